//! Cold-start benchmark (issue 15): S Subscriptions × N clusters in place (default 1,000 × 100,
//! i.e. 100,000 Descriptions); stop the hub and the scheduler together and start them again;
//! time until every agent has resynced and every Subscription is scheduled with its status
//! aggregated.
//!
//! The fleet: the parent API server (devcluster; `--parent kube`: kube-apiserver and etcd of the
//! real tier, `make k8s`), the scheduler and the hub as processes of their own, N
//! children (devcluster and real agent) `--per-host` to a `fleet-children` process
//! (`fleet::up_shared`; `--per-host 0`: a devcluster and an agent process per child). In the
//! parent's `default` namespace: S Deployments `app-<i>` of 1 replica and S Replication
//! Subscriptions, each of its Deployment to every cluster. The setup waits until every
//! Subscription is scheduled to all N clusters and its aggregated status counts N ready replicas.
//!
//! Then the hub and the scheduler get SIGTERM together (as a rollout would), and once both are
//! gone they are started again with the same command lines (`scenario::spawn_again`). From that
//! start, this process polls both admin servers every 100 ms and stamps, each the first time it
//! holds:
//! - hub `/readyz` 200 (its watches listed) and scheduler `/readyz` 200 (caches synced, leader);
//! - the hub's `atoll_hub_agent_streams` = N: every agent reconnected (agents back off 0.25-0.5
//!   s, then doubling, while the hub is down);
//! - **every agent resynced**: the hub sent every agent its whole snapshot (N × (S + 1)
//!   messages, `atoll_hub_messages_sent_total`: the upserts and a marker each; with a window of
//!   unacknowledged messages, the last ones go out once the agent has acknowledged, i.e.
//!   applied, the earlier ones) and took in N × S reports (`atoll_hub_reports_total`,
//!   `result="written"` and `"superseded"`; both, as a report may come from an apply still
//!   running from before the restart);
//! - **the scheduler has scheduled every Subscription again**:
//!   `atoll_scheduler_reconciles_total` ≥ S with `atoll_scheduler_queue_depth` 0;
//! - then one list of the Subscriptions checks that each is `Scheduled`, bound to all N clusters
//!   and its aggregated status counts N ready replicas (statuses live in the parent, so this
//!   holds unless the restart broke them; the hub's and the scheduler's write counters say
//!   whether the restart rewrote anything).
//!
//! Raw baselines in the same run: one LIST of every Description in the parent (what the hub and
//! the scheduler list at start), and the same S Deployments server-side applied unchanged into
//! child-1 by one client with 32 requests in flight (what one agent's resync would write, were
//! unchanged Descriptions applied again; agents leave them in place). CPU per
//! kind of process over the cold start comes from `/proc/<pid>/stat`.
//!
//! ```text
//! cargo build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
//! cargo run --release -p atoll-e2e --example bench_cold_start -- [--subscriptions 1000]
//!     [--children 100] [--per-host 25] [--parent devcluster|kube]
//! ```
//!
//! (`make bench-cold-start`.) The fleet is stopped at the end, on failure and on Ctrl-C.

mod bench_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atoll_bench::cpu_seconds;
use atoll_crds::apps::{Description, Subscription};
use atoll_crds::{conditions, known};
use atoll_e2e::fleet;
use atoll_e2e::plan::Backend;
use atoll_e2e::process;
use atoll_e2e::scenario;
use atoll_e2e::state::{FleetState, Role};
use bench_support::{FleetGuard, log, machine, ms, secs};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Namespace of the feeds and Subscriptions, in the parent (and of the feeds in every child).
const NS: &str = "default";
/// Namespace of the raw baseline's Deployments in child-1.
const RAW_NS: &str = "cold-raw";
/// Writes in flight when creating the setup's objects and in the raw re-apply.
const CONCURRENCY: usize = 32;
/// The longest the setup (every Subscription settled) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(1800);
/// The longest the cold start may take before the run fails.
const COLD_START_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the admin servers are polled during the cold start.
const POLL: Duration = Duration::from_millis(100);

