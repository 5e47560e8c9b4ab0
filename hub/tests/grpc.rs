//! The `Sync` service over an in-memory transport (tokio duplex pipes) with a fake backend:
//! handshake outcomes, snapshot/marker/deltas, window and acks, report authorisation, epochs,
//! size limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_applier::model::Report;
use atoll_hub::Error;
use atoll_hub::domain::{
    Admission, AgentHello, ClusterHeartbeat, PullCredentials, SecretString, Session,
};
use atoll_hub::index::{ChartEntry, DescEntry, Index};
use atoll_hub::metrics::Metrics;
use atoll_hub::server::hub_server;
use atoll_hub::service::{Backend, HubService, StreamConfig};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_client::HubClient;
use atoll_proto::v1::hub_message::Message as Out;
use atoll_testkit::BOOTSTRAP_TOKEN;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Streaming};

const ID_A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
const ID_B: &str = "bbbbbbbb-0000-4000-8000-000000000002";

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Connected(String),
    Heartbeat(String),
    Report(String, String),
    Disconnected(String),
}

#[derive(Default)]
struct Fake {
    epochs: std::sync::atomic::AtomicU64,
    events: Mutex<Vec<Event>>,
    /// Whether Secret `apps/late` can be read yet.
    late_granted: std::sync::atomic::AtomicBool,
    /// Whether Secret `apps/creds` holds its second password.
    rotated: std::sync::atomic::AtomicBool,
    /// When set, each report write waits for a permit of it (a slow parent API server).
    report_gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// The same for heartbeat writes.
    heartbeat_gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// The observedGeneration of each report written, in order.
    written: Arc<Mutex<Vec<i64>>>,
    /// How many report writes fail (with a 503 from the parent) before they succeed.
    failing_reports: std::sync::atomic::AtomicU32,
}

fn ns_of(cluster_id: &str) -> String {
    format!("clusternet-{}", &cluster_id[..5])
}

impl Backend for Fake {
    fn admit(&self, hello: &AgentHello) -> impl Future<Output = Result<Admission, Error>> + Send {
        let hello = hello.clone();
        async move {
            match hello.token.0.as_str() {
                BOOTSTRAP_TOKEN => Ok(Admission {
                    namespace: ns_of(&hello.cluster_id),
                    managed_cluster_name: hello.cluster_name.clone(),
                    cluster_token: Some(SecretString("minted".into())),
                    credentials: Default::default(),
                }),
                "deny.me" => Err(Error::RegistrationDenied {
                    cluster_id: hello.cluster_id,
                    reason: "not on the guest list".into(),
                }),
                _ => Err(Error::Authenticate {
                    cluster_id: hello.cluster_id,
                    reason: "the token secret does not match".into(),
                }),
            }
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
    fn connected(&self, s: &Session) -> impl Future<Output = ()> + Send {
        self.events
            .lock()
            .push(Event::Connected(s.cluster_id.clone()));
        async {}
    }
    fn heartbeat(
        &self,
        s: &Session,
        _: ClusterHeartbeat,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.events
            .lock()
            .push(Event::Heartbeat(s.cluster_id.clone()));
        let gate = self.heartbeat_gate.lock().clone();
        async move {
            if let Some(gate) = gate {
                gate.acquire().await.unwrap().forget();
            }
            Ok(())
        }
    }
    fn report(
        &self,
        s: &Session,
        e: Arc<DescEntry>,
        r: Report,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.events.lock().push(Event::Report(
            s.cluster_id.clone(),
            format!("{}/{}", e.namespace, e.name),
        ));
        let gate = self.report_gate.lock().clone();
        let fake_written = Arc::clone(&self.written);
        let fail = self
            .failing_reports
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| n.checked_sub(1),
            )
            .is_ok();
        let object = format!("{}/{}", e.namespace, e.name);
        async move {
            if let Some(gate) = gate {
                gate.acquire().await.unwrap().forget();
            }
            if fail {
                return Err(Error::CallApiServer {
                    operation: "write Description status".into(),
                    object,
                    source: kube::Error::Api(
                        kube::core::Status::failure("the server is busy", "ServiceUnavailable")
                            .with_code(503)
                            .boxed(),
                    ),
                });
            }
            fake_written.lock().push(r.observed_generation);
            Ok(())
        }
    }
    fn disconnected(&self, s: &Session) -> impl Future<Output = ()> + Send {
        self.events
            .lock()
            .push(Event::Disconnected(s.cluster_id.clone()));
        async {}
    }
    /// One readable Secret, `apps/creds`; `apps/locked` is forbidden; `apps/late` once granted.
    fn pull_credentials(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<PullCredentials, String>> + Send {
        let read = match (namespace, name) {
            ("apps", "late") if self.late_granted.load(std::sync::atomic::Ordering::Relaxed) => {
                Ok(PullCredentials {
                    username: "late".into(),
                    password: SecretString("granted".into()),
                })
            }
            ("apps", "creds") => Ok(PullCredentials {
                username: "robot".into(),
                password: SecretString(
                    if self.rotated.load(std::sync::atomic::Ordering::Relaxed) {
                        "rotated"
                    } else {
                        "hunter2"
                    }
                    .into(),
                ),
            }),
            _ => Err(format!("the hub may not read Secret {namespace}/{name}")),
        };
        async move { read }
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
        let (client, server) = tokio::io::duplex(1 << 20);
        let sent = self.0.send(Ok(server));
        Box::pin(async move {
            sent.map_err(|_| std::io::Error::other("server gone"))?;
            Ok(TokioIo::new(client))
        })
    }
}

struct Harness {
    index: Arc<Index>,
    fake: Arc<Fake>,
    connector: Connector,
}

fn entry(ns: &str, name: &str, generation: i64) -> DescEntry {
    DescEntry {
        charts: Vec::new(),
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        resource_version: generation.to_string(),
        generation,
        objects: vec![Bytes::from(format!(
            r#"{{"kind":"ConfigMap","g":{generation}}}"#
        ))],
        deleting: false,
        labels: BTreeMap::new(),
        finalizers: vec![],
        status: None,
        rejected: None,
    }
}

fn start(window: u32, max_decode: usize) -> Harness {
    start_with(
        StreamConfig {
            heartbeat_seconds: 7,
            window,
            ..StreamConfig::default()
        },
        max_decode,
    )
}

fn start_with(config: StreamConfig, max_decode: usize) -> Harness {
    let index = Arc::new(Index::new());
    index.begin_relist();
    index.finish_relist();
    let fake = Arc::new(Fake::default());
    let svc = HubService::new(
        fake.clone(),
        index.clone(),
        config,
        Arc::new(Metrics::default()),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hub_server(svc, max_decode, 16 << 20))
            .serve_with_incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .unwrap();
    });
    Harness {
        index,
        fake,
        connector: Connector(tx),
    }
}

