//! The gRPC service: the `Sync` stream of each agent. The handshake, the fan-out loop with its
//! window, and the authorisation of every report live here; what is written to the parent API
//! server is behind [`Backend`], so that the service is tested over an in-memory transport with
//! a fake backend.

use crate::Error;
use crate::domain::{AgentHello, ClusterHeartbeat, Session, report_from_wire};
use crate::flow::{EpochTable, PendingQueue, ReportDecision, Window, authorise_report};
use crate::index::{Change, DescEntry, Index, Next, StreamQueue};
use crate::metrics::Metrics;
use crate::pull_secrets::{CredentialChecks, Delivery, add_pull_credentials};
use crate::streams::{CloseSignal, OpenStreams};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_message::Message as Out;
use atoll_proto::{InSequence, Sequence};
use futures::StreamExt;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

pub use crate::parent::Backend;

/// Stream settings.
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    /// Heartbeat period asked of agents, seconds.
    pub heartbeat_seconds: u32,
    /// Unacknowledged Description messages per stream.
    pub window: u32,
    /// A stream that sends no Hello within this long is closed (`DEADLINE_EXCEEDED`).
    pub hello_timeout: Duration,
    /// Streams between their start and the end of their handshake (Hello, token check,
    /// registration) at once; more are refused at once with `RESOURCE_EXHAUSTED`, so that a
    /// flood of unauthenticated streams cannot queue up work or memory.
    pub max_handshakes: usize,
    /// A report larger than this (encoded) is dropped with a logged reason, and the stream goes
    /// on; only a message over the gRPC size limit ends it.
    pub max_report_bytes: usize,
    /// First wait before a Description is sent again after some chart's `chartPullSecret`
    /// could not be read (so that a Secret created or granted later is picked up); it doubles
    /// with each try, up to [`crate::pull_secrets::RETRY_MAX`].
    pub credentials_retry: Duration,
    /// How often the chart pull Secrets of a delivered Description are read again, so that a
    /// rotated Secret reaches the cluster without an edit.
    pub credentials_recheck: Duration,
    /// First wait before a report whose write failed for a passing reason (see
    /// [`crate::Error::is_transient`]) is written again; it doubles with each failure in a row on
    /// the stream, up to [`REPORT_RETRY_MAX`]. Agents send a report once per change, so the
    /// hub is what retries it.
    pub report_retry: Duration,
}

/// The longest wait before a failed report write is tried again (the default heartbeat period):
/// once the parent is back, each stream's report writes resume within it.
pub const REPORT_RETRY_MAX: Duration = Duration::from_secs(10);

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            heartbeat_seconds: 10,
            window: 16,
            hello_timeout: Duration::from_secs(10),
            max_handshakes: 256,
            max_report_bytes: 1024 * 1024,
            credentials_retry: Duration::from_secs(10),
            credentials_recheck: Duration::from_secs(300),
            report_retry: Duration::from_secs(1),
        }
    }
}

/// The `Hub` gRPC service.
pub struct HubService<B> {
    backend: Arc<B>,
    index: Arc<Index>,
    epochs: Arc<EpochTable>,
    config: StreamConfig,
    metrics: Arc<Metrics>,
    handshakes: Arc<tokio::sync::Semaphore>,
    streams: Arc<OpenStreams>,
}

impl<B> Clone for HubService<B> {
    fn clone(&self) -> Self {
        HubService {
            backend: self.backend.clone(),
            index: self.index.clone(),
            epochs: self.epochs.clone(),
            config: self.config,
            metrics: self.metrics.clone(),
            handshakes: self.handshakes.clone(),
            streams: self.streams.clone(),
        }
    }
}

impl<B: Backend> HubService<B> {
    /// A service fanning out from `index` and writing through `backend`.
    pub fn new(
        backend: Arc<B>,
        index: Arc<Index>,
        config: StreamConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        HubService {
            backend,
            index,
            epochs: Arc::new(EpochTable::default()),
            handshakes: Arc::new(tokio::sync::Semaphore::new(config.max_handshakes.max(1))),
            config,
            metrics,
            streams: Arc::new(OpenStreams::default()),
        }
    }

