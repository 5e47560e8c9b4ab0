//! Fleet benchmark (issue 15, first step): propagation end to end on a REAL fleet of processes.
//!
//! For each N given (default `10 100`), `atoll_e2e::fleet::up` starts a parent devcluster, the
//! scheduler, the hub, N child devclusters and N agents (the release binaries), and then:
//!
//! 1. **first placement**: a ConfigMap feed `bench/bench-feed` (and its Namespace) in the parent,
//!    then a Replication Subscription to every cluster (`clusterAffinity: {}`); timed from the
//!    Subscription's create acknowledged to the ConfigMap readable in each child;
//! 2. **edits** (20): a merge PATCH of the feed's `data.value` in the parent, timed from the
//!    PATCH acknowledged to the new value readable in each child; the next edit starts once all
//!    N children have it (plus a short pause), and a child missing for 60 s fails the run;
//! 3. **raw baseline**, interleaved with the edits (one try after each): a merge PATCH of a
//!    ConfigMap in `bench-raw` written straight to child-1's API server, timed from the request
//!    to its own watch event: the floor any propagation (one write, one watch hop) pays.
//!
//! "Readable in a child" is the arrival of the first event carrying the value on a kube-rs
//! watcher of that child's `bench` namespace, started (and listed) before the first write. A
//! watcher on the parent's Descriptions splits each figure in two: the scheduler (PATCH
//! acknowledged → every cluster's Description carries the value) and the rest (hub watch →
//! gRPC stream → agent apply → child watch). The CPU time each kind of process used (from
//! `/proc/<pid>/stat`) is measured over 5 idle seconds and over the edits; the difference is the
//! CPU an edit costs.
//!
//! Prints a markdown table per N, then one with every N side by side. The fleet is stopped at
//! the end, on failure and on Ctrl-C too (its logs are kept when the run fails).
//!
//! **Shared children** (`--per-host K`, needed above 250 children): the parent devcluster, the
//! scheduler and the hub are still processes of their own, but the children run K to a
//! `fleet-children` process (`atoll_e2e::children_host`: K in-memory devclusters and K real
//! agents, `fleet::up_shared`), because two processes per child (~29 MiB) do not fit 1,000
//! children in the machine's memory. A host's CPU is split between its devclusters and its
//! agents by thread (each runs on a runtime of its own, threads named apart). RSS is reported
//! per process kind, and per child (a host's RSS divided by the children it hosts).
//!
//! **A real parent** (`--parent kube`, with `--per-host K`): the parent is a real control plane
//! (kube-apiserver and etcd of the real tier, `make k8s`; atoll installed with `kubectl apply
//! -k` and run with its ServiceAccounts, as `fleet up --backend kube` does), the children still
//! shared devclusters: the same figures with the API server devcluster stands in for. "parent"
//! CPU and RSS are then kube-apiserver's; etcd's CPU is counted under "control plane".
//!
//! ```text
//! cargo build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
//! cargo run --release -p atoll-e2e --example bench_fleet -- [N...]     # default: 10 100
//! cargo run --release -p atoll-e2e --example bench_fleet -- --per-host 250 1000
//! cargo run --release -p atoll-e2e --example bench_fleet -- --parent kube --per-host 250 1000
//! ```
//!
//! (`make bench-fleet` does both.) The binaries are taken from the directory above this
//! example's (`target/release/`), or from `ATOLL_BIN_DIR`. `kubectl` must be on PATH (the fleet
//! installs the CRDs with it).

// Its fleet guard and binary lookup; the rest serves the other fleet benchmarks.
#[allow(dead_code)]
mod bench_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use atoll_bench::{cpu_seconds, loadavg, percentile, rss_kib};
use atoll_crds::apps::{Description, Subscription};
use atoll_e2e::children_host;
use atoll_e2e::fleet::{self, UpOptions};
use atoll_e2e::plan::Backend;
use atoll_e2e::state::{FleetState, Role};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

/// Namespace of the feed, in the parent and in every child.
const NS: &str = "bench";
/// The feed ConfigMap.
const CM: &str = "bench-feed";
/// The data key the edits change.
const KEY: &str = "value";
/// Namespace of the raw baseline's ConfigMap, written to child-1 directly.
const RAW_NS: &str = "bench-raw";
/// The raw baseline's ConfigMap.
const RAW_CM: &str = "bench-raw";
/// Feed edits per N (the issue asks for at least 20).
const EDITS: usize = 20;
/// The longest any child may take to receive a value before the run fails.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause after every child has an edit, before the raw try and the next edit (agents report
/// their status to the hub after applying; the next edit should not race those writes); 2 ms
/// per child above 250 children, for the hub's status writes of as many reports.
const PAUSE: Duration = Duration::from_millis(500);
/// Most children `fleet up` starts on devclusters, a process each.
const MAX_CHILDREN: usize = 250;
/// The idle window (after the first placement, before the edits) over which the fleet's
/// background CPU (heartbeats, status) is measured, to subtract it from the edits' CPU.
const IDLE: Duration = Duration::from_secs(5);

