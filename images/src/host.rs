//! What an image takes from the build machine: the release binaries, helm, the CA bundle, and
//! the shared libraries the binaries link (found with `ldd`), each at its path with the host's
//! symlinks on the way (`/lib` -> `usr/lib` on a merged-/usr Debian).

use crate::Error;
use crate::oci::{self, Layer};
use crate::spec::{self, IMAGES, ImageSpec};
use crate::tar::{Entry, Kind};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Where the inputs are and how to name the images.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The directory of the release binaries (`target/release`).
    pub bin_dir: PathBuf,
    /// helm, for the images that carry it.
    pub helm: PathBuf,
    /// The CA bundle (`/etc/ssl/certs/ca-certificates.crt`).
    pub ca_bundle: PathBuf,
    /// The repository the images are named in, `localhost`.
    pub repository: String,
    /// Their tag, the workspace version.
    pub tag: String,
}

/// An image written to an archive.
#[derive(Clone, Debug)]
pub struct Built {
    /// Its reference.
    pub reference: String,
    /// Its manifest digest.
    pub digest: String,
    /// The archive.
    pub archive: PathBuf,
    /// The archive's size in bytes.
    pub size: usize,
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::ReadInput {
        path: path.display().to_string(),
        source,
    })
}

fn relative(path: &Path) -> String {
    path.to_string_lossy().trim_start_matches('/').to_owned()
}

/// Adds `path` (absolute) to `out` as the host has it: each symlink met on the way as a symlink
/// entry, then the file it leads to with its mode.
pub fn add_host_path(path: &Path, out: &mut BTreeMap<String, Entry>) -> Result<(), Error> {
    let mut path = path.to_path_buf();
    'resolve: for _ in 0..16 {
        let mut walked = PathBuf::from("/");
        let components: Vec<Component> = path.components().skip(1).collect();
        for (i, component) in components.iter().enumerate() {
            walked.push(component);
            let meta = std::fs::symlink_metadata(&walked).map_err(|source| Error::ReadInput {
                path: walked.display().to_string(),
                source,
            })?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&walked).map_err(|source| Error::ReadInput {
                    path: walked.display().to_string(),
                    source,
                })?;
                out.insert(
                    relative(&walked),
                    Entry {
                        path: relative(&walked),
                        mode: 0o777,
                        owner: (0, 0),
                        kind: Kind::Symlink(target.to_string_lossy().into_owned()),
                    },
                );
                let base = walked.parent().unwrap_or(Path::new("/")).join(&target);
                path = components[i + 1..]
                    .iter()
                    .fold(base, |p, c| p.join(c.as_os_str()));
                continue 'resolve;
            }
        }
        let mode = std::fs::metadata(&path)
            .map_err(|source| Error::ReadInput {
                path: path.display().to_string(),
                source,
            })?
            .permissions()
            .mode()
            & 0o7777;
        out.insert(
            relative(&path),
            oci::file(&relative(&path), mode, (0, 0), read(&path)?),
        );
        return Ok(());
    }
    Err(Error::ReadInput {
        path: path.display().to_string(),
        source: std::io::Error::other("too many levels of symbolic links"),
    })
}

/// The shared libraries `binary` links, as absolute paths, from `ldd`'s output.
pub fn libraries(binary: &Path) -> Result<Vec<PathBuf>, Error> {
    let failed = |reason: String| Error::ListLibraries {
        path: binary.display().to_string(),
        reason,
    };
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| failed(format!("running ldd: {e}")))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// The library paths of `ldd` output (`libc.so.6 => /lib/…/libc.so.6 (0x…)` and the loader,
/// `/lib64/ld-linux-x86-64.so.2 (0x…)`); the vDSO has no file.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The layer every image shares: users, CA bundle and the libraries of all `binaries`.
pub fn base_layer(ca_bundle: &Path, binaries: &[PathBuf]) -> Result<Layer, Error> {
    let mut libs = BTreeMap::new();
    for binary in binaries {
        for lib in libraries(binary)? {
            add_host_path(&lib, &mut libs)?;
        }
    }
    oci::layer(oci::base_entries(
        read(ca_bundle)?,
        libs.into_values().collect(),
    ))
}

fn app_layer(inputs: &Inputs, spec: &ImageSpec) -> Result<Layer, Error> {
    let bin =
        |name: &str, data| oci::file(&format!("{}/{name}", spec::BIN_DIR), 0o755, (0, 0), data);
    let mut entries = vec![bin(spec.binary, read(&inputs.bin_dir.join(spec.binary))?)];
    if spec.helm {
        entries.push(bin("helm", read(&inputs.helm)?));
    }
    oci::layer(entries)
}

/// Builds the image of `spec` over `base` into `out/<binary>.tar`.
pub fn build_image(
    inputs: &Inputs,
    spec: &ImageSpec,
    base: &Layer,
    out: &Path,
) -> Result<Built, Error> {
    let write_failed = |path: &Path, source| Error::WriteArchive {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(out).map_err(|e| write_failed(out, e))?;
    let reference = format!("{}/{}:{}", inputs.repository, spec.binary, inputs.tag);
    let image = oci::image(spec, &reference, base.clone(), app_layer(inputs, spec)?);
    let bytes = oci::archive(&image)?;
    let path = out.join(format!("{}.tar", spec.binary));
    std::fs::write(&path, &bytes).map_err(|e| write_failed(&path, e))?;
    Ok(Built {
        reference,
        digest: image.manifest.digest,
        archive: path,
        size: bytes.len(),
    })
}

/// Builds every image of [`IMAGES`] into `out/<binary>.tar`.
pub fn build_images(inputs: &Inputs, out: &Path) -> Result<Vec<Built>, Error> {
    let binaries: Vec<PathBuf> = IMAGES
        .iter()
        .map(|spec| inputs.bin_dir.join(spec.binary))
        .collect();
    let base = base_layer(&inputs.ca_bundle, &binaries)?;
    IMAGES
        .iter()
        .map(|spec| build_image(inputs, spec, &base, out))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_every_library_and_the_loader_but_not_the_vdso() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd1a5f2000)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f2b1c000000)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2b1be00000)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f2b1c9b0000)\n";
        assert_eq!(
            parse_ldd(text),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn a_host_path_keeps_the_symlinks_on_its_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::write(root.join("usr/lib/libx.so.1.2"), b"elf").unwrap();
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink("libx.so.1.2", root.join("usr/lib/libx.so.1")).unwrap();
        let mut out = BTreeMap::new();
        add_host_path(&root.join("lib/libx.so.1"), &mut out).unwrap();
        let rel = |p: &str| format!("{}/{p}", relative(root));
        let kinds: Vec<(String, Kind)> = out.into_values().map(|e| (e.path, e.kind)).collect();
        assert_eq!(
            kinds,
            [
                (rel("lib"), Kind::Symlink("usr/lib".into())),
                (
                    rel("usr/lib/libx.so.1"),
                    Kind::Symlink("libx.so.1.2".into())
                ),
                (rel("usr/lib/libx.so.1.2"), Kind::File(b"elf".to_vec())),
            ]
        );
    }
}