struct Agent {
    tx: mpsc::Sender<v1::AgentMessage>,
    rx: Streaming<v1::HubMessage>,
}

fn hello(id: &str, token: &str) -> v1::AgentMessage {
    v1::AgentMessage {
        seq: 0,
        message: Some(In::Hello(v1::Hello {
            protocol_version: v1::ProtocolVersion::V1 as i32,
            cluster_id: id.into(),
            cluster_name: "edge".into(),
            cluster_labels: Default::default(),
            token: token.into(),
            agent_version: "test".into(),
            cluster_type: String::new(),
        })),
    }
}

impl Harness {
    /// Waits until the reports written (their observedGeneration, in order) are `want`.
    async fn written_eventually(&self, what: &str, want: &[i64]) {
        atoll_testkit::Poll::every(Duration::from_millis(10))
            .eventually(what, Duration::from_secs(5), || async {
                let written = self.fake.written.lock().clone();
                if written == want {
                    Ok(())
                } else {
                    Err(format!("written: {written:?}"))
                }
            })
            .await;
    }

    async fn channel(&self) -> Channel {
        Endpoint::try_from("http://in-memory.invalid")
            .unwrap()
            .connect_with_connector(self.connector.clone())
            .await
            .unwrap()
    }

    async fn open(&self, first: v1::AgentMessage) -> Result<Agent, tonic::Status> {
        let (tx, rx) = mpsc::channel(64);
        tx.send(first).await.unwrap();
        let mut client = HubClient::new(self.channel().await);
        let resp = client.sync(ReceiverStream::new(rx)).await?;
        Ok(Agent {
            tx,
            rx: resp.into_inner(),
        })
    }

    fn events(&self) -> Vec<Event> {
        self.fake.events.lock().clone()
    }

    async fn wait_for(&self, want: &Event) {
        atoll_testkit::Poll::every(Duration::from_millis(10))
            .eventually(&format!("{want:?}"), Duration::from_secs(2), || async {
                let events = self.events();
                if events.contains(want) {
                    Ok(())
                } else {
                    Err(format!("events: {events:?}"))
                }
            })
            .await;
    }
}

impl Agent {
    async fn recv(&mut self) -> Out {
        tokio::time::timeout(Duration::from_secs(5), self.rx.message())
            .await
            .expect("timed out waiting for a hub message")
            .expect("stream error")
            .expect("stream ended")
            .message
            .expect("empty message")
    }
    async fn recv_status(&mut self) -> tonic::Status {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.rx.message())
                .await
                .expect("timeout")
            {
                Err(s) => return s,
                Ok(Some(_)) => continue,
                Ok(None) => panic!("stream ended without a status"),
            }
        }
    }
    async fn nothing_for(&mut self, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), self.rx.message())
            .await
            .is_err()
    }
    async fn send(&self, m: In) {
        self.tx.send(v1::AgentMessage::from(m)).await.unwrap();
    }
    async fn ack(&self, seq: u64) {
        self.send(In::Ack(v1::Ack { seq })).await;
    }
}

