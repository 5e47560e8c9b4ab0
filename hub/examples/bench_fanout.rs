//! Fan-out benchmark of the hub's gRPC service with a no-op backend (no API server). N agents
//! connect over in-memory HTTP/2 pipes, each with its own namespace. The benchmark measures:
//! - the process RSS per connected idle agent (hub and client sides together: an upper bound
//!   for the hub alone);
//! - the latency from one index change per namespace (what a Subscription edit produces) to its
//!   receipt by every agent: p50/p99/max;
//! - the process CPU per heartbeat, and from it the share of one core for N agents that beat
//!   every 10 s (client side included: an upper bound).
//!
//! `cargo run --release -p atoll-hub --example bench_fanout -- [agents]`
//!
//! `... -- rss [agents]` measures the hub's RSS alone: the hub serves on loopback TCP and the
//! agents run in a child process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::manual_async_fn
)]

use atoll_applier::model::Report;
use atoll_hub::Error;
use atoll_hub::domain::{Admission, AgentHello, ClusterHeartbeat, Session};
use atoll_hub::index::{DescEntry, Index};
use atoll_hub::metrics::Metrics;
use atoll_hub::server::hub_server;
use atoll_hub::service::{Backend, HubService, StreamConfig};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_client::HubClient;
use atoll_proto::v1::hub_message::Message as Out;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::Service;
use tonic::transport::{Endpoint, Uri};

struct Null {
    epochs: AtomicU64,
    heartbeats: AtomicU64,
}

impl Backend for Null {
    fn admit(&self, hello: &AgentHello) -> impl Future<Output = Result<Admission, Error>> + Send {
        let ns = format!("ns-{}", &hello.cluster_id[24..]);
        async move {
            Ok(Admission {
                namespace: ns,
                managed_cluster_name: "c".into(),
                cluster_token: None,
                credentials: Default::default(),
            })
        }
    }
    fn claim_epoch(
        &self,
        _: &str,
        _: &Admission,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        // The API server orders epochs in the real backend; here one counter does.
        let epoch = self
            .epochs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        async move { Ok(epoch) }
    }
    fn connected(&self, _: &Session) -> impl Future<Output = ()> + Send {
        async {}
    }
    fn heartbeat(
        &self,
        _: &Session,
        _: ClusterHeartbeat,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
        async { Ok(()) }
    }
    fn report(
        &self,
        _: &Session,
        _: Arc<DescEntry>,
        _: Report,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }
    fn disconnected(&self, _: &Session) -> impl Future<Output = ()> + Send {
        async {}
    }
}

#[derive(Clone)]
struct Connector(mpsc::UnboundedSender<Result<DuplexStream, std::io::Error>>);

impl Service<Uri> for Connector {
    type Response = TokioIo<DuplexStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Uri) -> Self::Future {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let sent = self.0.send(Ok(server));
        Box::pin(async move {
            sent.map_err(|_| std::io::Error::other("server gone"))?;
            Ok(TokioIo::new(client))
        })
    }
}

fn entry(ns: &str, generation: i64) -> DescEntry {
    DescEntry {
        namespace: ns.into(),
        name: "apps.web".into(),
        uid: format!("uid-{ns}"),
        resource_version: generation.to_string(),
        generation,
        objects: vec![Bytes::from(format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"apps"}},"spec":{{"replicas":{generation}}}}}"#
        ))],
        charts: Vec::new(),
        deleting: false,
        labels: Default::default(),
        finalizers: vec![],
        status: None,
        rejected: None,
    }
}

