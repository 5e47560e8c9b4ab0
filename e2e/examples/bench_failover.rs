//! Failover benchmark (issue 15): kill one agent of a Dividing Subscription and time until its
//! replicas run in the other clusters, on a fleet of real processes with the hub's and the
//! scheduler's default flags.
//!
//! `fleet::up` starts a parent devcluster, the scheduler, the hub, N child devclusters and N
//! agents, each a process of its own (the release binaries; N ≤ 250). In the parent: a Deployment
//! `failover/web` of 2 × N replicas (`--replicas`) and a Dividing (Static) Subscription of it to
//! every cluster with equal weights, so that each child runs 2. Then, per trial (`--trials`,
//! default 3):
//!
//! 1. SIGKILL to one agent's process group (`scenario::kill`, as a crash would): its stream to
//!    the hub ends, the hub waits its `--disconnect-grace` (default 3 s) for a reconnection,
//!    marks the ManagedCluster `Ready=Unknown` and taints it; the scheduler's ManagedCluster
//!    watch sees that, schedules every Subscription again and the victim's share goes to the
//!    other clusters (the victim stays bound at 0 replicas); the hub streams the changed
//!    Descriptions, the agents apply them;
//! 2. timed from just before the SIGKILL, as the watches in this process see them: the
//!    ManagedCluster not Ready; the Subscription's `status.replicas` giving the victim 0 and the
//!    others all R; every surviving cluster's Description carrying its new count; every
//!    surviving child's Deployment with its new `spec.replicas`; **every surviving child's
//!    Deployment with `status.readyReplicas` equal to its new count, R in all** (the headline);
//!    the Subscription's aggregated status counting R ready replicas from the survivors;
//! 3. raw baseline, in the same run: a Deployment `failover-raw/raw` scaled straight in child-1's
//!    API server (a merge PATCH of `spec.replicas`), timed from the request to its own watch
//!    showing every replica ready: one write, the simulated pod start, one watch hop;
//! 4. the agent is started again (same command line) and the fleet left to divide back to 2 per
//!    cluster (timed too) before the next trial.
//!
//! "Ready" in a child: devcluster runs no controllers or pods; with `--simulate-workloads` (the
//! fleet starts its children so) it reports every replica of a Deployment ready
//! `--workload-delay-ms` after a change (default here 500 ms, a stand-in for a pod start; the
//! raw baseline pays the same delay).
//!
//! ```text
//! cargo build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
//! cargo run --release -p atoll-e2e --example bench_failover -- [--children 100] [--trials 3]
//!     [--replicas 200] [--workload-delay-ms 500]
//! ```
//!
//! (`make bench-failover`.) The fleet is stopped at the end, on failure and on Ctrl-C (its logs
//! are kept when the run fails).

// The parent-kind helpers (`--parent`) serve the cold-start benchmark.
#[allow(dead_code)]
mod bench_support;

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use atoll_bench::percentile;
use atoll_crds::apps::{Description, Subscription};
use atoll_crds::clusters::ManagedCluster;
use atoll_e2e::fleet;
use atoll_e2e::state::FleetState;
use atoll_e2e::{process, scenario};
use bench_support::{FleetGuard, log, machine, ms, secs};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Resource;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinHandle;

/// Namespace of the divided Deployment, in the parent and in every child.
const NS: &str = "failover";
/// The divided Deployment and its Subscription.
const NAME: &str = "web";
/// Namespace of the raw baseline's Deployment, written to child-1 directly.
const RAW_NS: &str = "failover-raw";
/// The raw baseline's Deployment.
const RAW_NAME: &str = "raw";
/// The longest a failover (or the division back) may take before the run fails.
const CONVERGE: Duration = Duration::from_secs(180);
/// The hub's `--disconnect-grace` default (hub/src/args.rs): the wait for a reconnection
/// before a cluster whose stream ended is marked `Ready=Unknown`.
const DEFAULT_DISCONNECT_GRACE: Duration = Duration::from_secs(3);

