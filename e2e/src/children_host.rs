//! A children host: many child clusters of a fleet in ONE process, where a process per child
//! would not fit in memory (1,000 children; issue 15). Behind the `fleet-children` binary, which
//! [`fleet::up_shared`](crate::fleet::up_shared) starts once per group of children.
//!
//! For each child `child-<i>` it hosts, it runs
//!
//! - an in-memory devcluster (as `devcluster --simulate-workloads --nodes N` would), whose
//!   kubeconfig it writes to `D/child-<i>.kubeconfig`, where the fleet and the benchmark read it;
//! - the real agent: the same [`atoll_agent::app::Args`] the `atoll-agent` binary parses (the
//!   command line [`fleet::agent_args`](crate::fleet::agent_args) gives it), built by
//!   [`atoll_agent::app::build`] as the binary builds it, with its own kube client for its own
//!   devcluster, registering with the hub over real gRPC (bootstrap token, cluster name, labels).
//!
//! What differs from one agent process per child: the agents do not serve an admin port (their
//! metrics are registered, each in a registry of its own, but not served), and they share one
//! tracing subscriber and one log. The devclusters run on one tokio runtime and the agents on
//! another, with threads named [`DEVCLUSTER_THREADS`] and [`AGENT_THREADS`], so that the CPU of
//! each can be read per thread from `/proc/<pid>/task/*/stat`. Runs until SIGTERM or SIGINT, then
//! stops the agents (at most [`STOP_GRACE`]) and the devclusters.

use std::path::PathBuf;
use std::time::Duration;

use crate::Error;
use crate::plan::{self, ChildSpec, Layout};

/// Name of the devcluster runtime's threads (`/proc/<pid>/task/<tid>/comm`).
pub const DEVCLUSTER_THREADS: &str = "host-devcluster";
/// Name of the agent runtime's threads.
pub const AGENT_THREADS: &str = "host-agent";
/// How long the agents get to stop once asked.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// `fleet-children`: hosts children `first` to `first + count - 1` of the fleet in `dir`, each a
/// devcluster and a real agent, in this one process.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "fleet-children", version)]
pub struct Args {
    /// The fleet directory: `child-<i>.kubeconfig` are written there, `bootstrap-token` is read.
    #[arg(long, env = "FLEET_DIR")]
    pub dir: PathBuf,
    /// Index of the first child hosted (1-based, as in `child-1`).
    #[arg(long)]
    pub first: usize,
    /// Number of children hosted.
    #[arg(long)]
    pub count: usize,
    /// The hub's gRPC URL (plaintext, `http://...`).
    #[arg(long, env = "ATOLL_HUB")]
    pub hub: String,
    /// Simulated nodes per child.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Delay before simulated workloads in the children become ready, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub workload_delay_ms: u64,
    /// The `helm` binary the agents install HelmChart feeds with (default: `helm` on PATH).
    #[arg(long)]
    pub helm: Option<PathBuf>,
    /// Worker threads of each of the two runtimes (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub worker_threads: usize,
    /// Logging (one subscriber for every agent hosted).
    #[command(flatten)]
    pub telemetry: atoll_runtime::args::TelemetryArgs,
}

/// The children `args` hosts: the fleet's own specs (names and labels) for those indexes.
pub fn hosted(args: &Args) -> Result<Vec<ChildSpec>, Error> {
    if args.first == 0 || args.count == 0 {
        return Err(Error::InvalidArgument {
            what: "--first/--count".into(),
            message: format!(
                "first {} count {}: both must be at least 1",
                args.first, args.count
            ),
        });
    }
    let last = args.first + args.count - 1;
    Ok(plan::child_specs(last).split_off(args.first - 1))
}

/// Runs the host until SIGTERM or SIGINT. Builds its two runtimes itself (call it from a plain
/// `main`, not from inside a runtime).
pub fn main(args: Args) -> Result<(), Error> {
    let runtime = |name: &str| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if args.worker_threads > 0 {
            builder.worker_threads(args.worker_threads);
        }
        builder
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(Error::StartRuntime)
    };
    let devclusters = runtime(DEVCLUSTER_THREADS)?;
    let agents = runtime(AGENT_THREADS)?;
    let result = agents.block_on(run(&args, devclusters.handle().clone()));
    agents.shutdown_timeout(Duration::from_secs(1));
    devclusters.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Starts the children (devclusters on `devclusters`, agents on the current runtime), serves
