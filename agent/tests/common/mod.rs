//! A minimal in-test gRPC Hub and helpers shared by the agent's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use atoll_proto::v1::{self, agent_message, hub_message, hub_server};
use atoll_testkit::BOOTSTRAP_TOKEN;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

pub const NS: &str = "clusternet-test1";

pub type Outbound = mpsc::Sender<Result<v1::HubMessage, Status>>;

/// A hub that registers any agent presenting [`BOOTSTRAP_TOKEN`], streams a fixed snapshot and
/// records everything it receives.
#[derive(Clone, Default)]
pub struct TestHub {
    pub descriptions: Arc<Mutex<BTreeMap<String, Vec<Value>>>>,
    pub tokens: Arc<Mutex<Vec<String>>>,
    pub minted: Arc<AtomicU64>,
    pub hellos: Arc<Mutex<Vec<v1::Hello>>>,
    pub received: Arc<Mutex<Vec<agent_message::Message>>>,
    pub current: Arc<Mutex<Vec<Outbound>>>,
    pub seq: Arc<AtomicU64>,
    pub epoch: Arc<AtomicU64>,
    /// Heartbeat period asked of agents; 0 means 1 s.
    pub heartbeat_seconds: Arc<AtomicU64>,
    /// The sequence numbers of each stream's messages (`AgentMessage.seq`), one list a stream.
    pub numbers: Arc<Mutex<Vec<Vec<u64>>>>,
}

pub fn upsert(
    seq: u64,
    name: &str,
    generation: i64,
    objects: &[Value],
    deleting: bool,
) -> v1::HubMessage {
    v1::HubMessage {
        message: Some(hub_message::Message::Upsert(v1::DescriptionUpsert {
            charts: Vec::new(),
            seq,
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
            generation,
            objects: objects
                .iter()
                .map(|o| serde_json::to_vec(o).unwrap())
                .collect(),
            deleting,
            labels: Default::default(),
        })),
    }
}

#[tonic::async_trait]
impl hub_server::Hub for TestHub {
    type SyncStream = ReceiverStream<Result<v1::HubMessage, Status>>;

    async fn sync(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SyncStream>, Status> {
        let mut inbound = request.into_inner();
        let Some(v1::AgentMessage {
            message: Some(agent_message::Message::Hello(hello)),
            seq,
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument(
                "the first message must be a Hello",
            ));
        };
        self.hellos.lock().unwrap().push(hello.clone());
        let cluster_token = if hello.token == BOOTSTRAP_TOKEN {
            let token = format!("ct-{}", self.minted.fetch_add(1, Ordering::SeqCst) + 1);
            self.tokens.lock().unwrap().push(token.clone());
            token
        } else if self.tokens.lock().unwrap().contains(&hello.token) {
            String::new()
        } else {
            return Err(Status::unauthenticated("unknown or revoked token"));
        };
        let (tx, rx) = mpsc::channel(64);
        let welcome = v1::Welcome {
            namespace: NS.into(),
            managed_cluster_name: hello.cluster_name.clone(),
            epoch: self.epoch.fetch_add(1, Ordering::SeqCst) + 1,
            cluster_token,
            heartbeat_seconds: u32::try_from(self.heartbeat_seconds.load(Ordering::SeqCst))
                .unwrap_or(1)
                .max(1),
            window: 16,
        };
        let mut messages = vec![v1::HubMessage {
            message: Some(hub_message::Message::Welcome(welcome)),
        }];
        // Each stream numbers its own messages from 1, as the hub does: with one counter
        // reset by every sync, agents connecting at once got each other's numbers, and one
        // whose SnapshotComplete carried a number it had seen dropped it as a repeat.
        // (`seq` is the Hello's number, recorded below.)
        let mut sent = 0;
        for (name, objects) in self.descriptions.lock().unwrap().iter() {
            sent += 1;
            messages.push(upsert(sent, name, 1, objects, false));
        }
        sent += 1;
        messages.push(v1::HubMessage {
            message: Some(hub_message::Message::SnapshotComplete(
                v1::SnapshotComplete {
                    seq: sent,
                    confirmed_prune: String::new(),
                },
            )),
        });
        // Later messages pushed by a test go on from the newest stream's snapshot.
        self.seq.store(sent, Ordering::SeqCst);
        for m in messages {
            tx.send(Ok(m)).await.unwrap();
        }
        self.current.lock().unwrap().push(tx);
        let received = self.received.clone();
        let numbers = self.numbers.clone();
        let stream = {
            let mut numbers = numbers.lock().unwrap();
            numbers.push(vec![seq]);
            numbers.len() - 1
        };
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                numbers.lock().unwrap()[stream].push(m.seq);
                if let Some(m) = m.message {
                    received.lock().unwrap().push(m);
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

impl TestHub {
    /// A hub whose snapshot holds one Description.
    pub fn with_description(name: &str, objects: Vec<Value>) -> TestHub {
        let hub = TestHub::default();
        hub.descriptions
            .lock()
            .unwrap()
            .insert(name.into(), objects);
        hub
    }

    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub async fn push(&self, message: v1::HubMessage) {
        let tx = self.current.lock().unwrap().last().cloned().unwrap();
        tx.send(Ok(message)).await.unwrap();
    }

    /// Ends the current stream from the hub side.
    pub fn drop_stream(&self) {
        self.current.lock().unwrap().clear();
    }

    pub fn acked(&self, seq: u64) -> bool {
        self.received
            .lock()
            .unwrap()
            .iter()
            .any(|m| matches!(m, agent_message::Message::Ack(a) if a.seq == seq))
    }

    pub fn reports(&self, name: &str) -> Vec<v1::DescriptionReport> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| match m {
                agent_message::Message::Report(r) if r.name == name => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn heartbeats(&self) -> Vec<v1::Heartbeat> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| match m {
                agent_message::Message::Heartbeat(h) => Some(h.clone()),
                _ => None,
            })
            .collect()
    }
}

pub async fn serve(hub: TestHub) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(hub_server::HubServer::new(hub))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

pub fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}