/// What the watchers send.
enum Msg {
    /// Child `i`'s Deployments in [`NS`].
    Child(usize, Seen<Deployment>),
    /// child-1's Deployments in [`RAW_NS`].
    Raw(Seen<Deployment>),
    /// The parent's ManagedClusters.
    Cluster(Seen<ManagedCluster>),
    /// The parent's Subscriptions in [`NS`].
    Sub(Seen<Subscription>),
    /// The parent's Descriptions.
    Desc(Seen<Description>),
}

/// Replicas of a Deployment as a watch last showed them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Replicas {
    spec: i32,
    ready: i32,
}

/// The fleet as the watches show it.
#[derive(Default)]
struct View {
    /// Child name → its `failover/web` Deployment, and when the watch first showed it so.
    children: BTreeMap<String, (Replicas, Instant)>,
    /// ManagedCluster name → Ready=True.
    ready: BTreeMap<String, bool>,
    /// Dedicated namespace → ManagedCluster name.
    cluster_of_ns: HashMap<String, String>,
    /// The Subscription.
    sub: Option<Subscription>,
    /// Cluster name → replicas of the Deployment in its Description, and when the watch first
    /// showed that count.
    desc: BTreeMap<String, (i32, Instant)>,
    /// child-1's raw Deployment.
    raw: Option<Replicas>,
    /// Lists done (one per watcher).
    listed: usize,
}

impl View {
    fn apply(&mut self, msg: Msg, names: &[String]) {
        let at = arrival(&msg);
        let seen = match msg {
            Msg::Child(i, seen) => seen.map(|d| Target::Child(i, d)),
            Msg::Raw(seen) => seen.map(Target::Raw),
            Msg::Cluster(seen) => seen.map(Target::Cluster),
            Msg::Sub(seen) => seen.map(Target::Sub),
            Msg::Desc(seen) => seen.map(Target::Desc),
        };
        let Some((target, deleted)) = seen else {
            self.listed += 1;
            return;
        };
        match target {
            Target::Child(i, d) if d.name_any() == NAME => {
                if let Some(name) = names.get(i) {
                    if deleted {
                        self.children.remove(name);
                    } else {
                        let now = replicas(&d);
                        if self.children.get(name).map(|(r, _)| *r) != Some(now) {
                            self.children.insert(name.clone(), (now, at));
                        }
                    }
                }
            }
            Target::Child(..) => {}
            Target::Raw(d) => {
                if d.name_any() == RAW_NAME {
                    self.raw = (!deleted).then(|| replicas(&d));
                }
            }
            Target::Cluster(mc) => {
                let name = mc.name_any();
                if let Some(ns) = mc.namespace() {
                    self.cluster_of_ns.insert(ns, name.clone());
                }
                self.ready.insert(name, !deleted && fleet::is_ready(&mc));
            }
            Target::Sub(s) => {
                if s.name_any() == NAME {
                    self.sub = (!deleted).then_some(s);
                }
            }
            Target::Desc(d) => {
                let from_sub =
                    d.labels().get(atoll_crds::known::LABEL_SUBS_NAME) == Some(&NAME.to_string());
                let cluster = d
                    .namespace()
                    .and_then(|ns| self.cluster_of_ns.get(&ns).cloned());
                if let (true, Some(cluster)) = (from_sub, cluster) {
                    match (deleted, description_replicas(&d)) {
                        (false, Some(n)) => {
                            if self.desc.get(&cluster).map(|(c, _)| *c) != Some(n) {
                                self.desc.insert(cluster, (n, at));
                            }
                        }
                        _ => {
                            self.desc.remove(&cluster);
                        }
                    }
                }
            }
        }
    }

    /// Cluster name → its share of the Deployment in the Subscription's status.
    fn shares(&self) -> BTreeMap<String, i32> {
        let Some(status) = self.sub.as_ref().and_then(|s| s.status.as_ref()) else {
            return BTreeMap::new();
        };
        let Some(counts) = status
            .replicas
            .iter()
            .find(|(key, _)| key.contains("Deployment"))
            .map(|(_, v)| v)
        else {
            return BTreeMap::new();
        };
        status
            .binding_clusters
            .iter()
            .zip(counts)
            .filter_map(|(binding, n)| {
                let (_, cluster) = atoll_crds::known::parse_binding_cluster(binding)?;
                Some((cluster.to_string(), *n))
            })
            .collect()
    }

