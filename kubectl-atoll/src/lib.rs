//! `kubectl atoll`, a kubectl plugin for atoll's parent cluster (issue 14, first step).
//!
//! - [`args`]: the command line (`clusters`, `approve`, `deny`, `status`, `describe`, `apply`,
//!   `delete`, `get`, `plan`, `completion`).
//! - [`app`]: reads and writes the API objects and prints the pages.
//! - [`clusters`], [`registration`], [`status`], [`describe`], [`manifests`], [`plan`]: what each
//!   subcommand reads, shows or writes, as pure functions from typed objects to tables, lookups,
//!   patches and Manifests.
//! - [`table`]: kubectl-like tables and ages.
//! - [`output`]: `-o json|yaml`.

#![warn(missing_docs)]

/// Field manager of the plugin's writes, as the API server records it in `managedFields`.
pub const FIELD_MANAGER: &str = "kubectl-atoll";

pub mod app;
pub mod args;
pub mod clusters;
pub mod describe;
mod error;
pub mod manifests;
pub mod output;
pub mod plan;
pub mod registration;
pub mod status;
pub mod table;

pub use error::Error;
