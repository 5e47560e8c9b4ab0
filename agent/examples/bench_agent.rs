//! The issue-5 agent benchmarks, release build:
//!
//! 1. **Apply throughput**: the real [`atoll_applier::Applier`] against a child devcluster served
//!    by a runtime thread of its own applies one Description of 1,000 small ConfigMaps: first as
//!    generation 1 (every object created), then generation 2 with changed data (every object
//!    updated), then generation 2 again (nothing changed). Each round uses a fresh devcluster and
//!    a fresh applier (so discovery is part of the first apply, as in a freshly started agent);
//!    the table shows the median of the rounds and every round's time.
//! 2. **Idle RSS**: a parent and a child devcluster (in this process), the `atoll-hub` and
//!    `atoll-agent` release binaries as processes of their own. Once the agent's ManagedCluster
//!    is Ready and a Description with a few objects was applied and reported, the agent idles
//!    through a few heartbeats; then its `VmRSS` and `VmHWM` are read from `/proc/<pid>/status`.
//!
//! ```text
//! cargo build --release -p atoll-agent -p atoll-hub --bins --examples
//! cargo run --release -p atoll-agent --example bench_agent -- [rounds]   # default 3
//! ```
//!
//! `ATOLL_HUB_BIN` and `ATOLL_AGENT_BIN` override the binaries' paths (default:
//! `target/release/atoll-hub` and `target/release/atoll-agent`, next to this example's
//! directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_applier::{Applier, Phase};
use atoll_bench::{
    BOOTSTRAP_TOKEN, OwnRuntimeCluster, binary, cpu_seconds, free_port, loadavg, log, status_kib,
};
use atoll_crds::apps::Description as DescriptionResource;
use atoll_crds::clusters::ManagedCluster;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const OBJECTS: usize = 1000;
const HEARTBEAT_SECONDS: u64 = 10;
/// Heartbeat periods the agent idles through before its memory is read.
const IDLE_HEARTBEATS: u64 = 3;
const MIB: f64 = 1024.0;

/// A scratch directory removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> ScratchDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("atoll-bench-agent-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"k": value}})
}

fn bulk(generation: i64, value: &str) -> atoll_applier::Description {
    atoll_applier::Description {
        charts: Vec::new(),
        namespace: "clusternet-bench".into(),
        name: "default.bulk".into(),
        uid: "uid-bulk".into(),
        generation,
        orphan: false,
        objects: (0..OBJECTS)
            .map(|i| cm(&format!("cm-{i}"), value))
            .collect(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn all_secs(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.3}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Times one apply and checks that every object was applied.
async fn timed_apply(applier: &Applier, d: &atoll_applier::Description) -> Duration {
    let t = Instant::now();
    let report = applier.apply(d).await;
    let elapsed = t.elapsed();
    assert_eq!(
        report.phase,
        Phase::Success,
        "generation {}: {}",
        d.generation,
        report.reason
    );
    assert_eq!(report.observed_generation, d.generation);
    assert_eq!(report.objects.len(), OBJECTS);
    elapsed
}

struct Throughput {
    create: Vec<Duration>,
    update: Vec<Duration>,
    unchanged: Vec<Duration>,
}

/// Part 1: the applier, 1,000 ConfigMaps, `rounds` fresh devclusters.
async fn apply_throughput(started: Instant, rounds: usize) -> Throughput {
    let mut t = Throughput {
        create: Vec::new(),
        update: Vec::new(),
        unchanged: Vec::new(),
    };
    for round in 1..=rounds {
        let child = OwnRuntimeCluster::start("child", devcluster::Config::default());
        let client = child.client().await;
        let applier = Applier::new(client.clone(), atoll_crds::known::FIELD_MANAGER_AGENT);
        let create = timed_apply(&applier, &bulk(1, "v1")).await;
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "default");
        let created = cms
            .list(&ListParams::default().labels("apps.clusternet.io/managed-by=atoll-agent"))
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(created, OBJECTS, "ConfigMaps in the child after the create");
        let update = timed_apply(&applier, &bulk(2, "v2")).await;
        let unchanged = timed_apply(&applier, &bulk(2, "v2")).await;
        // The update reached every object.
        let updated = cms
            .list(&ListParams::default().labels("apps.clusternet.io/managed-by=atoll-agent"))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("v2"))
            .count();
        assert_eq!(updated, OBJECTS, "ConfigMaps with the generation-2 data");
        log(
            started,
            &format!(
                "round {round}/{rounds}: create {}, update {}, unchanged {}",
                secs(create),
                secs(update),
                secs(unchanged)
            ),
        );
        t.create.push(create);
        t.update.push(update);
        t.unchanged.push(unchanged);
        drop(child);
    }
    t
}

fn is_ready(mc: &ManagedCluster) -> bool {
    let status = serde_json::to_value(&mc.status).unwrap_or(Value::Null);
    status["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .unwrap_or(false)
}

/// Polls `check` until it yields a value; panics (which kills the child processes) on timeout
/// or when one of `procs` exits.
async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    procs: &mut [(&str, &mut tokio::process::Child, &Path)],
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    atoll_testkit::eventually(what, timeout, || {
        for (name, child, err) in procs.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{name} exited with {status} while waiting for {what}: {}",
                    std::fs::read_to_string(err).unwrap_or_default()
                );
            }
        }
        check()
    })
    .await
}