    /// Ready replicas of the Deployment per cluster in the Subscription's aggregated status.
    fn aggregated_ready(&self) -> BTreeMap<String, i32> {
        let Some(status) = self.sub.as_ref().and_then(|s| s.status.as_ref()) else {
            return BTreeMap::new();
        };
        status
            .aggregated_statuses
            .iter()
            .filter(|a| a.feed.kind == "Deployment" && a.feed.name == NAME)
            .flat_map(|a| &a.feed_status_details)
            .map(|d| {
                (
                    d.cluster_name.clone(),
                    d.replica_status.ready_replicas.unwrap_or(0),
                )
            })
            .collect()
    }
}

/// What one watch message carried.
enum Target {
    Child(usize, Deployment),
    Raw(Deployment),
    Cluster(ManagedCluster),
    Sub(Subscription),
    Desc(Description),
}

trait SeenExt<K> {
    /// The object and whether it was deleted, mapped; `None` for the end of a list.
    fn map<T>(self, f: impl FnOnce(K) -> T) -> Option<(T, bool)>;
}

impl<K> SeenExt<K> for Seen<K> {
    fn map<T>(self, f: impl FnOnce(K) -> T) -> Option<(T, bool)> {
        match self {
            Seen::Listed => None,
            Seen::Object {
                object, deleted, ..
            } => Some((f(object), deleted)),
        }
    }
}

/// When a watch message arrived (the end of a list: now).
fn arrival(msg: &Msg) -> Instant {
    fn at<K>(seen: &Seen<K>) -> Instant {
        match seen {
            Seen::Object { at, .. } => *at,
            Seen::Listed => Instant::now(),
        }
    }
    match msg {
        Msg::Child(_, s) | Msg::Raw(s) => at(s),
        Msg::Cluster(s) => at(s),
        Msg::Sub(s) => at(s),
        Msg::Desc(s) => at(s),
    }
}

fn replicas(d: &Deployment) -> Replicas {
    Replicas {
        spec: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        ready: d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
    }
}

/// `spec.replicas` of the Deployment a Description carries.
fn description_replicas(d: &Description) -> Option<i32> {
    d.spec
        .raw
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|o| o["spec"]["replicas"].as_i64())
        .and_then(|n| i32::try_from(n).ok())
}

/// Milestones of one failover, each the first arrival at which it held, from the SIGKILL.
#[derive(Default, Debug)]
struct Trial {
    victim: String,
    /// SIGKILL sent → the process group gone.
    killed: Duration,
    unknown: Option<Duration>,
    scheduled: Option<Duration>,
    descriptions: Option<Duration>,
    specs: Option<Duration>,
    ready: Option<Duration>,
    aggregated: Option<Duration>,
    /// Clusters whose share grew, and by how much in all.
    gained: Vec<String>,
    moved: i32,
    /// The agent started again → divided back to the even shares, all ready.
    recovered: Option<Duration>,
    /// The raw baseline of this trial.
    raw: Duration,
}

struct Options {
    /// SIGSTOP instead of SIGKILL: the agent freezes with its stream open (a hung process or a
    /// partition that keeps the connection), so that only its missing heartbeats tell.
    freeze: bool,
    children: usize,
    trials: usize,
    replicas: i32,
    workload_delay_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench_support::main_with("bench_failover", parse_args(), |opts| async move {
        run(&opts).await
    })
    .await
}

