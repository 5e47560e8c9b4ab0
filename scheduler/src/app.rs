//! The `atoll-scheduler` process: flags, admin server, leader election, then the control loop.

use crate::controller::{self, Metrics};
use atoll_runtime::admin::{self, Readiness};
use atoll_runtime::args::{AdminArgs, ClientArgs, LeaderElectionArgs, TelemetryArgs};
use atoll_runtime::leader::{self, LeaderElection};
use kube::runtime::events::Reporter;
use prometheus_client::registry::Registry;
use std::sync::Arc;
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
}

/// Runs the scheduler until it loses leadership or the control loop ends.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = atoll_runtime::client::client(&args.client).await?;
    let metrics = Metrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let readiness = Readiness::default();
    let (admin_addr, admin) = admin::serve(
        args.admin.admin_listen,
        Arc::new(registry),
        readiness.clone(),
    )
    .await?;
    tracing::info!(%admin_addr, "admin server listening");
    let admin = tokio::spawn(admin);

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
        Some(election.acquire().await)
    } else {
        None
    };

    let config = controller::Config {
        resync: Duration::from_secs(args.resync_seconds.max(10)),
        scheduler_name: args.scheduler_name.clone(),
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
            r = work => r.map_err(Into::into),
            () = held.lost() => Err("lost leadership; exiting so that a new contender takes over".into()),
            r = shutdown_signal() => r,
        },
        None => tokio::select! {
            r = work => r.map_err(Into::into),
            r = shutdown_signal() => r,
        },
    };
    readiness.set(false);
    if let Some(held) = leadership
        && let Err(e) = held.release().await
    {
        tracing::warn!(error = %e, "releasing the lease failed");
    }
    admin.abort();
    result
}

async fn shutdown_signal() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    tracing::info!("shutting down");
    Ok(())
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
