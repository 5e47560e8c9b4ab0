//! atoll end to end: the local fleet launcher behind `make demo` and the end-to-end tests.
//!
//! A fleet is a parent devcluster, N child devclusters (simulated nodes and ready workloads),
//! the scheduler, the hub and one agent per child, all as detached local processes whose pids
//! are kept in `<dir>/fleet.json`:
//!
//! - [`control_plane`], [`install`], [`real_tier`]: the real tier (`--backend kube`): a real
//!   control plane per cluster, and atoll installed with `kubectl apply -k`.
//! - [`plan`]: names, labels, file layout, binaries, bootstrap tokens (pure).
//! - [`process`]: start detached, check, stop (SIGTERM then SIGKILL).
//! - [`kubectl`]: the real kubectl, bound to one kubeconfig.
//! - [`fleet`]: `up`, `down`, `status`, `wait`, `dedicated_namespace`.
//! - [`status`]: the tables `fleet status` prints (pure).
//! - [`state`]: the state file.
//! - [`app`]: the `fleet` command line.
//! - [`scenario`]: crash and restart one process of a running fleet (end-to-end scenarios).
//! - [`chaos`]: fault proxies and seeded chaos runs with invariant checks.
//! - [`children_host`]: many children (devcluster + real agent each) in one process, for fleets
//!   too large for a process per child (`fleet-children`, [`fleet::up_shared`]).
//! - [`real_node`]: one real node (containerd, kubelet, kube-proxy in a network namespace of its
//!   own) for a real-tier cluster.
//! - [`pods`]: `fleet up --real-nodes`: a real node per cluster and atoll installed and running
//!   as pods on them, as a user installs it.
//! - [`chart_repo`]: `helm`, a local HTTP chart repository and a local OCI registry (Helm tests).

pub mod app;
pub mod chaos;
pub mod chart_repo;
pub mod children_host;
pub mod control_plane;
mod error;
pub mod fleet;
pub mod install;
pub mod kubectl;
pub mod plan;
pub mod pods;
pub mod process;
pub mod real_node;
pub mod real_tier;
pub mod scenario;
pub mod state;
pub mod status;

pub use error::Error;
