//! A message fault proxy: a gRPC `Hub` service in front of the hub that relays each agent's
//! `Sync` stream message by message, and repeats, swaps or drops messages as a seeded
//! [`MessageSchedule`] says.
//!
//! The byte proxy ([`super::proxy`]) cannot do this: a repeated or reordered byte range inside
//! HTTP/2 is a corrupt stream, which the peer refuses at once. Here each message is decoded,
//! so the faults are the ones a broken peer or intermediary could make: the same message twice
//! ([`MessageFault::Repeat`]), one message overtaken by the next ([`MessageFault::Swap`]), or
//! a message lost while the stream goes on ([`MessageFault::Drop`]). The hub and the agent
//! number their messages (`seq` in `hub.proto`); the receiver drops a repeat and ends the stream
//! at a gap (for the hub's last messages, at the `Progress` that answers a heartbeat), and the
//! run's invariants check that nothing is rolled back or left behind.
//!
//! It speaks plaintext HTTP/2 on both sides, as the chaos fleet's hub does.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use atoll_proto::v1::{self, hub_client::HubClient, hub_server};
use futures::{Stream, StreamExt};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::proxy::{ProxyTasks, bind, loaded, timed_steps};
use crate::Error;

/// Which way a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From an agent to the hub.
    ToHub,
    /// From the hub to an agent.
    ToAgent,
}

/// What happens to the messages going one way while a step lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageFault {
    /// Each message is sent twice.
    Repeat,
    /// Each message is held until the next one has gone (or [`SWAP_WAIT`] passed).
    Swap,
    /// Each message is lost; the stream goes on.
    Drop,
}

/// How long a swapped message waits for one to overtake it: a request waiting for its answer
/// (the Hello) would otherwise wait for the step's end.
pub const SWAP_WAIT: Duration = Duration::from_millis(500);

/// One step of a message schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageStep {
    /// When it starts, from the start of the schedule.
    pub at: Duration,
    /// How long it lasts.
    pub lasting: Duration,
    /// The messages it affects.
    pub direction: Direction,
    /// What it does to them.
    pub fault: MessageFault,
}

impl MessageStep {
    /// A short name, for counting steps by kind (`repeat to-agent`, ...).
    pub fn kind(&self) -> &'static str {
        match (self.fault, self.direction) {
            (MessageFault::Repeat, Direction::ToHub) => "repeat to-hub",
            (MessageFault::Repeat, Direction::ToAgent) => "repeat to-agent",
            (MessageFault::Swap, Direction::ToHub) => "swap to-hub",
            (MessageFault::Swap, Direction::ToAgent) => "swap to-agent",
            (MessageFault::Drop, Direction::ToHub) => "drop to-hub",
            (MessageFault::Drop, Direction::ToAgent) => "drop to-agent",
        }
    }
}

/// Message faults over time, drawn from a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageSchedule {
    /// The steps, in time order, never overlapping.
    pub steps: Vec<MessageStep>,
}

impl MessageSchedule {
    /// A schedule of `span` from a caller's generator: quiet gaps of 1-5 s between steps of
    /// 1-4 s (a stream carries a message a second or so, heartbeats mostly, so a step must last
    /// to meet some), each kind and direction equally likely.
    pub fn generate_with(rng: &mut StdRng, span: Duration) -> MessageSchedule {
        let draw = |rng: &mut StdRng| {
            let direction = if rng.random_bool(0.5) {
                Direction::ToHub
            } else {
                Direction::ToAgent
            };
            let fault = match rng.random_range(0..3) {
                0 => MessageFault::Repeat,
                1 => MessageFault::Swap,
                _ => MessageFault::Drop,
            };
            (direction, fault)
        };
        let steps = timed_steps(rng, span, 1000..4000, 1000..4000, 1000..5000, draw)
            .into_iter()
            .map(|(at, lasting, (direction, fault))| MessageStep {
                at,
                lasting,
                direction,
                fault,
            })
            .collect();
        MessageSchedule { steps }
    }
}