fn upsert_name(m: &Out) -> String {
    match m {
        Out::Upsert(u) => format!("up:{}:{}", u.name, u.generation),
        Out::Removed(r) => format!("rm:{}", r.name),
        Out::Withheld(w) => format!("withheld:{}", w.name),
        Out::SnapshotComplete(_) => "marker".into(),
        Out::Welcome(_) => "welcome".into(),
        Out::Progress(p) => format!("progress:{}", p.last_seq),
    }
}

fn seq_of(m: &Out) -> u64 {
    m.seq().unwrap_or(0)
}

/// An agent's numbered stream (`AgentMessage.seq`): a repeat is dropped, a gap ends the stream
/// with ABORTED (the agent reconnects), and a first message numbered other than 1 is refused.
#[tokio::test]
async fn a_numbered_agent_stream_drops_repeats_and_ends_at_a_gap() {
    let h = start(16, 4 << 20);
    let numbered = |seq: u64, mut m: v1::AgentMessage| {
        m.seq = seq;
        m
    };
    let err = match h.open(numbered(2, hello(ID_A, BOOTSTRAP_TOKEN))).await {
        Ok(mut a) => a.recv_status().await,
        Err(s) => s,
    };
    assert_eq!(err.code(), Code::Aborted, "a Hello numbered 2: {err:?}");

    let mut a = h
        .open(numbered(1, hello(ID_A, BOOTSTRAP_TOKEN)))
        .await
        .unwrap();
    assert!(matches!(a.recv().await, Out::Welcome(_)));
    // Handled, a second Hello would end the stream (INVALID_ARGUMENT); as a repeat of message
    // 1 it is dropped.
    let ack = |seq| v1::AgentMessage::from(In::Ack(v1::Ack { seq }));
    for m in [
        numbered(1, hello(ID_A, BOOTSTRAP_TOKEN)),
        numbered(2, ack(0)),
        numbered(5, ack(0)),
    ] {
        a.tx.send(m).await.unwrap();
    }
    let err = a.recv_status().await;
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    assert!(
        err.message()
            .contains("message 5 arrived where 3 was expected"),
        "{err:?}"
    );
}

/// While a message is unacknowledged, each heartbeat is answered with Progress (how far the hub
/// has sent, so that an agent that lost the last messages finds out); once all are acked, a
/// heartbeat gets no answer.
#[tokio::test]
async fn heartbeats_are_answered_with_progress_while_messages_are_unacknowledged() {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert_eq!(upsert_name(&a.recv().await), "welcome");
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:1");
    assert_eq!(upsert_name(&a.recv().await), "marker");
    let heartbeat = || In::Heartbeat(v1::Heartbeat::default());
    a.send(heartbeat()).await;
    assert_eq!(upsert_name(&a.recv().await), "progress:2");
    a.ack(1).await;
    a.send(heartbeat()).await;
    assert_eq!(upsert_name(&a.recv().await), "progress:2");
    a.ack(2).await;
    a.send(heartbeat()).await;
    assert!(
        a.nothing_for(300).await,
        "Progress with nothing unacknowledged"
    );
    // A change: unacknowledged again, and Progress names it.
    h.index.apply(entry(&ns, "apps.web", 2));
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:2");
    a.send(heartbeat()).await;
    assert_eq!(upsert_name(&a.recv().await), "progress:3");
}

#[tokio::test]
async fn handshake_outcomes_map_to_grpc_codes() {
    let h = start(16, 4 << 20);
    let not_hello = v1::AgentMessage {
        seq: 0,
        message: Some(In::Ack(v1::Ack { seq: 1 })),
    };
    let mut old = hello(ID_A, BOOTSTRAP_TOKEN);
    if let Some(In::Hello(x)) = old.message.as_mut() {
        x.protocol_version = 9;
    }
    let cases = [
        (
            "bad token",
            hello(ID_A, "07401b.0000000000000000"),
            Code::Unauthenticated,
        ),
        ("denied", hello(ID_A, "deny.me"), Code::PermissionDenied),
        ("unknown version", old, Code::FailedPrecondition),
        ("not a hello", not_hello, Code::InvalidArgument),
        (
            "bad cluster id",
            hello("nope", BOOTSTRAP_TOKEN),
            Code::InvalidArgument,
        ),
    ];
    for (what, first, code) in cases {
        let err = match h.open(first).await {
            Ok(mut a) => a.recv_status().await,
            Err(s) => s,
        };
        assert_eq!(err.code(), code, "{what}: {err:?}");
        assert!(
            !err.message().contains("0000000000000000"),
            "{what}: token leaked"
        );
    }
    let denied = h.open(hello(ID_A, "deny.me")).await.err().unwrap();
    assert!(
        denied.message().contains("not on the guest list"),
        "{denied:?}"
    );
    let version = {
        let mut m = hello(ID_A, BOOTSTRAP_TOKEN);
        if let Some(In::Hello(x)) = m.message.as_mut() {
            x.protocol_version = 9;
        }
        h.open(m).await.err().unwrap()
    };
    assert!(
        version.message().contains("unsupported protocol version 9"),
        "{version:?}"
    );
}

