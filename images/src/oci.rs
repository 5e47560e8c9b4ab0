//! OCI image layout: gzip layers, the image config, the manifest and the index, and the archive
//! of all of them that `docker load`, `podman load` and `ctr images import` take. No time is
//! recorded anywhere, so the same inputs give the same digests.

use crate::Error;
use crate::spec::{self, ImageSpec};
use crate::tar::{self, Entry, Kind};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;

/// Media types.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The image index of an archive.
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The image config.
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// A gzip layer.
pub const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Content and its `sha256:` digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blob {
    /// `sha256:<hex>`.
    pub digest: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Blob {
    /// A blob of `bytes`.
    pub fn of(bytes: Vec<u8>) -> Blob {
        Blob {
            digest: sha256(&bytes),
            bytes,
        }
    }

    /// Its OCI descriptor.
    pub fn descriptor(&self, media_type: &str) -> Value {
        json!({"mediaType": media_type, "digest": self.digest, "size": self.bytes.len()})
    }

    /// Its path in an image layout, `blobs/sha256/<hex>`.
    pub fn path(&self) -> String {
        format!("blobs/{}", self.digest.replacen(':', "/", 1))
    }
}

fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A compressed layer and the digest of its uncompressed tar (its `diff_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The gzip blob.
    pub blob: Blob,
    /// `sha256:` of the tar.
    pub diff_id: String,
}

/// A layer of `entries`, sorted by path, with every missing parent directory added (root's,
/// `0755`).
pub fn layer(entries: Vec<Entry>) -> Result<Layer, Error> {
    let mut by_path: BTreeMap<String, Entry> = BTreeMap::new();
    for entry in entries {
        let mut parent = entry.path.as_str();
        while let Some((dir, _)) = parent.rsplit_once('/') {
            by_path.entry(dir.to_owned()).or_insert_with(|| Entry {
                path: dir.to_owned(),
                mode: 0o755,
                owner: (0, 0),
                kind: Kind::Dir,
            });
            parent = dir;
        }
        by_path.insert(entry.path.clone(), entry);
    }
    let entries: Vec<Entry> = by_path.into_values().collect();
    let tar = tar::archive(&entries)?;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar).map_err(Error::CompressLayer)?;
    let compressed = gz.finish().map_err(Error::CompressLayer)?;
    Ok(Layer {
        blob: Blob::of(compressed),
        diff_id: sha256(&tar),
    })
}

/// A file of the image.
pub fn file(path: &str, mode: u32, owner: (u32, u32), data: Vec<u8>) -> Entry {
    Entry {
        path: path.to_owned(),
        mode,
        owner,
        kind: Kind::File(data),
    }
}

/// What every image shares, as distroless/cc nonroot has it: the users, the CA bundle, glibc
/// (the `libraries` the binaries link, with the host's symlinks on their paths), `/tmp` and
/// the nonroot home.
pub fn base_entries(ca_bundle: Vec<u8>, libraries: Vec<Entry>) -> Vec<Entry> {
    let mut entries = vec![
        file("etc/passwd", 0o644, (0, 0), spec::PASSWD.into()),
        file("etc/group", 0o644, (0, 0), spec::GROUP.into()),
        file("etc/nsswitch.conf", 0o644, (0, 0), spec::NSSWITCH.into()),
        file(spec::CA_BUNDLE, 0o644, (0, 0), ca_bundle),
        Entry {
            path: "tmp".into(),
            mode: 0o1777,
            owner: (0, 0),
            kind: Kind::Dir,
        },
        Entry {
            path: "home/nonroot".into(),
            mode: 0o700,
            owner: (spec::USER, spec::USER),
            kind: Kind::Dir,
        },
    ];
    entries.extend(libraries);
    entries
}

/// A built image: its reference, config, manifest and layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// `localhost/atoll-hub:0.1.0`.
    pub reference: String,
    /// The config blob.
    pub config: Blob,
    /// The manifest blob; its digest is the image's.
    pub manifest: Blob,
    /// The layers, base first.
    pub layers: Vec<Layer>,
}

/// The image config of `spec` over `layers`.
pub fn config(spec: &ImageSpec, layers: &[Layer]) -> Value {
    let ports: serde_json::Map<String, Value> = spec
        .exposed_ports()
        .iter()
        .map(|p| (format!("{p}/tcp"), json!({})))
        .collect();
    json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{0}:{0}", spec::USER),
            "Env": spec::env(),
            "Entrypoint": [spec.entrypoint()],
            "WorkingDir": "/home/nonroot",
            "ExposedPorts": ports,
            "Labels": labels(spec),
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
        },
        "history": [
            {"created_by": "atoll-images: base (users, CA certificates, glibc)"},
            {"created_by": format!("atoll-images: {}", spec.target)},
        ],
    })
}

fn labels(spec: &ImageSpec) -> Value {
    json!({
        "org.opencontainers.image.title": spec.title,
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.licenses": "Apache-2.0",
    })
}

/// The image of `spec` named `reference`, from the shared `base` layer and its own `app` layer.
pub fn image(spec: &ImageSpec, reference: &str, base: Layer, app: Layer) -> Image {
    let layers = vec![base, app];
    let config = Blob::of(config(spec, &layers).to_string().into_bytes());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config.descriptor(CONFIG),
        "layers": layers.iter().map(|l| l.blob.descriptor(LAYER)).collect::<Vec<_>>(),
        "annotations": labels(spec),
    });
    Image {
        reference: reference.to_owned(),
        config,
        manifest: Blob::of(manifest.to_string().into_bytes()),
        layers,
    }
}

/// The archive of `image`: an OCI image layout (`oci-layout`, `index.json`, `blobs/`) with
/// Docker's `manifest.json` beside it, as `docker save` writes since Docker 25, so that every
/// loader finds its name.
pub fn archive(image: &Image) -> Result<Vec<u8>, Error> {
    let mut descriptor = image.manifest.descriptor(MANIFEST);
    descriptor["annotations"] = json!({
        "io.containerd.image.name": image.reference,
        "org.opencontainers.image.ref.name": image.reference,
    });
    let index = json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": [descriptor]});
    let docker = json!([{
        "Config": image.config.path(),
        "RepoTags": [image.reference],
        "Layers": image.layers.iter().map(|l| l.blob.path()).collect::<Vec<_>>(),
    }]);
    let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for blob in std::iter::once(&image.config)
        .chain(std::iter::once(&image.manifest))
        .chain(image.layers.iter().map(|l| &l.blob))
    {
        blobs.insert(blob.path(), blob.bytes.clone());
    }
    let dir = |path: &str| Entry {
        path: path.to_owned(),
        mode: 0o755,
        owner: (0, 0),
        kind: Kind::Dir,
    };
    let mut entries = vec![
        dir("blobs"),
        dir("blobs/sha256"),
        file(
            "oci-layout",
            0o644,
            (0, 0),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        file("index.json", 0o644, (0, 0), index.to_string().into_bytes()),
        file(
            "manifest.json",
            0o644,
            (0, 0),
            docker.to_string().into_bytes(),
        ),
    ];
    entries.extend(
        blobs
            .into_iter()
            .map(|(path, bytes)| file(&path, 0o644, (0, 0), bytes)),
    );
    tar::archive(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::IMAGES;
    use std::io::Read;

    fn build(binary: &[u8]) -> Image {
        let spec = &IMAGES[1];
        let base = layer(base_entries(b"CA".to_vec(), Vec::new())).unwrap();
        let app = layer(vec![file(
            &format!("usr/local/bin/{}", spec.binary),
            0o755,
            (0, 0),
            binary.to_vec(),
        )])
        .unwrap();
        image(spec, "localhost/atoll-hub:0.1.0", base, app)
    }

    fn json_of(entries: &[Entry], path: &str) -> Value {
        let entry = entries.iter().find(|e| e.path == path).unwrap();
        let Kind::File(bytes) = &entry.kind else {
            panic!("{path} is not a file")
        };
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn the_same_inputs_give_the_same_digest_and_another_binary_another() {
        let a = archive(&build(b"hub v1")).unwrap();
        assert_eq!(a, archive(&build(b"hub v1")).unwrap());
        assert_ne!(
            build(b"hub v1").manifest.digest,
            build(b"hub v2").manifest.digest
        );
        // The base layer is shared: another binary changes only the app layer.
        assert_eq!(build(b"hub v1").layers[0], build(b"hub v2").layers[0]);
    }

    #[test]
    fn the_archive_is_an_oci_layout_whose_descriptors_match_their_blobs() {
        let image = build(b"hub");
        let entries = tar::read(&archive(&image).unwrap()).unwrap();
        let index = json_of(&entries, "index.json");
        assert_eq!(
            index["manifests"][0]["digest"],
            json!(image.manifest.digest)
        );
        assert_eq!(
            index["manifests"][0]["annotations"]["io.containerd.image.name"],
            json!("localhost/atoll-hub:0.1.0")
        );
        for entry in &entries {
            if let (Some(hex), Kind::File(bytes)) =
                (entry.path.strip_prefix("blobs/sha256/"), &entry.kind)
            {
                assert_eq!(sha256(bytes), format!("sha256:{hex}"), "{}", entry.path);
            }
        }
        let manifest = json_of(&entries, &image.manifest.path());
        let config = json_of(
            &entries,
            manifest["config"]["digest"]
                .as_str()
                .map(|d| format!("blobs/{}", d.replacen(':', "/", 1)))
                .unwrap()
                .as_str(),
        );
        assert_eq!(config["config"]["User"], json!("65532:65532"));
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/usr/local/bin/atoll-hub"])
        );
        // Each diff_id is the digest of the uncompressed layer.
        for (i, layer) in image.layers.iter().enumerate() {
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(layer.blob.bytes.as_slice())
                .read_to_end(&mut tar)
                .unwrap();
            assert_eq!(config["rootfs"]["diff_ids"][i], json!(sha256(&tar)));
        }
        let docker = json_of(&entries, "manifest.json");
        assert_eq!(docker[0]["RepoTags"], json!(["localhost/atoll-hub:0.1.0"]));
    }

    #[test]
    fn a_layer_has_every_parent_directory_and_keeps_owners_and_modes() {
        let base = layer(base_entries(b"CA".to_vec(), Vec::new())).unwrap();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(base.blob.bytes.as_slice())
            .read_to_end(&mut tar)
            .unwrap();
        let entries = tar::read(&tar).unwrap();
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        for dir in ["etc", "etc/ssl", "etc/ssl/certs", "home"] {
            assert!(paths.contains(&dir), "{dir} in {paths:?}");
        }
        let home = entries.iter().find(|e| e.path == "home/nonroot").unwrap();
        assert_eq!((home.mode, home.owner), (0o700, (65532, 65532)));
        let tmp = entries.iter().find(|e| e.path == "tmp").unwrap();
        assert_eq!(tmp.mode, 0o1777);
    }
}
