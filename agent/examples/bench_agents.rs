//! The hub measured with the real pieces: the `atoll-hub` binary runs as its own process
//! (so its RSS and CPU are read from `/proc/<pid>`), against a parent devcluster, with N real
//! `atoll_agent::Agent`s sharing one child devcluster (each keeps its state in its own
//! namespace). Parent, child and agents run in this process; the hub alone in its own.
//!
//! It measures:
//! - hub RSS before any agent vs with N idle agents (each with one delivered Description) →
//!   KiB per idle agent;
//! - one Description change per cluster namespace, patched in a burst, timed per Description from
//!   its patch being committed by the parent API server (the patch response) to:
//!   - delivery: the agent has received the new generation from the hub (the agent's
//!     `ConnectionState::last_received`, recorded on arrival, before applying) — hub watch →
//!     index → stream → agent;
//!   - round trip: the parent watch shows `status.observedGeneration` of the new generation
//!     (delivery, then the agent applies the ConfigMap to the child → agent report → hub status
//!     write → watch event here);
//!
//!   each as p50/p99/max, and the same for changes paced at 50 namespaces/s;
//! - hub CPU over idle heartbeat periods (`--heartbeat-seconds 10`), from `/proc/<pid>/stat`.
//!
//! ```text
//! cargo build --release -p atoll-hub
//! cargo run --release -p atoll-agent --example bench_agents -- [agents]   # default 1000
//! ```
//!
//! `ATOLL_HUB_BIN` overrides the hub binary's path (default: `target/release/atoll-hub`, next
//! to this example's directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_agent::hub::{Backoff, ConnectionState};
use atoll_agent::{Agent, AgentConfig};
use atoll_applier::Applier;
use atoll_bench::{
    BOOTSTRAP_TOKEN, OwnRuntimeCluster, binary, cpu_seconds, free_port, loadavg, log, percentile,
    rss_kib,
};
use atoll_crds::apps::Description;
use atoll_crds::clusters::ManagedCluster;
use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DESC: &str = "bench.cm";
const HEARTBEAT_SECONDS: u64 = 10;
/// Rate of the paced change round.
const PACED_PER_SECOND: f64 = 50.0;

/// A plain HTTP/1.0 GET on the hub's admin port; the whole response.
async fn admin_get(admin_port: u16, path: &str) -> String {
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", admin_port)).await else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

async fn readyz(admin_port: u16) -> bool {
    let r = admin_get(admin_port, "/readyz").await;
    r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200")
}

/// The hub's count of ManagedCluster status writes (one per heartbeat received).
async fn status_writes(admin_port: u16) -> f64 {
    admin_get(admin_port, "/metrics")
        .await
        .lines()
        .find(|l| l.contains("writes_total{") && l.contains("result=\"managedcluster_status\""))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn configmap(i: usize, generation: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
           "data": {"generation": generation.to_string()}})
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

fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id())
}

/// When each (namespace, observedGeneration) of a bench Description was first seen.
type Seen = Arc<Mutex<HashMap<(String, i64), Instant>>>;

/// Each agent's connection state, by its cluster namespace.
type States = BTreeMap<String, tokio::sync::watch::Receiver<ConnectionState>>;

/// When the agent of `ns` received generation `generation` (or later) of the bench Description.
fn received_at(states: &States, ns: &str, generation: i64) -> Option<Instant> {
    let state = states.get(ns)?.borrow();
    state
        .last_received
        .as_ref()
        .filter(|r| r.name == DESC && r.generation >= generation)
        .map(|r| r.at)
}

/// Waits until every agent received `generation` (at most 5 min).
async fn wait_delivered(states: &States, generation: i64) {
    let what = format!("every agent to receive generation {generation}");
    atoll_testkit::Poll::every(Duration::from_millis(20))
        .eventually(&what, Duration::from_secs(300), || async {
            let missing = states
                .keys()
                .filter(|ns| received_at(states, ns, generation).is_none())
                .count();
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} agents without it"))
            }
        })
        .await;
}

/// Per namespace: the delivery time of `generation` from `start(ns)`, sorted.
fn delivery_times(
    states: &States,
    generation: i64,
    start: impl Fn(&str) -> Instant,
) -> Vec<Duration> {
    let mut v: Vec<Duration> = states
        .keys()
        .map(|ns| {
            received_at(states, ns, generation)
                .unwrap()
                .saturating_duration_since(start(ns))
        })
        .collect();
    v.sort();
    v
}