#[tokio::test]
async fn welcome_snapshot_marker_then_deltas_of_own_namespace_only() {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    h.index.apply(entry(&ns, "apps.db", 1));
    h.index.apply(entry(&ns_of(ID_B), "apps.other", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    match a.recv().await {
        Out::Welcome(w) => {
            assert_eq!(w.namespace, ns);
            assert_eq!(w.managed_cluster_name, "edge");
            assert_eq!(w.cluster_token, "minted");
            assert_eq!((w.heartbeat_seconds, w.window), (7, 16));
            assert!(w.epoch > 0);
        }
        other => panic!("expected Welcome, got {other:?}"),
    }
    let mut got = vec![];
    let mut seqs = vec![];
    for _ in 0..3 {
        let m = a.recv().await;
        seqs.push(seq_of(&m));
        got.push(upsert_name(&m));
    }
    assert_eq!(got, vec!["up:apps.db:1", "up:apps.web:1", "marker"]);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    h.index.apply(entry(&ns, "apps.web", 2));
    h.index.delete(&ns, "apps.db");
    h.index.apply(entry(&ns_of(ID_B), "apps.other", 2));
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:2");
    assert_eq!(upsert_name(&a.recv().await), "rm:apps.db");
    assert!(a.nothing_for(200).await);
    h.wait_for(&Event::Connected(ID_A.into())).await;
}

#[tokio::test]
async fn window_holds_messages_until_acked_and_queue_keeps_latest_only() {
    let h = start(2, 4 << 20);
    let ns = ns_of(ID_A);
    for i in 0..4 {
        h.index.apply(entry(&ns, &format!("d{i}"), 1));
    }
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert_eq!(upsert_name(&a.recv().await), "welcome");
    let first = a.recv().await;
    let second = a.recv().await;
    assert_eq!(
        [upsert_name(&first), upsert_name(&second)],
        ["up:d0:1", "up:d1:1"]
    );
    assert!(a.nothing_for(200).await, "window of 2 exceeded");
    // While the agent stalls, d2 changes three times: it will get only the latest.
    for g in 2..5 {
        h.index.apply(entry(&ns, "d2", g));
    }
    a.ack(seq_of(&second)).await;
    let m3 = a.recv().await;
    let m4 = a.recv().await;
    assert_eq!([upsert_name(&m3), upsert_name(&m4)], ["up:d2:4", "up:d3:1"]);
    assert!(a.nothing_for(200).await);
    a.ack(seq_of(&m4)).await;
    assert_eq!(upsert_name(&a.recv().await), "marker");
}

#[tokio::test]
async fn a_stalled_agent_never_blocks_the_others() {
    let h = start(1, 4 << 20);
    let ns = ns_of(ID_A);
    let mut stalled = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    // a second agent of a different cluster subscribed to its own namespace
    let mut other = h.open(hello(ID_B, BOOTSTRAP_TOKEN)).await.unwrap();
    assert_eq!(upsert_name(&stalled.recv().await), "welcome");
    assert_eq!(upsert_name(&stalled.recv().await), "marker");
    assert_eq!(upsert_name(&other.recv().await), "welcome");
    assert_eq!(upsert_name(&other.recv().await), "marker");
    for g in 1..=200 {
        h.index.apply(entry(&ns, "hot", g));
        h.index.apply(entry(&ns_of(ID_B), "cold", g));
    }
    // The stalled agent got one message and nothing else; the other one keeps up.
    assert_eq!(
        upsert_name(&stalled.recv().await).split(':').next(),
        Some("up")
    );
    let mut seen = 0;
    loop {
        let m = other.recv().await;
        other.ack(seq_of(&m)).await;
        seen += 1;
        if upsert_name(&m) == "up:cold:200" {
            break;
        }
    }
    assert!(seen <= 200, "{seen} messages for 200 changes");
    assert!(stalled.nothing_for(100).await);
}

#[tokio::test]
async fn reports_are_authorised_against_the_streams_own_namespace() {
    let h = start(16, 4 << 20);
    h.index.apply(entry(&ns_of(ID_A), "apps.web", 1));
    h.index.apply(entry(&ns_of(ID_B), "apps.secret", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        a.recv().await;
    }
    let report = |name: &str| {
        In::Report(v1::DescriptionReport {
            name: name.into(),
            phase: "Success".into(),
            observed_generation: 1,
            ..Default::default()
        })
    };
    a.send(report("apps.web")).await;
    h.wait_for(&Event::Report(
        ID_A.into(),
        format!("{}/apps.web", ns_of(ID_A)),
    ))
    .await;
    a.send(In::Heartbeat(v1::Heartbeat {
        healthz: true,
        ..Default::default()
    }))
    .await;
    h.wait_for(&Event::Heartbeat(ID_A.into())).await;
    a.send(report("apps.secret")).await;
    let status = a.recv_status().await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("apps.secret"), "{status:?}");
    h.wait_for(&Event::Disconnected(ID_A.into())).await;
    let reports: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Report(..)))
        .collect();
    assert_eq!(
        reports.len(),
        1,
        "the cross-cluster report was written: {reports:?}"
    );
}

