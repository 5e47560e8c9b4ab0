//! Issue 15, "10,000 agents on one hub": the `atoll-hub` binary holding N agent streams, each
//! process on its own so that none nears the file-descriptor limit and the hub's RSS and CPU are
//! its own:
//!
//! - the parent devcluster (this example in role `parent`);
//! - the hub (`target/release/atoll-hub`, default heartbeat period, `--auto-approve`);
//! - K agent hosts (this example in role `agents`), each with one child devcluster shared by its
//!   agents (each agent keeps its state in a namespace of its own and applies into `default`),
//!   and N/K real agents (`atoll_agent::Agent`, the agent binary's hub client, default backoff
//!   with jitter, default settings), which report what they see on stdout. With
//!   `--noop-children`, the agents' child does nothing (`atoll_agent::child::NoopChild`: the
//!   same hub client, every Description applied at once with no objects, no API server): the
//!   issue's light agents, for the hub's figures at N that real children do not fit;
//! - a raw gRPC fan-out server for the baseline (this example in role `raw-server`): the same
//!   `Hub` service and messages, answering each Hello with a Welcome and sending one message to
//!   every open stream on request, nothing else; its N clients run in this process.
//!
//! It measures, in one run: time until all N are connected (first registration), hub RSS per
//! idle agent, hub CPU over idle heartbeat periods, one Description change per cluster namespace
//! patched in a burst → received by every agent (p50/p99/max from each patch's commit), then a
//! hub restart with all N agents reconnecting at once (time until all are connected again,
//! handshakes refused, agents stuck), and the raw baseline: N raw streams connected at once, the
//! raw server's RSS per idle stream, and one message fanned out to all N (p50/p99/max). Each
//! figure is also given as a ratio to its raw counterpart.
//!
//! ```text
//! cargo build --release -p atoll-hub -p atoll-agent --example bench_hub_agents
//! target/release/examples/bench_hub_agents [--hosts K] [--noop-children] [N]
//!                                                   # default N 10000, K = N/1000
//! ```
//!
//! `ATOLL_HUB_BIN` overrides the hub binary's path (default: `target/release/atoll-hub`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_agent::child::{ChildCluster, NoopChild};
use atoll_agent::hub::ConnectionState;
use atoll_agent::{Agent, AgentConfig};
use atoll_applier::Applier;
use atoll_bench::{
    BOOTSTRAP_TOKEN, OwnRuntimeCluster, binary, cpu_seconds, free_port, loadavg, log, percentile,
    rss_kib,
};
use atoll_crds::apps::Description;
use atoll_proto::v1;
use atoll_proto::v1::hub_client::HubClient;
use atoll_proto::v1::hub_message::Message as Out;
use futures::StreamExt;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The raw server's end of one client stream.
type RawSender = mpsc::Sender<Result<v1::HubMessage, tonic::Status>>;

const DESC: &str = "bench.cm";
/// The hub's default heartbeat period (`--heartbeat-seconds`), which this run keeps.
const HEARTBEAT_SECONDS: u64 = 10;
/// Agents per host process when `--hosts` is not given.
const AGENTS_PER_HOST: usize = 1000;
/// How long every agent gets to connect (first registration, and after the restart).
const CONNECT_DEADLINE: Duration = Duration::from_secs(1200);
/// A change received later than this after its commit is listed in the log, one line an agent
/// (p99 is 1-6 s at 2,000 agents on 2 cores).
const LATE: Duration = Duration::from_secs(10);

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The wall-clock time of `at` (an `Instant` of this process), in Unix nanoseconds.
fn unix_nanos_of(at: Instant) -> u128 {
    unix_nanos().saturating_sub(at.elapsed().as_nanos())
}

fn configmap(i: usize, generation: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
           "data": {"generation": generation.to_string()}})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("parent") => parent(Path::new(&args[1])).await,
        Some("agents") => {
            let noop = args.get(4).is_some_and(|c| c == "noop");
            host(
                &args[1],
                args[2].parse().unwrap(),
                args[3].parse().unwrap(),
                noop,
            )
            .await
        }
        Some("raw-server") => raw_server(args[1].parse().unwrap()).await,
        _ => coordinate(&args).await,
    }
}

/// The lines of this process's stdin, read on a thread of their own (tokio's `io-std` is not
/// enabled here); the channel closes with stdin (the coordinator ended or dropped it).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until this process's stdin closes.
async fn until_stdin_closes() {
    let mut lines = stdin_lines();
    while lines.recv().await.is_some() {}
}

