//! atoll hub: agent gRPC server, cluster lifecycle, status write-back and aggregation.
//!
//! - [`aggregation`]: Subscription status aggregated from the Descriptions' reports (pure).
//! - [`error`]: the crate's one error type.
//! - [`token`], [`flow`], [`domain`], [`status`]: pure pieces (tokens, flow control, protocol
//!   conversion, status builders).
//! - [`index`]: the in-memory Description index and its fan-out to streams.
//! - [`service`]: the gRPC `Sync` stream, over a [`service::Backend`]; [`metrics`];
//!   [`resync`]: how often an agent may have its snapshot sent again.
//! - [`server`]: tonic server, TLS, health service, size limits.
//! - [`backend`]: registration and status writes against the parent API server.
//! - [`pull_secrets`]: chart repository credentials sent with Descriptions, and when to read
//!   them again.
//! - [`push`]: Push mode, the agent's applier run by the hub for `syncMode: Push` clusters.
//! - [`controllers`]: the shared watches, finalizers, lost clusters, Subscription aggregation.
//! - [`streams`]: the open streams of this replica, closed when their credentials are revoked.
//! - [`args`], [`run`], [`app`]: the binary's flags, the hub's wiring, and the process.

pub mod aggregation;
pub mod app;
pub mod args;
pub mod backend;
pub mod controllers;
pub mod domain;
pub mod error;
pub mod flow;
pub mod index;
pub mod metrics;
pub mod parent;
pub mod pull_secrets;
pub mod push;
pub mod report_order;
pub mod resync;
pub mod run;
pub mod server;
pub mod service;
pub mod status;
pub mod streams;
pub mod token;
pub mod watched;

pub use error::Error;