fn count_seen(seen: &Seen, generation: i64) -> usize {
    seen.lock()
        .unwrap()
        .keys()
        .filter(|(_, g)| *g >= generation)
        .count()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let started = Instant::now();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let hub_bin = binary("ATOLL_HUB_BIN", "atoll-hub");
    if !hub_bin.is_file() {
        eprintln!(
            "the hub binary {} is missing: build it first with `cargo build --release -p atoll-hub` (or set ATOLL_HUB_BIN)",
            hub_bin.display()
        );
        std::process::exit(2);
    }

    // 1. Parent devcluster with atoll's CRDs, namespaces and a bootstrap token.
    let (parent, pc) = OwnRuntimeCluster::start_parent("parent").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("parent.kubeconfig");
    std::fs::write(
        &kubeconfig,
        serde_yaml::to_string(&parent.kubeconfig).unwrap(),
    )
    .unwrap();
    log(started, &format!("parent devcluster at {}", parent.url));

    // 2. The real hub, as its own process.
    let grpc_port = free_port();
    let admin_port = free_port();
    let hub_log = dir.path().join("hub.log");
    let mut hub = tokio::process::Command::new(&hub_bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--listen",
            &format!("127.0.0.1:{grpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--insecure",
            "--auto-approve",
            "--heartbeat-seconds",
            &HEARTBEAT_SECONDS.to_string(),
        ])
        .env(
            "ATOLL_LOG",
            std::env::var("ATOLL_LOG").unwrap_or("warn".into()),
        )
        .stdout(std::fs::File::create(&hub_log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("hub.err")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = hub.id().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !readyz(admin_port).await {
        if let Ok(Some(status)) = hub.try_wait() {
            panic!(
                "atoll-hub exited with {status}: {}",
                std::fs::read_to_string(dir.path().join("hub.err")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "atoll-hub not ready within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = rss_kib(pid);
    log(
        started,
        &format!("hub pid {pid} ready on 127.0.0.1:{grpc_port}; RSS {rss0} KiB"),
    );

    // 3. One child devcluster and N real agents.
    let child = OwnRuntimeCluster::start(
        "child",
        devcluster::Config {
            nodes: 1,
            ..devcluster::Config::default()
        },
    );
    let url = format!("http://127.0.0.1:{grpc_port}");
    let mut stops = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for i in 0..n {
        let client = child.client().await;
        let mut config = AgentConfig::new(&url, BOOTSTRAP_TOKEN, &format!("sim-{i}"));
        config.backoff = Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
        };
        let applier = Arc::new(
            Applier::new(client.clone(), "atoll-agent").with_state_namespace(&format!("agent-{i}")),
        );
        let agent = Agent::new(client, config, applier)
            .with_cluster_id(&format!("00000000-0000-4000-8000-{i:012}"));
        receivers.push(agent.subscribe());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));
        if (i + 1) % 100 == 0 {
            log(started, &format!("started {} agents", i + 1));
        }
    }
    let mcs: Api<ManagedCluster> = Api::all(pc.clone());
    let setup_deadline = Instant::now() + Duration::from_secs(1800);
    let namespaces: Vec<String> = loop {
        let list = mcs.list(&ListParams::default()).await.unwrap();
        let ready: Vec<String> = list
            .items
            .iter()
            .filter(|m| is_ready(m))
            .filter_map(|m| m.metadata.namespace.clone())
            .collect();
        log(
            started,
            &format!(
                "{} ManagedClusters, {} Ready (of {n}); load {}",
                list.items.len(),
                ready.len(),
                loadavg()
            ),
        );
        if ready.len() >= n {
            break ready;
        }
        assert!(
            Instant::now() < setup_deadline,
            "not every ManagedCluster became Ready within 30 min"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    let setup = started.elapsed();
    let states: States = receivers
        .into_iter()
        .map(|rx| {
            let ns = rx.borrow().namespace.clone();
            (ns, rx)
        })
        .collect();
    assert_eq!(states.len(), n, "every agent has a namespace of its own");
    // What one cached ManagedCluster weighs (the hub's reflector keeps whole objects).
    if let Some(mc) = mcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .first()
    {
        let whole = serde_json::to_vec(mc).unwrap().len();
        let managed = serde_json::to_vec(&mc.metadata.managed_fields)
            .unwrap()
            .len();
        log(
            started,
            &format!("one ManagedCluster: {whole} bytes of JSON, {managed} of them managedFields"),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_ready = rss_kib(pid);

    // Watch every Description's observedGeneration from here on.
    let seen: Seen = Arc::default();
    {
        let seen = seen.clone();
        let api: Api<Description> = Api::all(pc.clone());
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Ok(Some(ev)) = events.try_next().await {
                let d = match ev {
                    watcher::Event::Apply(d) | watcher::Event::InitApply(d) => d,
                    _ => continue,
                };
                let (Some(ns), Some(g)) = (
                    d.metadata.namespace.clone(),
                    d.status.as_ref().and_then(|s| s.observed_generation),
                ) else {
                    continue;
                };
                seen.lock()
                    .unwrap()
                    .entry((ns, g))
                    .or_insert_with(Instant::now);
            }
        });
    }

    // One Description per cluster namespace (generation 1), delivered before idling.
    let index: BTreeMap<String, usize> = namespaces
        .iter()
        .enumerate()
        .map(|(i, ns)| (ns.clone(), i))
        .collect();
    futures::stream::iter(index.iter())
        .map(|(ns, i)| {
            let api: Api<Description> = Api::namespaced(pc.clone(), ns);
            let d: Description = serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"name": DESC, "namespace": ns},
                "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&[configmap(*i, 1)])}
            }))
            .unwrap();
            async move { api.create(&PostParams::default(), &d).await.unwrap() }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let t = Instant::now();
    while count_seen(&seen, 1) < n {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "only {} of {n} Descriptions reported generation 1 within 10 min",
            count_seen(&seen, 1)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    log(
        started,
        &format!("{n} Descriptions applied and reported in {:?}", t.elapsed()),
    );

    // 4a. Idle: let the first-contact work settle, then CPU over idle heartbeat periods and RSS.
    tokio::time::sleep(Duration::from_secs(HEARTBEAT_SECONDS)).await;
    let periods = 3;
    let window = Duration::from_secs(HEARTBEAT_SECONDS * periods);
    let writes0 = status_writes(admin_port).await;
    let tw0 = Instant::now();
    let cpu0 = cpu_seconds(pid);
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let cpu = cpu_seconds(pid) - cpu0;
    let elapsed = t0.elapsed().as_secs_f64();
    let beats = status_writes(admin_port).await - writes0;
    let beats_window = tw0.elapsed().as_secs_f64();
    // CPU per heartbeat: the CPU rate over the heartbeat rate (the two windows nearly overlap).
    let per_beat = if beats > 0.0 {
        (cpu / elapsed) / (beats / beats_window)
    } else {
        0.0
    };
    let cpu_pct = cpu / elapsed * 100.0;
    let rss1 = rss_kib(pid);
    let per_agent = rss1.saturating_sub(rss0) as f64 / n as f64;
    log(
        started,
        &format!("idle: hub CPU {cpu:.2} s over {window:?}, RSS {rss1} KiB"),
    );

    // 4b. One change per cluster namespace, patched in a burst.
    let committed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (hub_cpu_burst0, self_cpu_burst0) = (cpu_seconds(pid), self_cpu_seconds());
    let burst = Instant::now();
    futures::stream::iter(index.iter())
        .map(|(ns, i)| {
            let api: Api<Description> = Api::namespaced(pc.clone(), ns);
            let committed = committed.clone();
            let patch =
                json!({"spec": {"raw": atoll_crds::json_text::encode_all(&[configmap(*i, 2)])}});
            async move {
                let d = api
                    .patch(DESC, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
                assert_eq!(
                    d.metadata.generation,
                    Some(2),
                    "a spec change bumps generation"
                );
                committed.lock().unwrap().insert(ns.clone(), Instant::now());
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let patched = burst.elapsed();
    wait_delivered(&states, 2).await;
    let delivered_wall = burst.elapsed();
    let t = Instant::now();
    while count_seen(&seen, 2) < n {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "only {} of {n} Descriptions reported generation 2 within 5 min",
            count_seen(&seen, 2)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let burst_wall = burst.elapsed().as_secs_f64();
    let hub_cpu_burst = cpu_seconds(pid) - hub_cpu_burst0;
    let self_cpu_burst = self_cpu_seconds() - self_cpu_burst0;
    let (mut from_commit, mut from_burst) = (Vec::with_capacity(n), Vec::with_capacity(n));
    {
        let seen = seen.lock().unwrap();
        let committed = committed.lock().unwrap();
        for ns in index.keys() {
            let at = seen
                .iter()
                .filter(|((s, g), _)| s == ns && *g >= 2)
                .map(|(_, at)| *at)
                .min()
                .unwrap();
            from_commit.push(at.saturating_duration_since(committed[ns]));
            from_burst.push(at.duration_since(burst));
        }
    }
    from_commit.sort();
    from_burst.sort();
    let delivered = {
        let committed = committed.lock().unwrap();
        delivery_times(&states, 2, |ns| committed[ns])
    };
    let delivered_from_burst = delivery_times(&states, 2, |_| burst);
    log(
        started,
        &format!(
            "burst: {n} patches committed in {patched:?}, delivered to every agent {delivered_wall:?} and reported {burst_wall:.1} s after the first patch; now {PACED_PER_SECOND} changes/s"
        ),
    );

    // 4c. The same change (generation 3), paced: one namespace every 1/PACED_PER_SECOND s, so
    // that the in-process API servers are not saturated and the per-change path shows.
    let paced_committed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / PACED_PER_SECOND));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inflight = Vec::with_capacity(n);
    for (ns, i) in &index {
        tick.tick().await;
        let api: Api<Description> = Api::namespaced(pc.clone(), ns);
        let committed = paced_committed.clone();
        let patch =
            json!({"spec": {"raw": atoll_crds::json_text::encode_all(&[configmap(*i, 3)])}});
        let ns = ns.clone();
        inflight.push(tokio::spawn(async move {
            api.patch(DESC, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            committed.lock().unwrap().insert(ns, Instant::now());
        }));
    }
    for t in inflight {
        t.await.unwrap();
    }
    wait_delivered(&states, 3).await;
    let paced_delivered = {
        let committed = paced_committed.lock().unwrap();
        delivery_times(&states, 3, |ns| committed[ns])
    };
    let t = Instant::now();
    while count_seen(&seen, 3) < n {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "only {} of {n} Descriptions reported generation 3 within 5 min",
            count_seen(&seen, 3)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut paced = Vec::with_capacity(n);
    {
        let seen = seen.lock().unwrap();
        let committed = paced_committed.lock().unwrap();
        for ns in index.keys() {
            let at = seen
                .iter()
                .filter(|((s, g), _)| s == ns && *g >= 3)
                .map(|(_, at)| *at)
                .min()
                .unwrap();
            paced.push(at.saturating_duration_since(committed[ns]));
        }
    }
    paced.sort();

    // 5. The table.
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!();
    println!("| measurement ({n} real agents, hub as its own process) | value | target |");
    println!("|---|---|---|");
    println!(
        "| hub RSS per idle agent (({rss1} − {rss0}) KiB / {n}; each agent with 1 Description) | {per_agent:.1} KiB | ≤ 64 KiB |"
    );
    let row = |v: &[Duration]| {
        format!(
            "{} / {} / {}",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(percentile(v, 1.0))
        )
    };
    println!(
        "| burst: one Description change in each of the {n} cluster namespaces, patched 32 at a time: time to commit all {n} patches | {} | |",
        ms(patched)
    );
    println!(
        "| burst, **delivery**: patch commit → the agent received generation 2 from the hub (before applying), p50 / p99 / max | {} | p99 < 200 ms |",
        row(&delivered)
    );
    println!(
        "| burst, round trip: patch commit → the agent's report written back (watched observedGeneration=2), p50 / p99 / max | {} | |",
        row(&from_commit)
    );
    println!(
        "| burst, from its first patch: delivered (all in {}) / reported (all in {burst_wall:.1} s), p50 / p99 / max | {} / {} | |",
        ms(delivered_wall),
        row(&delivered_from_burst),
        row(&from_burst)
    );
    println!(
        "| same change paced at {PACED_PER_SECOND} namespaces/s: delivery (generation 3 received) / round trip (watched observedGeneration=3), p50 / p99 / max | {} / {} | |",
        row(&paced_delivered),
        row(&paced)
    );
    println!(
        "| CPU during the burst ({burst_wall:.1} s): hub process / bench process (parent, child, agents) | {:.0} % / {:.0} % of one core | |",
        hub_cpu_burst / burst_wall * 100.0,
        self_cpu_burst / burst_wall * 100.0
    );
    println!(
        "| hub RSS with {n} idle agents and no Description yet ({rss_ready} KiB) | {:.1} KiB per agent | |",
        rss_ready.saturating_sub(rss0) as f64 / n as f64
    );
    println!(
        "| hub CPU, idle, {periods} heartbeat periods of {HEARTBEAT_SECONDS} s ({cpu:.2} s CPU in {elapsed:.1} s) | {cpu_pct:.2} % of one core | < 5 % |"
    );
    println!(
        "| hub CPU per heartbeat in that window ({beats:.0} heartbeats in {beats_window:.1} s, each with its ManagedCluster status write) → {n} agents every {HEARTBEAT_SECONDS} s | {:.0} µs → {:.2} % of one core | < 5 % |",
        per_beat * 1e6,
        per_beat * n as f64 / HEARTBEAT_SECONDS as f64 * 100.0
    );
    println!();
    println!(
        "note: load average {} (2 cores shared; parent, child devclusters and agents run in the bench process); setup to all Ready took {:.0} s",
        loadavg(),
        setup.as_secs_f64()
    );

    drop(stops);
    let _ = hub.kill().await;
}
