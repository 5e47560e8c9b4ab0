//! devcluster: an embedded, single-process stand-in for kube-apiserver.
//!
//! For local runs and tests only, never for production. It serves the Kubernetes REST API on
//! loopback so that the real `kubectl` and kube-rs work against it unchanged.

pub mod api;
pub mod objects;
