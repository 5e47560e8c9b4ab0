//! Process plumbing shared by atoll's binaries, written once: the process lifecycle (tracing,
//! client, metrics registry, admin server, readiness, shutdown signal), command-line argument
//! groups, the admin server (`/metrics`, `/healthz`, `/readyz`), leader election through a
//! `Lease`, finalizer edits, the kube client, a readiness flag many tasks can wait on, and text bounds.

pub mod admin;
pub mod args;
pub mod client;
mod error;
pub mod finalizer;
pub mod leader;
pub mod process;
pub mod ready;
pub mod telemetry;
pub mod text;

pub use error::Error;
