//! Process plumbing shared by atoll's binaries, written once: command-line argument groups,
//! tracing, the admin server (`/metrics`, `/healthz`, `/readyz`), leader election through a
//! `Lease`, the kube client, a readiness flag many tasks can wait on, and text bounds.

pub mod admin;
pub mod args;
pub mod client;
mod error;
pub mod leader;
pub mod ready;
pub mod telemetry;
pub mod text;

pub use error::Error;
