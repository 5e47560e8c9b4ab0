//! atoll scheduler: turns Subscriptions, Globalizations and Localizations into per-cluster
//! Descriptions.
//!
//! - [`placement`]: which clusters a Subscription binds and how many replicas each gets (pure).
//! - [`overrides`]: rendering a feed's object for one cluster through its overrides (pure).
//! - [`error`]: the crate's one error type.

pub mod app;
pub mod controller;
pub mod error;
pub mod overrides;
pub mod placement;

pub use error::Error;