    /// The same service, registering its streams in `streams` (shared with the watches that
    /// close them when their credentials are revoked).
    pub fn with_open_streams(mut self, streams: Arc<OpenStreams>) -> Self {
        self.streams = streams;
        self
    }

    /// The epoch table (newest stream per cluster).
    pub fn epochs(&self) -> Arc<EpochTable> {
        self.epochs.clone()
    }
}

/// The gRPC status an error ends a stream with. Messages never contain tokens.
pub fn status_of(e: &Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::Authenticate { .. } => Status::unauthenticated(msg),
        Error::RegistrationDenied { .. } | Error::AuthoriseReport { .. } => {
            Status::permission_denied(msg)
        }
        Error::AwaitApproval { full: true, .. } => Status::resource_exhausted(msg),
        Error::AwaitApproval { full: false, .. } => Status::unavailable(msg),
        Error::CheckProtocolVersion { .. } => Status::failed_precondition(msg),
        Error::ParseHello { .. } => Status::invalid_argument(msg),
        Error::CallApiServer { .. } | Error::WriteParentObject { .. } | Error::Runtime(_) => {
            Status::unavailable(msg)
        }
        _ => Status::internal(msg),
    }
}

/// Maps a receive error of the inbound stream to what the agent is told: an oversized message
/// is RESOURCE_EXHAUSTED, an undecodable one INVALID_ARGUMENT.
pub fn inbound_error(status: &Status) -> Status {
    let m = status.message();
    if m.contains("too large") || status.code() == Code::ResourceExhausted {
        Status::resource_exhausted(format!(
            "message over the hub's size limit: {m}; raise --max-message-bytes on the hub or \
             send less per message"
        ))
    } else if status.code() == Code::Internal || m.contains("decode") {
        Status::invalid_argument(format!("malformed message: {m}"))
    } else {
        status.clone()
    }
}

/// What a stream's task hands to its response stream. The message is boxed so that the
/// channel's preallocated block of slots (32 of them, whatever the capacity) costs 32 pointers
/// per stream instead of 32 inline `HubMessage`s (about 5 KiB per connected agent).
type Outgoing = Result<Box<v1::HubMessage>, Status>;
type Tx = mpsc::Sender<Outgoing>;

fn unbox(m: Outgoing) -> Result<v1::HubMessage, Status> {
    m.map(|b| *b)
}

/// The response stream of `Sync`.
pub type SyncStream =
    futures::stream::Map<ReceiverStream<Outgoing>, fn(Outgoing) -> Result<v1::HubMessage, Status>>;

#[tonic::async_trait]
impl<B: Backend> v1::hub_server::Hub for HubService<B> {
    type SyncStream = SyncStream;

