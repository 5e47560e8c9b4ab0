//! atoll applier: puts Descriptions into a child cluster and reports what became of them. The
//! agent runs it for the Descriptions the hub streams; the hub runs it itself for Push-mode
//! clusters. It knows nothing of gRPC.
//!
//! - [`applier`]: [`Applier`], server-side apply of a Description's objects, deletion and
//!   prune.
//! - `drift` and `repair` ([`start_drift_repair`]): drift watchers send what they see down a
//!   channel to the repair loop, which records statuses and re-applies what someone else
//!   changed or deleted ([`start_status_watch`]: statuses only). Modules depend one way:
//!   repair → applier → drift.
//! - [`model`]: what a Description asks for and what the applier reports ([`Report`]).
//! - [`inventory`]: the record in the child of which objects each Description owns.
//! - [`prune`]: what a prune would delete, and when it waits for confirmation.
//! - [`scope`]: which Descriptions of the child's inventories are this registration's.
//! - [`helm`]: the HelmCharts of a Description, as Helm releases installed by a `helm` binary;
//!   [`release_identity`]: the per-namespace identity helm can act as.
//! - [`heartbeat`]: the cluster's health and capacity, as a heartbeat carries it.
//! - [`discovery`], [`fieldpath`]: kinds the child serves; managed-field paths.

#![warn(missing_docs)]

pub mod applier;
pub mod discovery;
mod drift;
mod error;
pub mod fieldpath;
pub mod heartbeat;
pub mod helm;
pub mod inventory;
pub mod metrics;
pub mod model;
pub mod prune;
pub mod release_identity;
mod repair;
pub mod scope;

pub use applier::{Applier, Notice};
pub use error::Error;
pub use metrics::Metrics;
pub use model::{Description, ObjectRef, ObjectReport, Phase, Report};
pub use repair::{start_drift_repair, start_status_watch};
