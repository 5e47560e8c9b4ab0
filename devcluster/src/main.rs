//! `devcluster`: run an embedded kube-apiserver stand-in (local runs and tests only).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// An embedded, single-process stand-in for kube-apiserver, for local runs and tests only.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
struct Args {
    /// Port on 127.0.0.1 (0 = pick a free port).
    #[arg(long, env = "DEVCLUSTER_PORT", default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig once the server is ready.
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Persist objects in SQLite under this directory (default: memory only).
    #[arg(long, env = "DEVCLUSTER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Require this bearer token.
    #[arg(long, env = "DEVCLUSTER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Number of simulated Ready nodes.
    #[arg(long, env = "DEVCLUSTER_NODES", default_value_t = 0)]
    nodes: u32,
    /// Report workloads (Deployments, StatefulSets, ...) as ready.
    #[arg(long, env = "DEVCLUSTER_SIMULATE_WORKLOADS")]
    simulate_workloads: bool,
    /// Delay before simulated workloads become ready, in milliseconds.
    #[arg(long, env = "DEVCLUSTER_WORKLOAD_DELAY_MS", default_value_t = 0)]
    workload_delay_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cluster = devcluster::DevCluster::start(devcluster::Config {
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
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    drop(cluster);
    Ok(())
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