/// until the stop signal, then stops them.
async fn run(args: &Args, devclusters: tokio::runtime::Handle) -> Result<(), Error> {
    if let Err(e) = atoll_runtime::telemetry::init(&args.telemetry) {
        eprintln!("fleet-children: keeping the tracing subscriber already installed: {e}");
    }
    let children = hosted(args)?;
    let layout = Layout::new(&args.dir);
    let token_path = layout.bootstrap_token();
    let token = std::fs::read_to_string(&token_path)
        .map_err(|source| Error::ReadFile {
            path: token_path.clone(),
            source,
        })?
        .trim()
        .to_string();
    let pid = std::process::id();
    let rss0 = rss_mib(pid);

    // The devclusters, on their runtime; each kubeconfig written as soon as it serves.
    let config = devcluster::Config {
        nodes: args.nodes,
        simulate_workloads: true,
        workload_delay: Duration::from_millis(args.workload_delay_ms),
        ..devcluster::Config::default()
    };
    let mut clusters = Vec::with_capacity(children.len());
    for child in &children {
        let config = config.clone();
        let path = layout.child_kubeconfig(child.index);
        let started = devclusters
            .spawn(async move {
                let cluster = devcluster::DevCluster::start(config).await?;
                cluster.write_kubeconfig(&path)?;
                Ok::<_, devcluster::Error>(cluster)
            })
            .await;
        let cluster = match started {
            Ok(Ok(cluster)) => cluster,
            Ok(Err(e)) => {
                return Err(Error::StartChild {
                    name: child.name.clone(),
                    message: e.to_string(),
                });
            }
            Err(e) => {
                return Err(Error::StartChild {
                    name: child.name.clone(),
                    message: e.to_string(),
                });
            }
        };
        clusters.push(cluster);
    }
    let rss1 = rss_mib(pid);
    tracing::info!(
        children = children.len(),
        rss_mib = rss1,
        per_child_mib = (rss1 - rss0) / children.len() as f64,
        "devclusters serving"
    );

    // The agents, each built from the command line the fleet gives an agent process.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::with_capacity(children.len());
    let no_admin = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    for child in &children {
        let kubeconfig = layout.child_kubeconfig(child.index);
        let helm_home = layout.dir.join(format!("helm-{}", child.name));
        let argv = std::iter::once("atoll-agent".to_string()).chain(crate::fleet::agent_args(
            child,
            &kubeconfig,
            &args.hub,
            &token,
            no_admin,
            args.helm.as_deref(),
            &helm_home,
        ));
        let agent_args =
            <atoll_agent::app::Args as clap::Parser>::try_parse_from(argv).map_err(|e| {
                Error::InvalidArgument {
                    what: format!("the agent command line of {}", child.name),
                    message: e.to_string(),
                }
            })?;
        let client = atoll_runtime::client::client(&agent_args.client)
            .await
            .map_err(|e| Error::StartChild {
                name: child.name.clone(),
                message: e.to_string(),
            })?;
        let mut registry = prometheus_client::registry::Registry::default();
        let agent = atoll_agent::app::build(&agent_args, client, &mut registry).map_err(|e| {
            Error::StartChild {
                name: child.name.clone(),
                message: e.to_string(),
            }
        })?;
        let mut stopped = stopped.clone();
        let name = child.name.clone();
        tasks.push(tokio::spawn(async move {
            let _registry = registry;
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = agent.run(shutdown).await {
                tracing::error!(cluster = %name, error = %e, "agent stopped with an error");
            }
        }));
    }
    let rss2 = rss_mib(pid);
    tracing::info!(
        children = children.len(),
        rss_mib = rss2,
        per_agent_mib = (rss2 - rss1) / children.len() as f64,
        "agents started"
    );
    println!(
        "fleet-children: hosting {} children ({} to {}); RSS {rss0:.1} MiB empty, {rss1:.1} MiB with the devclusters, {rss2:.1} MiB with the agents",
        children.len(),
        children.first().map_or("-", |c| c.name.as_str()),
        children.last().map_or("-", |c| c.name.as_str()),
    );

    atoll_runtime::process::shutdown_signal().await;
    tracing::info!("stopping the agents, then the devclusters");
    let _ = stop.send(true);
    let all = futures::future::join_all(tasks);
    if tokio::time::timeout(STOP_GRACE, all).await.is_err() {
        tracing::warn!("some agents did not stop within the grace period");
    }
    drop(clusters);
    Ok(())
}

/// Resident memory of `pid` in MiB (0 if unreadable).
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_command_line_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn a_host_takes_the_fleet_specs_of_its_index_range() {
        let args = |first: &str, count: &str| {
            Args::try_parse_from([
                "fleet-children",
                "--dir",
                "/f",
                "--first",
                first,
                "--count",
                count,
                "--hub",
                "http://127.0.0.1:1",
            ])
            .unwrap()
        };
        let specs = hosted(&args("4", "3")).unwrap();
        let names: Vec<&str> = specs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["child-4", "child-5", "child-6"]);
        assert_eq!(specs, plan::child_specs(6)[3..].to_vec());
        assert!(matches!(
            hosted(&args("0", "3")),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            hosted(&args("1", "0")),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