#[tokio::test]
async fn heartbeats_pass_reports_waiting_on_a_slow_parent_and_only_the_latest_report_is_written() {
    let h = start(16, 4 << 20);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.fake.report_gate.lock() = Some(gate.clone());
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 3));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        a.recv().await;
    }
    // The snapshot acknowledged: the heartbeat below gets no Progress.
    a.ack(2).await;
    let report = |observed_generation: i64| {
        In::Report(v1::DescriptionReport {
            name: "apps.web".into(),
            phase: "Success".into(),
            observed_generation,
            ..Default::default()
        })
    };
    // The first report's write hangs on the parent; two more arrive behind it.
    a.send(report(1)).await;
    h.wait_for(&Event::Report(ID_A.into(), format!("{ns}/apps.web")))
        .await;
    a.send(report(2)).await;
    a.send(report(3)).await;
    a.send(In::Heartbeat(v1::Heartbeat {
        healthz: true,
        ..Default::default()
    }))
    .await;
    h.wait_for(&Event::Heartbeat(ID_A.into())).await;
    assert!(h.fake.written.lock().is_empty());
    gate.add_permits(10);
    h.written_eventually("the latest report written", &[1, 3])
        .await;
    assert!(a.nothing_for(100).await);
    assert_eq!(*h.fake.written.lock(), [1, 3], "report 2 was superseded");
}

/// A heartbeat whose write waits on a slow parent holds nothing back: the stream delivers a
/// changed Description meanwhile, and of the heartbeats that arrive while one is written only
/// the newest is written next.
#[tokio::test]
async fn a_heartbeat_waiting_on_a_slow_parent_holds_no_description_back() {
    let h = start(16, 4 << 20);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.fake.heartbeat_gate.lock() = Some(gate.clone());
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        a.recv().await;
    }
    a.ack(2).await;
    let heartbeat = || In::Heartbeat(v1::Heartbeat::default());
    a.send(heartbeat()).await;
    h.wait_for(&Event::Heartbeat(ID_A.into())).await;
    // Its write hangs; the next change still goes out.
    h.index.apply(entry(&ns, "apps.web", 2));
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:2");
    a.ack(3).await;
    for _ in 0..3 {
        a.send(heartbeat()).await;
    }
    assert!(a.nothing_for(200).await);
    let beats = || {
        h.events()
            .iter()
            .filter(|e| matches!(e, Event::Heartbeat(_)))
            .count()
    };
    assert_eq!(beats(), 1, "a second write began before the first ended");
    gate.add_permits(10);
    atoll_testkit::Poll::every(Duration::from_millis(10))
        .eventually(
            "the newest waiting heartbeat written",
            Duration::from_secs(5),
            || async {
                if beats() == 2 {
                    Ok(())
                } else {
                    Err(format!("{} written", beats()))
                }
            },
        )
        .await;
    assert!(a.nothing_for(200).await);
    assert_eq!(beats(), 2, "superseded heartbeats were written");
}

#[tokio::test]
async fn a_report_whose_write_failed_is_written_again_without_the_agent_sending_it_again() {
    let h = start_with(
        StreamConfig {
            report_retry: Duration::from_millis(20),
            ..StreamConfig::default()
        },
        4 << 20,
    );
    h.fake
        .failing_reports
        .store(2, std::sync::atomic::Ordering::Relaxed);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        a.recv().await;
    }
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        phase: "Success".into(),
        observed_generation: 1,
        ..Default::default()
    }))
    .await;
    h.written_eventually("the report written after two failed writes", &[1])
        .await;
    let attempts = h
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Report(..)))
        .count();
    assert_eq!(attempts, 3, "two failed writes and the one that succeeded");
    assert_eq!(
        h.fake
            .failing_reports
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn an_older_stream_of_the_same_cluster_is_closed_and_does_not_mark_it_disconnected() {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut old = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        old.recv().await;
    }
    let mut new = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        new.recv().await;
    }
    // The hub ends the older stream as soon as the newer one is admitted.
    let ended = tokio::time::timeout(Duration::from_secs(5), old.rx.message())
        .await
        .expect("the older stream is still open");
    let status = ended.expect_err("the older stream ends with a status");
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    let report = In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        phase: "Success".into(),
        ..Default::default()
    });
    new.send(report).await;
    h.wait_for(&Event::Report(ID_A.into(), format!("{ns}/apps.web")))
        .await;
    // The old stream ending does not mark the cluster disconnected: a newer stream is live.
    drop(old);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !h.events().contains(&Event::Disconnected(ID_A.into())),
        "{:?}",
        h.events()
    );
    drop(new);
    h.wait_for(&Event::Disconnected(ID_A.into())).await;
}

