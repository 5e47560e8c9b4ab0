//! Plumbing shared by the benchmark examples of the scheduler, the hub and the agent (`make
//! bench`): figures of a process read from `/proc`, percentiles, and a devcluster served by a
//! runtime of its own. Benchmarks only: panics on setup failures, like the examples using it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One progress line on stderr, stamped with the time since `started`.
pub fn log(started: Instant, msg: &str) {
    eprintln!("[{:>7.1}s] {msg}", started.elapsed().as_secs_f64());
}

/// A `Vm…:` line of `/proc/<pid>/status` (e.g. `VmRSS`, `VmHWM`), in KiB; 0 if unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Resident memory of `pid`, in KiB; 0 if unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// User plus system CPU time of `pid` so far, in seconds (clock ticks of 1/100 s).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (utime + stime) / 100.0
}

/// The three load averages, as `/proc/loadavg` prints them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `p` quantile (0..=1) of `sorted`, nearest rank; zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize)
        .saturating_sub(1)
        .min(sorted.len() - 1);
    sorted[i]
}

/// A free TCP port on 127.0.0.1 for a process the bench starts, reserved as the fleet
/// launcher's are ([`atoll_e2e::process::free_port`]).
pub fn free_port() -> u16 {
    match atoll_e2e::process::free_port() {
        Ok(port) => port,
        Err(e) => panic!("no free port for the bench: {e}"),
    }
}

/// `$env`, or the binary `name` next to the running example's directory
/// (`target/release/examples/bench_x` → `target/release/<name>`).
pub fn binary(env: &str, name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(|dir| dir.join(name))
        .unwrap_or_else(|| PathBuf::from("target/release").join(name))
}

/// The bootstrap token that [`OwnRuntimeCluster::start_parent`] installs (the test kit's).
pub use atoll_testkit::BOOTSTRAP_TOKEN;

/// A devcluster served by a runtime of its own (one OS thread), so that its requests are not
/// queued behind the benchmark's own tasks. Dropping the handle stops it.
pub struct OwnRuntimeCluster {
    /// Its URL.
    pub url: String,
    /// A kubeconfig for it.
    pub kubeconfig: kube::config::Kubeconfig,
    _stop: std::sync::mpsc::Sender<()>,
}

impl OwnRuntimeCluster {
    /// Starts a devcluster on a thread named `name`.
    pub fn start(name: &'static str, config: devcluster::Config) -> OwnRuntimeCluster {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(name)
                    .enable_all()
                    .build()
                    .unwrap();
                let dc = rt.block_on(devcluster::DevCluster::start(config)).unwrap();
                ready_tx.send((dc.url(), dc.kubeconfig().unwrap())).unwrap();
                // Serve until the handle is dropped.
                let _ = stopped.recv();
                drop(dc);
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .unwrap();
        let (url, kubeconfig) = ready_rx.recv().unwrap();
        OwnRuntimeCluster {
            url,
            kubeconfig,
            _stop: stop,
        }
    }

    /// A devcluster set up as an atoll parent, as `kubectl apply -k manifests/crds` and the
    /// install would leave it: atoll's CRDs, the `clusternet-system` and `clusternet-reserved`
    /// namespaces, and a bootstrap-token Secret for [`BOOTSTRAP_TOKEN`].
    pub async fn start_parent(name: &'static str) -> (OwnRuntimeCluster, kube::Client) {
        let parent = OwnRuntimeCluster::start(name, devcluster::Config::default());
        let client = parent.client().await;
        atoll_testkit::install_crds(&client).await;
        for ns in ["clusternet-system", "clusternet-reserved"] {
            atoll_testkit::create_namespace(&client, ns).await;
        }
        atoll_testkit::bootstrap_secret(&client, BOOTSTRAP_TOKEN, None).await;
        (parent, client)
    }

    /// A kube client for it.
    pub async fn client(&self) -> kube::Client {
        let config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig.clone(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// Writes its kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) {
        std::fs::write(path, serde_yaml::to_string(&self.kubeconfig).unwrap()).unwrap();
    }
}

/// A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
/// without nodes) started from the `make k8s` binaries, for benchmarks whose parent must be a
/// real API server. Dropping it kills its processes.
pub struct RealParent {
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Every process it started (kube-apiserver's pid among them).
    pub state: atoll_e2e::state::FleetState,
    _dir: tempfile::TempDir,
}

impl RealParent {
    /// Starts one real cluster named `parent` in a temporary directory.
    pub async fn start() -> RealParent {
        let binaries = atoll_e2e::real_tier::locate_binaries().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let layout = atoll_e2e::plan::Layout::new(dir.path());
        std::fs::create_dir_all(layout.logs()).unwrap();
        let kubeconfig = layout.parent_kubeconfig();
        let mut state = atoll_e2e::state::FleetState::default();
        let started = atoll_e2e::real_tier::start_clusters(
            &[(
                "parent".to_string(),
                kubeconfig.clone(),
                atoll_e2e::state::Role::Parent,
            )],
            &binaries,
            &layout,
            &mut state,
            0,
            Duration::from_secs(120),
        )
        .await;
        if let Err(e) = started {
            kill_all(&state);
            panic!("starting a real parent: {e}");
        }
        RealParent {
            kubeconfig,
            state,
            _dir: dir,
        }
    }

    /// kube-apiserver's pid.
    pub fn apiserver_pid(&self) -> u32 {
        self.state.process("parent").map_or(0, |p| p.pid)
    }

    /// A client for it.
    pub async fn client(&self) -> kube::Client {
        atoll_e2e::fleet::client_for(&self.kubeconfig)
            .await
            .unwrap()
    }
}

fn kill_all(state: &atoll_e2e::state::FleetState) {
    for p in state.processes.iter().rev() {
        if atoll_e2e::process::is_running(p) {
            let _ = atoll_e2e::process::signal_group(p.pid, "KILL");
        }
    }
}

impl Drop for RealParent {
    fn drop(&mut self) {
        kill_all(&self.state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&v, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.99), Duration::ZERO);
    }

    #[test]
    fn own_process_figures_are_readable() {
        let pid = std::process::id();
        let rss = rss_kib(pid);
        assert!(rss > 0);
        // The high-water mark read later is at least any earlier RSS.
        assert!(status_kib(pid, "VmHWM") >= rss);
        assert!(cpu_seconds(pid) >= 0.0);
        assert_eq!(loadavg().split(' ').count(), 3);
    }
}