struct Options {
    subscriptions: usize,
    children: usize,
    /// Children per `fleet-children` process; 0 for a process per devcluster and agent.
    per_host: usize,
    /// What the parent is (`--parent kube`: kube-apiserver and etcd of the real tier).
    parent: Backend,
}

/// The cold start's milestones, from the new processes' start.
#[derive(Default, Debug)]
struct Milestones {
    hub_ready: Option<Duration>,
    scheduler_ready: Option<Duration>,
    streams: Option<Duration>,
    resynced: Option<Duration>,
    scheduled: Option<Duration>,
    verified: Option<Duration>,
}

/// Counters read from the admin servers at the end.
#[derive(Default, Debug)]
struct Counters {
    hub_reports: f64,
    hub_messages: f64,
    hub_writes: BTreeMap<String, f64>,
    scheduler_reconciles: f64,
    scheduler_descriptions_written: f64,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main_with("bench_cold_start", parse_args(), |opts| async move {
        run(&opts).await
    })
    .await
}

fn parse_args() -> Result<Options> {
    let mut opts = Options {
        subscriptions: 1000,
        children: 100,
        per_host: 25,
        parent: Backend::Devcluster,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        if flag == "--parent" {
            opts.parent = bench_support::parse_parent(Some(&value))?;
            continue;
        }
        let number: usize = value
            .parse()
            .with_context(|| format!("{flag} {value:?} is not a number"))?;
        match flag.as_str() {
            "--subscriptions" => opts.subscriptions = number,
            "--children" => opts.children = number,
            "--per-host" => opts.per_host = number,
            other => bail!(
                "unknown flag {other}; give --subscriptions S, --children N, --per-host K (0: a process per child), --parent devcluster|kube"
            ),
        }
    }
    if opts.subscriptions == 0 || opts.children == 0 {
        bail!("--subscriptions and --children must be at least 1");
    }
    if opts.parent == Backend::Kube && opts.per_host == 0 {
        bail!("--parent kube needs --per-host K (the children are shared devclusters)");
    }
    Ok(opts)
}

async fn run(opts: &Options) -> Result<String> {
    let started = Instant::now();
    let machine_before = machine();
    let dir = std::env::temp_dir().join(format!("atoll-bench-cold-start-{}", std::process::id()));
    let mut up = bench_support::up_options(&dir, opts.children, 0)?;
    up.backend = opts.parent;
    log(
        started,
        &format!(
            "fleet up: {} children ({}), parent {}, in {}",
            opts.children,
            if opts.per_host == 0 {
                "a process each".to_string()
            } else {
                format!("{} per fleet-children process", opts.per_host)
            },
            bench_support::parent_name(opts.parent),
            dir.display()
        ),
    );
    let mut guard = FleetGuard {
        dir: dir.clone(),
        succeeded: false,
        who: "bench_cold_start",
    };
    let state = if opts.per_host == 0 {
        fleet::up(&up).await
    } else {
        fleet::up_shared(&up, opts.per_host).await
    }
    .context("fleet up")?;
    log(started, &format!("fleet up, all Ready; {}", machine()));

    let parent = fleet::client_for(&state.parent_kubeconfig).await?;
    let child1 = fleet::client_for(&state.children.first().context("no child")?.kubeconfig).await?;
    let setup_started = Instant::now();
    create_feeds_and_subscriptions(&parent, opts.subscriptions).await?;
    log(
        started,
        &format!(
            "{} Deployments and Subscriptions created in {} s; waiting until all are settled",
            opts.subscriptions,
            secs(setup_started.elapsed())
        ),
    );
    wait_settled(&parent, opts, started).await?;
    // The hub adds its finalizer to each Description a few at a time, behind the statuses: wait
    // for the last ones, so that the cold start does not count the setup's leftover writes.
    wait_finalizers(
        admin_addr(&state, "hub")?,
        opts.subscriptions * opts.children,
        started,
    )
    .await?;
    let setup = setup_started.elapsed();
    log(
        started,
        &format!("setup settled after {} s; {}", secs(setup), machine()),
    );

    // Raw baselines, before the restart (the fleet idle).
    let raw_list = raw_list_descriptions(&parent, opts).await?;
    let raw_reapply = raw_reapply(&child1, opts.subscriptions).await?;
    log(
        started,
        &format!(
            "raw: LIST of every Description {} ms ({} MB read in {} ms, decoded in {} ms); {} Deployments re-applied into child-1 {} ms",
            ms(raw_list.total()),
            raw_list.bytes / 1_000_000,
            ms(raw_list.read),
            ms(raw_list.decode),
            opts.subscriptions,
            ms(raw_reapply)
        ),
    );
    // A quiet moment, so that the setup's last writes are not counted in the cold start.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let machine_restart = machine();
    let (milestones, counters, cpu, stop_took) =
        cold_start(&dir, &state, &parent, opts, started).await?;
    let machine_after = machine();
    guard.succeeded = true;
    drop(guard);
    Ok(report(
        opts,
        &milestones,
        &counters,
        &cpu,
        Report {
            setup,
            stop_took,
            raw_list,
            raw_reapply,
            machine_before,
            machine_restart,
            machine_after,
        },
    ))
}