/// What the proxy has done, for the run's report.
#[derive(Debug, Default)]
pub struct MessageCounters {
    /// Agent streams relayed.
    pub streams: AtomicU64,
    /// Messages relayed (each once, however often it was sent).
    pub messages: AtomicU64,
    /// Messages sent twice.
    pub repeated: AtomicU64,
    /// Messages overtaken by the next one.
    pub swapped: AtomicU64,
    /// Messages lost.
    pub dropped: AtomicU64,
}

impl MessageCounters {
    /// Each counter with its name in the run's report.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        loaded(&[
            ("streams", &self.streams),
            ("messages", &self.messages),
            ("repeated", &self.repeated),
            ("swapped", &self.swapped),
            ("dropped", &self.dropped),
        ])
    }
}

/// The fault in force: none, or one for one direction.
type Mode = Option<(Direction, MessageFault)>;

struct Shared {
    upstream: String,
    mode: watch::Sender<Mode>,
    counters: MessageCounters,
}

/// A running message proxy; dropping it stops serving (open streams end).
pub struct MessageProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: ProxyTasks,
}

impl MessageProxy {
    /// Serves on `127.0.0.1:<free port>`, relaying every stream to the hub at `upstream`
    /// (`http://host:port`), passing everything until a schedule is played.
    pub async fn start(upstream: String) -> Result<MessageProxy, Error> {
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let shared = Arc::new(Shared {
            upstream,
            mode: watch::channel(None).0,
            counters: MessageCounters::default(),
        });
        let service = hub_server::HubServer::new(Relay(shared.clone()))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let server = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                eprintln!("chaos: the message proxy stopped: {e}");
            }
        });
        Ok(MessageProxy {
            addr,
            shared,
            tasks: ProxyTasks::new(server),
        })
    }

    /// Where agents connect (`http://` it).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has done so far.
    pub fn counters(&self) -> &MessageCounters {
        &self.shared.counters
    }

    /// Back to passing everything, now (also ends a schedule being played).
    pub fn heal(&mut self) {
        self.tasks.stop_playing();
        self.shared.mode.send_replace(None);
    }

    /// Plays `schedule` from now on, in the background (replacing one being played).
    pub fn play(&mut self, schedule: MessageSchedule) {
        self.heal();
        let shared = self.shared.clone();
        let steps = schedule
            .steps
            .iter()
            .map(|s| (s.at, s.lasting, (s.direction, s.fault)))
            .collect();
        self.tasks.play_steps(steps, move |mode| {
            shared.mode.send_replace(mode);
        });
    }
}

/// The `Hub` service of the proxy.
struct Relay(Arc<Shared>);

type Replies = Pin<Box<dyn Stream<Item = Result<v1::HubMessage, Status>> + Send>>;

#[tonic::async_trait]
impl hub_server::Hub for Relay {
    type SyncStream = Replies;

    async fn sync(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Replies>, Status> {
        let shared = self.0.clone();
        shared.counters.streams.fetch_add(1, Ordering::Relaxed);
        let channel = tonic::transport::Endpoint::from_shared(shared.upstream.clone())
            .map_err(|e| Status::internal(format!("the hub's address: {e}")))?
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("the proxy cannot reach the hub: {e}")))?;
        let mut hub = HubClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        // To the hub: what the agent sends, until it ends its side or fails.
        let (to_hub, from_agent) = mpsc::channel::<Result<v1::AgentMessage, Status>>(64);
        tokio::spawn(relay(
            request.into_inner(),
            to_hub,
            Direction::ToHub,
            shared.clone(),
        ));
        let outbound = tokio_stream::wrappers::ReceiverStream::new(from_agent)
            .take_while(|m| std::future::ready(m.is_ok()))
            .filter_map(|m| std::future::ready(m.ok()));
        // The hub reads the Hello before it answers: the relay above has sent it on.
        let replies = hub.sync(outbound).await?.into_inner();
        let (to_agent, from_hub) = mpsc::channel::<Result<v1::HubMessage, Status>>(64);
        tokio::spawn(relay(replies, to_agent, Direction::ToAgent, shared));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(from_hub),
        )))
    }
}