fn parse_args() -> Result<Options> {
    let mut opts = Options {
        freeze: false,
        children: 100,
        trials: 3,
        replicas: 0,
        workload_delay_ms: 500,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--freeze" {
            opts.freeze = true;
            continue;
        }
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let number = |what: &str| -> Result<u64> {
            value
                .parse()
                .with_context(|| format!("{what} {value:?} is not a number"))
        };
        match flag.as_str() {
            "--children" => opts.children = usize::try_from(number("--children")?)?,
            "--trials" => opts.trials = usize::try_from(number("--trials")?)?,
            "--replicas" => opts.replicas = i32::try_from(number("--replicas")?)?,
            "--workload-delay-ms" => opts.workload_delay_ms = number("--workload-delay-ms")?,
            other => bail!(
                "unknown flag {other}; give --children N, --trials T, --replicas R, --workload-delay-ms MS, --freeze"
            ),
        }
    }
    if opts.children < 2
        || opts.children > fleet::max_children(atoll_e2e::plan::Backend::Devcluster)
    {
        bail!(
            "--children {} is out of range; give 2 to 250",
            opts.children
        );
    }
    if opts.trials == 0 {
        bail!("--trials must be at least 1");
    }
    if opts.replicas == 0 {
        opts.replicas = i32::try_from(2 * opts.children)?;
    }
    Ok(opts)
}

async fn run(opts: &Options) -> Result<String> {
    let started = Instant::now();
    let machine_before = machine();
    let dir = std::env::temp_dir().join(format!("atoll-bench-failover-{}", std::process::id()));
    let up = bench_support::up_options(&dir, opts.children, opts.workload_delay_ms)?;
    log(
        started,
        &format!("fleet up: {} children in {}", opts.children, dir.display()),
    );
    let mut guard = FleetGuard {
        dir: dir.clone(),
        succeeded: false,
        who: "bench_failover",
    };
    let state = fleet::up(&up).await.context("fleet up")?;
    let fleet_up = started.elapsed();
    log(started, &format!("fleet up, all Ready; {}", machine()));
    let trials = measure(opts, &state, &dir, started).await?;
    let machine_after = machine();
    guard.succeeded = true;
    drop(guard);
    Ok(report(
        opts,
        &trials,
        fleet_up,
        &machine_before,
        &machine_after,
    ))
}

