//! The hub's handling of decoded agent messages: `HubService::sync` (the handshake) and its
//! stream loop (Hello, Heartbeat, Report, Ack, Resync, empty and undecodable-then-dropped
//! messages, in any order, on up to two streams), over an in-memory HTTP/2 transport with a
//! fake backend, as `hub/tests/grpc.rs` drives it. The parent API server is not involved: the
//! backend (admission, epochs, status writes) is the fake, so this fuzzes the hub's own logic.
//!
//! Checked: no message sequence panics the hub; a stream ends once the agent closes its side
//! (no hang); a stream ends with OK or a documented status code, never INTERNAL or UNKNOWN; a
//! report is written only on a Description of the stream's own namespace, and only when its
//! uid is empty or the Description's.
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use arbitrary::Arbitrary;
use atoll_applier::model::Report;
use atoll_hub::Error;
use atoll_hub::domain::{Admission, AgentHello, ClusterHeartbeat, SecretString, Session};
use atoll_hub::index::{DescEntry, Index};
use atoll_hub::metrics::Metrics;
use atoll_hub::server::hub_server;
use atoll_hub::service::{Backend, HubService, StreamConfig};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_client::HubClient;
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use parking_lot::Mutex;
use prost::Message;
use tokio::io::DuplexStream;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint, Uri};

const ID_A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
const ID_B: &str = "bbbbbbbb-0000-4000-8000-000000000002";
const GOOD_TOKEN: &str = "abcdef.0123456789abcdef";
const DENIED_TOKEN: &str = "deny.me";

fn ns_of(cluster_id: &str) -> String {
    format!("ns-{}", cluster_id.chars().take(8).collect::<String>())
}

/// A report the fake backend was asked to write.
#[derive(Debug)]
struct Written {
    session: Session,
    entry: Arc<DescEntry>,
    report_uid: String,
}

#[derive(Default)]
struct Fake {
    epochs: std::sync::atomic::AtomicU64,
    written: Mutex<Vec<Written>>,
}