/// A value seen by a watcher.
struct Seen {
    /// Index of the child (0-based) or of the watcher.
    who: usize,
    /// `data.value` of the ConfigMap.
    value: String,
    /// When the watch event arrived here.
    at: Instant,
}

/// What the ConfigMap watchers send.
enum WatchMsg {
    /// The watcher's initial list is done.
    Ready(usize),
    /// An event carrying a value.
    Seen(Seen),
}

/// A Description in the parent, as its watcher saw it.
struct DescSeen {
    /// Its namespace (one per cluster).
    namespace: String,
    /// Its spec, serialized.
    spec: String,
    /// When the watch event arrived here.
    at: Instant,
}

/// Aborts the watcher tasks when dropped (before the fleet they watch is stopped).
struct Watchers(Vec<JoinHandle<()>>);

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// CPU seconds per kind of process of the fleet, and of this benchmark process.
type CpuByRole = BTreeMap<&'static str, f64>;

/// The pause after an edit at `n` children: [`PAUSE`], or 2 ms per child when longer.
fn pause(n: usize) -> Duration {
    PAUSE.max(Duration::from_millis(2 * n as u64))
}

/// Resident memory in MiB, per kind of process.
#[derive(Default)]
struct Memory {
    hub: f64,
    scheduler: f64,
    parent: f64,
    /// Per child: its devcluster and agent processes, or its share of a children host.
    per_child: f64,
    /// The children hosts, each (empty without shared children).
    hosts: Vec<f64>,
    /// This process (the N watchers).
    bench: f64,
}