async fn measure(
    opts: &Options,
    state: &FleetState,
    dir: &std::path::Path,
    started: Instant,
) -> Result<Vec<Trial>> {
    let parent = fleet::client_for(&state.parent_kubeconfig).await?;
    let mut children = Vec::with_capacity(state.children.len());
    for child in &state.children {
        children.push(fleet::client_for(&child.kubeconfig).await?);
    }
    let names: Vec<String> = state.children.iter().map(|c| c.name.clone()).collect();
    let raw_client = children.first().cloned().context("no child")?;

    // The raw baseline's Deployment first (its namespace too), then the watchers.
    create_namespace(&raw_client, RAW_NS).await?;
    Api::<Deployment>::namespaced(raw_client.clone(), RAW_NS)
        .create(&PostParams::default(), &deployment(RAW_NS, RAW_NAME, 1)?)
        .await
        .context("creating the raw Deployment in child-1")?;

    let (tx, mut rx) = unbounded_channel();
    let mut tasks = Vec::new();
    for (i, c) in children.iter().enumerate() {
        tasks.push(watch(
            Api::<Deployment>::namespaced(c.clone(), NS),
            tx.clone(),
            move |s| Msg::Child(i, s),
            format!("{} deployments", names.get(i).map_or("?", String::as_str)),
        ));
    }
    tasks.push(watch(
        Api::<Deployment>::namespaced(raw_client.clone(), RAW_NS),
        tx.clone(),
        Msg::Raw,
        "raw deployments".into(),
    ));
    tasks.push(watch(
        Api::<ManagedCluster>::all(parent.clone()),
        tx.clone(),
        Msg::Cluster,
        "managedclusters".into(),
    ));
    tasks.push(watch(
        Api::<Subscription>::namespaced(parent.clone(), NS),
        tx.clone(),
        Msg::Sub,
        "subscriptions".into(),
    ));
    tasks.push(watch(
        Api::<Description>::all(parent.clone()),
        tx.clone(),
        Msg::Desc,
        "descriptions".into(),
    ));
    let watchers = Watchers(tasks);
    let mut view = View::default();
    let expected_lists = watchers.0.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while view.listed < expected_lists {
        let msg = recv(&mut rx, deadline, "the watchers to list").await?;
        view.apply(msg, &names);
    }

    // The divided Deployment and its Subscription.
    create_namespace(&parent, NS).await?;
    Api::<Deployment>::namespaced(parent.clone(), NS)
        .create(
            &PostParams::default(),
            &deployment(NS, NAME, opts.replicas)?,
        )
        .await
        .context("creating the feed Deployment")?;
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {}, "weight": 1}],
            "feeds": [
                {"apiVersion": "v1", "kind": "Namespace", "name": NS},
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": NAME},
            ],
        },
    }))?;
    let placed_at = Instant::now();
    Api::<Subscription>::namespaced(parent.clone(), NS)
        .create(&PostParams::default(), &sub)
        .await
        .context("creating the Subscription")?;
    let all: Vec<String> = names.clone();
    wait_divided(
        &mut rx,
        &mut view,
        &names,
        &all,
        opts.replicas,
        "the first division",
    )
    .await?;
    log(
        started,
        &format!(
            "divided: {} replicas over {} children, all ready, {} after the Subscription",
            opts.replicas,
            names.len(),
            secs(placed_at.elapsed())
        ),
    );

    let mut trials = Vec::new();
    for t in 0..opts.trials {
        // Victims spread over the fleet, never child-1 (the raw baseline's child).
        let index = ((t + 1) * names.len() / (opts.trials + 1)).clamp(1, names.len() - 1);
        let victim = names.get(index).cloned().context("no victim")?;
        let before = view.shares();
        let mut trial = Trial {
            victim: victim.clone(),
            ..Default::default()
        };
        let agent = format!("agent-{victim}");
        let signal = if opts.freeze { "SIGSTOP" } else { "SIGKILL" };
        log(
            started,
            &format!("trial {}: {signal} {agent}; {}", t + 1, machine()),
        );
        let frozen_pid = match opts.freeze {
            true => Some(state.process(&agent).context("no such agent")?.pid),
            false => None,
        };
        let t0 = Instant::now();
        let snap = match frozen_pid {
            Some(pid) => {
                process::signal_group(pid, "STOP")?;
                None
            }
            None => Some(scenario::kill(dir, &agent).await?),
        };
        trial.killed = t0.elapsed();
        let survivors: Vec<String> = names.iter().filter(|n| **n != victim).cloned().collect();
        let deadline = Instant::now() + CONVERGE;
        loop {
            let msg = recv(&mut rx, deadline, &format!("the failover of {victim}")).await?;
            let at = arrival(&msg);
            view.apply(msg, &names);
            let since = at.saturating_duration_since(t0);
            if trial.unknown.is_none() && view.ready.get(&victim) == Some(&false) {
                trial.unknown = Some(since);
            }
            let shares = view.shares();
            let victim_share = shares.get(&victim).copied().unwrap_or(0);
            let placed: i32 = survivors.iter().filter_map(|s| shares.get(s)).sum();
            if trial.scheduled.is_none() && victim_share == 0 && placed == opts.replicas {
                trial.scheduled = Some(since);
                trial.gained = survivors
                    .iter()
                    .filter(|s| shares.get(*s) > before.get(*s))
                    .cloned()
                    .collect();
                trial.moved = survivors
                    .iter()
                    .map(|s| {
                        shares.get(s).copied().unwrap_or(0) - before.get(s).copied().unwrap_or(0)
                    })
                    .filter(|d| *d > 0)
                    .sum();
            }
            if trial.scheduled.is_none() {
                continue;
            }
            // Each of these holds once every survivor shows its new count; it is timed by the
            // arrival of the last survivor's change (the Descriptions and the children may
            // show it before the Subscription's status, which the scheduler writes last).
            let want = |s: &String| shares.get(s).copied().unwrap_or(0);
            let last_change = |changed: &dyn Fn(&String) -> Option<Instant>| {
                survivors
                    .iter()
                    .map(changed)
                    .collect::<Option<Vec<Instant>>>()
                    .and_then(|ats| ats.into_iter().max())
                    .map(|last| last.saturating_duration_since(t0))
            };
            if trial.descriptions.is_none() {
                trial.descriptions = last_change(&|s| {
                    let (n, at) = view.desc.get(s)?;
                    (*n == want(s)).then_some(*at)
                });
            }
            if trial.specs.is_none() {
                trial.specs = last_change(&|s| {
                    let (r, at) = view.children.get(s)?;
                    (r.spec == want(s)).then_some(*at)
                });
            }
            if trial.ready.is_none() {
                trial.ready = last_change(&|s| {
                    let (r, at) = view.children.get(s)?;
                    (r.spec == want(s) && r.ready == want(s)).then_some(*at)
                });
            }
            let aggregated = view.aggregated_ready();
            if trial.aggregated.is_none()
                && survivors
                    .iter()
                    .map(|s| aggregated.get(s).copied().unwrap_or(0))
                    .sum::<i32>()
                    == opts.replicas
            {
                trial.aggregated = Some(since);
            }
            if trial.descriptions.is_some() && trial.ready.is_some() && trial.aggregated.is_some() {
                break;
            }
        }
        log(
            started,
            &format!(
                "trial {}: {victim} lost, its {} replicas ready in {} other children after {} s",
                t + 1,
                trial.moved,
                trial.gained.len(),
                trial.ready.map_or("-".into(), secs)
            ),
        );
        trial.raw = raw_scale(&raw_client, &mut rx, &mut view, &names, t).await?;

        let restarted = Instant::now();
        match (&snap, frozen_pid) {
            (Some(snap), _) => {
                scenario::start_again(dir, snap, Duration::from_secs(60)).await?;
            }
            (None, Some(pid)) => process::signal_group(pid, "CONT")?,
            (None, None) => {}
        }
        wait_divided(
            &mut rx,
            &mut view,
            &names,
            &all,
            opts.replicas,
            &format!("the division back after {victim} returned"),
        )
        .await?;
        trial.recovered = Some(restarted.elapsed());
        log(
            started,
            &format!(
                "trial {}: agent-{victim} back, divided evenly again after {} s",
                t + 1,
                secs(restarted.elapsed())
            ),
        );
        trials.push(trial);
    }
    drop(watchers);
    Ok(trials)
}

