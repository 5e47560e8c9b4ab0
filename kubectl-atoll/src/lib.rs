//! `kubectl atoll`, a kubectl plugin for atoll's parent cluster (issue 14, first step).
//!
//! - [`args`]: the command line (`clusters`, `approve`, `deny`, `status`).
//! - [`app`]: reads and writes the API objects and prints the pages.
//! - [`clusters`], [`registration`], [`status`]: what each subcommand shows or writes, as pure
//!   functions from typed objects to tables, lookups and patches.
//! - [`table`]: kubectl-like tables and ages.
//! - [`output`]: `-o json|yaml`.

#![warn(missing_docs)]

pub mod app;
pub mod args;
pub mod clusters;
mod error;
pub mod output;
pub mod registration;
pub mod status;
pub mod table;

pub use error::Error;