/// Everything one N measured.
struct Figures {
    n: usize,
    /// Children per `fleet-children` process, or `None` for a process per devcluster and agent.
    per_host: Option<usize>,
    /// What the parent API server is.
    parent: Backend,
    memory: Memory,
    /// Resident memory after the edits: what the edits' writes left behind (the parent's watch
    /// history grows with them).
    memory_after: Memory,
    /// Time to start and list the N child watchers.
    watchers_listed: Duration,
    cores: usize,
    load_before: String,
    load_after: String,
    fleet_up: Duration,
    /// Per child: Subscription created → ConfigMap in that child.
    placement: Vec<Duration>,
    /// Subscription created → Description of every cluster written (as the parent's watch saw it).
    placement_desc_last: Option<Duration>,
    /// Per child and edit: PATCH acknowledged → value in that child.
    per_child: Vec<Duration>,
    /// Per edit: PATCH acknowledged → value in the last child.
    until_last: Vec<Duration>,
    /// Per edit and cluster: PATCH acknowledged → that cluster's Description carries the value.
    desc_per_cluster: Vec<Duration>,
    /// Per edit: PATCH acknowledged → the last Description carries the value.
    desc_until_last: Vec<Duration>,
    /// Per edit: the parent PATCH's round trip.
    parent_patch: Vec<Duration>,
    /// Per try: the raw PATCH's round trip on child-1.
    raw_patch: Vec<Duration>,
    /// Per try: the raw PATCH sent → its watch event on child-1.
    raw_watch: Vec<Duration>,
    /// CPU seconds used during the edits, per kind of process.
    cpu: CpuByRole,
    /// CPU seconds used while idle over [`IDLE`], per kind of process.
    idle_cpu: CpuByRole,
    /// Requests the parent API server served during the edits, by verb and resource (from its
    /// `apiserver_request_total`; empty when it has no such metric, as devcluster).
    parent_requests: BTreeMap<String, f64>,
    /// Wall time of the edit phase.
    edit_wall: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let (ns, per_host, parent) = match parse_args() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("bench_fleet: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut all = Vec::new();
    for n in ns {
        let result = tokio::select! {
            r = run(n, per_host, parent) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        };
        match result {
            Ok(figures) => {
                println!("{}", table(&figures));
                all.push(figures);
            }
            Err(e) => {
                eprintln!("bench_fleet: N={n} FAILED: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if all.len() > 1 {
        println!("{}", side_by_side(&all));
    }
    println!("\n{}", csv(&all));
    ExitCode::SUCCESS
}

/// `[--parent devcluster|kube] [--per-host K] [N...]`: the Ns (default `10 100`), the children
/// per host, if shared, and the parent's kind.
fn parse_args() -> Result<(Vec<usize>, Option<usize>, Backend)> {
    let mut args = std::env::args().skip(1);
    let mut per_host = None;
    let mut parent = Backend::Devcluster;
    let mut ns = Vec::new();
    while let Some(a) = args.next() {
        if a == "--parent" {
            parent = bench_support::parse_parent(args.next().as_deref())?;
            continue;
        }
        if a == "--per-host" {
            let k = args.next().context("--per-host needs a number")?;
            let k: usize = k
                .parse()
                .with_context(|| format!("--per-host {k:?} is not a number"))?;
            if k == 0 {
                bail!("--per-host must be at least 1");
            }
            per_host = Some(k);
            continue;
        }
        let n: usize = a
            .parse()
            .with_context(|| format!("{a:?} is not a number"))?;
        let most = if per_host.is_some() {
            fleet::MAX_SHARED_CHILDREN
        } else {
            MAX_CHILDREN
        };
        if n == 0 || n > most {
            bail!(
                "N={n} is out of range; give 1 to {most} (more than {MAX_CHILDREN} needs --per-host K before the Ns)"
            );
        }
        ns.push(n);
    }
    if parent == Backend::Kube && per_host.is_none() {
        bail!("--parent kube needs --per-host K (the children are shared devclusters)");
    }
    Ok((
        if ns.is_empty() { vec![10, 100] } else { ns },
        per_host,
        parent,
    ))
}

/// Progress on stderr, stamped with the time since `started`.
fn log(started: Instant, msg: &str) {
    eprintln!("[{:>7.1}s] {msg}", started.elapsed().as_secs_f64());
}

/// One N: fleet up, placement, edits with interleaved raw tries, fleet down.
async fn run(n: usize, per_host: Option<usize>, parent: Backend) -> Result<Figures> {
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let load_before = loadavg();
    let dir = std::env::temp_dir().join(format!("atoll-bench-fleet-{}-n{n}", std::process::id()));
    let opts = UpOptions {
        dir: dir.clone(),
        children: n,
        bin_dir: bench_support::bin_dir()?,
        manifests: Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests"),
        nodes: 3,
        workload_delay_ms: 500,
        timeout: Duration::from_secs(180).max(Duration::from_millis(600 * n as u64)),
        backend: parent,
        persist_parent: false,
        detours: Default::default(),
        real_nodes: false,
    };
    let how = match per_host {
        Some(k) => format!("children shared, {k} per fleet-children process"),
        None => "a devcluster and an agent process per child".to_string(),
    };
    let how = format!("{how}; parent: {}", bench_support::parent_name(parent));
    log(
        started,
        &format!("N={n}: fleet up in {} ({how})", dir.display()),
    );
    // Armed before `up`: an interrupt during start-up stops what its state file lists so far.
    let mut guard = bench_support::FleetGuard {
        dir,
        succeeded: false,
        who: "bench_fleet",
    };
    let state = match per_host {
        Some(k) => fleet::up_shared(&opts, k).await,
        None => fleet::up(&opts).await,
    }
    .context("fleet up")?;
    let fleet_up = started.elapsed();
    log(
        started,
        &format!("N={n}: fleet up, all Ready; load {}", loadavg()),
    );
    let mut figures = measure(n, &state, started, cores, load_before, fleet_up).await?;
    figures.per_host = per_host;
    figures.parent = parent;
    guard.succeeded = true;
    drop(guard);
    log(started, &format!("N={n}: done"));
    Ok(figures)
}

/// Everything between fleet up and fleet down.
async fn measure(
    n: usize,
    state: &FleetState,
    started: Instant,
    cores: usize,
    load_before: String,
    fleet_up: Duration,
) -> Result<Figures> {
    let parent = fleet::client_for(&state.parent_kubeconfig).await?;
    let mut children = Vec::with_capacity(n);
    for child in &state.children {
        children.push(fleet::client_for(&child.kubeconfig).await?);
    }
    let raw_client = children.first().cloned().context("no child")?;
    let watch_started = Instant::now();

    // Watchers first: every child's `bench`, child-1's `bench-raw`, the parent's Descriptions.
    let (tx, mut rx) = unbounded_channel();
    let (raw_tx, mut raw_rx) = unbounded_channel();
    let (desc_tx, mut desc_rx) = unbounded_channel();
    let mut tasks: Vec<JoinHandle<()>> = children
        .iter()
        .enumerate()
        .map(|(i, c)| watch_configmap(c.clone(), NS, CM, i, tx.clone()))
        .collect();
    tasks.push(watch_configmap(
        raw_client.clone(),
        RAW_NS,
        RAW_CM,
        0,
        raw_tx,
    ));
    tasks.push(watch_descriptions(parent.clone(), desc_tx));
    let _watchers = Watchers(tasks);
    wait_ready(&mut rx, n, "child watchers").await?;
    wait_ready(&mut raw_rx, 1, "raw watcher").await?;
    let watchers_listed = watch_started.elapsed();
    log(
        started,
        &format!(
            "N={n}: {n} child watchers listed in {:.1} s",
            watchers_listed.as_secs_f64()
        ),
    );

    // The raw baseline's ConfigMap, straight in child-1.
    let raw_cms: Api<ConfigMap> = Api::namespaced(raw_client.clone(), RAW_NS);
    Api::<Namespace>::all(raw_client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": RAW_NS}}))?,
        )
        .await
        .context("creating the raw namespace in child-1")?;
    raw_cms
        .create(
            &PostParams::default(),
            &configmap(RAW_NS, RAW_CM, "raw-init"),
        )
        .await
        .context("creating the raw ConfigMap in child-1")?;
    await_values(&mut raw_rx, "raw-init", 1, &["child-1".into()]).await?;

    // The feed and its namespace in the parent, then the Subscription.
    let names: Vec<String> = state.children.iter().map(|c| c.name.clone()).collect();
    Api::<Namespace>::all(parent.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await
        .context("creating the feed namespace in the parent")?;
    let feeds: Api<ConfigMap> = Api::namespaced(parent.clone(), NS);
    let first = token(n, 0);
    feeds
        .create(&PostParams::default(), &configmap(NS, CM, &first))
        .await
        .context("creating the feed in the parent")?;
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": "bench", "namespace": NS},
        "spec": {
            "schedulingStrategy": "Replication",
            "subscribers": [{"clusterAffinity": {}}],
            "feeds": [
                {"apiVersion": "v1", "kind": "Namespace", "name": NS},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": CM, "namespace": NS},
            ],
        },
    }))?;
    Api::<Subscription>::namespaced(parent.clone(), NS)
        .create(&PostParams::default(), &sub)
        .await
        .context("creating the Subscription")?;
    let created = Instant::now();
    let arrivals = await_values(&mut rx, &first, n, &names).await?;
    let placement = since(created, &arrivals);
    let placement_desc_last = desc_arrivals(&mut desc_rx, &first, n, created)
        .await
        .iter()
        .max()
        .copied();
    log(
        started,
        &format!(
            "N={n}: first placement in all {n} children after {:.0} ms",
            max(&placement).as_secs_f64() * 1e3
        ),
    );
    tokio::time::sleep(pause(n)).await;
    let memory = resident_memory(state);
    log(
        started,
        &format!(
            "N={n}: RSS MiB: hub {:.1}, scheduler {:.1}, parent {:.1}, per child {:.2}, hosts {:?}, bench {:.1}; load {}",
            memory.hub,
            memory.scheduler,
            memory.parent,
            memory.per_child,
            memory.hosts,
            memory.bench,
            loadavg()
        ),
    );

    // The edits, each followed by one raw try.
    let mut figures = Figures {
        n,
        per_host: None,
        parent: Backend::Devcluster,
        memory_after: Memory::default(),
        memory,
        watchers_listed,
        cores,
        load_before,
        load_after: String::new(),
        fleet_up,
        placement,
        placement_desc_last,
        per_child: Vec::new(),
        until_last: Vec::new(),
        desc_per_cluster: Vec::new(),
        desc_until_last: Vec::new(),
        parent_patch: Vec::new(),
        raw_patch: Vec::new(),
        raw_watch: Vec::new(),
        cpu: CpuByRole::new(),
        idle_cpu: CpuByRole::new(),
        parent_requests: BTreeMap::new(),
        edit_wall: Duration::ZERO,
    };
    let idle_before = cpu_by_role(state);
    tokio::time::sleep(IDLE).await;
    figures.idle_cpu = cpu_delta(&idle_before, &cpu_by_role(state));
    let cpu_before = cpu_by_role(state);
    let requests_before = parent_requests(&parent).await;
    let edits_started = Instant::now();
    for edit in 1..=EDITS {
        let value = token(n, edit);
        let sent = Instant::now();
        feeds
            .patch(CM, &PatchParams::default(), &merge(&value))
            .await
            .with_context(|| format!("edit {edit}: PATCH of the feed"))?;
        let acked = Instant::now();
        figures.parent_patch.push(acked - sent);
        let arrivals = await_values(&mut rx, &value, n, &names)
            .await
            .with_context(|| format!("edit {edit}"))?;
        let latencies = since(acked, &arrivals);
        figures.until_last.push(max(&latencies));
        figures.per_child.extend(latencies);
        let desc = desc_arrivals(&mut desc_rx, &value, n, acked).await;
        if let Some(last) = desc.iter().max() {
            figures.desc_until_last.push(*last);
        }
        figures.desc_per_cluster.extend(desc);
        log(
            started,
            &format!(
                "N={n}: edit {edit:>2}: in all {n} children after {:.0} ms",
                max(&since(acked, &arrivals)).as_secs_f64() * 1e3
            ),
        );
        tokio::time::sleep(pause(n)).await;

        let raw = format!("raw-{edit:03}");
        let sent = Instant::now();
        raw_cms
            .patch(RAW_CM, &PatchParams::default(), &merge(&raw))
            .await
            .with_context(|| format!("raw try {edit}: PATCH on child-1"))?;
        figures.raw_patch.push(sent.elapsed());
        let seen = await_values(&mut raw_rx, &raw, 1, &["child-1".into()]).await?;
        figures.raw_watch.extend(since(sent, &seen));
    }
    figures.edit_wall = edits_started.elapsed();
    let requests_after = parent_requests(&parent).await;
    figures.parent_requests = requests_after
        .into_iter()
        .map(|(k, after)| {
            let before = requests_before.get(&k).copied().unwrap_or(0.0);
            (k, after - before)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let cpu_after = cpu_by_role(state);
    figures.cpu = cpu_delta(&cpu_before, &cpu_after);
    figures.load_after = loadavg();
    figures.memory_after = resident_memory(state);
    Ok(figures)
}

/// The value of edit `edit` at N = `n`: fixed width, so that no value is a prefix of another.
fn token(n: usize, edit: usize) -> String {
    format!("n{n:03}-e{edit:03}")
}

/// A ConfigMap `namespace/name` with `data.value`.
fn configmap(namespace: &str, name: &str, value: &str) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert(KEY.to_string(), value.to_string());
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// The merge patch that sets `data.value`.
fn merge(value: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"data": {KEY: value}}))
}

/// Watches ConfigMap `namespace/name` (kube-rs watcher, default backoff) and sends every value
/// it carries, stamped on arrival, and `Ready` once the initial list is done.
fn watch_configmap(
    client: Client,
    namespace: &'static str,
    name: &'static str,
    who: usize,
    tx: UnboundedSender<WatchMsg>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let msg = match event {
                Ok(watcher::Event::Apply(cm)) | Ok(watcher::Event::InitApply(cm))
                    if cm.name_any() == name =>
                {
                    match cm.data.and_then(|mut d| d.remove(KEY)) {
                        Some(value) => WatchMsg::Seen(Seen { who, value, at }),
                        None => continue,
                    }
                }
                Ok(watcher::Event::InitDone) => WatchMsg::Ready(who),
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("bench_fleet: watcher {namespace} #{who}: {e}");
                    continue;
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    })
}