/// Waits until every cluster of `clusters` is Ready, its share in the Subscription's status is
/// in its child's Deployment with every replica ready, the shares add up to `replicas`, and the
/// aggregated status counts them all ready.
async fn wait_divided(
    rx: &mut UnboundedReceiver<Msg>,
    view: &mut View,
    names: &[String],
    clusters: &[String],
    replicas: i32,
    what: &str,
) -> Result<()> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let shares = view.shares();
        let aggregated = view.aggregated_ready();
        let done = clusters.iter().all(|c| {
            let share = shares.get(c).copied().unwrap_or(0);
            view.ready.get(c) == Some(&true)
                && view.children.get(c).map(|(r, _)| *r)
                    == Some(Replicas {
                        spec: share,
                        ready: share,
                    })
                && aggregated.get(c).copied().unwrap_or(0) == share
        }) && shares.values().sum::<i32>() == replicas
            // Even again: no cluster at 0 (the division before any failover).
            && clusters.iter().all(|c| shares.get(c).copied().unwrap_or(0) > 0);
        if done {
            return Ok(());
        }
        let msg = match recv(rx, deadline, what).await {
            Ok(msg) => msg,
            Err(e) => {
                let pending: Vec<String> = clusters
                    .iter()
                    .filter_map(|c| {
                        let share = shares.get(c).copied().unwrap_or(0);
                        let child = view.children.get(c).map(|(r, _)| *r);
                        let agg = aggregated.get(c).copied();
                        let ready = view.ready.get(c).copied();
                        let fine = ready == Some(true)
                            && child == Some(Replicas { spec: share, ready: share })
                            && agg == Some(share)
                            && share > 0;
                        (!fine).then(|| {
                            format!("{c}: Ready {ready:?}, share {share}, child {child:?}, aggregated {agg:?}")
                        })
                    })
                    .take(5)
                    .collect();
                return Err(e.context(format!(
                    "shares add up to {} of {replicas}; e.g. {}",
                    shares.values().sum::<i32>(),
                    pending.join("; ")
                )));
            }
        };
        view.apply(msg, names);
    }
}

