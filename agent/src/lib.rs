//! atoll agent: runs in a child cluster, registers it with the hub, applies the Descriptions the
//! hub streams (with [`atoll_applier`]: server-side apply, prune, drift repair) and reports their
//! status and the cluster's health.
//!
//! - [`hub`]: the hub client ([`Agent`]): identity, token, connection, snapshot, deltas, acks,
//!   reports and heartbeats.
//! - [`identity`]: the cluster id and the parent-cluster Secret.
//! - [`app`]: the command line and the process.

#![warn(missing_docs)]

pub mod app;
pub mod child;
mod error;
pub mod hub;
pub mod identity;
pub mod metrics;

pub use error::Error;
pub use hub::{Agent, AgentConfig};

/// The agent's version, reported to the hub.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