/// Watches every Description in the parent and sends each, stamped on arrival.
fn watch_descriptions(client: Client, tx: UnboundedSender<DescSeen>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Description> = Api::all(client);
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let at = Instant::now();
            if let Ok(watcher::Event::Apply(d)) | Ok(watcher::Event::InitApply(d)) = event {
                let msg = DescSeen {
                    namespace: d.namespace().unwrap_or_default(),
                    spec: serde_json::to_string(&d.spec).unwrap_or_default(),
                    at,
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
        }
    })
}

/// Waits until `n` watchers have listed.
async fn wait_ready(rx: &mut UnboundedReceiver<WatchMsg>, n: usize, what: &str) -> Result<()> {
    let mut ready = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
    while ready.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(WatchMsg::Ready(i))) => {
                ready.insert(i);
            }
            Ok(Some(WatchMsg::Seen(_))) => {}
            Ok(None) => bail!("{what}: the watchers stopped"),
            Err(_) => bail!(
                "{what}: only {} of {n} listed within {}s",
                ready.len(),
                ARRIVAL_TIMEOUT.as_secs()
            ),
        }
    }
    Ok(())
}

/// Waits until each of the `n` watchers has seen `value`; the arrival of each. Fails, naming the
/// missing ones, after [`ARRIVAL_TIMEOUT`].
async fn await_values(
    rx: &mut UnboundedReceiver<WatchMsg>,
    value: &str,
    n: usize,
    names: &[String],
) -> Result<Vec<Instant>> {
    let mut arrivals: Vec<Option<Instant>> = vec![None; n];
    let mut missing = n;
    let deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
    while missing > 0 {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(WatchMsg::Seen(seen))) if seen.value == value => {
                if let Some(slot) = arrivals.get_mut(seen.who)
                    && slot.is_none()
                {
                    *slot = Some(seen.at);
                    missing -= 1;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => bail!("the watchers stopped"),
            Err(_) => {
                let absent: Vec<&str> = arrivals
                    .iter()
                    .zip(names)
                    .filter(|(a, _)| a.is_none())
                    .map(|(_, name)| name.as_str())
                    .collect();
                bail!(
                    "{value:?} reached only {} of {n} children within {}s; missing: {}",
                    n - missing,
                    ARRIVAL_TIMEOUT.as_secs(),
                    absent.join(", ")
                );
            }
        }
    }
    Ok(arrivals.into_iter().flatten().collect())
}

