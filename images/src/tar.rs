//! A ustar writer for image layers and archives: entries in the order given, every time and owner
//! fixed by the caller, so that the same entries always make the same bytes.

use crate::Error;

/// What an entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file with these contents.
    File(Vec<u8>),
    /// A symbolic link to this target.
    Symlink(String),
}

/// One entry: a path relative to the root (no leading `/`), its mode and owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The path, `usr/local/bin/atoll-hub`; a directory's without a trailing `/`.
    pub path: String,
    /// Permission bits, `0o755`.
    pub mode: u32,
    /// Owner uid and gid.
    pub owner: (u32, u32),
    /// What it is.
    pub kind: Kind,
}

const BLOCK: usize = 512;

/// Writes `value` as a NUL-terminated octal field of `field.len()` bytes.
fn octal(field: &mut [u8], value: u64) -> Result<(), Error> {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    if text.len() > digits {
        return Err(Error::WriteTar {
            reason: format!("{value} does not fit an octal field of {digits} digits"),
        });
    }
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
    Ok(())
}

/// Splits `path` into ustar's `prefix` (at most 155 bytes) and `name` (at most 100).
fn split_path(path: &str) -> Result<(&str, &str), Error> {
    if path.len() <= 100 {
        return Ok(("", path));
    }
    path.char_indices()
        .filter(|&(i, c)| c == '/' && i <= 155 && path.len() - i - 1 <= 100)
        .map(|(i, _)| (&path[..i], &path[i + 1..]))
        .next()
        .ok_or_else(|| Error::WriteTar {
            reason: format!("path {path:?} is too long for a ustar header"),
        })
}

fn header(entry: &Entry) -> Result<[u8; BLOCK], Error> {
    let mut h = [0u8; BLOCK];
    let (name, typeflag, size, link) = match &entry.kind {
        Kind::Dir => (format!("{}/", entry.path), b'5', 0, ""),
        Kind::File(data) => (entry.path.clone(), b'0', data.len() as u64, ""),
        Kind::Symlink(target) => (entry.path.clone(), b'2', 0, target.as_str()),
    };
    let (prefix, name) = split_path(&name)?;
    if link.len() > 100 {
        return Err(Error::WriteTar {
            reason: format!("link target {link:?} is too long for a ustar header"),
        });
    }
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(entry.mode))?;
    octal(&mut h[108..116], u64::from(entry.owner.0))?;
    octal(&mut h[116..124], u64::from(entry.owner.1))?;
    octal(&mut h[124..136], size)?;
    octal(&mut h[136..148], 0)?;
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is computed with its own field as spaces.
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h[148..155], sum)?;
    h[155] = b' ';
    Ok(h)
}

/// The tar archive of `entries`, in their order, ended by two zero blocks.
pub fn archive(entries: &[Entry]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    for entry in entries {
        out.extend_from_slice(&header(entry)?);
        if let Kind::File(data) = &entry.kind {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

/// Reads back the entries of an archive this module wrote (for tests and checks).
pub fn read(archive: &[u8]) -> Result<Vec<Entry>, Error> {
    let bad = |reason: &str| Error::ReadTar {
        reason: reason.to_owned(),
    };
    let field = |h: &[u8]| -> String {
        let end = h.iter().position(|&b| b == 0).unwrap_or(h.len());
        String::from_utf8_lossy(&h[..end]).into_owned()
    };
    let number = |h: &[u8]| -> Result<u64, Error> {
        let text = field(h);
        u64::from_str_radix(text.trim(), 8).map_err(|_| bad("a numeric field is not octal"))
    };
    let mut entries = Vec::new();
    let mut at = 0;
    while at + BLOCK <= archive.len() {
        let h = &archive[at..at + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let prefix = field(&h[345..500]);
        let name = field(&h[..100]);
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let size = usize::try_from(number(&h[124..136])?).map_err(|_| bad("size"))?;
        let start = at + BLOCK;
        let kind = match h[156] {
            b'5' => Kind::Dir,
            b'2' => Kind::Symlink(field(&h[157..257])),
            b'0' | 0 => Kind::File(
                archive
                    .get(start..start + size)
                    .ok_or_else(|| bad("a file runs past the end"))?
                    .to_vec(),
            ),
            other => return Err(bad(&format!("entry type {other} is not written here"))),
        };
        entries.push(Entry {
            path: path.trim_end_matches('/').to_owned(),
            mode: u32::try_from(number(&h[100..108])?).map_err(|_| bad("mode"))?,
            owner: (
                u32::try_from(number(&h[108..116])?).map_err(|_| bad("uid"))?,
                u32::try_from(number(&h[116..124])?).map_err(|_| bad("gid"))?,
            ),
            kind,
        });
        at = start + size.div_ceil(BLOCK) * BLOCK;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Entry> {
        let long = format!("{}/file", "d".repeat(120));
        vec![
            Entry {
                path: "etc".into(),
                mode: 0o755,
                owner: (0, 0),
                kind: Kind::Dir,
            },
            Entry {
                path: "etc/passwd".into(),
                mode: 0o644,
                owner: (0, 0),
                kind: Kind::File(b"root:x:0:0::/root:/sbin/nologin\n".to_vec()),
            },
            Entry {
                path: "lib64/ld-linux-x86-64.so.2".into(),
                mode: 0o777,
                owner: (0, 0),
                kind: Kind::Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into()),
            },
            Entry {
                path: long,
                mode: 0o600,
                owner: (65532, 65532),
                kind: Kind::File(vec![7; 1000]),
            },
        ]
    }

    #[test]
    fn entries_round_trip_and_the_same_entries_make_the_same_bytes() {
        let bytes = archive(&entries()).unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);
        assert_eq!(bytes, archive(&entries()).unwrap());
        assert_eq!(read(&bytes).unwrap(), entries());
    }

    #[test]
    fn the_header_checksum_is_the_ustar_one() {
        let bytes = archive(&entries()[..1]).unwrap();
        let mut h = bytes[..BLOCK].to_vec();
        let stored = u64::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].fill(b' ');
        assert_eq!(stored, h.iter().map(|&b| u64::from(b)).sum::<u64>());
        assert_eq!(&h[257..263], b"ustar\0");
    }

    #[test]
    fn a_path_too_long_for_ustar_is_an_error() {
        let entry = Entry {
            path: "x".repeat(300),
            mode: 0o644,
            owner: (0, 0),
            kind: Kind::Dir,
        };
        assert!(archive(&[entry]).is_err());
    }
}