impl Backend for Fake {
    fn admit(&self, hello: &AgentHello) -> impl Future<Output = Result<Admission, Error>> + Send {
        let hello = hello.clone();
        async move {
            match hello.token.0.as_str() {
                GOOD_TOKEN => Ok(Admission {
                    namespace: ns_of(&hello.cluster_id),
                    managed_cluster_name: hello.cluster_name.clone(),
                    cluster_token: Some(SecretString("minted".into())),
                    credentials: Default::default(),
                }),
                DENIED_TOKEN => Err(Error::RegistrationDenied {
                    cluster_id: hello.cluster_id,
                    reason: "denied".into(),
                }),
                _ => Err(Error::Authenticate {
                    cluster_id: hello.cluster_id,
                    reason: "wrong token".into(),
                }),
            }
        }
    }
    fn claim_epoch(
        &self,
        _: &str,
        _: &Admission,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        let epoch = self
            .epochs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        async move { Ok(epoch) }
    }
    async fn connected(&self, _: &Session) {}
    async fn heartbeat(&self, _: &Session, _: ClusterHeartbeat) -> Result<(), Error> {
        Ok(())
    }
    fn report(
        &self,
        session: &Session,
        entry: Arc<DescEntry>,
        report: Report,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.written.lock().push(Written {
            session: session.clone(),
            entry,
            report_uid: report.uid,
        });
        async { Ok(()) }
    }
    async fn disconnected(&self, _: &Session) {}
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

struct Hub {
    rt: Runtime,
    fake: Arc<Fake>,
    channel: Channel,
}

fn entry(cluster_id: &str, name: &str) -> DescEntry {
    let ns = ns_of(cluster_id);
    DescEntry {
        uid: format!("uid-{ns}-{name}"),
        namespace: ns,
        name: name.into(),
        resource_version: "1".into(),
        generation: 1,
        objects: vec![bytes_of(r#"{"apiVersion":"v1","kind":"ConfigMap"}"#)],
        charts: Vec::new(),
        deleting: false,
        labels: BTreeMap::new(),
        finalizers: vec![],
        status: None,
        rejected: None,
    }
}

fn bytes_of(s: &str) -> bytes::Bytes {
    bytes::Bytes::from(s.to_owned())
}

fn hub() -> &'static Hub {
    static HUB: OnceLock<Hub> = OnceLock::new();
    HUB.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let index = Arc::new(Index::new());
        index.begin_relist();
        for (id, name) in [(ID_A, "web"), (ID_A, "api"), (ID_B, "web"), (ID_B, "db")] {
            index.apply(entry(id, name));
        }
        index.finish_relist();
        let fake = Arc::new(Fake::default());
        let config = StreamConfig {
            heartbeat_seconds: 7,
            window: 2,
            hello_timeout: Duration::from_secs(2),
            max_handshakes: 4,
            max_report_bytes: 4096,
            ..StreamConfig::default()
        };
        let svc = HubService::new(fake.clone(), index, config, Arc::new(Metrics::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let channel = rt.block_on(async move {
            tokio::spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(hub_server(svc, 64 * 1024, 16 << 20))
                    .serve_with_incoming(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                    .await;
            });
            Endpoint::try_from("http://in-memory.invalid")
                .unwrap_or_else(|e| panic!("{e}"))
                .connect_with_connector(Connector(tx))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        });
        Hub { rt, fake, channel }
    })
}

#[derive(Arbitrary, Debug)]
struct Input {
    steps: Vec<Step>,
}

#[derive(Arbitrary, Debug)]
struct Step {
    /// Which of two streams sends it.
    second: bool,
    /// Its sequence number (`AgentMessage.seq`).
    seq: Numbering,
    msg: Msg,
}

#[derive(Arbitrary, Debug)]
enum Numbering {
    /// 0, as from an agent older than the numbers.
    Unnumbered,
    /// The next number of its stream, as an agent sends.
    Next,
    /// Any number: a repeat, a gap, or the next by chance.
    Raw(u8),
}

#[derive(Arbitrary, Debug)]
enum Msg {
    Hello {
        id: Pick,
        token: Pick,
        version: u8,
        name: Option<String>,
        labels: Vec<(String, String)>,
        cluster_type: Pick,
    },
    Heartbeat {
        k8s_version: String,
        allocatable: Vec<(String, String)>,
        capacity: Vec<(String, String)>,
        heartbeat_seconds: u32,
        nodes: Option<(i32, i32, i32)>,
        prune_hold: Option<(String, Vec<String>, u32, u32)>,
    },
    Report {
        name: Pick,
        uid: Pick,
        generation: i64,
        phase: Pick,
        reason: String,
        objects: Vec<(String, String, Vec<u8>)>,
        deleted: bool,
        padding: u16,
    },
    Ack(u64),
    Resync,
    Empty,
    /// Bytes that decode as an AgentMessage (anything else is dropped: the transport would
    /// refuse it before the hub sees it).
    Raw(Vec<u8>),
}

/// A choice among likely values, or anything.
#[derive(Arbitrary, Debug)]
enum Pick {
    A,
    B,
    C,
    Raw(String),
}

fn agent_message(msg: &Msg, stream_id: &str) -> Option<v1::AgentMessage> {
    let m = match msg {
        Msg::Hello {
            id,
            token,
            version,
            name,
            labels,
            cluster_type,
        } => In::Hello(v1::Hello {
            protocol_version: i32::from(*version % 3),
            cluster_id: match id {
                Pick::A | Pick::C => stream_id.to_owned(),
                Pick::B => ID_B.to_uppercase(),
                Pick::Raw(s) => s.clone(),
            },
            cluster_name: name.clone().unwrap_or_default(),
            cluster_labels: labels.iter().cloned().collect::<HashMap<_, _>>(),
            token: match token {
                Pick::A | Pick::C => GOOD_TOKEN.to_owned(),
                Pick::B => DENIED_TOKEN.to_owned(),
                Pick::Raw(s) => s.clone(),
            },
            agent_version: "fuzz".into(),
            cluster_type: match cluster_type {
                Pick::A => String::new(),
                Pick::B => "EdgeCluster".into(),
                Pick::C => "StandardCluster".into(),
                Pick::Raw(s) => s.clone(),
            },
        }),
        Msg::Heartbeat {
            k8s_version,
            allocatable,
            capacity,
            heartbeat_seconds,
            nodes,
            prune_hold,
        } => In::Heartbeat(v1::Heartbeat {
            k8s_version: k8s_version.clone(),
            platform: "linux/amd64".into(),
            agent_version: "fuzz".into(),
            node_statistics: nodes.map(|(r, n, u)| v1::NodeStatistics {
                ready_nodes: r,
                not_ready_nodes: n,
                unknown_nodes: u,
            }),
            capacity: capacity.iter().cloned().collect(),
            allocatable: allocatable.iter().cloned().collect(),
            healthz: true,
            livez: true,
            readyz: true,
            heartbeat_seconds: *heartbeat_seconds,
            prune_hold: prune_hold
                .as_ref()
                .map(|(id, descriptions, objects, max)| v1::PruneHold {
                    id: id.clone(),
                    descriptions: descriptions.clone(),
                    description_count: u32::try_from(descriptions.len()).unwrap_or(u32::MAX),
                    objects: *objects,
                    owned_objects: *objects / 2,
                    max_percent: *max,
                    earlier_registration_objects: 0,
                }),
        }),
        Msg::Report {
            name,
            uid,
            generation,
            phase,
            reason,
            objects,
            deleted,
            padding,
        } => {
            let name = match name {
                Pick::A => "web".to_owned(),
                Pick::B => "db".to_owned(),
                Pick::C => "api".to_owned(),
                Pick::Raw(s) => s.clone(),
            };
            In::Report(v1::DescriptionReport {
                uid: match uid {
                    Pick::A => format!("uid-{}-{name}", ns_of(stream_id)),
                    Pick::B => String::new(),
                    Pick::C => format!("uid-{}-{name}", ns_of(ID_B)),
                    Pick::Raw(s) => s.clone(),
                },
                name,
                observed_generation: *generation,
                phase: match phase {
                    Pick::A => "Success".into(),
                    Pick::B => "Failure".into(),
                    Pick::C => "Pending".into(),
                    Pick::Raw(s) => s.clone(),
                },
                reason: format!("{reason}{}", "r".repeat(usize::from(*padding % 8192))),
                objects: objects
                    .iter()
                    .map(|(kind, name, status)| v1::ObjectStatus {
                        api_version: "v1".into(),
                        kind: kind.clone(),
                        namespace: "default".into(),
                        name: name.clone(),
                        status: status.clone(),
                        error: String::new(),
                    })
                    .collect(),
                releases: Vec::new(),
                deleted: *deleted,
            })
        }
        Msg::Ack(seq) => In::Ack(v1::Ack { seq: *seq }),
        Msg::Resync => In::Resync(v1::ResyncRequest {}),
        Msg::Empty => return Some(v1::AgentMessage::default()),
        Msg::Raw(bytes) => return v1::AgentMessage::decode(bytes.as_slice()).ok(),
    };
    Some(v1::AgentMessage::from(m))
}

/// One agent stream: its sending side and, once the handshake answered, the hub's replies.
struct Agent {
    /// The last number sent in order on this stream.
    sent: u64,
    tx: Option<mpsc::Sender<v1::AgentMessage>>,
    opened: Option<Result<tonic::Streaming<v1::HubMessage>, tonic::Status>>,
}

fn allowed(code: Code) -> bool {
    matches!(
        code,
        Code::Ok
            | Code::InvalidArgument
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::ResourceExhausted
            | Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Aborted
    )
}

async fn run(hub: &Hub, input: &Input) {
    let mut agents: [Agent; 2] = [
        Agent {
            sent: 0,
            tx: None,
            opened: None,
        },
        Agent {
            sent: 0,
            tx: None,
            opened: None,
        },
    ];
    for step in input.steps.iter().take(64) {
        let i = usize::from(step.second);
        let stream_id = [ID_A, ID_B][i];
        let Some(mut msg) = agent_message(&step.msg, stream_id) else {
            continue;
        };
        let agent = &mut agents[i];
        msg.seq = match step.seq {
            Numbering::Unnumbered => 0,
            Numbering::Next => {
                agent.sent += 1;
                agent.sent
            }
            Numbering::Raw(seq) => u64::from(seq),
        };
        if agent.opened.is_none() {
            let (tx, rx) = mpsc::channel(128);
            let _ = tx.send(msg).await;
            let mut client = HubClient::new(hub.channel.clone());
            let opened = tokio::time::timeout(
                Duration::from_secs(10),
                client.sync(ReceiverStream::new(rx)),
            )
            .await
            .unwrap_or_else(|_| panic!("the handshake did not answer"));
            agent.opened = Some(opened.map(tonic::Response::into_inner));
            agent.tx = Some(tx);
        } else if let Some(tx) = &agent.tx {
            let _ = tx.send(msg).await;
        }
    }
    for agent in &mut agents {
        agent.tx = None; // the agent closes its side
        match agent.opened.take() {
            None => {}
            Some(Err(status)) => {
                assert!(allowed(status.code()), "handshake ended with {status:?}");
            }
            Some(Ok(mut replies)) => loop {
                let next = tokio::time::timeout(Duration::from_secs(10), replies.message())
                    .await
                    .unwrap_or_else(|_| panic!("the hub did not end a stream the agent closed"));
                match next {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(status) => {
                        assert!(allowed(status.code()), "stream ended with {status:?}");
                        break;
                    }
                }
            },
        }
    }
}

fuzz_target!(|input: Input| {
    let hub = hub();
    hub.fake.written.lock().clear();
    hub.rt.block_on(run(hub, &input));
    for w in hub.fake.written.lock().iter() {
        assert_eq!(
            w.entry.namespace, w.session.namespace,
            "a report was written on another cluster's Description: {w:?}"
        );
        assert!(
            w.report_uid.is_empty() || w.report_uid == w.entry.uid,
            "a report of another incarnation was written: {w:?}"
        );
    }
});