/// For each cluster whose Description carries `value`: the time from `from` to the first event
/// showing it. Waits at most 2 s more for the ones not seen yet (a stage breakdown, not a gate).
async fn desc_arrivals(
    rx: &mut UnboundedReceiver<DescSeen>,
    value: &str,
    n: usize,
    from: Instant,
) -> Vec<Duration> {
    let mut first: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while first.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(d)) if d.spec.contains(value) => {
                first.entry(d.namespace).or_insert(d.at);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    first
        .values()
        .map(|at| at.saturating_duration_since(from))
        .collect()
}

/// `arrivals` as durations since `from`.
fn since(from: Instant, arrivals: &[Instant]) -> Vec<Duration> {
    arrivals
        .iter()
        .map(|at| at.saturating_duration_since(from))
        .collect()
}

/// The largest of `ds` (zero when empty).
fn max(ds: &[Duration]) -> Duration {
    ds.iter().max().copied().unwrap_or_default()
}

/// CPU seconds so far per kind of fleet process, and of this process (`bench`). A children
/// host's threads are counted as child devclusters or agents by their name.
fn cpu_by_role(state: &FleetState) -> CpuByRole {
    let mut out = CpuByRole::new();
    for p in &state.processes {
        let role = match p.role {
            Role::Parent => "parent API server",
            Role::Child => "child devclusters",
            Role::Scheduler => "scheduler",
            Role::Hub => "hub",
            Role::Agent => "agents",
            Role::Etcd | Role::ControlPlane => "control plane",
            Role::RealNode => "real nodes",
            Role::ChildrenHost => {
                for (thread, seconds) in thread_cpu_seconds(p.pid) {
                    let role = if thread.starts_with(children_host::DEVCLUSTER_THREADS) {
                        "child devclusters"
                    } else if thread.starts_with(children_host::AGENT_THREADS) {
                        "agents"
                    } else {
                        "children hosts (other threads)"
                    };
                    *out.entry(role).or_default() += seconds;
                }
                continue;
            }
        };
        *out.entry(role).or_default() += cpu_seconds(p.pid);
    }
    out.insert("bench (watchers)", cpu_seconds(std::process::id()));
    out
}

