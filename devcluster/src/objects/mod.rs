//! Pure algorithms over JSON objects: patches, server-side apply, CRD schema handling and
//! metadata validation. No I/O and no server state: the HTTP layer loads, calls these, stores.

pub mod apply;
mod fieldset;
mod lists;
pub mod patch;
pub mod schema;
mod smp;
pub mod validate;
