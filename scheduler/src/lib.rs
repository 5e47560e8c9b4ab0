//! atoll scheduler: turns Subscriptions, Globalizations and Localizations into per-cluster
//! Descriptions.
//!
//! - [`placement`]: which clusters a Subscription binds and how many replicas each gets (pure).
//! - [`overrides`]: rendering a feed's object for one cluster through its overrides (pure).
//! - [`selector`]: Kubernetes label selectors, compiled once, matched against cluster labels
//!   (pure; used by placement and overrides).
//! - [`tenancy`]: which feeds a Subscription may use, given the FeedGrants (pure).
//! - [`charts`]: HelmChart status, from a lookup of each chart in its repository.
//! - [`error`]: the crate's one error type.

pub mod app;
pub mod charts;
pub mod controller;
pub mod error;
pub mod overrides;
pub mod placement;
pub mod selector;
pub mod tenancy;

pub use error::Error;