#[tokio::test]
async fn oversized_message_is_resource_exhausted_and_closes_only_that_stream() {
    let h = start(16, 64 * 1024);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut big = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    let mut fine = h.open(hello(ID_B, BOOTSTRAP_TOKEN)).await.unwrap();
    big.recv().await;
    fine.recv().await;
    big.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        reason: "x".repeat(100 * 1024),
        ..Default::default()
    }))
    .await;
    let status = big.recv_status().await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    h.index.apply(entry(&ns_of(ID_B), "still", 1));
    loop {
        if upsert_name(&fine.recv().await) == "up:still:1" {
            break;
        }
    }
}

#[tokio::test]
async fn an_oversized_report_is_dropped_and_the_stream_goes_on() {
    let h = start_with(
        StreamConfig {
            heartbeat_seconds: 7,
            max_report_bytes: 64 * 1024,
            ..StreamConfig::default()
        },
        4 << 20,
    );
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        let m = a.recv().await;
        a.ack(seq_of(&m)).await;
    }
    // Under the gRPC limit (4 MiB), over the report limit (64 KiB): dropped, not fatal.
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        reason: "x".repeat(100 * 1024),
        ..Default::default()
    }))
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !h.events().iter().any(|e| matches!(e, Event::Report(..))),
        "{:?}",
        h.events()
    );
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        phase: "Success".into(),
        ..Default::default()
    }))
    .await;
    h.wait_for(&Event::Report(ID_A.into(), format!("{ns}/apps.web")))
        .await;
    h.index.apply(entry(&ns, "apps.web", 2));
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:2");
}

/// Agent A connected with one Description, its snapshot received and acknowledged.
async fn synced_with_one_description() -> (Harness, Agent) {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_A);
    h.index.apply(entry(&ns, "apps.web", 1));
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    for _ in 0..3 {
        let m = a.recv().await;
        a.ack(seq_of(&m)).await;
    }
    (h, a)
}

#[tokio::test]
async fn resync_request_resends_the_snapshot_and_marker() {
    let (_h, mut a) = synced_with_one_description().await;
    a.send(In::Resync(v1::ResyncRequest {})).await;
    assert_eq!(upsert_name(&a.recv().await), "up:apps.web:1");
    assert_eq!(upsert_name(&a.recv().await), "marker");
}

/// A hostile agent asking for its snapshot again and again gets one snapshot at once and one
/// more when the second ends, not one per request.
#[tokio::test]
async fn a_burst_of_resync_requests_is_answered_by_two_snapshots() {
    let (_h, mut a) = synced_with_one_description().await;
    for _ in 0..200 {
        a.send(In::Resync(v1::ResyncRequest {})).await;
    }
    let mut markers = 0;
    let until = tokio::time::Instant::now() + Duration::from_millis(2500);
    while let Ok(Ok(Some(m))) = tokio::time::timeout_at(until, a.rx.message()).await {
        let m = m.message.expect("a message");
        if upsert_name(&m) == "marker" {
            markers += 1;
        }
        a.ack(seq_of(&m)).await;
    }
    assert_eq!(markers, 2, "200 requests, two snapshots");
}

/// Encodes like an `AgentMessage`, except that `bad_ack` puts a fixed64 where `Ack` (a
/// message) belongs: the hub cannot decode it.
#[derive(Clone, PartialEq, prost::Message)]
struct Mixed {
    #[prost(message, optional, tag = "1")]
    hello: Option<v1::Hello>,
    #[prost(fixed64, optional, tag = "4")]
    bad_ack: Option<u64>,
}

async fn raw_stream(
    h: &Harness,
    msgs: Vec<Mixed>,
) -> Result<Streaming<v1::HubMessage>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(h.channel().await);
    grpc.ready().await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    for m in msgs {
        tx.send(m).await.unwrap();
    }
    // Keep the request stream open for the rest of the test.
    std::mem::forget(tx);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/atoll.hub.v1.Hub/Sync");
    let codec = tonic_prost::ProstCodec::<Mixed, v1::HubMessage>::default();
    grpc.streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec)
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn malformed_protobuf_is_invalid_argument_and_closes_only_that_stream() {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_B);
    let mut healthy = h.open(hello(ID_B, BOOTSTRAP_TOKEN)).await.unwrap();
    assert_eq!(upsert_name(&healthy.recv().await), "welcome");
    assert_eq!(upsert_name(&healthy.recv().await), "marker");

    // Malformed first message.
    let err = raw_stream(
        &h,
        vec![Mixed {
            hello: None,
            bad_ack: Some(7),
        }],
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // A good Hello, then a malformed message.
    let Some(In::Hello(good)) = hello(ID_A, BOOTSTRAP_TOKEN).message else {
        unreachable!()
    };
    let mut s = raw_stream(
        &h,
        vec![
            Mixed {
                hello: Some(good),
                bad_ack: None,
            },
            Mixed {
                hello: None,
                bad_ack: Some(7),
            },
        ],
    )
    .await
    .unwrap();
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(5), s.message())
            .await
            .unwrap()
        {
            Err(status) => break status,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("stream ended without a status"),
        }
    };
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    // The other agent's stream is unaffected.
    h.index.apply(entry(&ns, "after", 1));
    assert_eq!(upsert_name(&healthy.recv().await), "up:after:1");
}

