//! atoll agent: runs in a child cluster, registers it with the hub, applies the Descriptions the
//! hub streams (server-side apply, prune, drift repair) and reports their status and the
//! cluster's health.
//!
//! - [`applier`]: applies Descriptions to a cluster; independent of gRPC (the hub reuses it for
//!   Push mode).
//! - [`hub`]: the hub client ([`Agent`]): identity, token, connection, snapshot, deltas, acks,
//!   reports and heartbeats.
//! - [`heartbeat`]: what a heartbeat carries.
//! - [`scope`]: which Descriptions of the child's inventories are this registration's.

#![warn(missing_docs)]

pub mod applier;
pub mod cli;
pub mod discovery;
mod drift;
mod error;
pub mod fieldpath;
pub mod heartbeat;
pub mod hub;
pub mod identity;
pub mod inventory;
pub mod metrics;
pub mod model;
pub mod prune;
pub mod scope;

pub use applier::{Applier, Notice};
pub use error::Error;
pub use hub::{Agent, AgentConfig};
pub use model::{Description, ObjectRef, ObjectReport, Phase, Report};

/// The agent's version, reported to the hub.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
