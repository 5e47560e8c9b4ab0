//! The `fleet` command line: start, inspect and stop a local atoll fleet (parent + N children +
//! scheduler + hub + agents) made of real processes. `src/bin/fleet.rs` parses and calls [`run`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use crate::{Error, fleet, plan};

/// Starts, inspects and stops a local atoll fleet of real processes.
#[derive(Debug, clap::Parser)]
#[command(version)]
pub struct Args {
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a parent and N child devclusters, the scheduler, the hub and N agents; return once
    /// every ManagedCluster is Ready. The processes keep running until `fleet down`.
    Up {
        /// Number of child clusters.
        #[arg(long, env = "FLEET_CHILDREN", default_value_t = 3)]
        children: usize,
        /// What the clusters are made of: devcluster, or real control planes built by
        /// `make k8s` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok).
        #[arg(long, env = "FLEET_BACKEND", value_enum, default_value_t = plan::Backend::Devcluster)]
        backend: plan::Backend,
        /// Fleet directory: kubeconfigs, logs/, fleet.json.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
        /// Directory holding devcluster, atoll-scheduler, atoll-hub and atoll-agent (default:
        /// the directory of this executable).
        #[arg(long, env = "ATOLL_BIN_DIR")]
        bin_dir: Option<PathBuf>,
        /// The repository's manifests/ directory (its crds/ are installed in the parent).
        #[arg(long, env = "FLEET_MANIFESTS", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests"))]
        manifests: PathBuf,
        /// Simulated nodes per child cluster.
        #[arg(long, env = "FLEET_NODES", default_value_t = 3)]
        nodes: u32,
        /// Delay before simulated workloads in the children become ready, in milliseconds.
        #[arg(long, env = "FLEET_WORKLOAD_DELAY_MS", default_value_t = 500)]
        workload_delay_ms: u64,
        /// Seconds to wait for each start-up step.
        #[arg(long, env = "FLEET_TIMEOUT_SECONDS", default_value_t = 120)]
        timeout_seconds: u64,
        /// Keep the parent's objects in SQLite under DIR/parent-data (devcluster --data-dir),
        /// so that the parent can be restarted without losing them.
        #[arg(long, env = "FLEET_PERSIST_PARENT")]
        persist_parent: bool,
        /// With `--backend kube`: one real node per cluster (containerd, kubelet, kube-proxy;
        /// needs root and `apt-get install containerd runc containernetworking-plugins`), and
        /// atoll installed with `kubectl apply -k` and running as pods on them. At most 3
        /// children.
        #[arg(long, env = "FLEET_REAL_NODES")]
        real_nodes: bool,
    },
    /// Stop everything `fleet up` started in the directory (SIGTERM, then SIGKILL).
    Down {
        /// Fleet directory.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
        /// Seconds between SIGTERM and SIGKILL.
        #[arg(long, default_value_t = 10)]
        grace_seconds: u64,
    },
    /// Print the fleet's processes, clusters and Subscriptions.
    Status {
        /// Fleet directory.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
    },
    /// Wait until every Subscription is scheduled and applied in every bound cluster.
    Wait {
        /// Fleet directory.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
        /// Seconds to wait.
        #[arg(long, default_value_t = 120)]
        timeout_seconds: u64,
    },
    /// Kill one process of the fleet (SIGKILL to its process group, like a crash) and start it
    /// again with the same command line and environment; clusters keep their port.
    Restart {
        /// Fleet directory.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
        /// The process, as named by `fleet status`: parent, child-1, scheduler, hub, agent-child-1.
        #[arg(long)]
        process: String,
        /// Seconds to wait until it answers again.
        #[arg(long, default_value_t = 60)]
        timeout_seconds: u64,
    },
    /// Chaos runs: each starts a fleet whose agents reach the hub and their child's API server
    /// (and whose scheduler and hub reach the parent) through fault proxies, injects seeded
    /// faults, kills and restarts processes while editing Subscriptions, feeds, a Localization
    /// and cluster labels, checks what must hold while the faults last, then the invariants;
    /// stops at the first run that violates one, naming its seed.
    Chaos {
        /// Fleet directory of each run (kept, with its logs).
        #[arg(long, env = "FLEET_DIR", default_value = "target/chaos")]
        dir: PathBuf,
        /// Seed of the first run; run i uses seed + i.
        #[arg(long, env = "CHAOS_SEED", default_value_t = 1)]
        seed: u64,
        /// Runs.
        #[arg(long, env = "CHAOS_RUNS", default_value_t = 1)]
        runs: u64,
        /// Seconds of faults per run.
        #[arg(long, env = "CHAOS_SECONDS", default_value_t = 60)]
        seconds: u64,
        /// Seconds the fleet may take to converge once the faults stopped.
        #[arg(long, env = "CHAOS_CONVERGE_SECONDS", default_value_t = 60)]
        converge_seconds: u64,
        /// Child clusters (3 or more).
        #[arg(long, env = "FLEET_CHILDREN", default_value_t = 3)]
        children: usize,
        /// What the clusters are made of.
        #[arg(long, env = "FLEET_BACKEND", value_enum, default_value_t = plan::Backend::Devcluster)]
        backend: plan::Backend,
        /// Directory holding the binaries (default: the directory of this executable).
        #[arg(long, env = "ATOLL_BIN_DIR")]
        bin_dir: Option<PathBuf>,
        /// The repository's manifests/ directory.
        #[arg(long, env = "FLEET_MANIFESTS", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests"))]
        manifests: PathBuf,
        /// The most RSS any process may reach, in MiB.
        #[arg(long, env = "CHAOS_RSS_LIMIT_MIB", default_value_t = 512)]
        rss_limit_mib: u64,
        /// Hub replicas, 1 or 2 (the agents' proxy spreads connections over them).
        #[arg(long, env = "CHAOS_HUBS", default_value_t = 2)]
        hubs: usize,
        /// A HelmChart feed in the workload, when `make k8s` built `helm`.
        #[arg(long, env = "CHAOS_HELM", default_value_t = true, action = clap::ArgAction::Set)]
        helm: bool,
        /// Request-proxy steps that send writes again late, after newer ones (one in three);
        /// `false` makes them steps that repeat writes at once.
        #[arg(long, env = "CHAOS_LATE_COPIES", default_value_t = true, action = clap::ArgAction::Set)]
        late_copies: bool,
    },
    /// Print the dedicated namespace of a cluster (where its Localizations go).
    DedicatedNamespace {
        /// Fleet directory.
        #[arg(long, env = "FLEET_DIR", default_value = "target/fleet")]
        dir: PathBuf,
        /// ManagedCluster name, e.g. child-1.
        #[arg(long)]
        cluster: String,
    },
}