/// Figures of the run outside the cold start itself.
struct Report {
    setup: Duration,
    stop_took: Duration,
    raw_list: RawList,
    raw_reapply: Duration,
    machine_before: String,
    machine_restart: String,
    machine_after: String,
}

fn deployment(namespace: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    })
}

fn app(i: usize) -> String {
    format!("app-{i}")
}

async fn create_feeds_and_subscriptions(parent: &Client, subscriptions: usize) -> Result<()> {
    let deployments = Api::<Deployment>::namespaced(parent.clone(), NS);
    stream::iter(0..subscriptions)
        .map(|i| {
            let api = deployments.clone();
            async move {
                let d: Deployment = serde_json::from_value(deployment(NS, &app(i)))?;
                api.create(&PostParams::default(), &d)
                    .await
                    .with_context(|| format!("creating Deployment {}", app(i)))?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let subs = Api::<Subscription>::namespaced(parent.clone(), NS);
    stream::iter(0..subscriptions)
        .map(|i| {
            let api = subs.clone();
            async move {
                let s: Subscription = serde_json::from_value(json!({
                    "apiVersion": "apps.clusternet.io/v1alpha1",
                    "kind": "Subscription",
                    "metadata": {"name": app(i), "namespace": NS},
                    "spec": {
                        "subscribers": [{"clusterAffinity": {}}],
                        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": app(i)}],
                    },
                }))?;
                api.create(&PostParams::default(), &s)
                    .await
                    .with_context(|| format!("creating Subscription {}", app(i)))?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Why the Subscription is not settled (scheduled for its generation, bound to `children`
/// clusters, its Deployment aggregated with `children` ready replicas), or `None`.
fn unsettled(sub: &Subscription, children: usize) -> Option<String> {
    let name = sub.name_any();
    let Some(status) = sub.status.as_ref() else {
        return Some(format!("{name}: no status"));
    };
    if status.observed_generation != sub.metadata.generation {
        return Some(format!("{name}: generation not scheduled"));
    }
    if !conditions::is_true(&status.conditions, known::CONDITION_SCHEDULED) {
        return Some(format!("{name}: not Scheduled"));
    }
    if status.binding_clusters.len() != children {
        return Some(format!(
            "{name}: bound to {} of {children} clusters",
            status.binding_clusters.len()
        ));
    }
    let ready: i32 = status
        .aggregated_statuses
        .iter()
        .filter(|a| a.feed.kind == "Deployment")
        .flat_map(|a| &a.feed_status_details)
        .map(|d| d.replica_status.ready_replicas.unwrap_or(0))
        .sum();
    if ready != i32::try_from(children).unwrap_or(i32::MAX) {
        return Some(format!(
            "{name}: aggregated status counts {ready} of {children} ready replicas"
        ));
    }
    None
}

/// The Subscriptions not settled yet, by [`unsettled`], from one list.
async fn unsettled_subscriptions(parent: &Client, opts: &Options) -> Result<Vec<String>> {
    let subs = Api::<Subscription>::namespaced(parent.clone(), NS)
        .list(&ListParams::default())
        .await
        .context("listing Subscriptions")?;
    let mut pending: Vec<String> = subs
        .items
        .iter()
        .filter_map(|s| unsettled(s, opts.children))
        .collect();
    if subs.items.len() != opts.subscriptions {
        pending.push(format!(
            "{} Subscriptions listed, {} created",
            subs.items.len(),
            opts.subscriptions
        ));
    }
    Ok(pending)
}

async fn wait_settled(parent: &Client, opts: &Options, started: Instant) -> Result<()> {
    wait_setup(started, Duration::from_secs(5), || async {
        let pending = unsettled_subscriptions(parent, opts).await?;
        Ok(pending.first().map(|first| {
            format!(
                "{} Subscriptions not settled yet (e.g. {first})",
                pending.len()
            )
        }))
    })
    .await
}

/// Waits until the hub has written its finalizer on `want` Descriptions
/// (`atoll_hub_writes_total{result="finalizer"}`).
async fn wait_finalizers(hub_admin: SocketAddr, want: usize, started: Instant) -> Result<()> {
    wait_setup(started, Duration::from_secs(1), || async {
        let written = match fleet::http_get(hub_admin, "/metrics").await {
            Some((200, text)) => hub_writes(&text).get("finalizer").copied().unwrap_or(0.0),
            _ => 0.0,
        };
        Ok((written < want as f64).then(|| format!("{written} of {want} finalizers written")))
    })
    .await
}

/// Polls `pending` every `every` until it says nothing is pending (`None`), logging what it
/// says every 30 s; fails with it after [`SETUP_TIMEOUT`].
async fn wait_setup<F, Fut>(started: Instant, every: Duration, pending: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<String>>>,
{
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let mut last_report = Instant::now();
    loop {
        let Some(what) = pending().await? else {
            return Ok(());
        };
        if last_report.elapsed() >= Duration::from_secs(30) {
            log(started, &format!("setup: {what}; {}", machine()));
            last_report = Instant::now();
        }
        if Instant::now() >= deadline {
            bail!(
                "the setup did not finish within {} s: {what}",
                SETUP_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(every).await;
    }
}

/// One LIST of every Description in the parent, timed in two parts: the response read whole
/// (the API server's work and the transfer), then decoded into typed Descriptions (the client's
/// work); checks it returned S × N.
async fn raw_list_descriptions(parent: &Client, opts: &Options) -> Result<RawList> {
    let path = format!(
        "/apis/{}/descriptions",
        <Description as kube::Resource>::api_version(&())
    );
    let request = http::Request::get(path)
        .body(Vec::new())
        .context("building the LIST request")?;
    let sent = Instant::now();
    let text = parent
        .request_text(request)
        .await
        .context("listing Descriptions")?;
    let read = sent.elapsed();
    let decoding = Instant::now();
    let list: kube::core::ObjectList<Description> =
        serde_json::from_str(&text).context("decoding the Description list")?;
    let decode = decoding.elapsed();
    let want = opts.subscriptions * opts.children;
    if list.items.len() != want {
        bail!("{} Descriptions listed, {want} expected", list.items.len());
    }
    Ok(RawList {
        read,
        decode,
        bytes: text.len(),
    })
}

/// The raw LIST baseline's parts.
struct RawList {
    /// From the request to the last byte of the response.
    read: Duration,
    /// Decoding the response into typed Descriptions.
    decode: Duration,
    /// The response's size.
    bytes: usize,
}

impl RawList {
    fn total(&self) -> Duration {
        self.read + self.decode
    }
}

/// The setup's S Deployments created in child-1's `cold-raw`, then server-side applied again
/// unchanged (32 in flight); the second pass timed, as an agent's resync writes them.
async fn raw_reapply(child: &Client, subscriptions: usize) -> Result<Duration> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RAW_NS},
    }))?;
    Api::<Namespace>::all(child.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the raw namespace in child-1")?;
    let api = Api::<Deployment>::namespaced(child.clone(), RAW_NS);
    let apply_all = || {
        stream::iter(0..subscriptions)
            .map(|i| {
                let api = api.clone();
                async move {
                    let d = deployment(RAW_NS, &app(i));
                    api.patch(
                        &app(i),
                        &PatchParams::apply("bench-raw").force(),
                        &Patch::Apply(&d),
                    )
                    .await
                    .with_context(|| format!("applying raw Deployment {}", app(i)))?;
                    Ok::<_, anyhow::Error>(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
    };
    apply_all().await?;
    let sent = Instant::now();
    apply_all().await?;
    Ok(sent.elapsed())
}

/// CPU seconds so far per kind of process of the fleet.
fn cpu_by_role(state: &FleetState) -> BTreeMap<&'static str, f64> {
    let mut out = BTreeMap::new();
    for p in &state.processes {
        let kind = match p.role {
            Role::Parent => "parent API server",
            Role::Etcd => "etcd",
            Role::ControlPlane => "control plane (other)",
            Role::Scheduler => "scheduler",
            Role::Hub => "hub",
            Role::ChildrenHost => "children hosts",
            Role::Child => "child devclusters",
            Role::Agent => "agents",
            Role::RealNode => "real nodes",
        };
        *out.entry(kind).or_insert(0.0) += cpu_seconds(p.pid);
    }
    out
}

/// Per `writes` label of the hub's write counter.
fn hub_writes(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("atoll_hub_writes_total{result=\"") else {
            continue;
        };
        let Some((label, tail)) = rest.split_once('"') else {
            continue;
        };
        if let Some(v) = tail.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()) {
            out.insert(label.to_string(), v);
        }
    }
    out
}

fn admin_addr(state: &FleetState, name: &str) -> Result<SocketAddr> {
    state
        .process(name)
        .and_then(|p| p.admin.as_deref())
        .with_context(|| format!("{name} has no admin address"))?
        .parse()
        .with_context(|| format!("{name}'s admin address"))
}

type ColdStart = (Milestones, Counters, BTreeMap<&'static str, f64>, Duration);

async fn cold_start(
    dir: &std::path::Path,
    state: &FleetState,
    parent: &Client,
    opts: &Options,
    started: Instant,
) -> Result<ColdStart> {
    let hub_admin = admin_addr(state, "hub")?;
    let scheduler_admin = admin_addr(state, "scheduler")?;
    let hub = state.process("hub").context("no hub")?.clone();
    let scheduler = state.process("scheduler").context("no scheduler")?.clone();
    let hub_snap = scenario::snapshot(&hub)?;
    let scheduler_snap = scenario::snapshot(&scheduler)?;

    log(
        started,
        &format!(
            "stopping the hub and the scheduler (SIGTERM); {}",
            machine()
        ),
    );
    let stop_started = Instant::now();
    let grace = Duration::from_secs(10);
    let (hub_stopped, scheduler_stopped) =
        tokio::join!(process::stop(&hub, grace), process::stop(&scheduler, grace));
    let stop_took = stop_started.elapsed();
    log(
        started,
        &format!(
            "hub {}, scheduler {} after {} s; starting both again",
            hub_stopped?,
            scheduler_stopped?,
            secs(stop_took)
        ),
    );
    // The hub and the scheduler start again from zero: only the others count from here.
    let mut cpu_before = cpu_by_role(state);
    cpu_before.remove("hub");
    cpu_before.remove("scheduler");
    let t0 = Instant::now();
    let hub_record = scenario::spawn_again(dir, &hub_snap)?;
    let scheduler_record = scenario::spawn_again(dir, &scheduler_snap)?;
    let mut restarted = state.clone();
    for p in restarted.processes.iter_mut() {
        if p.name == hub_record.name {
            *p = hub_record.clone();
        } else if p.name == scheduler_record.name {
            *p = scheduler_record.clone();
        }
    }

    let n = opts.children as f64;
    let s = opts.subscriptions as f64;
    let mut m = Milestones::default();
    let mut counters = Counters::default();
    let deadline = t0 + COLD_START_TIMEOUT;
    loop {
        let now = t0.elapsed();
        if m.hub_ready.is_none() && fleet::http_status(hub_admin, "/readyz").await == Some(200) {
            m.hub_ready = Some(now);
        }
        if m.scheduler_ready.is_none()
            && fleet::http_status(scheduler_admin, "/readyz").await == Some(200)
        {
            m.scheduler_ready = Some(now);
        }
        if let Some((200, text)) = fleet::http_get(hub_admin, "/metrics").await {
            // A report superseded by a newer one on the same Description before the hub
            // wrote it counts as taken in too.
            counters.hub_reports =
                fleet::metric_sum(&text, "atoll_hub_reports_total", "result=\"written\"")
                    + fleet::metric_sum(&text, "atoll_hub_reports_total", "result=\"superseded\"");
            counters.hub_messages = fleet::metric_sum(&text, "atoll_hub_messages_sent_total", "");
            counters.hub_writes = hub_writes(&text);
            if m.streams.is_none() && fleet::metric_sum(&text, "atoll_hub_agent_streams", "") >= n {
                m.streams = Some(now);
            }
            // Reports of applies from before the restart can count towards N × S before the
            // snapshots are out: every snapshot (S upserts and a marker per agent) must have
            // been sent too.
            if m.resynced.is_none()
                && counters.hub_reports >= n * s
                && counters.hub_messages >= n * (s + 1.0)
            {
                m.resynced = Some(now);
            }
        }
        if let Some((200, text)) = fleet::http_get(scheduler_admin, "/metrics").await {
            counters.scheduler_reconciles =
                fleet::metric_sum(&text, "atoll_scheduler_reconciles_total", "");
            counters.scheduler_descriptions_written =
                fleet::metric_sum(&text, "atoll_scheduler_descriptions_written_total", "");
            if m.scheduled.is_none()
                && m.scheduler_ready.is_some()
                && counters.scheduler_reconciles >= s
                && fleet::metric_sum(&text, "atoll_scheduler_queue_depth", "") == 0.0
            {
                m.scheduled = Some(now);
            }
        }
        if m.resynced.is_some() && m.scheduled.is_some() && m.hub_ready.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "the cold start did not finish within {} s: {m:?}, {counters:?}",
                COLD_START_TIMEOUT.as_secs()
            );
        }
        if !process::is_running(&hub_record) || !process::is_running(&scheduler_record) {
            bail!(
                "the hub or the scheduler exited during the cold start; see {}/logs",
                dir.display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let pending = unsettled_subscriptions(parent, opts).await?;
    if !pending.is_empty() {
        bail!(
            "after the cold start {} Subscriptions are not settled, e.g. {}",
            pending.len(),
            pending.first().map_or("-", String::as_str)
        );
    }
    m.verified = Some(t0.elapsed());
    let cpu_after = cpu_by_role(&restarted);
    let cpu: BTreeMap<&'static str, f64> = cpu_after
        .iter()
        .map(|(k, v)| (*k, v - cpu_before.get(k).copied().unwrap_or(0.0)))
        .collect();
    log(started, &format!("cold start done: {m:?}; {}", machine()));
    Ok((m, counters, cpu, stop_took))
}

fn at(d: Option<Duration>) -> String {
    d.map_or("-".into(), secs)
}

fn report(
    opts: &Options,
    m: &Milestones,
    c: &Counters,
    cpu: &BTreeMap<&'static str, f64>,
    r: Report,
) -> String {
    let total = m.resynced.max(m.scheduled).unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    // Were every Description applied again in the resync, the children's API servers alone
    // would need N of the raw re-apply spread over the cores. Agents leave a Description
    // delivered again unchanged in place, so what bounds the cold start is the parent's LIST
    // of every Description, which the hub makes before it delivers any.
    let children_reapply = r.raw_reapply.mul_f64(opts.children as f64 / cores as f64);
    let ratio = |floor: Duration| {
        if floor.is_zero() {
            "-".to_string()
        } else {
            format!("{:.1}x", total.as_secs_f64() / floor.as_secs_f64())
        }
    };
    let rows = vec![
        (
            "machine before the fleet / at the restart / after".to_string(),
            format!(
                "{} / {} / {}",
                r.machine_before, r.machine_restart, r.machine_after
            ),
        ),
        (
            "fleet".into(),
            format!(
                "{} children ({}), parent ({}), scheduler, hub as processes of their own",
                opts.children,
                if opts.per_host == 0 {
                    "a devcluster and an agent process each".to_string()
                } else {
                    format!("{} per fleet-children process", opts.per_host)
                },
                bench_support::parent_name(opts.parent)
            ),
        ),
        (
            "in place".into(),
            format!(
                "{} Replication Subscriptions × {} clusters = {} Descriptions (a 1-replica Deployment each)",
                opts.subscriptions,
                opts.children,
                opts.subscriptions * opts.children
            ),
        ),
        (
            "setup: Subscriptions created → all settled, s".into(),
            secs(r.setup),
        ),
        (
            "hub and scheduler: SIGTERM → both gone, s".into(),
            secs(r.stop_took),
        ),
        (
            "start → hub /readyz (watches listed), s".into(),
            at(m.hub_ready),
        ),
        ("start → scheduler /readyz, s".into(), at(m.scheduler_ready)),
        ("start → every agent's stream open, s".into(), at(m.streams)),
        (
            "**start → every agent resynced (N × (S + 1) messages sent, N × S reports back), s**"
                .into(),
            at(m.resynced),
        ),
        (
            "**start → the scheduler has scheduled every Subscription again, s**".into(),
            at(m.scheduled),
        ),
        (
            "start → one list confirms every Subscription Scheduled and aggregated, s".into(),
            at(m.verified),
        ),
        (
            "hub: reports accepted / messages sent / parent writes by kind".into(),
            format!(
                "{} / {} / {}",
                c.hub_reports,
                c.hub_messages,
                if c.hub_writes.is_empty() {
                    "none".to_string()
                } else {
                    c.hub_writes
                        .iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        ),
        (
            "scheduler: reconciles / Descriptions written".into(),
            format!(
                "{} / {}",
                c.scheduler_reconciles, c.scheduler_descriptions_written
            ),
        ),
        (
            "CPU s over the cold start, per kind of process".into(),
            cpu.iter()
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "raw: one LIST of every Description in the parent, ms".into(),
            ms(r.raw_list.total()),
        ),
        (
            "of which: response read (parent's work and transfer) / decoded (client's work), ms"
                .into(),
            format!(
                "{} / {} ({} MB)",
                ms(r.raw_list.read),
                ms(r.raw_list.decode),
                r.raw_list.bytes / 1_000_000
            ),
        ),
        (
            format!(
                "raw: {} Deployments server-side applied unchanged into child-1 (32 in flight), ms",
                opts.subscriptions
            ),
            ms(r.raw_reapply),
        ),
        (
            format!(
                "N × that over {cores} cores (the children's API servers, were every Description re-applied), s"
            ),
            secs(children_reapply),
        ),
        (
            "ratio: cold start (the later of resynced and scheduled) / the raw LIST".into(),
            ratio(r.raw_list.total()),
        ),
    ];
    bench_support::table(&rows)
}
