//! The `devcluster` process: flags in, a devcluster served until SIGINT/SIGTERM. (It does not
//! use `atoll-runtime`'s process lifecycle: devcluster is the test stand-in the rest of the
//! workspace, `atoll-runtime` included, tests against, so it depends on none of it.)

use std::path::PathBuf;
use std::time::Duration;

use crate::{Config, DevCluster, Error};

/// An embedded, single-process stand-in for kube-apiserver, for local runs and tests only.
#[derive(Debug, clap::Parser)]
#[command(name = "devcluster", version)]
pub struct Args {
    /// Port on 127.0.0.1 (0 = pick a free port).
    #[arg(long, env = "DEVCLUSTER_PORT", default_value_t = 0)]
    pub port: u16,
    /// Where to write the kubeconfig once the server is ready.
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Persist objects in SQLite under this directory (default: memory only).
    #[arg(long, env = "DEVCLUSTER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Require this bearer token.
    #[arg(long, env = "DEVCLUSTER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Number of simulated Ready nodes.
    #[arg(long, env = "DEVCLUSTER_NODES", default_value_t = 0)]
    pub nodes: u32,
    /// Report workloads (Deployments, StatefulSets, ...) as ready.
    #[arg(long, env = "DEVCLUSTER_SIMULATE_WORKLOADS")]
    pub simulate_workloads: bool,
    /// Delay before simulated workloads become ready, in milliseconds.
    #[arg(long, env = "DEVCLUSTER_WORKLOAD_DELAY_MS", default_value_t = 0)]
    pub workload_delay_ms: u64,
}

/// Serves a devcluster until SIGINT or SIGTERM; writes its kubeconfig once it is ready.
pub async fn run(args: Args) -> Result<(), Error> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let cluster = DevCluster::start(Config {
        data_dir: args.data_dir,
        token: args.token,
        nodes: args.nodes,
        simulate_workloads: args.simulate_workloads,
        workload_delay: Duration::from_millis(args.workload_delay_ms),
        port: args.port,
    })
    .await?;
    if let Some(path) = &args.kubeconfig {
        cluster.write_kubeconfig(path)?;
    }
    println!("devcluster listening on {}", cluster.url());
    tracing::info!(url = %cluster.url(), "devcluster ready");
    shutdown_signal().await.map_err(Error::Signal)?;
    tracing::info!("shutting down");
    drop(cluster);
    Ok(())
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_consistent() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }
}