/// Prints what is sent, each string as is, on a thread of its own.
fn stdout_printer() -> mpsc::UnboundedSender<String> {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::Write;
        let mut out = std::io::stdout();
        while let Some(text) = rx.blocking_recv() {
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    });
    tx
}

// ----- role `parent` -------------------------------------------------------------------------

async fn parent(kubeconfig: &Path) {
    let (parent, _client) = OwnRuntimeCluster::start_parent("parent").await;
    parent.write_kubeconfig(kubeconfig);
    println!("READY {}", parent.url);
    until_stdin_closes().await;
}

// ----- role `agents` -------------------------------------------------------------------------

/// Hosts agents `first..first + count`: one child devcluster, one kube client shared by the
/// agents (one connection pool), each agent with its own state namespace; or, with `noop`,
/// agents whose child does nothing (`atoll_agent::child::NoopChild`: the same hub client,
/// no API server behind it). Prints `CONN` (connection changes) and `RECV` (a bench Description
/// received) lines; `diag` on stdin prints the last error of every agent not connected.
async fn host(hub_url: &str, first: usize, count: usize, noop: bool) {
    // The child devcluster (kept until the host ends) and its client; none with `noop`.
    let child = if noop {
        None
    } else {
        let cluster = OwnRuntimeCluster::start(
            "child",
            devcluster::Config {
                nodes: 1,
                ..devcluster::Config::default()
            },
        );
        let client = cluster.client().await;
        Some((cluster, client))
    };
    let lines = stdout_printer();
    let mut states = Vec::with_capacity(count);
    for i in first..first + count {
        let config = AgentConfig::new(hub_url, BOOTSTRAP_TOKEN, &format!("sim-{i}"));
        let cluster_id = format!("00000000-0000-4000-8000-{i:012}");
        let rx = match &child {
            Some((_, client)) => {
                let applier = Arc::new(
                    Applier::new(client.clone(), "atoll-agent")
                        .with_state_namespace(&format!("agent-{i}")),
                );
                launch(Agent::new(client.clone(), config, applier).with_cluster_id(&cluster_id))
            }
            None => launch(Agent::with_child(NoopChild::new(&cluster_id), config)),
        };
        states.push((i, rx.clone()));
        let mut rx = rx;
        let lines = lines.clone();
        tokio::spawn(async move {
            let (mut connected, mut sessions, mut received) = (false, 0u64, 0i64);
            while rx.changed().await.is_ok() {
                let s: ConnectionState = rx.borrow_and_update().clone();
                if s.connected != connected || s.sessions != sessions {
                    (connected, sessions) = (s.connected, s.sessions);
                    let _ = lines.send(format!(
                        "CONN {i} {} {} {} {}\n",
                        s.namespace,
                        s.sessions,
                        u8::from(s.connected),
                        unix_nanos()
                    ));
                }
                if let Some(r) = s.last_received.filter(|r| r.name == DESC)
                    && r.generation > received
                {
                    received = r.generation;
                    let _ = lines.send(format!(
                        "RECV {i} {} {} {}\n",
                        s.namespace,
                        r.generation,
                        unix_nanos_of(r.at)
                    ));
                }
            }
        });
    }
    let mut stdin = stdin_lines();
    while let Some(line) = stdin.recv().await {
        if line.trim() == "diag" {
            for (i, rx) in &states {
                let s = rx.borrow().clone();
                if !s.connected {
                    let _ = lines.send(format!(
                        "DIAG {i} sessions={} error={:?}\n",
                        s.sessions, s.last_error
                    ));
                }
            }
        }
    }
    drop(child);
}

/// Runs `agent` until the process ends; returns its connection state.
fn launch<C: ChildCluster>(agent: Agent<C>) -> tokio::sync::watch::Receiver<ConnectionState> {
    let rx = agent.subscribe();
    tokio::spawn(agent.run(std::future::pending::<()>()));
    rx
}

// ----- role `raw-server` ---------------------------------------------------------------------

/// The raw baseline: the `Hub` gRPC service reduced to a Welcome per Hello and a broadcast.
struct RawHub {
    streams: Arc<Mutex<Vec<RawSender>>>,
}

#[tonic::async_trait]
impl v1::hub_server::Hub for RawHub {
    type SyncStream = ReceiverStream<Result<v1::HubMessage, tonic::Status>>;