/// CPU seconds so far of each thread of `pid`, by thread name (`comm`, at most 15 bytes; a
/// runtime's threads share a name). Threads that ended are not counted.
fn thread_cpu_seconds(pid: u32) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
        *out.entry(name.trim().to_string()).or_default() += (ticks(11) + ticks(12)) / 100.0;
    }
    out
}

/// RSS per kind of process, in MiB.
fn resident_memory(state: &FleetState) -> Memory {
    let mib = |pid: u32| rss_kib(pid) as f64 / 1024.0;
    let mut m = Memory {
        bench: mib(std::process::id()),
        ..Memory::default()
    };
    let mut children_total = 0.0;
    for p in &state.processes {
        match p.role {
            Role::Hub => m.hub += mib(p.pid),
            Role::Scheduler => m.scheduler += mib(p.pid),
            Role::Parent => m.parent += mib(p.pid),
            Role::Child | Role::Agent => children_total += mib(p.pid),
            Role::ChildrenHost => {
                let rss = mib(p.pid);
                m.hosts.push(rss);
                children_total += rss;
            }
            Role::Etcd | Role::ControlPlane | Role::RealNode => {}
        }
    }
    m.per_child = children_total / state.children.len().max(1) as f64;
    m
}

/// CPU seconds used between `before` and `after`, per kind of process.
fn cpu_delta(before: &CpuByRole, after: &CpuByRole) -> CpuByRole {
    after
        .iter()
        .map(|(role, a)| (*role, a - before.get(role).copied().unwrap_or(0.0)))
        .collect()
}

/// Sorted copy.
fn sorted(ds: &[Duration]) -> Vec<Duration> {
    let mut v = ds.to_vec();
    v.sort();
    v
}

/// Milliseconds, one decimal.
fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// `p50 / p99 / max` in ms.
fn spread(ds: &[Duration]) -> String {
    let s = sorted(ds);
    format!(
        "{} / {} / {}",
        ms(percentile(&s, 0.50)),
        ms(percentile(&s, 0.99)),
        ms(max(&s))
    )
}