/// One raw try: child-1's raw Deployment scaled by a merge PATCH to its API server, timed from
/// the request to its watch showing every replica ready.
async fn raw_scale(
    client: &Client,
    rx: &mut UnboundedReceiver<Msg>,
    view: &mut View,
    names: &[String],
    t: usize,
) -> Result<Duration> {
    let want = if t.is_multiple_of(2) { 2 } else { 1 };
    let api = Api::<Deployment>::namespaced(client.clone(), RAW_NS);
    let sent = Instant::now();
    api.patch(
        RAW_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": want}})),
    )
    .await
    .context("scaling the raw Deployment")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let msg = recv(rx, deadline, "the raw Deployment to be ready").await?;
        let at = arrival(&msg);
        view.apply(msg, names);
        if view.raw
            == Some(Replicas {
                spec: want,
                ready: want,
            })
        {
            return Ok(at.saturating_duration_since(sent));
        }
    }
}

async fn recv(rx: &mut UnboundedReceiver<Msg>, deadline: Instant, what: &str) -> Result<Msg> {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, rx.recv()).await {
        Ok(Some(msg)) => Ok(msg),
        Ok(None) => bail!("the watchers stopped while waiting for {what}"),
        Err(_) => bail!("timed out waiting for {what}"),
    }
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

fn deployment(namespace: &str, name: &str, replicas: i32) -> Result<Deployment> {
    let value: Value = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    });
    Ok(serde_json::from_value(value)?)
}

/// One milestone of a trial, by name in the report.
type Milestone = fn(&Trial) -> Option<Duration>;

fn opt(d: Option<Duration>) -> Vec<Duration> {
    d.into_iter().collect()
}

