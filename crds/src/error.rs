//! The crate's error type.

use std::path::PathBuf;

/// Everything that can fail in `atoll-crds` (only the CRD generator does I/O).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRD could not be rendered as YAML.
    #[error("cannot render the CRD {crd} as YAML: {source}")]
    RenderCrd {
        /// The CRD name, e.g. `subscriptions.apps.clusternet.io`.
        crd: String,
        /// The serializer's error.
        source: serde_yaml::Error,
    },
    /// The output directory could not be created.
    #[error("cannot create the directory {}: {source}; pass an --out directory you can write to", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A generated file could not be written.
    #[error("cannot write {}: {source}; check the directory permissions", path.display())]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A committed file could not be read while checking for drift.
    #[error("cannot read {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The committed CRDs differ from what the Rust types generate.
    #[error("the committed CRDs are out of date: {}; run `make crds` and commit the result", files.join(", "))]
    CheckDrift {
        /// The drifted files (paths relative to the checked directory), with what is wrong.
        files: Vec<String>,
    },
    /// A resource quantity could not be read.
    #[error("cannot read quantity {quantity:?}: {reason}")]
    ParseQuantity {
        /// The quantity text (its first 64 characters).
        quantity: String,
        /// Why it cannot be read.
        reason: String,
    },
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::RenderCrd { .. } => "render_crd",
            Self::CreateDir { .. } => "create_dir",
            Self::WriteFile { .. } => "write_file",
            Self::ReadFile { .. } => "read_file",
            Self::CheckDrift { .. } => "check_drift",
            Self::ParseQuantity { .. } => "parse_quantity",
        }
    }
}