/// p50 of `ds`.
fn p50(ds: &[Duration]) -> Duration {
    percentile(&sorted(ds), 0.50)
}

/// The rows of one N's table: (figure, value).
fn rows(f: &Figures) -> Vec<(String, String)> {
    let raw = p50(&f.raw_watch);
    let ratio = |d: Duration| {
        if raw.is_zero() {
            "-".to_string()
        } else {
            format!("{:.1}x", d.as_secs_f64() / raw.as_secs_f64())
        }
    };
    let processes = match f.per_host {
        Some(k) => format!(
            "parent ({}), scheduler, hub; children in {} fleet-children processes of {k}",
            bench_support::parent_name(f.parent),
            f.n.div_ceil(k)
        ),
        None => "parent, scheduler, hub; a devcluster and an agent process per child".into(),
    };
    let m = &f.memory;
    let hosts = if m.hosts.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = m.hosts.iter().map(|h| format!("{h:.0}")).collect();
        format!(", hosts {}", each.join("+"))
    };
    let mut rows = vec![
        (
            "machine: cores / load before / load after".to_string(),
            format!("{} / {} / {}", f.cores, f.load_before, f.load_after),
        ),
        ("processes".into(), processes),
        (
            "RSS after the first placement, MiB: hub / scheduler / parent / per child (devcluster + agent) / bench".into(),
            format!(
                "{:.1} / {:.1} / {:.1} / {:.2}{hosts} / {:.1}",
                m.hub, m.scheduler, m.parent, m.per_child, m.bench
            ),
        ),
        (
            format!("RSS after the {EDITS} edits, MiB: hub / scheduler / parent / per child"),
            format!(
                "{:.1} / {:.1} / {:.1} / {:.2}",
                f.memory_after.hub,
                f.memory_after.scheduler,
                f.memory_after.parent,
                f.memory_after.per_child
            ),
        ),
        (
            "bench: N child watchers started and listed, s".into(),
            format!("{:.1}", f.watchers_listed.as_secs_f64()),
        ),
        (
            "fleet up (all ManagedClusters Ready), s".into(),
            format!("{:.1}", f.fleet_up.as_secs_f64()),
        ),
        (
            "first placement: Subscription created → ConfigMap in each child, p50 / p99 / max ms"
                .into(),
            spread(&f.placement),
        ),
        (
            "first placement: until the last child, ms".into(),
            ms(max(&f.placement)),
        ),
        (
            "first placement: until the last Description (scheduler), ms".into(),
            f.placement_desc_last.map_or("-".into(), ms),
        ),
        (
            format!(
                "edit → each child ({} edits × {} children), p50 / p99 / max ms",
                f.until_last.len(),
                f.n
            ),
            spread(&f.per_child),
        ),
        (
            "edit → last child (per edit), p50 / p99 / max ms".into(),
            spread(&f.until_last),
        ),
        (
            "of which edit → each Description (scheduler), p50 / p99 / max ms".into(),
            spread(&f.desc_per_cluster),
        ),
        (
            "of which edit → last Description (per edit), p50 / p99 / max ms".into(),
            spread(&f.desc_until_last),
        ),
        (
            "parent PATCH round trip, p50 / p99 / max ms".into(),
            spread(&f.parent_patch),
        ),
        (
            format!(
                "raw: PATCH round trip on child-1 ({} tries), p50 / p99 / max ms",
                f.raw_patch.len()
            ),
            spread(&f.raw_patch),
        ),
        (
            "raw: PATCH sent → own watch event on child-1, p50 / p99 / max ms".into(),
            spread(&f.raw_watch),
        ),
        (
            "ratio: edit → each child p50 / raw p50".into(),
            ratio(p50(&f.per_child)),
        ),
        (
            "ratio: edit → last child p50 / raw p50".into(),
            ratio(p50(&f.until_last)),
        ),
    ];
    // CPU per edit: the edit phase's CPU minus the idle rate over the same wall time.
    let wall = f.edit_wall.as_secs_f64();
    let edits = f.until_last.len().max(1) as f64;
    let per_edit = |role: &str, total: f64| {
        let idle = f.idle_cpu.get(role).copied().unwrap_or(0.0) / IDLE.as_secs_f64();
        ((total - idle * wall) / edits * 1e3).max(0.0)
    };
    let idle: Vec<String> = f
        .idle_cpu
        .iter()
        .map(|(role, s)| format!("{role} {:.0}", s / IDLE.as_secs_f64() * 1e3))
        .collect();
    rows.push((
        "idle fleet: CPU ms per second, per kind of process".into(),
        idle.join(", "),
    ));
    let total: f64 = f.cpu.iter().map(|(role, s)| per_edit(role, *s)).sum();
    let mut cpu = vec![format!("total {total:.0}")];
    cpu.extend(
        f.cpu
            .iter()
            .map(|(role, s)| format!("{role} {:.0}", per_edit(role, *s))),
    );
    rows.push((
        "CPU ms per edit above idle, per kind of process".into(),
        cpu.join(", "),
    ));
    if !f.parent_requests.is_empty() {
        // What the whole fleet asked of the parent per edit (the bench's own PATCH and raw
        // tries included), busiest first.
        let mut requests: Vec<(&String, &f64)> = f.parent_requests.iter().collect();
        requests.sort_by(|a, b| b.1.total_cmp(a.1));
        let total: f64 = requests.iter().map(|(_, n)| **n).sum();
        let each: Vec<String> = requests
            .iter()
            .take(12)
            .map(|(k, n)| format!("{k} {:.1}", **n / edits))
            .collect();
        rows.push((
            "parent API requests per edit (apiserver_request_total), busiest".into(),
            format!("total {:.1}: {}", total / edits, each.join(", ")),
        ));
    }
    rows
}