fn spawn(bin: &Path, args: &[String], dir: &Path, name: &str) -> tokio::process::Child {
    tokio::process::Command::new(bin)
        .args(args)
        .env(
            "ATOLL_LOG",
            std::env::var("ATOLL_LOG").unwrap_or("warn".into()),
        )
        .stdout(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()))
}

struct Idle {
    rss_kib: u64,
    hwm_kib: u64,
    rss_ready_kib: u64,
    idle_cpu: f64,
    idle_window: f64,
    heartbeats: usize,
    objects: usize,
    bulk_e2e: Duration,
    bulk_heartbeats: usize,
    bulk_rss_kib: u64,
    bulk_hwm_kib: u64,
}

/// Sleeps for `window`, polling the ManagedCluster in `namespace` every second; the number of
/// times its `status.lastObservedTime` changed (one heartbeat written back by the hub each).
async fn count_heartbeats(mcs: &Api<ManagedCluster>, namespace: &str, window: Duration) -> usize {
    let end = Instant::now() + window;
    let mut seen = std::collections::BTreeSet::new();
    while Instant::now() < end {
        if let Ok(list) = mcs.list(&ListParams::default()).await
            && let Some(t) = list
                .items
                .iter()
                .find(|m| m.metadata.namespace.as_deref() == Some(namespace))
                .and_then(|m| m.status.as_ref())
                .and_then(|s| s.last_observed_time.clone())
        {
            seen.insert(t.0.to_string());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    seen.len().saturating_sub(1)
}

/// Part 2: hub and agent as processes; the agent's memory after idling.
async fn idle_rss(started: Instant, hub_bin: &Path, agent_bin: &Path) -> Idle {
    let dir = ScratchDir::new();
    // Parent: atoll's CRDs, namespaces and the bootstrap token.
    let (parent, pc) = OwnRuntimeCluster::start_parent("parent").await;
    let parent_kubeconfig = dir.0.join("parent.kubeconfig");
    parent.write_kubeconfig(&parent_kubeconfig);
    let child = OwnRuntimeCluster::start(
        "child",
        devcluster::Config {
            nodes: 1,
            ..devcluster::Config::default()
        },
    );
    let child_kubeconfig = dir.0.join("child.kubeconfig");
    child.write_kubeconfig(&child_kubeconfig);
    log(
        started,
        &format!("parent at {}, child at {}", parent.url, child.url),
    );

    let grpc_port = free_port();
    let mut hub = spawn(
        hub_bin,
        &[
            "--kubeconfig".into(),
            parent_kubeconfig.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{grpc_port}"),
            "--admin-listen".into(),
            format!("127.0.0.1:{}", free_port()),
            "--insecure".into(),
            "--auto-approve".into(),
            "--heartbeat-seconds".into(),
            HEARTBEAT_SECONDS.to_string(),
        ],
        &dir.0,
        "hub",
    );
    let hub_err = dir.0.join("hub.err");
    wait_for(
        "the hub's gRPC port",
        Duration::from_secs(60),
        &mut [("atoll-hub", &mut hub, &hub_err)],
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", grpc_port))
                .await
                .ok()
                .map(drop)
        },
    )
    .await;
    let mut agent = spawn(
        agent_bin,
        &[
            "--kubeconfig".into(),
            child_kubeconfig.display().to_string(),
            "--hub".into(),
            format!("http://127.0.0.1:{grpc_port}"),
            "--bootstrap-token".into(),
            BOOTSTRAP_TOKEN.into(),
            "--cluster-name".into(),
            "bench".into(),
            "--insecure".into(),
            "--admin-listen".into(),
            format!("127.0.0.1:{}", free_port()),
        ],
        &dir.0,
        "agent",
    );
    let agent_pid = agent.id().unwrap();
    let agent_err = dir.0.join("agent.err");
    log(
        started,
        &format!("hub pid {:?}, agent pid {agent_pid}", hub.id()),
    );

    // The agent's ManagedCluster Ready in the parent.
    let mcs: Api<ManagedCluster> = Api::all(pc.clone());
    let namespace: String = wait_for(
        "the ManagedCluster to be Ready",
        Duration::from_secs(120),
        &mut [
            ("atoll-hub", &mut hub, &hub_err),
            ("atoll-agent", &mut agent, &agent_err),
        ],
        || {
            let mcs = mcs.clone();
            async move {
                let list = mcs.list(&ListParams::default()).await.unwrap();
                list.items
                    .iter()
                    .find(|m| is_ready(m))
                    .and_then(|m| m.metadata.namespace.clone())
            }
        },
    )
    .await;
    let rss_ready_kib = status_kib(agent_pid, "VmRSS");
    log(
        started,
        &format!("ManagedCluster Ready in {namespace}; agent RSS {rss_ready_kib} KiB"),
    );

    // A Description with a few objects, applied and reported.
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": "bench"}, "data": {"greeting": "hello"}}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "credentials", "namespace": "bench"}, "data": {"password": "YmVuY2g="}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "bench"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "bench"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                   "template": {"metadata": {"labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
    ];
    let n_objects = objects.len();
    let descs: Api<DescriptionResource> = Api::namespaced(pc.clone(), &namespace);
    let d: DescriptionResource = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
        "metadata": {"name": "bench.web", "namespace": namespace},
        "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&objects)}
    }))
    .unwrap();
    descs.create(&PostParams::default(), &d).await.unwrap();
    let t = Instant::now();
    let status = wait_for(
        "the agent's report of the Description",
        Duration::from_secs(60),
        &mut [
            ("atoll-hub", &mut hub, &hub_err),
            ("atoll-agent", &mut agent, &agent_err),
        ],
        || {
            let descs = descs.clone();
            async move {
                let status = descs.get("bench.web").await.unwrap().status?;
                (status.observed_generation == Some(1)).then_some(status)
            }
        },
    )
    .await;
    let status = serde_json::to_value(status).unwrap();
    assert_eq!(
        status["phase"], "Success",
        "the Description was not applied: {status}"
    );
    log(
        started,
        &format!(
            "Description with {n_objects} objects applied and reported in {:.2} s",
            t.elapsed().as_secs_f64()
        ),
    );

    // Idle through a few heartbeats, counting them (the ManagedCluster's lastObservedTime).
    let cpu0 = cpu_seconds(agent_pid);
    let t0 = Instant::now();
    let heartbeats = count_heartbeats(
        &mcs,
        &namespace,
        Duration::from_secs(HEARTBEAT_SECONDS * IDLE_HEARTBEATS),
    )
    .await;
    let idle_cpu = cpu_seconds(agent_pid) - cpu0;
    let idle_window = t0.elapsed().as_secs_f64();
    if let Ok(Some(status)) = agent.try_wait() {
        panic!(
            "atoll-agent exited with {status} while idling: {}",
            std::fs::read_to_string(&agent_err).unwrap_or_default()
        );
    }
    let rss_kib = status_kib(agent_pid, "VmRSS");
    let hwm_kib = status_kib(agent_pid, "VmHWM");
    // Still connected and reporting: the ManagedCluster is Ready.
    let mc = mcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|m| m.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .unwrap();
    assert!(is_ready(&mc), "the ManagedCluster is no longer Ready");
    log(
        started,
        &format!(
            "idle {idle_window:.0} s ({heartbeats} heartbeats seen): agent RSS {rss_kib} KiB, HWM {hwm_kib} KiB"
        ),
    );

    // The same agent receives a Description of 1,000 ConfigMaps through the hub.
    let raw: Vec<Value> = (0..OBJECTS)
        .map(|i| cm(&format!("bulk-{i}"), "v1"))
        .collect();
    let d: DescriptionResource = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
        "metadata": {"name": "bench.bulk", "namespace": namespace},
        "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&raw)}
    }))
    .unwrap();
    let t = Instant::now();
    descs.create(&PostParams::default(), &d).await.unwrap();
    let status = wait_for(
        "the agent's report of the 1,000-object Description",
        Duration::from_secs(120),
        &mut [
            ("atoll-hub", &mut hub, &hub_err),
            ("atoll-agent", &mut agent, &agent_err),
        ],
        || {
            let descs = descs.clone();
            async move {
                let status = descs.get("bench.bulk").await.unwrap().status?;
                (status.observed_generation == Some(1)).then_some(status)
            }
        },
    )
    .await;
    let bulk_e2e = t.elapsed();
    let status = serde_json::to_value(status).unwrap();
    assert_eq!(
        status["phase"], "Success",
        "the 1,000-object Description was not applied: {}",
        status["reason"]
    );
    log(
        started,
        &format!(
            "1,000-object Description applied and reported through the hub in {:.2} s",
            bulk_e2e.as_secs_f64()
        ),
    );
    let bulk_heartbeats = count_heartbeats(
        &mcs,
        &namespace,
        Duration::from_secs(HEARTBEAT_SECONDS * IDLE_HEARTBEATS),
    )
    .await;
    let bulk_rss_kib = status_kib(agent_pid, "VmRSS");
    let bulk_hwm_kib = status_kib(agent_pid, "VmHWM");
    log(
        started,
        &format!(
            "idle again ({bulk_heartbeats} heartbeats seen): agent RSS {bulk_rss_kib} KiB, HWM {bulk_hwm_kib} KiB"
        ),
    );

    let _ = agent.kill().await;
    let _ = hub.kill().await;
    Idle {
        rss_kib,
        hwm_kib,
        rss_ready_kib,
        idle_cpu,
        idle_window,
        heartbeats,
        objects: n_objects,
        bulk_e2e,
        bulk_heartbeats,
        bulk_rss_kib,
        bulk_hwm_kib,
    }
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(3);
    let hub_bin = binary("ATOLL_HUB_BIN", "atoll-hub");
    let agent_bin = binary("ATOLL_AGENT_BIN", "atoll-agent");
    for (bin, env, package) in [
        (&hub_bin, "ATOLL_HUB_BIN", "atoll-hub"),
        (&agent_bin, "ATOLL_AGENT_BIN", "atoll-agent"),
    ] {
        if !bin.is_file() {
            eprintln!(
                "{} is missing: build it first with `cargo build --release -p {package} --bins` (or set {env})",
                bin.display()
            );
            std::process::exit(2);
        }
    }
    let load_before = loadavg();

    let t = apply_throughput(started, rounds).await;
    let idle = idle_rss(started, &hub_bin, &agent_bin).await;

    let create = median(t.create.clone());
    let update = median(t.update.clone());
    let unchanged = median(t.unchanged.clone());
    let verdict = |ok: bool| if ok { "" } else { " **missed**" };
    let target_apply = Duration::from_secs(2);
    let rss_mib = idle.rss_kib as f64 / MIB;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / MIB);
    println!();
    println!("| measurement (release build) | value | target |");
    println!("|---|---|---|");
    println!(
        "| agent idle RSS (`atoll-agent` process; 1 Description of {} objects applied, then idle {:.0} s = {IDLE_HEARTBEATS} heartbeat periods of {HEARTBEAT_SECONDS} s, lastObservedTime changed {}×) | {rss_mib:.1} MiB{} | ≤ 20 MiB |",
        idle.objects,
        idle.idle_window,
        idle.heartbeats,
        verdict(rss_mib <= 20.0)
    );
    println!(
        "| agent peak RSS so far (VmHWM) / RSS when first Ready, before any Description | {} / {} | |",
        mib(idle.hwm_kib),
        mib(idle.rss_ready_kib)
    );
    println!(
        "| agent CPU while idle ({:.2} s in {:.0} s; 10 ms clock ticks) | {:.2} % of one core | |",
        idle.idle_cpu,
        idle.idle_window,
        idle.idle_cpu / idle.idle_window * 100.0
    );
    println!(
        "| applier: 1,000 small ConfigMaps, create (generation 1, fresh devcluster and applier), median of {rounds} ({} s) | {}{} | < 2 s |",
        all_secs(&t.create),
        secs(create),
        verdict(create < target_apply)
    );
    println!(
        "| applier: same 1,000, every one changed (generation 2), median of {rounds} ({} s) | {}{} | < 2 s |",
        all_secs(&t.update),
        secs(update),
        verdict(update < target_apply)
    );
    println!(
        "| applier: same 1,000 again, unchanged, median of {rounds} ({} s) | {} | |",
        all_secs(&t.unchanged),
        secs(unchanged)
    );
    println!(
        "| end to end: Description of 1,000 ConfigMaps created in the parent → hub → agent process → status Success, observedGeneration 1 | {} | |",
        secs(idle.bulk_e2e)
    );
    println!(
        "| agent RSS idle {} s after that (lastObservedTime changed {}×) / peak (VmHWM) | {} / {} | |",
        HEARTBEAT_SECONDS * IDLE_HEARTBEATS,
        idle.bulk_heartbeats,
        mib(idle.bulk_rss_kib),
        mib(idle.bulk_hwm_kib)
    );
    println!();
    println!(
        "note: load average {load_before} at the start, {} at the end (2 cores shared with other work); devclusters run in the bench process on threads of their own, hub and agent as processes",
        loadavg()
    );
}