    async fn sync(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SyncStream>, Status> {
        // Held until the handshake is over: its own pool, so that streams that never
        // authenticate cannot starve those that do, nor grow without bound.
        let handshake = self.handshakes.clone().try_acquire_owned().map_err(|_| {
            self.metrics.handshake_refused("handshakes_full");
            Status::resource_exhausted(
                "too many agent handshakes in progress on this hub; retry with backoff",
            )
        })?;
        let peer = request.remote_addr().map(|a| a.to_string());
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(self.config.hello_timeout, inbound.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => return Err(Status::invalid_argument("the stream ended before Hello")),
            Ok(Err(e)) => return Err(inbound_error(&e)),
            Err(_) => {
                self.metrics.handshake_refused("hello_timeout");
                return Err(Status::deadline_exceeded(format!(
                    "no Hello within {:?} of the stream's start",
                    self.config.hello_timeout
                )));
            }
        };
        let inbound_sequence = Sequence::starting_with(first.seq)
            .inspect_err(|_| self.metrics.out_of_sequence("gap"))?;
        let hello = match first.message {
            Some(In::Hello(h)) => h,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of a stream must be Hello",
                ));
            }
        };
        let mut hello = AgentHello::from_proto(hello).map_err(|e| {
            self.metrics.handshake_failed(&e);
            tracing::info!(error = %e, "refused a Hello");
            status_of(&e)
        })?;
        hello.peer = peer;
        let admission = self.backend.admit(&hello).await.map_err(|e| {
            self.metrics.handshake_failed(&e);
            tracing::warn!(cluster_id = %hello.cluster_id, error = %e, "refused an agent");
            status_of(&e)
        })?;
        let epoch = self
            .backend
            .claim_epoch(&hello.cluster_id, &admission)
            .await
            .map_err(|e| {
                self.metrics.handshake_failed(&e);
                tracing::warn!(cluster_id = %hello.cluster_id, error = %e, "recording a new stream's epoch failed");
                status_of(&e)
            })?;
        drop(handshake);
        let session = Session {
            cluster_id: hello.cluster_id.clone(),
            namespace: admission.namespace.clone(),
            managed_cluster_name: admission.managed_cluster_name.clone(),
            epoch,
        };
        self.epochs.begin(&session.cluster_id, epoch);
        // Only the newest stream of a cluster stays open; older ones on this replica end here.
        let close = self.streams.open(&session, admission.credentials.clone());
        let renew_at = admission.credentials.renew_at;
        let capacity = usize::try_from(self.config.window)
            .unwrap_or(16)
            .saturating_add(4);
        let (tx, rx) = mpsc::channel(capacity);
        let welcome = Box::new(v1::HubMessage {
            message: Some(Out::Welcome(v1::Welcome {
                namespace: admission.namespace.clone(),
                managed_cluster_name: admission.managed_cluster_name.clone(),
                epoch,
                cluster_token: admission.cluster_token.map(|t| t.0).unwrap_or_default(),
                heartbeat_seconds: self.config.heartbeat_seconds,
                window: self.config.window,
            })),
        });
        if tx.try_send(Ok(welcome)).is_err() {
            return Err(Status::internal("could not queue Welcome"));
        }
        tracing::info!(cluster_id = %session.cluster_id, namespace = %session.namespace, epoch, "agent connected");
        self.backend.connected(&session).await;
        let this = self.clone();
        tokio::spawn(async move {
            this.run(session, inbound, inbound_sequence, tx, close, renew_at)
                .await
        });
        let unbox: fn(Outgoing) -> Result<v1::HubMessage, Status> = unbox;
        Ok(Response::new(ReceiverStream::new(rx).map(unbox)))
    }
}

impl<B: Backend> HubService<B> {
    async fn run(
        self,
        session: Session,
        mut inbound: Streaming<v1::AgentMessage>,
        inbound_sequence: Option<Sequence>,
        tx: Tx,
        close: CloseSignal,
        renew_at: Option<k8s_openapi::jiff::Timestamp>,
    ) {
        self.metrics.streams.inc();
        self.index.wait_synced().await;
        let queue = self.index.subscribe(&session.namespace, session.epoch);
        let prune_confirmation = self
            .streams
            .follow_prune_confirmation(&session, self.backend.confirmed_prune(&session));
        let mut state = StreamState {
            window: Window::new(self.config.window),
            seq: 0,
            inbound: inbound_sequence,
            sent: HashSet::new(),
            reports: PendingQueue::default(),
            report_failures: 0,
            heartbeat: None,
            credentials: CredentialChecks::new(
                self.config.credentials_retry,
                self.config.credentials_recheck,
            ),
            resync: crate::resync::ResyncGate::default(),
        };
        let ends = StreamEnds {
            close,
            renewal: Box::pin(renewal(renew_at)),
            prune_confirmation,
        };
        let end = self
            .pump(&session, &mut inbound, &tx, &queue, &mut state, ends)
            .await;
        if let Err(status) = end {
            let _ = tx.send(Err(status)).await;
        }
        self.streams.end(&session);
        self.index.unsubscribe(&session.namespace, &queue);
        self.metrics.streams.dec();
        tracing::info!(cluster_id = %session.cluster_id, epoch = session.epoch, "agent stream ended");
        if self.epochs.is_current(&session.cluster_id, session.epoch) {
            Box::pin(self.backend.disconnected(&session)).await;
        }
    }

