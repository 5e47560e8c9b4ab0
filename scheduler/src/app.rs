//! The `atoll-scheduler` process: flags, admin server, leader election, then the control loop.

use crate::Error;
use crate::controller::{self, Metrics};
use atoll_runtime::admin::Readiness;
use atoll_runtime::args::{AdminArgs, ClientArgs, LeaderElectionArgs, TelemetryArgs};
use atoll_runtime::leader::{self, LeaderElection};
use atoll_runtime::process::{Process, Shutdown};
use kube::runtime::events::Reporter;
use std::time::Duration;

/// Name of the scheduler's leader-election Lease.
pub const LEASE_NAME: &str = "atoll-scheduler";

/// Command line of `atoll-scheduler`.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "atoll-scheduler",
    version,
    about = "Turns Subscriptions and overrides into one Description per chosen cluster"
)]
pub struct Args {
    /// Parent cluster connection.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// Admin server.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Leader election.
    #[command(flatten)]
    pub leader: LeaderElectionArgs,
    /// Every Subscription is rendered again at least this often (seconds), repairing drift.
    #[arg(long, env = "ATOLL_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,
    /// Handle only Subscriptions whose `spec.schedulerName` is this (Clusternet's default is
    /// `default`); others are left to another scheduler.
    #[arg(long, env = "ATOLL_SCHEDULER_NAME", default_value = "default")]
    pub scheduler_name: String,
    /// The only hosts HelmChart repositories (and their registries' token services) are
    /// looked up on, comma-separated: `host`, `host:port` or `*.domain`. Empty (the default):
    /// any host, internal addresses included, since whoever may create a HelmChart picks it.
    #[arg(long, env = "ATOLL_CHART_REPOSITORY_HOSTS", value_delimiter = ',')]
    pub chart_repository_hosts: Vec<String>,
    /// The largest repository index or tag list read, in bytes.
    #[arg(long, env = "ATOLL_CHART_INDEX_MAX_BYTES", default_value_t = crate::charts::DEFAULT_MAX_BODY_BYTES)]
    pub chart_index_max_bytes: usize,
}

/// Runs the scheduler until SIGINT/SIGTERM, or until it loses leadership.
pub async fn run(args: Args) -> Result<(), Error> {
    let mut process = Process::start(&args.telemetry, &args.client).await?;
    let metrics = Metrics::default();
    metrics.register(process.registry());
    let client = process.client();
    let readiness = process.readiness();
    let admin = args.admin.clone();
    process
        .run(&admin, |shutdown| {
            schedule(args, client, metrics, readiness, shutdown)
        })
        .await
}

/// The scheduler's work once the admin server runs: wait for leadership (when elected), run the
/// control loop, and release the lease on the way out.
async fn schedule(
    args: Args,
    client: kube::Client,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: Shutdown,
) -> Result<(), Error> {
    let identity = args
        .leader
        .leader_elect_identity
        .clone()
        .unwrap_or_else(leader::default_identity);
    let mut leadership = if args.leader.leader_elect {
        let election = LeaderElection::new(
            client.clone(),
            &args.leader.leader_elect_namespace,
            LEASE_NAME,
            &identity,
            args.leader.lease_duration(),
        );
        tracing::info!(%identity, "waiting for leadership");
        let held = tokio::select! {
            held = election.acquire_standing_by(&readiness) => held,
            () = shutdown.clone().requested() => return Ok(()),
        };
        // Ready again once the new leader's caches have synced.
        readiness.set(false);
        Some(held)
    } else {
        None
    };

    let config = controller::Config {
        resync: Duration::from_secs(args.resync_seconds.max(10)),
        scheduler_name: args.scheduler_name.clone(),
        charts: crate::charts::ChartPolicy {
            allowed_hosts: args
                .chart_repository_hosts
                .iter()
                .filter(|h| !h.trim().is_empty())
                .cloned()
                .collect(),
            max_body_bytes: args.chart_index_max_bytes,
            ..crate::charts::ChartPolicy::default()
        },
        ..controller::Config::default()
    };
    let reporter = Reporter {
        controller: "atoll-scheduler".to_owned(),
        instance: Some(identity),
    };
    let ready = readiness.clone();
    let work = controller::run(client, config, metrics, reporter, move || ready.set(true));
    let result = match leadership.as_mut() {
        Some(held) => tokio::select! {
            r = work => r,
            () = held.lost() => Err(Error::KeepLeadership),
            () = shutdown.requested() => Ok(()),
        },
        None => tokio::select! {
            r = work => r,
            () = shutdown.requested() => Ok(()),
        },
    };
    readiness.set(false);
    if let Some(held) = leadership
        && let Err(e) = held.release().await
    {
        tracing::warn!(error = %e, "releasing the lease failed");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Args::command().debug_assert();
    }
}
