/// Failures of building an image, named after what failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An entry cannot be written as ustar.
    #[error("cannot write a tar entry: {reason}")]
    WriteTar {
        /// Why.
        reason: String,
    },
    /// An archive is not one this crate writes.
    #[error("cannot read a tar archive: {reason}")]
    ReadTar {
        /// Why.
        reason: String,
    },
    /// A file the image needs cannot be read.
    #[error("cannot read {path}")]
    ReadInput {
        /// The host path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A binary's shared libraries cannot be found.
    #[error("cannot list the shared libraries of {path}: {reason}")]
    ListLibraries {
        /// The binary.
        path: String,
        /// Why.
        reason: String,
    },
    /// Compressing a layer failed.
    #[error("cannot compress a layer")]
    CompressLayer(#[source] std::io::Error),
    /// Writing the image archive failed.
    #[error("cannot write {path}")]
    WriteArchive {
        /// The archive's path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