/// The parent API server's `apiserver_request_total`, summed by `verb resource[/subresource]`
/// (watches and their long-running requests excluded); empty when it serves no such metric.
async fn parent_requests(parent: &Client) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(request) = http::Request::get("/metrics").body(Vec::new()) else {
        return out;
    };
    let Ok(text) = parent.request_text(request).await else {
        return out;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let mut what = format!("{verb} {}", label("resource"));
        let sub = label("subresource");
        if !sub.is_empty() {
            what = format!("{what}/{sub}");
        }
        *out.entry(what).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// The parent's kind, for the tables.
/// One N as a markdown table.
fn table(f: &Figures) -> String {
    let mut out = format!(
        "\n### N = {} child clusters{}{}\n\n| figure | value |\n|---|---|\n",
        f.n,
        f.per_host
            .map_or(String::new(), |k| format!(" (shared, {k} per host)")),
        if f.parent == Backend::Kube {
            ", real parent"
        } else {
            ""
        }
    );
    for (k, v) in rows(f) {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    out
}

/// The header of [`csv`]: the columns of `docs/bench/propagation.csv`, which
/// `bench/examples/bench_plots.rs` draws.
const CSV_HEADER: &str = "n,children,edits,each_p50_ms,each_p99_ms,each_max_ms,last_p50_ms,last_p99_ms,placement_last_ms,hub_rss_mib,per_child_rss_mib,load1_before,load1_after";

/// One CSV line per N (with [`CSV_HEADER`]), to paste into `docs/bench/propagation.csv`.
fn csv(all: &[Figures]) -> String {
    let mut out = CSV_HEADER.to_string();
    for f in all {
        let each = sorted(&f.per_child);
        let last = sorted(&f.until_last);
        let load1 = |l: &str| l.split_whitespace().next().unwrap_or("-").to_string();
        out.push_str(&format!(
            "\n{},{},{},{},{},{},{},{},{},{:.1},{:.2},{},{}",
            f.n,
            match (f.parent, f.per_host) {
                (Backend::Kube, Some(k)) => format!("kube-parent-shared-{k}"),
                (_, Some(k)) => format!("shared-{k}"),
                (_, None) => "processes".to_string(),
            },
            f.until_last.len(),
            ms(percentile(&each, 0.50)),
            ms(percentile(&each, 0.99)),
            ms(max(&each)),
            ms(percentile(&last, 0.50)),
            ms(percentile(&last, 0.99)),
            ms(max(&f.placement)),
            f.memory.hub,
            f.memory.per_child,
            load1(&f.load_before),
            load1(&f.load_after),
        ));
    }
    out
}

/// Every N side by side.
fn side_by_side(all: &[Figures]) -> String {
    let header: Vec<String> = all
        .iter()
        .map(|f| match f.per_host {
            Some(k) => format!("N = {} (shared, {k} per host)", f.n),
            None => format!("N = {}", f.n),
        })
        .collect();
    let mut out = format!(
        "\n### all N\n\n| figure | {} |\n|---|{}\n",
        header.join(" | "),
        "---|".repeat(all.len())
    );
    let columns: Vec<Vec<(String, String)>> = all.iter().map(rows).collect();
    if let Some(first) = columns.first() {
        for (i, (k, _)) in first.iter().enumerate() {
            let values: Vec<&str> = columns
                .iter()
                .map(|c| c.get(i).map_or("-", |(_, v)| v.as_str()))
                .collect();
            out.push_str(&format!("| {k} | {} |\n", values.join(" | ")));
        }
    }
    out
}