    async fn sync(
        &self,
        request: tonic::Request<tonic::Streaming<v1::AgentMessage>>,
    ) -> Result<tonic::Response<Self::SyncStream>, tonic::Status> {
        let mut inbound = request.into_inner();
        let _hello = inbound.message().await?;
        let (tx, rx) = mpsc::channel(20);
        tx.try_send(Ok(v1::HubMessage {
            message: Some(Out::Welcome(v1::Welcome {
                namespace: "raw".into(),
                heartbeat_seconds: HEARTBEAT_SECONDS as u32,
                window: 16,
                ..v1::Welcome::default()
            })),
        }))
        .map_err(|_| tonic::Status::internal("welcome"))?;
        self.streams.lock().unwrap().push(tx);
        // Drain what the client sends (nothing, in this baseline) until it goes.
        tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves the raw baseline on `port`; each `send <generation>` line on stdin sends one upsert,
/// stamped with its send time, to every stream.
async fn raw_server(port: u16) {
    let streams: Arc<Mutex<Vec<_>>> = Arc::default();
    let service = v1::hub_server::HubServer::new(RawHub {
        streams: streams.clone(),
    });
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .add_service(service)
            .serve(addr)
            .await
            .unwrap();
    });
    println!("READY");
    let object = serde_json::to_vec(&configmap(0, 2)).unwrap();
    let mut stdin = stdin_lines();
    while let Some(line) = stdin.recv().await {
        let Some(generation) = line
            .strip_prefix("send ")
            .and_then(|g| g.trim().parse::<i64>().ok())
        else {
            continue;
        };
        let senders: Vec<_> = streams.lock().unwrap().clone();
        let sent_at = unix_nanos().to_string();
        for tx in senders {
            let message = v1::HubMessage {
                message: Some(Out::Upsert(v1::DescriptionUpsert {
                    seq: generation as u64,
                    name: DESC.into(),
                    resource_version: sent_at.clone(),
                    generation,
                    objects: vec![object.clone()],
                    ..v1::DescriptionUpsert::default()
                })),
            };
            let _ = tx.send(Ok(message)).await;
        }
        println!("SENT {generation} {}", senders_len(&streams));
    }
}

fn senders_len(streams: &Mutex<Vec<RawSender>>) -> usize {
    streams.lock().unwrap().len()
}

// ----- the coordinator -----------------------------------------------------------------------

/// What the hosts reported, by agent index.
#[derive(Default)]
struct Fleet {
    namespace: HashMap<usize, String>,
    /// (sessions, connected) per agent.
    connection: HashMap<usize, (u64, bool)>,
    /// When each (agent, generation) was received, Unix ns.
    received: HashMap<(usize, i64), u128>,
    diag: Vec<String>,
}

impl Fleet {
    fn connected(&self, sessions_above: u64) -> usize {
        self.connection
            .values()
            .filter(|(s, c)| *c && *s > sessions_above)
            .count()
    }
    fn received(&self, generation: i64) -> usize {
        self.received
            .keys()
            .filter(|(_, g)| *g == generation)
            .count()
    }
}

fn spawn_role(role: &[String], log_to: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log_to).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

struct Hub {
    child: Child,
    pid: u32,
}

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

