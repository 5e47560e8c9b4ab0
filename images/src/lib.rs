//! OCI images of atoll's components, built without a container daemon (`make images`): the
//! runtime stages of the repository's `Dockerfile` (user 65532, the binaries in
//! `/usr/local/bin`, CA certificates, glibc), assembled from the release binaries and the host's
//! libraries into archives that `docker load`, `podman load`, `ctr images import` and
//! `kind load image-archive` take. Nothing is pulled and no time is recorded, so the same inputs
//! give the same digests.
//!
//! - [`spec`]: what each image holds.
//! - [`oci`]: layers, config, manifest, index and the archive.
//! - [`tar`]: the deterministic ustar writer under both.
//! - [`host`]: the files read off the build machine (binaries, libraries with their symlinks).

pub mod error;
pub mod host;
pub mod oci;
pub mod spec;
pub mod tar;

pub use error::Error;