async fn clients(addr: String, n: usize) {
    let mut keep = Vec::with_capacity(n);
    for i in 0..n {
        let channel = Endpoint::try_from(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let (atx, arx) = mpsc::channel(8);
        atx.send(v1::AgentMessage {
            seq: 0,
            message: Some(In::Hello(v1::Hello {
                protocol_version: 1,
                cluster_id: format!("00000000-0000-4000-8000-{i:012}"),
                cluster_name: "c".into(),
                token: "t".into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut stream = HubClient::new(channel)
            .sync(ReceiverStream::new(arx))
            .await
            .unwrap()
            .into_inner();
        let ack = atx.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = stream.message().await {
                let seq = match m.message {
                    Some(Out::Upsert(u)) => u.seq,
                    Some(Out::SnapshotComplete(s)) => s.seq,
                    _ => continue,
                };
                let _ = ack
                    .send(v1::AgentMessage {
                        seq: 0,
                        message: Some(In::Ack(v1::Ack { seq })),
                    })
                    .await;
            }
        });
        keep.push(atx);
    }
    println!("connected");
    tokio::time::sleep(Duration::from_secs(3600)).await;
    drop(keep);
}

async fn hub_rss(n: usize) {
    let index = Arc::new(Index::new());
    index.begin_relist();
    for i in 0..n {
        index.apply(entry(&format!("ns-{i:012}"), 1));
    }
    index.finish_relist();
    let backend = Arc::new(Null {
        epochs: AtomicU64::new(0),
        heartbeats: AtomicU64::new(0),
    });
    let svc = HubService::new(
        backend,
        index,
        StreamConfig {
            heartbeat_seconds: 10,
            window: 16,
            // Every raw client connects at once and none retries.
            max_handshakes: 100_000,
            ..StreamConfig::default()
        },
        Arc::new(Metrics::default()),
    );
    let incoming = atoll_hub::server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hub_server(svc, 4 << 20, 4 << 20))
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss0 = atoll_bench::rss_kib(std::process::id());
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args(["clients", &addr.to_string(), &n.to_string()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line)
        .await
        .unwrap();
    assert_eq!(line.trim(), "connected");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = atoll_bench::rss_kib(std::process::id());
    println!(
        "hub alone: RSS {rss0} KiB before, {rss1} KiB with {n} idle agents (TCP, separate process): {:.1} KiB per agent",
        (rss1.saturating_sub(rss0)) as f64 / n as f64
    );
    let _ = child.kill().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("clients") => {
            return clients(args[2].clone(), args[3].parse().unwrap()).await;
        }
        Some("rss") => {
            return hub_rss(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000)).await;
        }
        _ => {}
    }
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let index = Arc::new(Index::new());
    index.begin_relist();
    for i in 0..n {
        index.apply(entry(&format!("ns-{i:012}"), 1));
    }
    index.finish_relist();
    let backend = Arc::new(Null {
        epochs: AtomicU64::new(0),
        heartbeats: AtomicU64::new(0),
    });
    let svc = HubService::new(
        backend.clone(),
        index.clone(),
        StreamConfig {
            heartbeat_seconds: 10,
            window: 16,
            // Every raw client connects at once and none retries.
            max_handshakes: 100_000,
            ..StreamConfig::default()
        },
        Arc::new(Metrics::default()),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hub_server(svc, 4 << 20, 4 << 20))
            .serve_with_incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .unwrap();
    });
    let connector = Connector(tx);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss0 = atoll_bench::rss_kib(std::process::id());

    let (lat_tx, mut lat_rx) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut senders = Vec::with_capacity(n);
    for i in 0..n {
        let channel = Endpoint::try_from("http://bench.invalid")
            .unwrap()
            .connect_with_connector(connector.clone())
            .await
            .unwrap();
        let (atx, arx) = mpsc::channel(8);
        atx.send(v1::AgentMessage {
            seq: 0,
            message: Some(In::Hello(v1::Hello {
                protocol_version: 1,
                cluster_id: format!("00000000-0000-4000-8000-{i:012}"),
                cluster_name: "c".into(),
                token: "t".into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut stream = HubClient::new(channel)
            .sync(ReceiverStream::new(arx))
            .await
            .unwrap()
            .into_inner();
        let lat_tx = lat_tx.clone();
        let ack = atx.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = stream.message().await {
                match m.message {
                    Some(Out::Upsert(u)) => {
                        let _ = ack
                            .send(v1::AgentMessage {
                                seq: 0,
                                message: Some(In::Ack(v1::Ack { seq: u.seq })),
                            })
                            .await;
                        if u.generation == 2 {
                            let _ = lat_tx.send((i, Instant::now()));
                        }
                    }
                    Some(Out::SnapshotComplete(s)) => {
                        let _ = ack
                            .send(v1::AgentMessage {
                                seq: 0,
                                message: Some(In::Ack(v1::Ack { seq: s.seq })),
                            })
                            .await;
                    }
                    _ => {}
                }
            }
        });
        senders.push(atx);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = atoll_bench::rss_kib(std::process::id());
    println!("agents: {n}");
    println!(
        "RSS: {rss0} KiB before, {rss1} KiB with {n} idle agents connected: {:.1} KiB per agent (hub + client sides)",
        (rss1.saturating_sub(rss0)) as f64 / n as f64
    );

    // One change per namespace, all at once (a Subscription edit bound to every cluster).
    let start = Instant::now();
    for i in 0..n {
        index.apply(entry(&format!("ns-{i:012}"), 2));
    }
    let mut lat = Vec::with_capacity(n);
    while lat.len() < n {
        let (_, at) = tokio::time::timeout(Duration::from_secs(30), lat_rx.recv())
            .await
            .unwrap()
            .unwrap();
        lat.push(at.duration_since(start));
    }
    lat.sort();
    let pct = |p: f64| {
        lat[((lat.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(lat.len() - 1)]
    };
    println!(
        "delivery of one change to each of {n} agents: p50 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );

    // Heartbeats: every agent sends `rounds` heartbeats.
    let rounds = 5u64;
    let cpu0 = atoll_bench::cpu_seconds(std::process::id());
    let t0 = Instant::now();
    for _ in 0..rounds {
        for s in &senders {
            let _ = s
                .send(v1::AgentMessage {
                    seq: 0,
                    message: Some(In::Heartbeat(v1::Heartbeat {
                        k8s_version: "v1.33.1".into(),
                        platform: "linux/amd64".into(),
                        node_statistics: Some(v1::NodeStatistics {
                            ready_nodes: 3,
                            ..Default::default()
                        }),
                        capacity: [
                            ("cpu".to_string(), "8".to_string()),
                            ("memory".to_string(), "32Gi".to_string()),
                        ]
                        .into(),
                        allocatable: [("cpu".to_string(), "7".to_string())].into(),
                        healthz: true,
                        livez: true,
                        readyz: true,
                        heartbeat_seconds: 10,
                        ..Default::default()
                    })),
                })
                .await;
        }
    }
    let total = rounds * n as u64;
    while backend.heartbeats.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu = atoll_bench::cpu_seconds(std::process::id()) - cpu0;
    let per = cpu / total as f64;
    println!(
        "heartbeats: {total} in {:?}, {:.1} µs CPU each; {n} agents every 10 s = {:.2}% of one core (gRPC path only, no API write)",
        t0.elapsed(),
        per * 1e6,
        per * n as f64 / 10.0 * 100.0
    );
}
