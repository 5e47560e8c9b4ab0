//! atoll hub: agent gRPC server, cluster lifecycle, status write-back and aggregation.
//!
//! - [`aggregation`]: Subscription status aggregated from the Descriptions' reports (pure).
//! - [`error`]: the crate's one error type.

pub mod aggregation;
pub mod error;

pub use error::Error;
