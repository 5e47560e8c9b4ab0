//! What the end-to-end scenario files share: a fleet of real processes started with the real
//! `fleet` binary and stopped again when its guard is dropped (also when a test panics), kubectl
//! for the parent and each child, and the interval at which the scenarios poll with
//! `atoll_testkit` (which puts the last observation in the failure message).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use atoll_e2e::kubectl::Kubectl;
use atoll_e2e::plan::{Backend, Binaries};
use atoll_testkit::Poll;

/// How long any single convergence may take before a scenario fails.
pub const CONVERGE: Duration = Duration::from_secs(60);

pub fn fleet_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleet"))
}

pub fn bin_dir() -> PathBuf {
    std::env::var_os("ATOLL_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| fleet_exe().parent().unwrap().to_path_buf())
}

pub fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// Whether kubectl and the binaries are there; prints a NOTICE when not.
pub async fn prerequisites_or_skip(test: &str) -> bool {
    if !Kubectl::available().await {
        eprintln!("NOTICE: {test} skipped: kubectl is not on PATH");
        return false;
    }
    if let Err(e) = Binaries::locate(&bin_dir()) {
        eprintln!("NOTICE: {test} skipped: {e}");
        return false;
    }
    if backend() == Backend::Kube {
        // The real tier was asked for: its binaries missing is a failure, not a skip.
        if let Err(e) = atoll_e2e::real_tier::locate_binaries() {
            panic!("{test}: FLEET_BACKEND=kube, but {e}");
        }
        if real_nodes() {
            let bin_dir = atoll_e2e::control_plane::bin_dir_from_env().unwrap_or_default();
            let missing = atoll_e2e::real_node::missing_prerequisites(&bin_dir);
            if !missing.is_empty() {
                eprintln!(
                    "NOTICE: {test} skipped: FLEET_REAL_NODES asks for real nodes, which need {}",
                    missing.join(", ")
                );
                return false;
            }
        }
    }
    true
}

/// Whether the fleets of this run put atoll in pods on real nodes (`FLEET_REAL_NODES`, which
/// the `fleet` binary reads too).
pub fn real_nodes() -> bool {
    matches!(
        std::env::var("FLEET_REAL_NODES").as_deref(),
        Ok("true") | Ok("1")
    )
}

/// The backend the fleets of this run are made of: `FLEET_BACKEND` (`devcluster` or `kube`),
/// which the `fleet` binary reads too.
pub fn backend() -> Backend {
    match std::env::var("FLEET_BACKEND").as_deref() {
        Ok("kube") => Backend::Kube,
        Ok("devcluster") | Ok("") | Err(_) => Backend::Devcluster,
        Ok(other) => panic!("FLEET_BACKEND={other}: give devcluster or kube"),
    }
}

/// Runs the `fleet` binary with `env` added.
pub fn fleet_cmd(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(fleet_exe())
        .args(args)
        .env("ATOLL_BIN_DIR", bin_dir())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A running fleet in a temporary directory; dropping it runs `fleet down`.
pub struct Fleet {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub parent: Kubectl,
    pub children: Vec<(String, Kubectl)>,
}

impl Fleet {
    /// The drift repairs `child`'s agent has counted (`atoll_agent_drift_repairs_total`, every
    /// result), read from its admin server's `/metrics`.
    pub async fn agent_drift_repairs(&self, child: &str) -> f64 {
        let text = self.agent_metrics(child).await;
        atoll_e2e::fleet::metric_sum(&text, "atoll_agent_drift_repairs_total", "")
    }

    /// The address atoll's components reach a test's server on this machine by (see
    /// `FleetState::serving_host`).
    pub fn serving_host(&self) -> std::net::IpAddr {
        atoll_e2e::state::FleetState::load(&self.dir.join("fleet.json"))
            .unwrap()
            .serving_host()
    }

    /// `/metrics` of `child`'s agent: from its admin server, or with atoll on pods
    /// (`--real-nodes`) through the child API server's proxy to the agent's pod.
    pub async fn agent_metrics(&self, child: &str) -> String {
        let state = atoll_e2e::state::FleetState::load(&self.dir.join("fleet.json")).unwrap();
        if state.real_nodes.is_some() {
            let k = self.child(child);
            let pod = k
                .run(&[
                    "get",
                    "pods",
                    "-n",
                    "clusternet-system",
                    "-l",
                    "app.kubernetes.io/name=atoll-agent",
                    "--field-selector=status.phase=Running",
                    "-o",
                    "jsonpath={.items[0].metadata.name}",
                ])
                .await
                .unwrap();
            let path =
                format!("/api/v1/namespaces/clusternet-system/pods/{pod}:9090/proxy/metrics");
            return k.run(&["get", "--raw", &path]).await.unwrap();
        }
        let name = format!("agent-{child}");
        let addr = state
            .process(&name)
            .and_then(|p| p.admin.as_deref()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} has no admin server in fleet.json"));
        let (code, text) = atoll_e2e::fleet::http_get(addr, "/metrics").await.unwrap();
        assert_eq!(code, 200, "{name} /metrics: {text}");
        text
    }

    /// `fleet up --children N` plus `extra` arguments, with `env` for every process it starts.
    pub async fn up(children: usize, extra: &[&str], env: &[(&str, &str)]) -> Fleet {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("fleet");
        let n = children.to_string();
        let manifests = manifests();
        let mut args = vec![
            "up",
            "--children",
            &n,
            "--dir",
            dir.to_str().unwrap(),
            "--manifests",
            manifests.to_str().unwrap(),
            "--timeout-seconds",
            "90",
        ];
        args.extend_from_slice(extra);
        let started = Instant::now();
        let out = fleet_cmd(&args, env);
        let home = tmp.path().join("home");
        let cache = tmp.path().join("cache");
        let fleet = Fleet {
            parent: Kubectl::new(dir.join("parent.kubeconfig"), &cache).with_home(&home),
            children: (1..=children)
                .map(|i| {
                    (
                        format!("child-{i}"),
                        Kubectl::new(dir.join(format!("child-{i}.kubeconfig")), &cache)
                            .with_home(&home),
                    )
                })
                .collect(),
            dir,
            tmp,
        };
        assert!(out.status.success(), "fleet up failed:\n{}", text(&out));
        eprintln!(
            "FIGURE fleet up ({children} children, {:?}, all Ready): {:.1}s",
            backend(),
            started.elapsed().as_secs_f64()
        );
        fleet
    }

    pub fn dir_str(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    pub fn child(&self, name: &str) -> &Kubectl {
        &self
            .children
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no child {name}"))
            .1
    }

    pub fn dedicated_namespace(&self, cluster: &str) -> String {
        let out = fleet_cmd(
            &[
                "dedicated-namespace",
                "--dir",
                self.dir_str(),
                "--cluster",
                cluster,
            ],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Writes `yaml` to a file and `kubectl apply -f`s it to the parent.
    pub async fn apply(&self, name: &str, yaml: &str) -> Result<String, atoll_e2e::Error> {
        let path = self.tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        self.parent
            .run(&["apply", "-f", path.to_str().unwrap()])
            .await
    }

    /// `kubectl delete -f` of what [`Fleet::apply`] wrote under `name`, waiting for finalizers.
    pub async fn delete(&self, name: &str) {
        let path = self.tmp.path().join(format!("{name}.yaml"));
        self.parent
            .run(&[
                "delete",
                "-f",
                path.to_str().unwrap(),
                "--ignore-not-found",
                "--timeout=60s",
            ])
            .await
            .unwrap();
    }

    /// The log files, for failure messages.
    pub fn logs(&self) -> String {
        self.dir.join("logs").display().to_string()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let out = fleet_cmd(
            &["down", "--dir", self.dir_str(), "--grace-seconds", "5"],
            &[],
        );
        eprintln!("fleet down {}:\n{}", self.dir.display(), text(&out));
        if std::thread::panicking() {
            // Keep the logs of a failed scenario.
            let keep = std::env::temp_dir().join(format!(
                "atoll-e2e-failed-{}",
                self.tmp.path().file_name().unwrap().to_string_lossy()
            ));
            let _ = std::fs::rename(self.dir.join("logs"), &keep);
            eprintln!("logs of the failed scenario kept in {}", keep.display());
        }
    }
}

/// One fleet shared by the tests of a file that run at the same time: the first test starts it,
/// the last one to finish stops it (the `Arc`'s drop runs `fleet down`).
pub async fn shared(slot: &'static std::sync::Mutex<Weak<Fleet>>, children: usize) -> Arc<Fleet> {
    // Start-up must not run twice at once: hold an async lock across it.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _starting = STARTING.lock().await;
    if let Some(f) = slot.lock().unwrap().upgrade() {
        return f;
    }
    let fleet = Arc::new(Fleet::up(children, &[], &[]).await);
    *slot.lock().unwrap() = Arc::downgrade(&fleet);
    fleet
}

/// How often the scenarios poll: every check runs kubectl against real processes.
pub const POLL: Poll = Poll::every(Duration::from_millis(250));

/// `kubectl get <kind> <name> [-n ns] -o jsonpath=<path>`: `None` when the object does not exist.
pub async fn jsonpath(
    k: &Kubectl,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    path: &str,
) -> Result<Option<String>, String> {
    let jp = format!("jsonpath={path}");
    let mut args = vec!["get", kind, name, "-o", &jp];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    match k.run(&args).await {
        Ok(out) => Ok(Some(out)),
        Err(atoll_e2e::Error::Kubectl { stderr, .. }) if stderr.contains("NotFound") => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// What one child should have: `kind ns/name` at `path` equals `want` (`None`: absent).
#[derive(Clone, Debug)]
pub struct Expect {
    pub child: &'static str,
    pub kind: &'static str,
    pub ns: Option<&'static str>,
    pub name: &'static str,
    pub path: &'static str,
    pub want: Option<String>,
}

pub fn expect(
    child: &'static str,
    kind: &'static str,
    ns: &'static str,
    name: &'static str,
    path: &'static str,
    want: Option<&str>,
) -> Expect {
    Expect {
        child,
        kind,
        ns: (!ns.is_empty()).then_some(ns),
        name,
        path,
        want: want.map(str::to_string),
    }
}

/// Waits until every expectation holds in the children of `fleet`; returns the time taken.
pub async fn converge(fleet: &Fleet, what: &str, expects: &[Expect]) -> Duration {
    let ((), took) = POLL
        .eventually_timed(what, CONVERGE, || async {
            let mut wrong = Vec::new();
            for e in expects {
                let got = jsonpath(fleet.child(e.child), e.kind, e.ns, e.name, e.path).await?;
                // An object that exists but lacks the field reads as "": count it as present.
                if got != e.want {
                    wrong.push(format!(
                        "{} {} {}/{} {}: want {:?}, got {:?}",
                        e.child,
                        e.kind,
                        e.ns.unwrap_or(""),
                        e.name,
                        e.path,
                        e.want,
                        got
                    ));
                }
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(format!("{} (logs: {})", wrong.join("; "), fleet.logs()))
            }
        })
        .await;
    took
}

/// The `status` of the condition `type_` of a Subscription, with its reason and message.
pub async fn condition(
    fleet: &Fleet,
    ns: &str,
    name: &str,
    type_: &str,
) -> Result<(String, String, String), String> {
    let path = format!(
        "{{range .status.conditions[?(@.type==\"{type_}\")]}}{{.status}}|{{.reason}}|{{.message}}{{end}}"
    );
    let got = jsonpath(&fleet.parent, "subscription", Some(ns), name, &path)
        .await?
        .ok_or_else(|| format!("Subscription {ns}/{name} not found"))?;
    let mut parts = got.splitn(3, '|');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(r), Some(m)) if !s.is_empty() => {
            Ok((s.to_string(), r.to_string(), m.to_string()))
        }
        _ => Err(format!("no {type_} condition on {ns}/{name} yet")),
    }
}

/// The Ready status of each ManagedCluster, as `name=status` in name order.
pub async fn clusters_ready(fleet: &Fleet) -> Result<String, String> {
    let out = fleet
        .parent
        .run(&[
            "get",
            "mcls",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ])
        .await
        .map_err(|e| e.to_string())?;
    let mut lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    lines.sort();
    Ok(lines.join(","))
}

pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The processes of one real control plane started by [`start_real`]; dropping it stops them
/// (also when a test panics).
pub struct RealCluster {
    state: atoll_e2e::state::FleetState,
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let state = std::mem::take(&mut self.state);
        // `stop_all` is async and Drop may run inside a runtime: a fresh one on another thread.
        let stopper = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(atoll_e2e::fleet::stop_all(&state, Duration::from_secs(5)))
        });
        if let Ok(results) = stopper.join() {
            for (name, r) in results {
                if let Err(e) = r {
                    eprintln!("stopping {name}: {e}");
                }
            }
        }
    }
}

/// One real control plane (etcd, kube-apiserver, controller manager, scheduler, kwok with
/// `nodes` Nodes) named `name`, with its files under `dir/real`; its admin kubeconfig
/// (`dir/kubeconfig`). Only for `FLEET_BACKEND=kube` runs: missing binaries fail the test.
pub async fn start_real(
    dir: &Path,
    name: &str,
    role: atoll_e2e::state::Role,
    nodes: u32,
) -> (RealCluster, PathBuf) {
    let (guard, kubeconfig, _) = start_real_for(dir, name, role, nodes, None).await;
    (guard, kubeconfig)
}

/// [`start_real`] for the real nodes of `network` to join (see `atoll_e2e::real_node`); also
/// returns the started cluster's files, ports and CA.
pub async fn start_real_for(
    dir: &Path,
    name: &str,
    role: atoll_e2e::state::Role,
    nodes: u32,
    network: Option<&atoll_e2e::control_plane::NodeNetwork>,
) -> (RealCluster, PathBuf, atoll_e2e::real_tier::RealCluster) {
    let binaries = atoll_e2e::real_tier::locate_binaries()
        .unwrap_or_else(|e| panic!("FLEET_BACKEND=kube, but {e}"));
    let layout = atoll_e2e::plan::Layout::new(dir.join("real"));
    std::fs::create_dir_all(layout.logs()).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut guard = RealCluster {
        state: atoll_e2e::state::FleetState::default(),
    };
    let started = Instant::now();
    let started_clusters = atoll_e2e::real_tier::start_clusters_for(
        &[(name.to_string(), kubeconfig.clone(), role)],
        &binaries,
        &layout,
        &mut guard.state,
        nodes,
        Duration::from_secs(120),
        network,
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "starting the real cluster: {e} (logs in {})",
            layout.logs().display()
        )
    });
    eprintln!(
        "FIGURE real cluster started in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let cluster = started_clusters
        .into_iter()
        .next()
        .expect("one cluster was started");
    (guard, kubeconfig, cluster)
}