/// Runs one `fleet` command.
pub async fn run(args: Args) -> Result<(), Error> {
    match args.command {
        Command::Up {
            children,
            backend,
            dir,
            bin_dir,
            manifests,
            nodes,
            workload_delay_ms,
            timeout_seconds,
            persist_parent,
            real_nodes,
        } => {
            let bin_dir = bin_dir_or_own(bin_dir)?;
            let dir = std::path::absolute(&dir).map_err(|source| Error::ResolvePath {
                path: dir.clone(),
                source,
            })?;
            let opts = fleet::UpOptions {
                dir: dir.clone(),
                children,
                backend,
                bin_dir,
                manifests,
                nodes,
                workload_delay_ms,
                timeout: Duration::from_secs(timeout_seconds),
                persist_parent,
                detours: fleet::Detours::default(),
                real_nodes,
            };
            let state = fleet::up(&opts).await?;
            println!("fleet: up\n{}", fleet::summary(&state, &dir));
        }
        Command::Down { dir, grace_seconds } => {
            let results = match fleet::down(&dir, Duration::from_secs(grace_seconds)).await {
                Err(Error::ReadState { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    println!("fleet: no fleet running in {}", dir.display());
                    return Ok(());
                }
                other => other?,
            };
            let mut failed = false;
            for (name, result) in results {
                match result {
                    Ok(how) => println!("{name}: {how}"),
                    Err(e) => {
                        failed = true;
                        eprintln!("{name}: {e}");
                    }
                }
            }
            if failed {
                return Err(Error::StopProcesses);
            }
        }
        Command::Status { dir } => print!("{}", fleet::status(&dir).await?),
        Command::Wait {
            dir,
            timeout_seconds,
        } => fleet::wait_settled(&dir, Duration::from_secs(timeout_seconds)).await?,
        Command::Restart {
            dir,
            process,
            timeout_seconds,
        } => {
            let record =
                crate::scenario::restart(&dir, &process, Duration::from_secs(timeout_seconds))
                    .await?;
            println!("{process}: restarted (pid {})", record.pid);
        }
        Command::Chaos {
            dir,
            seed,
            runs,
            seconds,
            converge_seconds,
            children,
            backend,
            bin_dir,
            manifests,
            rss_limit_mib,
            hubs,
            helm,
            late_copies,
        } => {
            let bin_dir = bin_dir_or_own(bin_dir)?;
            let dir = std::path::absolute(&dir).map_err(|source| Error::ResolvePath {
                path: dir.clone(),
                source,
            })?;
            for i in 0..runs {
                let opts = crate::chaos::Options {
                    seed: seed + i,
                    chaos: Duration::from_secs(seconds),
                    converge: Duration::from_secs(converge_seconds),
                    children,
                    dir: dir.join(format!("seed-{}", seed + i)),
                    bin_dir: bin_dir.clone(),
                    manifests: manifests.clone(),
                    backend,
                    rss_limit_mib,
                    hubs,
                    helm,
                    late_copies,
                };
                let report = crate::chaos::run(&opts).await?;
                print!("{}", report.summary());
            }
        }
        Command::DedicatedNamespace { dir, cluster } => {
            println!("{}", fleet::dedicated_namespace(&dir, &cluster).await?)
        }
    }
    Ok(())
}

/// `--bin-dir`, or the directory of this executable.
fn bin_dir_or_own(given: Option<PathBuf>) -> Result<PathBuf, Error> {
    match given {
        Some(d) => Ok(d),
        None => {
            let exe = std::env::current_exe().map_err(Error::LocateSelf)?;
            plan::bin_dir(None, &exe).ok_or_else(|| {
                Error::LocateSelf(std::io::Error::other(
                    "the executable has no parent directory",
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Args::command().debug_assert();
    }
}