#[test]
fn errors_map_to_the_documented_grpc_codes() {
    use atoll_hub::service::{inbound_error, status_of};
    let cases = [
        (
            Error::Authenticate {
                cluster_id: "c".into(),
                reason: "r".into(),
            },
            Code::Unauthenticated,
        ),
        (
            Error::RegistrationDenied {
                cluster_id: "c".into(),
                reason: "r".into(),
            },
            Code::PermissionDenied,
        ),
        (
            Error::AuthoriseReport {
                name: "n".into(),
                namespace: "ns".into(),
            },
            Code::PermissionDenied,
        ),
        (
            Error::CheckProtocolVersion { got: 2 },
            Code::FailedPrecondition,
        ),
        (
            Error::ParseHello { reason: "r".into() },
            Code::InvalidArgument,
        ),
        (
            Error::CallApiServer {
                operation: "o".into(),
                object: "x".into(),
                source: kube::Error::Service("connection refused".into()),
            },
            Code::Unavailable,
        ),
        (
            Error::WriteParentObject {
                operation: "o".into(),
                object: "x".into(),
                reason: "kept changing".into(),
            },
            Code::Unavailable,
        ),
    ];
    for (e, code) in cases {
        assert_eq!(status_of(&e).code(), code, "{e}");
    }
    let too_large = tonic::Status::out_of_range(
        "Error, decoded message length too large: found 9 bytes, the limit is: 4 bytes",
    );
    assert_eq!(inbound_error(&too_large).code(), Code::ResourceExhausted);
    assert_eq!(
        inbound_error(&tonic::Status::internal("invalid wire type")).code(),
        Code::InvalidArgument
    );
    assert_eq!(
        inbound_error(&tonic::Status::cancelled("gone")).code(),
        Code::Cancelled
    );
}

#[tokio::test]
async fn a_stream_that_sends_no_hello_is_closed_after_the_deadline() {
    let h = start_with(
        StreamConfig {
            hello_timeout: Duration::from_millis(300),
            ..StreamConfig::default()
        },
        4 << 20,
    );
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), raw_stream(&h, vec![]))
        .await
        .expect("a stream without Hello was kept open")
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(err.message().contains("no Hello"), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn handshakes_beyond_the_cap_are_refused_at_once_and_healthy_agents_get_in_after() {
    let h = start_with(
        StreamConfig {
            hello_timeout: Duration::from_millis(800),
            max_handshakes: 2,
            ..StreamConfig::default()
        },
        4 << 20,
    );
    // Two streams that never say Hello hold both handshake places...
    let mut silent = Vec::new();
    for _ in 0..2 {
        let channel = h.channel().await;
        silent.push(tokio::spawn(async move {
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.unwrap();
            let (tx, rx) = mpsc::channel::<Mixed>(1);
            let path =
                tonic::codegen::http::uri::PathAndQuery::from_static("/atoll.hub.v1.Hub/Sync");
            let codec = tonic_prost::ProstCodec::<Mixed, v1::HubMessage>::default();
            let r = grpc
                .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec)
                .await;
            drop(tx);
            r.err().map(|s| s.code())
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...so a third is refused at once, without waiting,
    let refused = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.err().unwrap();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // and once the silent ones are closed by the deadline, a healthy agent gets in.
    for s in silent {
        assert_eq!(s.await.unwrap(), Some(Code::DeadlineExceeded));
    }
    let mut ok = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert_eq!(upsert_name(&ok.recv().await), "welcome");
}

/// A HelmChart of namespace `apps` whose `chartPullSecret` is `secret` (namespace, name).
fn private_chart(name: &str, secret: serde_json::Value) -> ChartEntry {
    ChartEntry::new(
        "apps",
        &serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"repo": "https://charts.example.com", "chart": name,
                     "targetNamespace": "demo", "chartPullSecret": secret}
        }),
        &serde_json::json!({}),
    )
}

#[tokio::test]
async fn charts_get_their_own_namespaces_pull_credentials_or_the_reason_they_cannot() {
    let h = start(16, 4 << 20);
    let ns = ns_of(ID_A);
    let mut e = entry(&ns, "apps.charts", 1);
    e.charts = vec![
        private_chart("granted", serde_json::json!({"name": "creds"})),
        private_chart(
            "locked",
            serde_json::json!({"name": "locked", "namespace": "apps"}),
        ),
        private_chart(
            "elsewhere",
            serde_json::json!({"name": "creds", "namespace": "kube-system"}),
        ),
        ChartEntry::new(
            "apps",
            &serde_json::json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                                "metadata": {"name": "public", "namespace": "apps"},
                                "spec": {"repo": "https://r", "chart": "public", "targetNamespace": "demo"}}),
            &serde_json::json!({}),
        ),
        // Rendered from apps' HelmChart, claiming another namespace (a Manifest's template
        // or an override could): the chart's credentials still come from apps only.
        ChartEntry::new(
            "apps",
            &serde_json::json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                                "metadata": {"name": "claims", "namespace": "victim"},
                                "spec": {"repo": "https://r", "chart": "claims", "targetNamespace": "demo",
                                         "chartPullSecret": {"name": "creds", "namespace": "victim"}}}),
            &serde_json::json!({}),
        ),
        // No HelmChart named as its source: no Secret at all.
        ChartEntry::new(
            "",
            &serde_json::json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                                "metadata": {"name": "orphan", "namespace": "apps"},
                                "spec": {"repo": "https://r", "chart": "orphan", "targetNamespace": "demo",
                                         "chartPullSecret": {"name": "creds"}}}),
            &serde_json::json!({}),
        ),
    ];
    h.index.apply(e);
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert!(matches!(a.recv().await, Out::Welcome(_)));
    let Out::Upsert(up) = a.recv().await else {
        panic!("expected the Description");
    };
    let got: Vec<(Option<(String, String)>, String)> = up
        .charts
        .iter()
        .map(|c| {
            (
                c.credentials
                    .as_ref()
                    .map(|p| (p.username.clone(), p.password.clone())),
                c.credentials_error.clone(),
            )
        })
        .collect();
    assert_eq!(
        got[0],
        (Some(("robot".into(), "hunter2".into())), String::new())
    );
    assert_eq!(
        got[1],
        (None, "the hub may not read Secret apps/locked".into())
    );
    // Another namespace's Secret is refused before the backend is asked.
    assert_eq!(got[2].0, None);
    assert!(
        got[2]
            .1
            .contains("kube-system/creds is not in the HelmChart's namespace apps"),
        "{}",
        got[2].1
    );
    assert_eq!(got[3], (None, String::new()));
    assert_eq!(got[4].0, None);
    assert!(
        got[4]
            .1
            .contains("victim/creds is not in the HelmChart's namespace apps"),
        "{}",
        got[4].1
    );
    assert_eq!(got[5].0, None);
    assert!(
        got[5]
            .1
            .contains("does not name the HelmChart orphan comes from"),
        "{}",
        got[5].1
    );
}

