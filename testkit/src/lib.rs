//! What atoll's integration tests (and a few examples) share, so that each suite does not carry
//! its own copy:
//!
//! - [`eventually`] and [`eventually_timed`]: poll an async check until it holds, and fail the
//!   test with the last observation when it does not within the timeout. [`Poll`] sets another
//!   interval than [`INTERVAL`].
//! - [`Parent`]: a devcluster set up as an atoll parent (CRDs, `clusternet-system`,
//!   `clusternet-reserved`).
//! - [`BOOTSTRAP_TOKEN`] and [`bootstrap_secret`]: the test bootstrap token and the Secret the
//!   hub checks it against.
//!
//! - [`put_description`]: a Description written by hand, as the scheduler would write it.
//!
//! Tests only: setup failures panic, as in the tests using it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod description;
mod parent;
mod poll;
mod token;

pub use description::put_description;
pub use parent::{Parent, create_namespace, init_tracing, install_crds};
pub use poll::{INTERVAL, Observation, Poll, eventually, eventually_timed};
pub use token::{BOOTSTRAP_TOKEN, bootstrap_secret};
