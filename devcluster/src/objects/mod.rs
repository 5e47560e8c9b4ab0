//! Pure algorithms over JSON objects: patches, server-side apply, CRD schema handling and
//! metadata validation. No I/O and no server state: the HTTP layer loads, calls these, stores.
//!
//! - [`patch`]: JSON patch, JSON merge patch and strategic merge patch.
//! - [`apply`]: server-side apply and the `managedFields` of every other write.
//! - [`schema`]: pruning, defaulting and validation against a CRD's structural schema.
//! - [`validate`]: names, labels and annotations.
//!
//! Private helpers: `lists` (how the lists of built-in kinds merge, for both patch and
//! apply), `fieldset` (the `fieldsV1` trie and object diffs) and `smp`.

pub mod apply;
mod fieldset;
mod lists;
pub mod patch;
pub mod schema;
mod smp;
pub mod validate;