#[tokio::test]
async fn a_description_sent_without_its_credentials_is_sent_again_until_they_can_be_read() {
    let h = start_with(
        StreamConfig {
            credentials_retry: Duration::from_millis(100),
            ..StreamConfig::default()
        },
        4 << 20,
    );
    let ns = ns_of(ID_A);
    let mut e = entry(&ns, "apps.late", 1);
    e.charts = vec![private_chart("late", serde_json::json!({"name": "late"}))];
    h.index.apply(e);
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert!(matches!(a.recv().await, Out::Welcome(_)));
    let Out::Upsert(first) = a.recv().await else {
        panic!("expected the Description");
    };
    assert!(first.charts[0].credentials.is_none());
    assert!(!first.charts[0].credentials_error.is_empty());
    assert_eq!(upsert_name(&a.recv().await), "marker");
    // Not yet readable: sent again, still without them (after 100 ms, then 200 ms).
    let Out::Upsert(again) = a.recv().await else {
        panic!("expected the Description again");
    };
    assert_eq!((again.name.as_str(), again.generation), ("apps.late", 1));
    assert!(again.charts[0].credentials.is_none());
    h.fake
        .late_granted
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let with = loop {
        let Out::Upsert(up) = a.recv().await else {
            panic!("expected the Description again");
        };
        if let Some(c) = up.charts[0].credentials.clone() {
            break c;
        }
    };
    assert_eq!(
        (with.username.as_str(), with.password.as_str()),
        ("late", "granted")
    );
    // Delivered with its credentials: no more tries.
    assert!(a.nothing_for(1_000).await);
}

#[tokio::test]
async fn a_rotated_pull_secret_is_sent_again_and_an_unchanged_one_is_not() {
    let h = start_with(
        StreamConfig {
            credentials_recheck: Duration::from_millis(100),
            ..StreamConfig::default()
        },
        4 << 20,
    );
    let ns = ns_of(ID_A);
    let mut e = entry(&ns, "apps.private", 1);
    e.charts = vec![private_chart(
        "granted",
        serde_json::json!({"name": "creds"}),
    )];
    h.index.apply(e);
    let mut a = h.open(hello(ID_A, BOOTSTRAP_TOKEN)).await.unwrap();
    assert!(matches!(a.recv().await, Out::Welcome(_)));
    let password = |m: Out| match m {
        Out::Upsert(up) => up.charts[0].credentials.clone().unwrap().password,
        other => panic!("expected the Description, got {other:?}"),
    };
    assert_eq!(password(a.recv().await), "hunter2");
    assert_eq!(upsert_name(&a.recv().await), "marker");
    // Rechecked every 100 ms, unchanged: nothing is sent.
    assert!(a.nothing_for(500).await);
    h.fake
        .rotated
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(password(a.recv().await), "rotated");
    assert!(a.nothing_for(500).await);
}