/// Relays `from` into `to` under the faults of `direction`; a failure of `from` is passed on
/// and ends the relay, as does `to` closing.
async fn relay<T: Clone>(
    mut from: impl Stream<Item = Result<T, Status>> + Unpin,
    to: mpsc::Sender<Result<T, Status>>,
    direction: Direction,
    shared: Arc<Shared>,
) {
    let counters = &shared.counters;
    // A swapped message, waiting for the next one to overtake it, and until when it waits.
    let mut held: Option<T> = None;
    let mut until = tokio::time::Instant::now();
    loop {
        let next = tokio::select! {
            next = from.next() => next,
            () = tokio::time::sleep_until(until), if held.is_some() => {
                if let Some(message) = held.take()
                    && to.send(Ok(message)).await.is_err()
                {
                    return;
                }
                continue;
            }
        };
        let message = match next {
            Some(Ok(message)) => message,
            end => {
                if let Some(message) = held.take() {
                    let _ = to.send(Ok(message)).await;
                }
                if let Some(Err(status)) = end {
                    let _ = to.send(Err(status)).await;
                }
                return;
            }
        };
        counters.messages.fetch_add(1, Ordering::Relaxed);
        let fault = match *shared.mode.borrow() {
            Some((d, fault)) if d == direction => Some(fault),
            _ => None,
        };
        let mut out = Vec::with_capacity(2);
        match fault {
            Some(MessageFault::Repeat) => {
                counters.repeated.fetch_add(1, Ordering::Relaxed);
                out.push(message.clone());
                out.push(message);
            }
            Some(MessageFault::Swap) if held.is_none() => {
                counters.swapped.fetch_add(1, Ordering::Relaxed);
                held = Some(message);
                until = tokio::time::Instant::now() + SWAP_WAIT;
            }
            Some(MessageFault::Drop) => {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
            _ => out.push(message),
        }
        // The held message goes after the one that overtook it.
        if !out.is_empty()
            && let Some(message) = held.take()
        {
            out.push(message);
        }
        for message in out {
            if to.send(Ok(message)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repeat sends twice; Swap lets the next message overtake; a held message with nothing
    /// after it goes out after [`SWAP_WAIT`] or when the stream ends; Drop sends nothing.
    #[tokio::test]
    async fn relay_repeats_and_swaps_while_its_direction_is_faulted() {
        // (fault in force for ToAgent, messages in, messages out)
        let cases: Vec<(Mode, Vec<u32>, Vec<u32>)> = vec![
            (None, vec![1, 2, 3], vec![1, 2, 3]),
            (
                Some((Direction::ToAgent, MessageFault::Repeat)),
                vec![1, 2],
                vec![1, 1, 2, 2],
            ),
            (
                Some((Direction::ToAgent, MessageFault::Swap)),
                vec![1, 2, 3, 4, 5],
                vec![2, 1, 4, 3, 5],
            ),
            (
                Some((Direction::ToAgent, MessageFault::Drop)),
                vec![1, 2, 3],
                vec![],
            ),
            // Another direction's fault changes nothing here.
            (
                Some((Direction::ToHub, MessageFault::Repeat)),
                vec![1, 2],
                vec![1, 2],
            ),
        ];
        for (mode, input, want) in cases {
            let shared = Arc::new(Shared {
                upstream: String::new(),
                mode: watch::channel(mode).0,
                counters: MessageCounters::default(),
            });
            let (tx, mut rx) = mpsc::channel(16);
            let from = futures::stream::iter(input.clone().into_iter().map(Ok));
            relay(from, tx, Direction::ToAgent, shared).await;
            let mut got = Vec::new();
            while let Some(Ok(m)) = rx.recv().await {
                got.push(m);
            }
            assert_eq!(got, want, "{mode:?} {input:?}");
        }
    }
}