/// The sum of the hub's counters named `name` whose labels contain `label`.
async fn hub_counter(admin_port: u16, name: &str, label: &str) -> f64 {
    admin_get(admin_port, "/metrics")
        .await
        .lines()
        .filter(|l| l.contains(name) && l.contains(label) && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// The last reception of generation 2, from the first patch (`burst_unix`).
fn from_burst_last(fleet: &Mutex<Fleet>, burst_unix: u128) -> Duration {
    let f = fleet.lock().unwrap();
    let last = f
        .received
        .iter()
        .filter(|((_, g), _)| *g == 2)
        .map(|(_, at)| *at)
        .max()
        .unwrap_or(burst_unix);
    Duration::from_nanos(last.saturating_sub(burst_unix) as u64)
}

async fn start_hub(
    bin: &Path,
    kubeconfig: &Path,
    grpc_port: u16,
    admin_port: u16,
    dir: &Path,
    run: usize,
) -> Hub {
    let mut child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--listen",
            &format!("127.0.0.1:{grpc_port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--insecure",
            "--auto-approve",
        ])
        .env(
            "ATOLL_LOG",
            std::env::var("ATOLL_LOG").unwrap_or("warn".into()),
        )
        .stdout(std::fs::File::create(dir.join(format!("hub-{run}.log"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("hub-{run}.err"))).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = admin_get(admin_port, "/readyz").await;
        if r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200") {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("atoll-hub exited with {status}; see {}", dir.display());
        }
        assert!(
            Instant::now() < deadline,
            "atoll-hub not ready within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Hub { child, pid }
}

/// Each agent's count of streams opened so far.
fn sessions_of(fleet: &Mutex<Fleet>) -> HashMap<usize, u64> {
    fleet
        .lock()
        .unwrap()
        .connection
        .iter()
        .map(|(i, (s, _))| (*i, *s))
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn row(v: &[Duration]) -> String {
    format!(
        "{} / {} / {}",
        ms(percentile(v, 0.5)),
        ms(percentile(v, 0.99)),
        ms(percentile(v, 1.0))
    )
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "-".into()
    } else {
        format!("{:.1}x", a.as_secs_f64() / b.as_secs_f64())
    }
}

/// Waits until `done(fleet)` reaches `n`, logging progress every 10 s; `None` past `deadline`.
async fn wait_fleet(
    fleet: &Arc<Mutex<Fleet>>,
    started: Instant,
    what: &str,
    n: usize,
    deadline: Duration,
    done: impl Fn(&Fleet) -> usize,
) -> Option<Duration> {
    let t = Instant::now();
    let mut logged = Instant::now();
    loop {
        let count = done(&fleet.lock().unwrap());
        if count >= n {
            return Some(t.elapsed());
        }
        if logged.elapsed() >= Duration::from_secs(10) {
            log(
                started,
                &format!("{what}: {count} of {n}; load {}", loadavg()),
            );
            logged = Instant::now();
        }
        if t.elapsed() > deadline {
            log(
                started,
                &format!("{what}: only {count} of {n} within {deadline:?}"),
            );
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn coordinate(args: &[String]) {
    let started = Instant::now();
    let mut hosts: Option<usize> = None;
    let mut n = 10_000usize;
    let mut noop = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--hosts" => hosts = it.next().and_then(|h| h.parse().ok()),
            "--noop-children" => noop = true,
            other => {
                n = other
                    .parse()
                    .expect("usage: bench_hub_agents [--hosts K] [--noop-children] [N]")
            }
        }
    }
    let hosts = hosts.unwrap_or_else(|| n.div_ceil(AGENTS_PER_HOST)).max(1);
    let hub_bin = binary("ATOLL_HUB_BIN", "atoll-hub");
    assert!(
        hub_bin.is_file(),
        "{} is missing: cargo build --release -p atoll-hub",
        hub_bin.display()
    );
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let load_before = loadavg();
    log(
        started,
        &format!(
            "{n} agents in {hosts} hosts ({}); {cores} cores; load {load_before}",
            if noop {
                "children that do nothing"
            } else {
                "one child devcluster a host"
            }
        ),
    );
    let dir = tempfile::Builder::new()
        .prefix("bench-hub-agents-")
        .tempdir()
        .unwrap();
    let d = dir.path().to_path_buf();
    // BENCH_KEEP_DIR=1 keeps the processes' logs for a look after the run.
    let _dir = if std::env::var("BENCH_KEEP_DIR").is_ok_and(|v| v == "1") {
        println!("logs kept in {}", d.display());
        drop(dir.keep());
        None
    } else {
        Some(dir)
    };

    // 1. The parent, in its own process.
    let kubeconfig = d.join("parent.kubeconfig");
    let mut parent = spawn_role(
        &["parent".into(), kubeconfig.display().to_string()],
        &d.join("parent.err"),
    );
    let mut parent_out = BufReader::new(parent.stdout.take().unwrap()).lines();
    let ready = parent_out.next_line().await.unwrap().unwrap_or_default();
    assert!(ready.starts_with("READY"), "parent: {ready}");
    let parent_pid = parent.id().unwrap();
    let pc = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();

    // 2. The hub.
    let (grpc_port, admin_port) = (free_port(), free_port());
    let mut hub = start_hub(&hub_bin, &kubeconfig, grpc_port, admin_port, &d, 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = rss_kib(hub.pid);
    log(
        started,
        &format!("hub pid {} ready; RSS {rss0} KiB", hub.pid),
    );

    // 3. The agent hosts.
    let fleet: Arc<Mutex<Fleet>> = Arc::default();
    let url = format!("http://127.0.0.1:{grpc_port}");
    let mut host_stdins: Vec<ChildStdin> = Vec::new();
    let mut host_procs = Vec::new();
    let per_host = n.div_ceil(hosts);
    for h in 0..hosts {
        let first = h * per_host;
        let count = per_host.min(n - first);
        if count == 0 {
            break;
        }
        let mut p = spawn_role(
            &[
                "agents".into(),
                url.clone(),
                first.to_string(),
                count.to_string(),
                if noop { "noop" } else { "devcluster" }.into(),
            ],
            &d.join(format!("host-{h}.err")),
        );
        host_stdins.push(p.stdin.take().unwrap());
        let mut out = BufReader::new(p.stdout.take().unwrap()).lines();
        let fleet = fleet.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = out.next_line().await {
                let f: Vec<&str> = line.split_whitespace().collect();
                let mut fl = fleet.lock().unwrap();
                match f.as_slice() {
                    ["CONN", i, ns, sessions, connected, _at] => {
                        let i: usize = i.parse().unwrap();
                        fl.namespace.insert(i, (*ns).to_owned());
                        fl.connection
                            .insert(i, (sessions.parse().unwrap(), *connected == "1"));
                    }
                    ["RECV", i, _ns, generation, at] => {
                        fl.received.insert(
                            (i.parse().unwrap(), generation.parse().unwrap()),
                            at.parse().unwrap(),
                        );
                    }
                    ["DIAG", ..] => fl.diag.push(line.clone()),
                    _ => {}
                }
            }
        });
        host_procs.push(p);
    }
    let host_pids: Vec<u32> = host_procs.iter().filter_map(Child::id).collect();
    let first_connect = wait_fleet(
        &fleet,
        started,
        "connected (first registration)",
        n,
        CONNECT_DEADLINE,
        |f| f.connected(0),
    )
    .await;
    let Some(first_connect) = first_connect else {
        for stdin in &mut host_stdins {
            let _ = stdin.write_all(b"diag\n").await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        for l in fleet.lock().unwrap().diag.iter().take(20) {
            println!("{l}");
        }
        panic!("not every agent connected; logs in {}", d.display());
    };
    let rss_connected = rss_kib(hub.pid);
    log(
        started,
        &format!(
            "all {n} connected in {first_connect:?}; hub RSS {rss_connected} KiB; load {}",
            loadavg()
        ),
    );

    // 4. One Description per cluster namespace (generation 1), delivered before idling.
    let namespaces: Vec<(usize, String)> = {
        let f = fleet.lock().unwrap();
        let mut v: Vec<_> = f.namespace.iter().map(|(i, ns)| (*i, ns.clone())).collect();
        v.sort();
        v
    };
    let creating = Instant::now();
    futures::stream::iter(namespaces.iter())
        .map(|(i, ns)| {
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
    let created_in = creating.elapsed();
    let received = wait_fleet(
        &fleet,
        started,
        "generation 1 received",
        n,
        Duration::from_secs(600),
        |f| f.received(1),
    )
    .await
    .expect("generation 1 delivered");
    log(
        started,
        &format!(
            "{n} Descriptions created in {created_in:?} (16 at a time), all received {received:?} after the last was created"
        ),
    );

    // 5. Idle: settle (the agents' reports of generation 1), then heartbeat CPU and RSS.
    tokio::time::sleep(Duration::from_secs(2 * HEARTBEAT_SECONDS)).await;
    let periods = 3;
    let window = Duration::from_secs(HEARTBEAT_SECONDS * periods);
    let beats0 = hub_counter(admin_port, "writes_total{", "managedcluster_status").await;
    let cpu0 = cpu_seconds(hub.pid);
    let parent_cpu0 = cpu_seconds(parent_pid);
    let hosts_cpu0: f64 = host_pids.iter().map(|p| cpu_seconds(*p)).sum();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let idle_elapsed = t0.elapsed().as_secs_f64();
    let idle_cpu = cpu_seconds(hub.pid) - cpu0;
    let idle_parent_cpu = cpu_seconds(parent_pid) - parent_cpu0;
    let idle_hosts_cpu: f64 = host_pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - hosts_cpu0;
    let beats = hub_counter(admin_port, "writes_total{", "managedcluster_status").await - beats0;
    let rss_idle = rss_kib(hub.pid);
    let per_agent = rss_idle.saturating_sub(rss0) as f64 / n as f64;
    let load_idle = loadavg();
    log(
        started,
        &format!(
            "idle: hub CPU {idle_cpu:.2} s in {idle_elapsed:.1} s, {beats:.0} heartbeats; RSS {rss_idle} KiB; load {load_idle}"
        ),
    );

    // 6. One change per cluster namespace, patched in a burst (32 at a time).
    let sessions_before_burst = sessions_of(&fleet);
    let committed: Arc<Mutex<HashMap<usize, u128>>> = Arc::default();
    let burst = Instant::now();
    let burst_unix = unix_nanos();
    let hub_cpu_burst0 = cpu_seconds(hub.pid);
    futures::stream::iter(namespaces.iter())
        .map(|(i, ns)| {
            let api: Api<Description> = Api::namespaced(pc.clone(), ns);
            let committed = committed.clone();
            let patch =
                json!({"spec": {"raw": atoll_crds::json_text::encode_all(&[configmap(*i, 2)])}});
            async move {
                api.patch(DESC, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
                committed.lock().unwrap().insert(*i, unix_nanos());
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let patched = burst.elapsed();
    wait_fleet(
        &fleet,
        started,
        "generation 2 received",
        n,
        Duration::from_secs(600),
        |f| f.received(2),
    )
    .await
    .expect("generation 2 delivered");
    let delivered_all = from_burst_last(&fleet, burst_unix);
    let hub_cpu_burst = cpu_seconds(hub.pid) - hub_cpu_burst0;
    let (delivery, from_burst) = {
        let f = fleet.lock().unwrap();
        let c = committed.lock().unwrap();
        let mut a = Vec::with_capacity(n);
        let mut b = Vec::with_capacity(n);
        for (i, _) in &namespaces {
            let at = f.received[&(*i, 2)];
            a.push(Duration::from_nanos(at.saturating_sub(c[i]) as u64));
            b.push(Duration::from_nanos(at.saturating_sub(burst_unix) as u64));
        }
        a.sort();
        b.sort();
        (a, b)
    };
    log(
        started,
        &format!(
            "burst: {n} patches committed in {patched:?}, all received {delivered_all:?} after the first; delivery p50/p99/max {}",
            row(&delivery)
        ),
    );
    // The agents that got their change late, and whether their stream was opened again
    // meanwhile (a reconnection's backoff) or not (a starved process or a held message).
    {
        let f = fleet.lock().unwrap();
        let c = committed.lock().unwrap();
        let mut late: Vec<(Duration, usize)> = namespaces
            .iter()
            .map(|(i, _)| {
                let at = f.received[&(*i, 2)];
                (Duration::from_nanos(at.saturating_sub(c[i]) as u64), *i)
            })
            .filter(|(d, _)| *d > LATE)
            .collect();
        late.sort();
        let reconnected = late
            .iter()
            .filter(|(_, i)| {
                f.connection.get(i).map(|c| c.0) != sessions_before_burst.get(i).copied()
            })
            .count();
        log(
            started,
            &format!(
                "burst: {} agents received their change over {LATE:?} after its commit, {reconnected} of them on a stream opened since the burst began",
                late.len()
            ),
        );
        for (delay, i) in late.iter().rev().take(10) {
            log(
                started,
                &format!(
                    "  late: agent {i} ({}) after {} (committed {} into the burst, at {} Unix ns), sessions {:?} before the burst, {:?} now",
                    f.namespace.get(i).map_or("", String::as_str),
                    ms(*delay),
                    ms(Duration::from_nanos(c[i].saturating_sub(burst_unix) as u64)),
                    c[i],
                    sessions_before_burst.get(i),
                    f.connection.get(i).map(|c| c.0)
                ),
            );
        }
    }

    // 7. Hub restart: the hub stops (SIGTERM: it closes its streams), a new one starts on the
    // same ports at once, and every agent reconnects with its own backoff and jitter.
    tokio::time::sleep(Duration::from_secs(HEARTBEAT_SECONDS)).await;
    let sessions_before = sessions_of(&fleet);
    let load_restart = loadavg();
    let stop_at = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &hub.pid.to_string()])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(30), hub.child.wait()).await;
    let _ = hub.child.kill().await;
    let stopped = stop_at.elapsed();
    let restart_at = Instant::now();
    hub = start_hub(&hub_bin, &kubeconfig, grpc_port, admin_port, &d, 2).await;
    let hub_ready = restart_at.elapsed();
    let reconnect = wait_fleet(
        &fleet,
        started,
        "reconnected after the restart",
        n,
        CONNECT_DEADLINE,
        |f| {
            f.connection
                .iter()
                .filter(|(i, (s, c))| *c && *s > sessions_before.get(i).copied().unwrap_or(0))
                .count()
        },
    )
    .await;
    let stuck = {
        let f = fleet.lock().unwrap();
        f.connection
            .iter()
            .filter(|(i, (s, c))| !*c || *s <= sessions_before.get(i).copied().unwrap_or(0))
            .count()
    };
    if stuck > 0 {
        for stdin in &mut host_stdins {
            let _ = stdin.write_all(b"diag\n").await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        for l in fleet.lock().unwrap().diag.iter().take(20) {
            println!("{l}");
        }
    }
    let refused = hub_counter(admin_port, "handshakes_failed_total{", "").await;
    let full = hub_counter(admin_port, "handshakes_failed_total{", "handshakes_full").await;
    let reconnect_all = restart_at.elapsed();
    tokio::time::sleep(Duration::from_secs(2 * HEARTBEAT_SECONDS)).await;
    let rss_after_restart = rss_kib(hub.pid);
    log(
        started,
        &format!(
            "restart: old hub gone in {stopped:?}, new one ready in {hub_ready:?}; all reconnected {reconnect_all:?} after its start ({reconnect:?} after ready); {refused} handshakes refused ({full} handshakes_full); stuck {stuck}; RSS {rss_after_restart} KiB"
        ),
    );

    // 8. The raw baseline: the raw server in its own process, N raw streams from here.
    let raw_port = free_port();
    let mut raw = spawn_role(
        &["raw-server".into(), raw_port.to_string()],
        &d.join("raw.err"),
    );
    let mut raw_in = raw.stdin.take().unwrap();
    let mut raw_out = BufReader::new(raw.stdout.take().unwrap()).lines();
    assert_eq!(raw_out.next_line().await.unwrap().as_deref(), Some("READY"));
    let raw_pid = raw.id().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let raw_rss0 = rss_kib(raw_pid);
    let raw_received: Arc<Mutex<Vec<(i64, u128, u128)>>> = Arc::default();
    let raw_connect = Instant::now();
    let raw_url = format!("http://127.0.0.1:{raw_port}");
    let connected = futures::stream::iter(0..n)
        .map(|i| {
            let raw_url = raw_url.clone();
            let raw_received = raw_received.clone();
            async move {
                let mut attempt = 0u32;
                let (tx, mut inbound) = loop {
                    let channel = tonic::transport::Endpoint::from_shared(raw_url.clone())
                        .unwrap()
                        .connect_timeout(Duration::from_secs(10))
                        .connect()
                        .await;
                    if let Ok(channel) = channel {
                        let (tx, rx) = mpsc::channel::<v1::AgentMessage>(4);
                        tx.send(v1::AgentMessage {
                            seq: 0,
                            message: Some(v1::agent_message::Message::Hello(v1::Hello {
                                cluster_id: format!("raw-{i}"),
                                ..v1::Hello::default()
                            })),
                        })
                        .await
                        .unwrap();
                        if let Ok(r) = HubClient::new(channel).sync(ReceiverStream::new(rx)).await {
                            let mut inbound = r.into_inner();
                            if let Ok(Some(_welcome)) = inbound.message().await {
                                break (tx, inbound);
                            }
                        }
                    }
                    attempt += 1;
                    assert!(attempt < 20, "raw stream {i} could not connect");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                tokio::spawn(async move {
                    let _keep = tx;
                    while let Ok(Some(m)) = inbound.message().await {
                        if let Some(Out::Upsert(u)) = m.message {
                            raw_received.lock().unwrap().push((
                                u.generation,
                                u.resource_version.parse().unwrap_or(0),
                                unix_nanos(),
                            ));
                        }
                    }
                });
            }
        })
        .buffer_unordered(n)
        .count()
        .await;
    let raw_connect_all = raw_connect.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let raw_rss = rss_kib(raw_pid);
    let raw_per_stream = raw_rss.saturating_sub(raw_rss0) as f64 / n as f64;
    let mut raw_delivery = Vec::with_capacity(3 * n);
    for generation in 2..5i64 {
        raw_in
            .write_all(format!("send {generation}\n").as_bytes())
            .await
            .unwrap();
        let t = Instant::now();
        while raw_received
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _, _)| *g == generation)
            .count()
            < connected
        {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "raw fan-out stalled"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for (_, sent, got) in raw_received.lock().unwrap().iter() {
        raw_delivery.push(Duration::from_nanos(got.saturating_sub(*sent) as u64));
    }
    raw_delivery.sort();
    log(
        started,
        &format!(
            "raw: {connected} streams in {raw_connect_all:?}; RSS {raw_rss0} -> {raw_rss} KiB; fan-out p50/p99/max {}",
            row(&raw_delivery)
        ),
    );

    // 9. The table.
    let p = |v: &[Duration], q: f64| percentile(v, q);
    println!();
    println!(
        "| measurement ({n} real agents in {hosts} host processes; hub, parent and raw server each its own process) | atoll hub | raw gRPC fan-out | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| machine: cores / load (1, 5, 15 min) at start, idle window, restart, end | {cores} / {load_before}; {load_idle}; {load_restart}; {} | | |",
        loadavg()
    );
    println!(
        "| all N connected: first registration, from the hosts' start / after a hub restart, from the new hub's start | {} / {} | {} (N raw streams at once, no backoff) | {} |",
        ms(first_connect),
        ms(reconnect_all),
        ms(raw_connect_all),
        ratio(reconnect_all, raw_connect_all)
    );
    println!(
        "| restart details: old hub stopped (SIGTERM) in / new hub ready in / handshakes refused (of which handshakes_full) / agents stuck (not reconnected within {CONNECT_DEADLINE:?}) | {} / {} / {refused:.0} ({full:.0}) / {stuck} | | |",
        ms(stopped),
        ms(hub_ready)
    );
    println!(
        "| RSS per idle agent / stream: (({rss_idle} − {rss0}) KiB / N, each agent with 1 Description) vs raw (({raw_rss} − {raw_rss0}) KiB / N) | {per_agent:.1} KiB | {raw_per_stream:.1} KiB | {:.1}x |",
        if raw_per_stream > 0.0 {
            per_agent / raw_per_stream
        } else {
            0.0
        }
    );
    println!(
        "| hub RSS: no agent / N connected, no Description / N idle with 1 Description / after the restart | {rss0} / {rss_connected} / {rss_idle} / {rss_after_restart} KiB | | |"
    );
    println!(
        "| one change per namespace, {n} patches 32 at a time (committed in {}): commit → agent received, p50 / p99 / max | {} | {} (send → received, 3 rounds) | {} / {} |",
        ms(patched),
        row(&delivery),
        row(&raw_delivery),
        ratio(p(&delivery, 0.5), p(&raw_delivery, 0.5)),
        ratio(p(&delivery, 0.99), p(&raw_delivery, 0.99))
    );
    println!(
        "| same, from the first patch: received p50 / p99 / max (all in {}) | {} | | |",
        ms(delivered_all),
        row(&from_burst)
    );
    println!(
        "| hub CPU during the burst | {hub_cpu_burst:.2} s ({:.0} µs per agent) | | |",
        hub_cpu_burst / n as f64 * 1e6
    );
    println!(
        "| idle, {periods} heartbeat periods of {HEARTBEAT_SECONDS} s ({idle_elapsed:.1} s): hub CPU / heartbeats written / per heartbeat | {:.1} % of one core / {beats:.0} ({:.0}/s) / {:.0} µs | | |",
        idle_cpu / idle_elapsed * 100.0,
        beats / idle_elapsed,
        if beats > 0.0 {
            idle_cpu / beats * 1e6
        } else {
            0.0
        }
    );
    println!(
        "| idle, same window: parent devcluster CPU / agent hosts CPU (children and agents) | {:.1} % / {:.1} % of one core | | |",
        idle_parent_cpu / idle_elapsed * 100.0,
        idle_hosts_cpu / idle_elapsed * 100.0
    );
    println!();
    println!(
        "# csv: n,hosts,cores,first_connect_ms,reconnect_ms,raw_connect_ms,rss_per_agent_kib,raw_rss_per_stream_kib,delivery_p50_ms,delivery_p99_ms,delivery_max_ms,raw_p50_ms,raw_p99_ms,hub_idle_cpu_pct,heartbeats_per_s,stuck"
    );
    println!(
        "{n},{hosts},{cores},{:.0},{:.0},{:.0},{per_agent:.1},{raw_per_stream:.1},{:.1},{:.1},{:.1},{:.2},{:.2},{:.1},{:.0},{stuck}",
        first_connect.as_secs_f64() * 1e3,
        reconnect_all.as_secs_f64() * 1e3,
        raw_connect_all.as_secs_f64() * 1e3,
        p(&delivery, 0.5).as_secs_f64() * 1e3,
        p(&delivery, 0.99).as_secs_f64() * 1e3,
        p(&delivery, 1.0).as_secs_f64() * 1e3,
        p(&raw_delivery, 0.5).as_secs_f64() * 1e3,
        p(&raw_delivery, 0.99).as_secs_f64() * 1e3,
        idle_cpu / idle_elapsed * 100.0,
        beats / idle_elapsed,
    );

    drop(raw_in);
    drop(host_stdins);
    let _ = hub.child.kill().await;
    for mut p in host_procs {
        let _ = tokio::time::timeout(Duration::from_secs(10), p.wait()).await;
        let _ = p.kill().await;
    }
    let _ = raw.kill().await;
    let _ = parent.kill().await;
}
