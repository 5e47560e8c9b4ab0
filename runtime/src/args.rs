//! Argument groups every atoll binary flattens into its own clap parser. Every flag can also be
//! set from the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How to reach the Kubernetes API server.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// Path of the kubeconfig; when unset, `KUBECONFIG`, `~/.kube/config` and then the in-cluster
    /// service account are tried, as kubectl does.
    #[arg(long, env = "ATOLL_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use instead of its current context.
    #[arg(long, env = "ATOLL_CONTEXT")]
    pub context: Option<String>,
}

/// Logging.
#[derive(Clone, Debug, clap::Args)]
pub struct TelemetryArgs {
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info,atoll_scheduler=debug`.
    #[arg(long, env = "ATOLL_LOG", default_value = "info")]
    pub log: String,
    /// Log format.
    #[arg(long, env = "ATOLL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The admin HTTP server.
#[derive(Clone, Debug, clap::Args)]
pub struct AdminArgs {
    /// Address of the admin server serving `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "ATOLL_ADMIN_LISTEN", default_value = "0.0.0.0:9090")]
    pub admin_listen: SocketAddr,
}

/// Leader election through a `coordination.k8s.io/v1` Lease.
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderElectionArgs {
    /// Elect a leader before doing any work, so that only one replica is active.
    #[arg(long, env = "ATOLL_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(
        long,
        env = "ATOLL_LEADER_ELECT_NAMESPACE",
        default_value = "clusternet-system"
    )]
    pub leader_elect_namespace: String,
    /// How long a leader's Lease is valid without renewal, in seconds.
    #[arg(long, env = "ATOLL_LEADER_ELECT_LEASE_SECONDS", default_value_t = 15)]
    pub leader_elect_lease_seconds: u32,
    /// Identity of this replica in the Lease; defaults to the host name plus a random suffix.
    #[arg(long, env = "ATOLL_LEADER_ELECT_IDENTITY")]
    pub leader_elect_identity: Option<String>,
}

impl LeaderElectionArgs {
    /// The Lease duration.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.leader_elect_lease_seconds.max(2)))
    }
}