fn report(
    opts: &Options,
    trials: &[Trial],
    fleet_up: Duration,
    machine_before: &str,
    machine_after: &str,
) -> String {
    let column = |f: fn(&Trial) -> Option<Duration>| -> Vec<Duration> {
        trials.iter().flat_map(|t| opt(f(t))).collect()
    };
    let ready = column(|t| t.ready);
    let raw: Vec<Duration> = trials.iter().map(|t| t.raw).collect();
    let mut sorted_raw = raw.clone();
    sorted_raw.sort();
    let raw_p50 = percentile(&sorted_raw, 0.5);
    let mut sorted_ready = ready.clone();
    sorted_ready.sort();
    let ready_p50 = percentile(&sorted_ready, 0.5);
    let ratio = |d: Duration| {
        if raw_p50.is_zero() {
            "-".to_string()
        } else {
            format!("{:.1}x", d.as_secs_f64() / raw_p50.as_secs_f64())
        }
    };
    let mut rows = vec![
        (
            "machine before / after".to_string(),
            format!("{machine_before} / {machine_after}"),
        ),
        (
            "fleet".into(),
            format!(
                "{} children (a devcluster and an agent process each), parent, scheduler, hub; fleet up {} s",
                opts.children,
                secs(fleet_up)
            ),
        ),
        (
            "Subscription".into(),
            format!(
                "Dividing (Static), equal weights, Deployment of {} replicas; simulated pod start {} ms",
                opts.replicas, opts.workload_delay_ms
            ),
        ),
        (
            "hub flags".into(),
            format!(
                "defaults (disconnect grace {} s, heartbeat 10 s), --insecure --auto-approve",
                DEFAULT_DISCONNECT_GRACE.as_secs()
            ),
        ),
        (
            "how the agent is stopped (\"stop\" below)".into(),
            if opts.freeze {
                "SIGSTOP to its process group: frozen, its stream left open; SIGCONT after".into()
            } else {
                "SIGKILL to its process group, as a crash; started again after".into()
            },
        ),
        ("trials".into(), trials.len().to_string()),
    ];
    let steps: [(&str, Milestone); 6] = [
        ("stop → ManagedCluster not Ready", |t| t.unknown),
        (
            "stop → Subscription rescheduled (victim 0, others all)",
            |t| t.scheduled,
        ),
        (
            "stop → every survivor's Description with its new count",
            |t| t.descriptions,
        ),
        (
            "stop → every survivor's Deployment spec at its new count",
            |t| t.specs,
        ),
        (
            "**stop → every replica ready in the other children**",
            |t| t.ready,
        ),
        (
            "stop → the Subscription's aggregated status counts them ready",
            |t| t.aggregated,
        ),
    ];
    for (name, f) in steps {
        rows.push((format!("{name}, s (min / p50 / max)"), spread_s(&column(f))));
    }
    rows.push((
        "of which the hub waits by design (stop → not Ready)".into(),
        if opts.freeze {
            "until heartbeats are overdue: 25 s after the last one, swept every 5 s (defaults: 10 s period, 3 periods)".into()
        } else {
            format!("the disconnect grace, {} s", DEFAULT_DISCONNECT_GRACE.as_secs())
        },
    ));
    let after_detection: Vec<Duration> = trials
        .iter()
        .filter_map(|t| Some(t.ready?.saturating_sub(t.unknown?)))
        .collect();
    rows.push((
        "not Ready → every replica ready elsewhere, s (min / p50 / max)".into(),
        spread_s(&after_detection),
    ));
    rows.push((
        "raw: scale a Deployment in child-1 → all its replicas ready, ms (min / p50 / max)".into(),
        raw.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", "),
    ));
    rows.push((
        "ratio: failover ready p50 / raw p50".into(),
        ratio(ready_p50),
    ));
    rows.push((
        "agent back (started again, or SIGCONT) → divided evenly again, all ready, s".into(),
        spread_s(&column(|t| t.recovered)),
    ));
    rows.push((
        "per trial: victim, replicas moved, children gaining, signal sent (SIGKILL: process gone) ms, ready s".into(),
        trials
            .iter()
            .map(|t| {
                format!(
                    "{} {} {} {} {}",
                    t.victim,
                    t.moved,
                    t.gained.len(),
                    ms(t.killed),
                    t.ready.map_or("-".into(), secs)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    ));
    bench_support::table(&rows)
}

/// Aborts the watcher tasks when dropped (before the fleet they watch is stopped).
pub struct Watchers(pub Vec<JoinHandle<()>>);

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// What a watcher sends: an object (applied or deleted), stamped on arrival, or the end of its
/// initial list.
pub enum Seen<K> {
    /// The watcher's initial list is done.
    Listed,
    /// An object as the watch delivered it; `deleted` for a delete event.
    Object {
        object: K,
        deleted: bool,
        at: Instant,
    },
}

/// Watches `api` and sends every object to `tx` as `wrap(Seen)`, until the receiver is gone.
pub fn watch<K, M>(
    api: Api<K>,
    tx: UnboundedSender<M>,
    wrap: impl Fn(Seen<K>) -> M + Send + 'static,
    what: String,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    M: Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let seen = match event {
                Ok(watcher::Event::Apply(object)) | Ok(watcher::Event::InitApply(object)) => {
                    Seen::Object {
                        object,
                        deleted: false,
                        at,
                    }
                }
                Ok(watcher::Event::Delete(object)) => Seen::Object {
                    object,
                    deleted: true,
                    at,
                },
                Ok(watcher::Event::InitDone) => Seen::Listed,
                Ok(watcher::Event::Init) => continue,
                Err(e) => {
                    eprintln!("watcher {what}: {e}");
                    continue;
                }
            };
            if tx.send(wrap(seen)).is_err() {
                return;
            }
        }
    })
}

/// `min / p50 / max` of `ds` in seconds, or `-` when empty.
pub fn spread_s(ds: &[Duration]) -> String {
    if ds.is_empty() {
        return "-".into();
    }
    let mut sorted = ds.to_vec();
    sorted.sort();
    let first = sorted.first().copied().unwrap_or_default();
    let last = sorted.last().copied().unwrap_or_default();
    format!(
        "{} / {} / {}",
        secs(first),
        secs(percentile(&sorted, 0.5)),
        secs(last)
    )
}