    async fn pump(
        &self,
        session: &Session,
        inbound: &mut Streaming<v1::AgentMessage>,
        tx: &Tx,
        queue: &Arc<StreamQueue>,
        st: &mut StreamState,
        mut ends: StreamEnds,
    ) -> Result<(), Status> {
        // The report being written, if any. Reports are read on as they arrive and written one
        // at a time from `st.reports`, so that a heartbeat never waits behind a backlog of
        // reports, and a Description's reports superseded while queued cost no write. A write
        // that failed for a passing reason hands its report back to be queued again.
        let mut writing: Option<ReportWrite<'_>> = None;
        // The heartbeat being written, if any, the same way: while the parent is slow, the
        // stream goes on delivering Descriptions and reading messages, and only the newest
        // heartbeat waiting is written next.
        let mut beating: Option<HeartbeatWrite<'_>> = None;
        loop {
            if writing.is_none()
                && let Some((_, report)) = st.reports.pop()
            {
                let retry_in = report_retry_delay(self.config.report_retry, st.report_failures);
                writing = Some(Box::pin(self.write_report(session, report, retry_in)));
            }
            if beating.is_none()
                && let Some(heartbeat) = st.heartbeat.take()
            {
                beating = Some(Box::pin(self.write_heartbeat(session, heartbeat)));
            }
            while st.window.can_send() {
                let Some(next) = queue.next() else { break };
                st.seq += 1;
                let seq = st.seq;
                let msg = match next {
                    Next::SnapshotComplete => Out::SnapshotComplete(v1::SnapshotComplete {
                        seq,
                        confirmed_prune: self.backend.confirmed_prune(session),
                    }),
                    Next::Change(name, Change::Upsert(e)) => {
                        st.window.sent(seq);
                        let mut message = upsert(seq, &e);
                        let delivery = if e.deleting {
                            Delivery::NoSecrets
                        } else {
                            add_pull_credentials(self.backend.as_ref(), &e, &mut message).await
                        };
                        st.credentials
                            .record(&name, delivery, tokio::time::Instant::now());
                        st.sent.insert(name);
                        Out::Upsert(message)
                    }
                    Next::Change(name, Change::Withheld(e)) => {
                        st.window.sent(seq);
                        st.sent.insert(name.clone());
                        Out::Withheld(v1::DescriptionWithheld {
                            seq,
                            name: name.to_string(),
                            uid: e.uid.clone(),
                            reason: e.rejected.clone().unwrap_or_default(),
                        })
                    }
                    Next::Change(name, Change::Removed { uid }) => {
                        st.window.sent(seq);
                        Out::Removed(v1::DescriptionRemoved {
                            seq,
                            name: name.to_string(),
                            uid,
                        })
                    }
                };
                self.metrics.messages_sent.inc();
                tracing::trace!(namespace = %session.namespace, seq, "sending a message");
                if tx
                    .send(Ok(Box::new(v1::HubMessage { message: Some(msg) })))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            let credentials_due = st.credentials.next_due();
            let resync_due = st.resync.due();
            tokio::select! {
                () = or_pending(credentials_due.map(tokio::time::sleep_until)) => {
                    self.check_credentials(session, queue, st).await;
                }
                () = or_pending(resync_due.map(tokio::time::sleep_until)) => {
                    st.resync.sent(tokio::time::Instant::now());
                    self.index.resync(&session.namespace, queue);
                }
                m = inbound.message() => match m {
                    Ok(Some(m)) => self.handle(session, m, tx, queue, st).await?,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(inbound_error(&e)),
                },
                () = queue.notified() => {}
                failed = or_pending(writing.as_mut()), if writing.is_some() => {
                    writing = None;
                    match failed {
                        Some(report) => {
                            st.report_failures = st.report_failures.saturating_add(1);
                            let name = Arc::from(report.name.as_str());
                            if st.reports.push_if_absent(name, report) {
                                self.metrics.report("retried");
                            } else {
                                self.metrics.report("superseded");
                            }
                        }
                        None => st.report_failures = 0,
                    }
                }
                () = or_pending(beating.as_mut()), if beating.is_some() => beating = None,
                () = ends.prune_confirmation.notified() => {
                    // The marker of a fresh snapshot carries the new confirmation.
                    self.index.resync(&session.namespace, queue);
                }
                () = tx.closed() => return Ok(()),
                status = &mut ends.close => {
                    return Err(status.unwrap_or_else(|_| Status::unavailable("the hub closed the stream")));
                }
                () = &mut ends.renewal => {
                    return Err(Status::unavailable(
                        "the cluster token is due for renewal; reconnect to get a new one",
                    ));
                }
            }
        }
    }

    /// Looks again at the pull Secrets of the Descriptions due: sends a Description again when
    /// its credentials could not be read last time, or now read differently (rotated).
    async fn check_credentials(
        &self,
        session: &Session,
        queue: &Arc<StreamQueue>,
        st: &mut StreamState,
    ) {
        let now = tokio::time::Instant::now();
        for (name, sent) in st.credentials.take_due(now) {
            let Some(e) = self.index.get(&session.namespace, &name) else {
                st.credentials.forget(&name);
                continue;
            };
            if let Some(fingerprint) = sent {
                let mut probe = upsert(0, &e);
                let now_read = add_pull_credentials(self.backend.as_ref(), &e, &mut probe).await;
                if now_read == Delivery::Complete(fingerprint) {
                    st.credentials.record(&name, now_read, now);
                    continue;
                }
                tracing::info!(description = %name, "a chart's pull Secret changed; sending the Description again");
            }
            self.index.redeliver(&session.namespace, &name, queue);
        }
    }

    async fn handle(
        &self,
        session: &Session,
        m: v1::AgentMessage,
        tx: &Tx,
        queue: &Arc<StreamQueue>,
        st: &mut StreamState,
    ) -> Result<(), Status> {
        if let Some(sequence) = st.inbound.as_mut() {
            match sequence.observe(m.seq) {
                InSequence::Next => {}
                InSequence::Repeat => {
                    self.metrics.out_of_sequence("repeat");
                    tracing::warn!(cluster_id = %session.cluster_id, seq = m.seq, "dropped a message the agent's stream had delivered already");
                    return Ok(());
                }
                InSequence::Gap { expected } => {
                    self.metrics.out_of_sequence("gap");
                    tracing::warn!(cluster_id = %session.cluster_id, seq = m.seq, expected, "the agent's stream lost or reordered a message; ending it");
                    return Err(atoll_proto::out_of_sequence(m.seq, expected));
                }
            }
        }
        match m.message {
            Some(In::Ack(a)) => {
                st.window.ack(a.seq);
            }
            Some(In::Resync(_)) => {
                if st.resync.ask(tokio::time::Instant::now()) {
                    self.index.resync(&session.namespace, queue);
                } else {
                    tracing::debug!(cluster_id = %session.cluster_id, "a resync asked for again within a second: answered by one snapshot when the second ends");
                }
            }
            Some(In::Heartbeat(h)) => {
                if !self.epochs.is_current(&session.cluster_id, session.epoch) {
                    self.metrics.report("older_stream");
                    return Ok(());
                }
                let (heartbeat, notes) =
                    ClusterHeartbeat::from(h).bounded(self.config.heartbeat_seconds);
                if !notes.is_empty() {
                    tracing::warn!(cluster_id = %session.cluster_id, changes = %notes.join("; "), "bounded what an agent's heartbeat says");
                }
                self.metrics.heartbeat("received");
                if st.heartbeat.replace(heartbeat).is_some() {
                    self.metrics.heartbeat("superseded");
                }
                // Something sent is not acknowledged: say how far the stream goes, so that an
                // agent that lost its last messages finds out (a slow apply just acks later).
                // Skipped when the stream's buffer is full: the agent has not read it all yet.
                if st.window.acked() < st.seq {
                    let progress = Out::Progress(v1::Progress { last_seq: st.seq });
                    let _ = tx.try_send(Ok(Box::new(v1::HubMessage {
                        message: Some(progress),
                    })));
                }
            }
            Some(In::Report(r)) => {
                let size = atoll_proto::Message::encoded_len(&r);
                if size > self.config.max_report_bytes {
                    self.metrics.report("oversized");
                    tracing::warn!(
                        cluster_id = %session.cluster_id,
                        description = %format!("{}/{}", session.namespace, r.name),
                        size,
                        limit = self.config.max_report_bytes,
                        "dropped a report over --max-report-bytes; the stream goes on (agents cap their reports; is this agent out of date?)"
                    );
                    return Ok(());
                }
                match self.authorise(session, &r, st.sent.contains(r.name.as_str())) {
                    (ReportDecision::Write, Some(_)) => {
                        if st.reports.push(Arc::from(r.name.as_str()), r) {
                            self.metrics.report("superseded");
                        }
                    }
                    (ReportDecision::Deny, _) => {
                        self.metrics.report("denied");
                        let e = Error::AuthoriseReport {
                            name: r.name,
                            namespace: session.namespace.clone(),
                        };
                        tracing::warn!(cluster_id = %session.cluster_id, error = %e, "refused a report");
                        return Err(status_of(&e));
                    }
                    (ReportDecision::IgnoreOlderStream, _) => self.metrics.report("older_stream"),
                    _ => self.metrics.report("stale"),
                }
            }
            Some(In::Hello(_)) => {
                return Err(Status::invalid_argument(
                    "Hello may only be the first message",
                ));
            }
            None => {}
        }
        Ok(())
    }

    /// The decision on report `r` from `session`'s stream, with the Description it is on.
    fn authorise(
        &self,
        session: &Session,
        r: &v1::DescriptionReport,
        sent_on_stream: bool,
    ) -> (ReportDecision, Option<Arc<DescEntry>>) {
        let entry = self.index.get(&session.namespace, &r.name);
        let decision = authorise_report(
            self.epochs.is_current(&session.cluster_id, session.epoch),
            entry.as_ref().map(|e| e.uid.as_str()),
            sent_on_stream,
            &r.uid,
        );
        (decision, entry)
    }

    /// Writes a heartbeat to the cluster's status; a failure is counted and logged, and the
    /// stream's next heartbeat is written as usual.
    async fn write_heartbeat(&self, session: &Session, heartbeat: ClusterHeartbeat) {
        match self.backend.heartbeat(session, heartbeat).await {
            Ok(()) => self.metrics.heartbeat("written"),
            Err(e) => {
                self.metrics.heartbeat("failed");
                self.metrics.error(&e);
                tracing::warn!(cluster_id = %session.cluster_id, error = %e, "writing a heartbeat failed");
            }
        }
    }

    /// Writes a queued report, authorised again against the Description as it is now (it may
    /// have been deleted or replaced, or the stream superseded, while the report waited). It
    /// was on a Description sent on this stream, so one gone since is stale, not denied. When
    /// the write fails for a passing reason, the report comes back after `retry_in`, to be
    /// queued again (the agent sends it only once).
    async fn write_report(
        &self,
        session: &Session,
        r: v1::DescriptionReport,
        retry_in: Duration,
    ) -> Option<v1::DescriptionReport> {
        match self.authorise(session, &r, true) {
            (ReportDecision::Write, Some(entry)) => {
                self.metrics.report("written");
                let Err(e) = self
                    .backend
                    .report(session, entry, report_from_wire(r.clone()))
                    .await
                else {
                    return None;
                };
                self.metrics.error(&e);
                if !e.is_transient() {
                    tracing::warn!(cluster_id = %session.cluster_id, error = %e, "writing a report failed; the agent's next report on this Description is written");
                    return None;
                }
                tracing::warn!(cluster_id = %session.cluster_id, error = %e, retry_in = ?retry_in, "writing a report failed; retrying");
                tokio::time::sleep(retry_in).await;
                Some(r)
            }
            (ReportDecision::IgnoreOlderStream, _) => {
                self.metrics.report("older_stream");
                None
            }
            _ => {
                self.metrics.report("stale");
                None
            }
        }
    }
}

/// A report being written: resolves to the report when its write failed for a passing reason
/// and is to be queued again.
type ReportWrite<'a> =
    std::pin::Pin<Box<dyn Future<Output = Option<v1::DescriptionReport>> + Send + 'a>>;

/// The wait before writing a report again after `failures` failed writes in a row before this
/// one: `first` doubled per failure, at most [`REPORT_RETRY_MAX`].
fn report_retry_delay(first: Duration, failures: u32) -> Duration {
    crate::flow::doubling_backoff(first, failures, REPORT_RETRY_MAX)
}

/// `future`'s output, or never when there is none: an optional branch of `select!`.
async fn or_pending<F: Future>(future: Option<F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// A heartbeat being written. Boxed, like the report writes: the stream's task lives as long
/// as the agent is connected, and an inline API call would make every idle task as big as the
/// largest write future (several KiB per connected agent).
type HeartbeatWrite<'a> = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What ends a stream besides the agent: a revocation, or the renewal time of its token.
struct StreamEnds {
    close: CloseSignal,
    renewal: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Not an end: the ManagedCluster's prune confirmation changed, send a fresh snapshot.
    prune_confirmation: Arc<tokio::sync::Notify>,
}

/// Resolves at `at` (never when `None`).
async fn renewal(at: Option<k8s_openapi::jiff::Timestamp>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let wait = at
        .duration_since(k8s_openapi::jiff::Timestamp::now())
        .try_into()
        .unwrap_or(Duration::ZERO);
    tokio::time::sleep(wait).await;
}

struct StreamState {
    window: Window,
    seq: u64,
    /// The agent's sequence numbers so far; `None` when its stream is not numbered.
    inbound: Option<Sequence>,
    sent: HashSet<Arc<str>>,
    /// Authorised reports not written yet, the latest of each Description.
    reports: PendingQueue<v1::DescriptionReport>,
    /// Report writes failed in a row (for a passing reason) on this stream.
    report_failures: u32,
    /// The newest heartbeat not written yet.
    heartbeat: Option<ClusterHeartbeat>,
    /// When to look at each Description's chart pull Secrets again.
    credentials: CredentialChecks,
    /// The agent's requests for the whole snapshot again.
    resync: crate::resync::ResyncGate,
}

fn upsert(seq: u64, e: &DescEntry) -> v1::DescriptionUpsert {
    v1::DescriptionUpsert {
        seq,
        name: e.name.clone(),
        uid: e.uid.clone(),
        resource_version: e.resource_version.clone(),
        generation: e.generation,
        objects: e.objects.iter().map(|b| b.to_vec()).collect(),
        charts: e
            .charts
            .iter()
            .map(|c| v1::Chart {
                chart: c.chart.to_vec(),
                values: c.values.to_vec(),
                credentials: None,
                credentials_error: String::new(),
            })
            .collect(),
        deleting: e.deleting,
        labels: e
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_retries_wait_twice_as_long_after_each_failure_up_to_the_cap() {
        let first = Duration::from_secs(1);
        let waits: Vec<u64> = (0..8)
            .map(|n| report_retry_delay(first, n).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10, 10, 10]);
        assert_eq!(report_retry_delay(first, u32::MAX), REPORT_RETRY_MAX);
    }
}
