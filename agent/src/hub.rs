//! The hub client: one [`Agent`] per child cluster. It dials the hub, says Hello, applies the
//! snapshot, prunes after `SnapshotComplete`, follows the deltas, acknowledges every message,
//! reports on every change and heartbeats. It reconnects with exponential backoff and jitter.
//!
//! Built so that many agents can share one process: no global state, no threads of its own (a
//! few tokio tasks per agent), and only the Descriptions' objects in memory.

use crate::child::{ChildCluster, KubeChild};
use crate::identity::Credentials;
use crate::{Error, VERSION};
use atoll_applier::heartbeat;
use atoll_applier::model::{
    ChartRelease, Description, Phase, PullAuth, PullCredentials, ReleaseReport, Report,
    parse_received,
};
use atoll_applier::prune::{self, PruneHold};
use atoll_applier::{Applier, Notice};
use atoll_proto::v1::{self, agent_message, hub_client::HubClient, hub_message};
use atoll_proto::{InSequence, Sequence};
use atoll_runtime::text::truncate;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// A session that lasted this long resets the reconnection backoff.
const STABLE_SESSION: Duration = Duration::from_secs(10);

/// Largest hub message the agent accepts.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// The default of [`AgentConfig::max_prune_percent`].
pub const DEFAULT_MAX_PRUNE_PERCENT: u32 = 50;

/// How the agent reaches the hub.
#[derive(Clone, Debug)]
pub enum Transport {
    /// TLS, verifying the hub against this CA bundle (PEM).
    Tls {
        /// The CA bundle.
        ca_pem: Vec<u8>,
    },
    /// Plaintext HTTP/2 (`--insecure`; local demos only).
    Plaintext,
}

/// Reconnection backoff.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before reconnection attempt `attempt` (0-based): `initial * 2^attempt`, capped
    /// at `max`, scaled by `jitter` in `[0.5, 1.0]` so that a fleet does not reconnect in step.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let base = self
            .initial
            .saturating_mul(2u32.saturating_pow(attempt.min(20)))
            .min(self.max);
        base.mul_f64(jitter.clamp(0.5, 1.0))
    }
}

/// Settings of one agent. `Debug` never shows the bootstrap token.
#[derive(Clone)]
pub struct AgentConfig {
    /// The hub's gRPC URL, `https://…` (or `http://…` with [`Transport::Plaintext`]).
    pub hub_url: String,
    /// How to reach it.
    pub transport: Transport,
    /// The bootstrap token, `<token-id>.<token-secret>`; used on first contact and when the hub
    /// no longer accepts the stored cluster token.
    pub bootstrap_token: String,
    /// The ManagedCluster name asked for.
    pub cluster_name: String,
    /// Labels for the ManagedCluster.
    pub cluster_labels: BTreeMap<String, String>,
    /// `StandardCluster` or `EdgeCluster`.
    pub cluster_type: String,
    /// Reconnection backoff.
    pub backoff: Backoff,
    /// Heartbeat period when the hub does not say.
    pub default_heartbeat: Duration,
    /// How often a Description whose apply failed is applied again.
    pub retry_failed: Duration,
    /// A prune after a snapshot that would delete more than this percent of the objects the
    /// agent owns waits for confirmation (100: never waits).
    pub max_prune_percent: u32,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("hub_url", &self.hub_url)
            .field("transport", &self.transport)
            .field("bootstrap_token", &"<redacted>")
            .field("cluster_name", &self.cluster_name)
            .field("cluster_labels", &self.cluster_labels)
            .field("cluster_type", &self.cluster_type)
            .field("backoff", &self.backoff)
            .field("default_heartbeat", &self.default_heartbeat)
            .field("retry_failed", &self.retry_failed)
            .field("max_prune_percent", &self.max_prune_percent)
            .finish()
    }
}

impl AgentConfig {
    /// Settings with defaults for everything but the hub, token and name.
    pub fn new(hub_url: &str, bootstrap_token: &str, cluster_name: &str) -> Self {
        Self {
            hub_url: hub_url.to_owned(),
            transport: Transport::Plaintext,
            bootstrap_token: bootstrap_token.to_owned(),
            cluster_name: cluster_name.to_owned(),
            cluster_labels: BTreeMap::new(),
            cluster_type: "StandardCluster".to_owned(),
            backoff: Backoff::default(),
            default_heartbeat: Duration::from_secs(30),
            retry_failed: Duration::from_secs(30),
            max_prune_percent: DEFAULT_MAX_PRUNE_PERCENT,
        }
    }

    /// The gRPC endpoint for these settings.
    pub fn endpoint(&self) -> Result<Endpoint, Error> {
        let endpoint = Endpoint::from_shared(self.hub_url.clone())
            .map_err(|source| Error::ParseHubUrl {
                url: self.hub_url.clone(),
                source,
            })?
            .connect_timeout(Duration::from_secs(10))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let https = self.hub_url.starts_with("https://");
        match (&self.transport, https) {
            (Transport::Tls { ca_pem }, true) if ca_pem.is_empty() => {
                Err(Error::HubEndpoint(format!(
                    "{} needs TLS; pass --ca-file with the hub's CA bundle",
                    self.hub_url
                )))
            }
            (Transport::Tls { ca_pem }, true) => endpoint
                .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem)))
                .map_err(Error::ConfigureHubTls),
            (Transport::Plaintext, false) => Ok(endpoint),
            (Transport::Tls { .. }, false) => Err(Error::HubEndpoint(format!(
                "{} is plaintext; use an https:// URL, or pass --insecure for a local demo",
                self.hub_url
            ))),
            (Transport::Plaintext, true) => Err(Error::HubEndpoint(format!(
                "{} needs TLS; pass --ca-file with the hub's CA bundle",
                self.hub_url
            ))),
        }
    }
}

/// What the agent's connection looks like, for health checks and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionState {
    /// A stream is established (Welcome received).
    pub connected: bool,
    /// The dedicated namespace from the last Welcome.
    pub namespace: String,
    /// The stream epoch from the last Welcome.
    pub epoch: u64,
    /// How many Welcomes were received so far.
    pub sessions: u64,
    /// How many times a SnapshotComplete was handled.
    pub snapshots: u64,
    /// The last error, if the last attempt failed.
    pub last_error: Option<String>,
    /// How many Description messages (upserts and removals, snapshot included) were received
    /// from the hub so far, over all sessions.
    pub descriptions_received: u64,
    /// The last Description message received, recorded when it arrives, before it is applied
    /// (so that delivery can be told apart from applying).
    pub last_received: Option<ReceivedDescription>,
    /// The prune after the last snapshot, when it is held back for confirmation (reported in
    /// heartbeats).
    pub prune_hold: Option<PruneHold>,
}

/// A Description message as received from the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedDescription {
    /// The Description's name.
    pub name: String,
    /// Its generation (0 for a removal).
    pub generation: i64,
    /// The hub said the Description is being deleted (`deleting`) or is gone (removal).
    pub deleting: bool,
    /// When it was received.
    pub at: std::time::Instant,
}

/// Which token to present next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenChoice {
    Stored,
    Bootstrap,
}

/// How a session ended.
enum SessionEnd {
    /// Shut down on request.
    Shutdown,
    /// The stream ended or failed after a Welcome (reconnect soon).
    Dropped(Option<tonic::Status>),
    /// Refused before a Welcome.
    Refused(tonic::Status),
}

/// One agent: its child cluster (by default a real one, [`KubeChild`]) and the hub connection
/// settings.
pub struct Agent<C: ChildCluster = KubeChild> {
    child: Arc<C>,
    config: AgentConfig,
    metrics: Arc<crate::metrics::Metrics>,
    notices: mpsc::UnboundedReceiver<Notice>,
    /// Keeps `notices` open for a child that sends none.
    _notices_open: mpsc::UnboundedSender<Notice>,
    state: watch::Sender<ConnectionState>,
    cluster_id: Option<String>,
    /// The last Hello presented the stored cluster token (not the bootstrap token).
    presented_stored: bool,
}

impl Agent<KubeChild> {
    /// An agent for the child cluster `child`. The applier's notices are routed to this agent,
    /// and its drift repair is started.
    pub fn new(child: kube::Client, config: AgentConfig, applier: Arc<Applier>) -> Self {
        let (tx, notices) = mpsc::unbounded_channel();
        let child = KubeChild::new(child, applier, tx.clone());
        Self::with_notices(child, config, tx, notices)
    }

    /// The applier.
    pub fn applier(&self) -> &Arc<Applier> {
        self.child.applier()
    }
}

impl<C: ChildCluster> Agent<C> {
    /// An agent for a child cluster of another kind (see [`crate::child`]).
    pub fn with_child(child: C, config: AgentConfig) -> Self {
        let (tx, notices) = mpsc::unbounded_channel();
        Self::with_notices(child, config, tx, notices)
    }

    fn with_notices(
        child: C,
        config: AgentConfig,
        tx: mpsc::UnboundedSender<Notice>,
        notices: mpsc::UnboundedReceiver<Notice>,
    ) -> Self {
        Self {
            child: Arc::new(child),
            config,
            metrics: Arc::default(),
            notices,
            _notices_open: tx,
            state: watch::channel(ConnectionState::default()).0,
            cluster_id: None,
            presented_stored: false,
        }
    }

    /// Counts its hub connection into these metrics (by default, unregistered ones).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Uses this cluster id instead of reading the kube-system namespace.
    pub fn with_cluster_id(mut self, cluster_id: &str) -> Self {
        self.cluster_id = Some(cluster_id.to_owned());
        self
    }

    /// Follows the connection state.
    pub fn subscribe(&self) -> watch::Receiver<ConnectionState> {
        self.state.subscribe()
    }

    /// Runs until `shutdown` completes: connects, syncs, and reconnects with backoff and jitter.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let channel = self.config.endpoint()?.connect_lazy();
        tokio::pin!(shutdown);
        let mut attempt: u32 = 0;
        let mut choice = TokenChoice::Stored;
        let mut fell_back = false;
        loop {
            let started = std::time::Instant::now();
            let outcome = tokio::select! {
                () = &mut shutdown => return Ok(()),
                outcome = self.session(channel.clone(), choice) => outcome,
            };
            let mut immediate = false;
            match outcome {
                Ok(SessionEnd::Shutdown) => return Ok(()),
                Ok(SessionEnd::Dropped(status)) => {
                    // A stream that lived a while resets the backoff; one dropped at once does
                    // not, so that a flapping hub is not hammered.
                    if started.elapsed() >= STABLE_SESSION {
                        attempt = 0;
                    }
                    fell_back = false;
                    choice = TokenChoice::Stored;
                    let reason = match status {
                        Some(s) => {
                            tracing::warn!(code = ?s.code(), message = %s.message(), "hub stream ended");
                            format!("stream ended: {:?}: {}", s.code(), s.message())
                        }
                        None => {
                            tracing::info!("hub closed the stream");
                            "stream closed by the hub".to_owned()
                        }
                    };
                    atoll_applier::metrics::count(&self.metrics.connect_failures, "dropped");
                    self.state.send_modify(|s| s.last_error = Some(reason));
                }
                Ok(SessionEnd::Refused(status)) => {
                    let message = status.message().to_owned();
                    atoll_applier::metrics::count(
                        &self.metrics.connect_failures,
                        &format!("{:?}", status.code()),
                    );
                    match status.code() {
                        Code::Unauthenticated if self.presented_stored && !fell_back => {
                            tracing::warn!(
                                "the hub refused the stored cluster token; registering again with the bootstrap token"
                            );
                            choice = TokenChoice::Bootstrap;
                            fell_back = true;
                            immediate = true;
                        }
                        Code::Unauthenticated => {
                            tracing::error!(%message, "the hub refused the token; check --bootstrap-token");
                        }
                        Code::PermissionDenied => {
                            tracing::error!("{}", Error::RegistrationDenied(message.clone()));
                        }
                        Code::FailedPrecondition => {
                            tracing::error!("{}", Error::ProtocolMismatch(message.clone()));
                        }
                        _ => {
                            tracing::warn!(code = ?status.code(), %message, "hub refused the stream")
                        }
                    }
                    self.state.send_modify(|s| {
                        s.connected = false;
                        s.last_error = Some(format!("{:?}: {message}", status.code()));
                    });
                }
                Err(e) => {
                    atoll_applier::metrics::count(&self.metrics.connect_failures, e.label());
                    tracing::warn!(error = %e, "hub session failed");
                    self.state.send_modify(|s| {
                        s.connected = false;
                        s.last_error = Some(e.to_string());
                    });
                }
            }
            self.state.send_modify(|s| s.connected = false);
            if !immediate {
                let jitter = rand::random_range(0.5..=1.0);
                let delay = self.config.backoff.delay(attempt, jitter);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    async fn session(
        &mut self,
        channel: Channel,
        choice: TokenChoice,
    ) -> Result<SessionEnd, Error> {
        let cluster_id = match &self.cluster_id {
            Some(id) => id.clone(),
            None => {
                let id = self.child.cluster_id().await?;
                self.cluster_id = Some(id.clone());
                id
            }
        };
        let stored = self.child.load_credentials().await?;
        let (token, using_stored) = match (&stored, choice) {
            (Some(creds), TokenChoice::Stored)
                if creds.cluster_id == cluster_id || creds.cluster_id.is_empty() =>
            {
                (creds.token.clone(), true)
            }
            _ => (self.config.bootstrap_token.clone(), false),
        };
        self.presented_stored = using_stored;
        let hello = v1::Hello {
            protocol_version: atoll_proto::PROTOCOL_VERSION as i32,
            cluster_id: cluster_id.clone(),
            cluster_name: self.config.cluster_name.clone(),
            cluster_labels: self.config.cluster_labels.clone().into_iter().collect(),
            token,
            agent_version: VERSION.to_owned(),
            cluster_type: self.config.cluster_type.clone(),
        };
        let (tx, rx) = mpsc::channel::<v1::AgentMessage>(256);
        let _ = tx.send(agent_message::Message::Hello(hello).into()).await;
        let mut client = HubClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        // Numbered as they enter the stream, whichever task sent them (the hub checks the
        // numbers: hub.proto, AgentMessage.seq).
        let mut sent = 0u64;
        let outbound = ReceiverStream::new(rx).map(move |mut message| {
            sent += 1;
            message.seq = sent;
            message
        });
        let mut inbound = match client.sync(outbound).await {
            Ok(response) => response.into_inner(),
            Err(status) => return Ok(SessionEnd::Refused(status)),
        };
        let welcome = match inbound.message().await {
            Ok(Some(v1::HubMessage {
                message: Some(hub_message::Message::Welcome(w)),
            })) => w,
            Ok(Some(_)) => {
                return Ok(SessionEnd::Refused(tonic::Status::invalid_argument(
                    "the hub sent something else than a Welcome first",
                )));
            }
            Ok(None) => {
                return Ok(SessionEnd::Refused(tonic::Status::unavailable(
                    "the hub closed the stream before its Welcome",
                )));
            }
            Err(status) => return Ok(SessionEnd::Refused(status)),
        };
        // Earlier registrations of this cluster with this hub: their Descriptions' objects are
        // taken over by this registration's namesakes and never pruned unasked.
        let previous = match &stored {
            Some(creds) => atoll_applier::scope::previous_namespaces(
                &creds.previous_namespaces,
                &creds.namespace,
                creds.hub_url == self.config.hub_url && creds.cluster_id == cluster_id,
                &welcome.namespace,
            ),
            None => Vec::new(),
        };
        let moved = stored
            .as_ref()
            .is_some_and(|c| c.namespace != welcome.namespace);
        if !welcome.cluster_token.is_empty() || !using_stored || moved {
            let token = if welcome.cluster_token.is_empty() {
                stored.as_ref().map(|c| c.token.clone()).unwrap_or_default()
            } else {
                welcome.cluster_token.clone()
            };
            if !token.is_empty() {
                let creds = Credentials {
                    token,
                    hub_url: self.config.hub_url.clone(),
                    namespace: welcome.namespace.clone(),
                    cluster_id: cluster_id.clone(),
                    previous_namespaces: previous.clone(),
                };
                self.child.store_credentials(&creds).await?;
                tracing::info!(namespace = %welcome.namespace, ?previous, secret = %self.child.credentials_location(), "stored the cluster token");
            }
        }
        self.child.set_scope(atoll_applier::scope::Scope::new(
            &welcome.namespace,
            previous,
        ));
        tracing::info!(namespace = %welcome.namespace, cluster = %welcome.managed_cluster_name, epoch = welcome.epoch, "connected to the hub");
        let metrics = self.metrics.clone();
        metrics.connected.set(1);
        metrics.sessions.inc();
        self.state.send_modify(|s| {
            s.connected = true;
            s.namespace = welcome.namespace.clone();
            s.epoch = welcome.epoch;
            s.sessions += 1;
            s.last_error = None;
        });
        let period = if welcome.heartbeat_seconds == 0 {
            self.config.default_heartbeat
        } else {
            Duration::from_secs(u64::from(welcome.heartbeat_seconds))
        };
        let current: Arc<Mutex<HashMap<String, (String, String)>>> = Arc::default();
        // Aborted however the session ends (also when its future is dropped at shutdown).
        let heartbeats = AbortOnDrop(tokio::spawn(heartbeat_loop(
            self.child.clone(),
            tx.clone(),
            self.state.subscribe(),
            period,
        )));
        let result = self
            .follow(&welcome.namespace, &mut inbound, &tx, &current)
            .await;
        drop(heartbeats);
        metrics.connected.set(0);
        result
    }

    /// Records a Description message in the connection state.
    fn received(&self, name: &str, generation: i64, deleting: bool) {
        self.state.send_modify(|s| {
            s.descriptions_received += 1;
            s.last_received = Some(ReceivedDescription {
                name: name.to_owned(),
                generation,
                deleting,
                at: std::time::Instant::now(),
            });
        });
    }

    /// Prunes the Descriptions the snapshot did not contain, unless that deletes more than the
    /// limit allows and was not confirmed: then nothing is pruned and the hold is returned.
    async fn prune_after_snapshot(
        &self,
        keep: &HashSet<String>,
        confirmed: &str,
    ) -> Option<PruneHold> {
        let plan = match self.child.prune_plan(keep).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(error = %e, "prune after snapshot failed");
                return None;
            }
        };
        if let Some(held) = prune::hold(&plan, self.config.max_prune_percent, confirmed) {
            tracing::warn!(
                id = %held.id,
                descriptions = held.description_count,
                objects = held.objects,
                owned = held.owned_objects,
                max_percent = held.max_percent,
                "holding back a prune over the limit; confirm it with the annotation {}={} on the ManagedCluster",
                atoll_crds::known::ANNOTATION_CONFIRM_PRUNE,
                held.id,
            );
            self.metrics.prune_held.set(1);
            return Some(held);
        }
        self.metrics.prune_held.set(0);
        let pruned = self.child.prune(&plan).await;
        if !pruned.is_empty() {
            tracing::info!(?pruned, "pruned Descriptions the hub no longer has");
        }
        None
    }

    async fn follow(
        &mut self,
        namespace: &str,
        inbound: &mut tonic::Streaming<v1::HubMessage>,
        tx: &mpsc::Sender<v1::AgentMessage>,
        current: &Arc<Mutex<HashMap<String, (String, String)>>>,
    ) -> Result<SessionEnd, Error> {
        // Deletions not confirmed yet: retried until the objects are gone.
        let mut pending_deletions: HashMap<String, (String, String)> = HashMap::new();
        let mut retry = tokio::time::interval(Duration::from_secs(5));
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Descriptions whose last apply failed: applied again periodically (an object may have
        // been adopted, a CRD installed, a transient error passed).
        let mut failed: HashMap<String, Description> = HashMap::new();
        // The confirmation the last snapshot carried, for a held prune planned again later.
        let mut confirmed_prune = String::new();
        let mut reapply = tokio::time::interval(self.config.retry_failed);
        reapply.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Descriptions with charts are applied in the background (Helm may take minutes, with
        // `wait`): their reports come back here. The newest generation upserted per key, so
        // that the report of an older apply finishing late is not sent after a newer one.
        let (applied_tx, mut applied_rx) =
            mpsc::unbounded_channel::<(String, Description, Report)>();
        let mut background: HashMap<String, i64> = HashMap::new();
        let mut newest: HashMap<String, i64> = HashMap::new();
        let mut sequence = Sequence::default();
        loop {
            tokio::select! {
                message = inbound.message() => {
                    let message = match message {
                        Ok(Some(m)) => m,
                        Ok(None) => return Ok(SessionEnd::Dropped(None)),
                        Err(status) => return Ok(SessionEnd::Dropped(Some(status))),
                    };
                    // Every message but the Welcome is numbered; a Welcome after the first is
                    // ignored.
                    let Some(message) = message.message else { continue };
                    if let hub_message::Message::Progress(progress) = &message {
                        if let Some(expected) = sequence.missing(progress.last_seq) {
                            tracing::warn!(last_seq = progress.last_seq, expected, "the hub stream lost a message; reconnecting for a fresh snapshot");
                            return Ok(SessionEnd::Dropped(Some(lost_message(expected, progress.last_seq))));
                        }
                        continue;
                    }
                    let Some(seq) = message.seq() else { continue };
                    match sequence.observe(seq) {
                        InSequence::Next => {}
                        InSequence::Repeat => {
                            tracing::warn!(seq, "dropped a message the hub stream had delivered already");
                            continue;
                        }
                        InSequence::Gap { expected } => {
                            tracing::warn!(seq, expected, "the hub stream lost or reordered a message; reconnecting for a fresh snapshot");
                            return Ok(SessionEnd::Dropped(Some(atoll_proto::out_of_sequence(seq, expected))));
                        }
                    }
                    match message {
                        hub_message::Message::Upsert(up) => {
                            self.received(&up.name, up.generation, up.deleting);
                            let desc = to_description(namespace, &up);
                            let key = desc.key();
                            failed.remove(&key);
                            newest.insert(key.clone(), up.generation);
                            if up.deleting {
                                lock(current).insert(key.clone(), (up.name.clone(), up.uid.clone()));
                                let report = self.child.delete(namespace, &up.name, &up.uid).await;
                                if report.deleted {
                                    lock(current).remove(&key);
                                    pending_deletions.remove(&key);
                                } else {
                                    pending_deletions.insert(key, (up.name.clone(), up.uid.clone()));
                                }
                                send(tx, report_message(&report)).await;
                            } else {
                                pending_deletions.remove(&key);
                                lock(current).insert(key.clone(), (up.name.clone(), up.uid.clone()));
                                if !desc.charts.is_empty() {
                                    background.insert(key.clone(), desc.generation);
                                    spawn_apply(&self.child, &applied_tx, key, desc);
                                    send(tx, agent_message::Message::Ack(v1::Ack { seq }).into()).await;
                                    continue;
                                }
                                let report = self.child.apply(&desc).await;
                                if report.phase == Phase::Failure {
                                    failed.insert(key, desc);
                                }
                                send(tx, report_message(&report)).await;
                                // A held prune may be moot now (this Description took over what
                                // an earlier registration's namesake ran): plan it again.
                                if self.state.borrow().prune_hold.is_some() {
                                    let keep: HashSet<String> = lock(current).keys().cloned().collect();
                                    let held = self.prune_after_snapshot(&keep, &confirmed_prune).await;
                                    self.state.send_modify(|s| s.prune_hold = held);
                                }
                            }
                        }
                        hub_message::Message::Removed(removed) => {
                            self.received(&removed.name, 0, true);
                            let key = atoll_crds::known::owned_by_description(namespace, &removed.name);
                            lock(current).remove(&key);
                            pending_deletions.remove(&key);
                            failed.remove(&key);
                            let report = self.child.delete(namespace, &removed.name, &removed.uid).await;
                            if !report.deleted {
                                tracing::warn!(description = %key, reason = %report.reason, "pruning a removed Description is incomplete; it stays in the inventory");
                            }
                        }
                        hub_message::Message::Withheld(withheld) => {
                            // The hub has no version of it to send: keep what runs, and keep it
                            // out of the prune after the snapshot.
                            let key = atoll_crds::known::owned_by_description(namespace, &withheld.name);
                            tracing::warn!(description = %key, reason = %withheld.reason, "the hub withholds this Description; keeping what runs for it");
                            failed.remove(&key);
                            lock(current).insert(key, (withheld.name.clone(), withheld.uid.clone()));
                        }
                        hub_message::Message::SnapshotComplete(marker) => {
                            let keep: HashSet<String> = lock(current).keys().cloned().collect();
                            confirmed_prune = marker.confirmed_prune.clone();
                            let held = self.prune_after_snapshot(&keep, &confirmed_prune).await;
                            self.state.send_modify(|s| {
                                s.snapshots += 1;
                                s.prune_hold = held;
                            });
                        }
                        hub_message::Message::Welcome(_) | hub_message::Message::Progress(_) => {}
                    }
                    send(tx, agent_message::Message::Ack(v1::Ack { seq }).into()).await;
                }
                notice = self.notices.recv() => {
                    match notice {
                        Some(Notice::ReportChanged(key)) => {
                            let known = lock(current).contains_key(&key);
                            if known && let Some(report) = self.child.report(&key) {
                                send(tx, report_message(&report)).await;
                            }
                        }
                        Some(Notice::InventoryLost(key)) => {
                            tracing::warn!(description = %key, "inventory lost; asking the hub for a fresh snapshot");
                            send(tx, agent_message::Message::Resync(v1::ResyncRequest {}).into()).await;
                        }
                        None => return Ok(SessionEnd::Shutdown),
                    }
                }
                Some((key, desc, report)) = applied_rx.recv() => {
                    if background.get(&key) == Some(&desc.generation) {
                        background.remove(&key);
                    }
                    if newest.get(&key).is_some_and(|g| *g > desc.generation) {
                        continue;
                    }
                    if report.phase == Phase::Failure {
                        failed.insert(key.clone(), desc);
                    } else {
                        failed.remove(&key);
                    }
                    if lock(current).contains_key(&key) {
                        send(tx, report_message(&report)).await;
                    }
                    if self.state.borrow().prune_hold.is_some() {
                        let keep: HashSet<String> = lock(current).keys().cloned().collect();
                        let held = self.prune_after_snapshot(&keep, &confirmed_prune).await;
                        self.state.send_modify(|s| s.prune_hold = held);
                    }
                }
                _ = reapply.tick(), if !failed.is_empty() => {
                    let batch: Vec<(String, Description)> = failed.iter().map(|(k, d)| (k.clone(), d.clone())).collect();
                    for (key, desc) in batch {
                        if !desc.charts.is_empty() {
                            if !background.contains_key(&key) {
                                background.insert(key.clone(), desc.generation);
                                spawn_apply(&self.child, &applied_tx, key, desc);
                            }
                            continue;
                        }
                        let report = self.child.apply(&desc).await;
                        if report.phase == Phase::Success {
                            failed.remove(&key);
                        }
                        if lock(current).contains_key(&key) {
                            send(tx, report_message(&report)).await;
                        }
                    }
                }
                _ = retry.tick(), if !pending_deletions.is_empty() => {
                    let batch: Vec<(String, (String, String))> = pending_deletions.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    for (key, (name, uid)) in batch {
                        let report = self.child.delete(namespace, &name, &uid).await;
                        if report.deleted {
                            pending_deletions.remove(&key);
                            lock(current).remove(&key);
                            send(tx, report_message(&report)).await;
                        }
                    }
                }
            }
        }
    }
}

/// Why a stream ends when the hub has sent `last_sent` but `expected` never arrived.
fn lost_message(expected: u64, last_sent: u64) -> tonic::Status {
    tonic::Status::aborted(format!(
        "the hub has sent up to message {last_sent}, but {expected} never arrived; reconnect"
    ))
}

/// Applies `desc` in the background and sends its report to `done` (for Descriptions with
/// charts, whose Helm runs may take minutes; applies of one Description still run one at a
/// time, in order, under its lock in the applier).
fn spawn_apply<C: ChildCluster>(
    applier: &Arc<C>,
    done: &mpsc::UnboundedSender<(String, Description, Report)>,
    key: String,
    desc: Description,
) {
    let (applier, done) = (applier.clone(), done.clone());
    tokio::spawn(async move {
        let report = applier.apply(&desc).await;
        let _ = done.send((key, desc, report));
    });
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn send(tx: &mpsc::Sender<v1::AgentMessage>, message: v1::AgentMessage) {
    if tx.send(message).await.is_err() {
        tracing::debug!("hub stream closed while sending");
    }
}

/// Sends a heartbeat every `period`. Reports are not repeated here: each is sent once, when it
/// changes (the hub retries a failed write), and a new stream gets all of them again, as the
/// snapshot is applied.
async fn heartbeat_loop<C: ChildCluster>(
    child: Arc<C>,
    tx: mpsc::Sender<v1::AgentMessage>,
    state: watch::Receiver<ConnectionState>,
    period: Duration,
) {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match child.heartbeat().await {
            Ok(hb) => {
                let hold = state.borrow().prune_hold.clone();
                send(&tx, heartbeat_message(&hb, period, hold.as_ref())).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat collection failed");
                let hb = heartbeat::Heartbeat::default();
                let hold = state.borrow().prune_hold.clone();
                send(&tx, heartbeat_message(&hb, period, hold.as_ref())).await;
            }
        }
    }
}

/// Converts a `DescriptionUpsert` into the domain type. Objects that are not JSON become a
/// string, which the applier reports as invalid.
pub fn to_description(namespace: &str, up: &v1::DescriptionUpsert) -> Description {
    Description {
        namespace: namespace.to_owned(),
        name: up.name.clone(),
        uid: up.uid.clone(),
        generation: up.generation,
        orphan: atoll_applier::model::orphans(
            up.labels.get(atoll_crds::known::LABEL_DELETION_POLICY),
        ),
        objects: up.objects.iter().map(|raw| parse_received(raw)).collect(),
        charts: up
            .charts
            .iter()
            .map(|c| ChartRelease::from_received(&c.chart, &c.values, pull_auth(c)))
            .collect(),
    }
}

/// How a received chart is pulled: with the credentials the hub read from its
/// `chartPullSecret`, or failing with why the hub could not read them.
fn pull_auth(chart: &v1::Chart) -> PullAuth {
    match &chart.credentials {
        _ if !chart.credentials_error.is_empty() => {
            PullAuth::Unavailable(chart.credentials_error.clone())
        }
        Some(c) => PullAuth::Credentials(PullCredentials {
            username: c.username.clone(),
            password: c.password.clone(),
        }),
        None => PullAuth::Anonymous,
    }
}

/// A release's report as its protocol message.
fn release_to_wire(r: &ReleaseReport) -> v1::ReleaseStatus {
    let status = r.status.clone().unwrap_or_default();
    v1::ReleaseStatus {
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        phase: status.phase,
        revision: status.revision,
        chart_version: status.chart_version,
        first_deployed: status.first_deployed,
        last_deployed: status.last_deployed,
        description: truncate(&status.description, MAX_OBJECT_ERROR_BYTES),
        notes: truncate(&status.notes, MAX_OBJECT_STATUS_BYTES),
        error: r
            .error
            .as_deref()
            .map(|e| truncate(e, MAX_OBJECT_ERROR_BYTES))
            .unwrap_or_default(),
    }
}

/// An object's `.status` larger than this (as JSON) is left out of reports: one object with an
/// enormous status must not make the whole report too big to deliver.
pub const MAX_OBJECT_STATUS_BYTES: usize = 16 * 1024;
/// An object's error message is cut to this many bytes.
pub const MAX_OBJECT_ERROR_BYTES: usize = 1024;
/// A report stays under this size: the hub drops larger ones (its `--max-report-bytes`), and the
/// Description status it becomes must fit an etcd write.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// Converts a report into its protobuf message, within [`MAX_REPORT_BYTES`]: statuses over
/// [`MAX_OBJECT_STATUS_BYTES`] are replaced by a note, errors are cut, and if the report is still
/// too big, every object's status is left out (the reason says so).
pub fn report_message(report: &Report) -> v1::AgentMessage {
    let mut objects: Vec<v1::ObjectStatus> = report
        .objects
        .iter()
        .map(|o| v1::ObjectStatus {
            api_version: o.object.api_version.clone(),
            kind: o.object.kind.clone(),
            namespace: o.object.namespace.clone(),
            name: o.object.name.clone(),
            status: o
                .status
                .as_ref()
                .and_then(|s| serde_json::to_vec(s).ok())
                .map(capped_status)
                .unwrap_or_default(),
            error: o
                .error
                .as_deref()
                .map(|e| truncate(e, MAX_OBJECT_ERROR_BYTES))
                .unwrap_or_default(),
        })
        .collect();
    let mut reason = report.reason.clone();
    let size = |objects: &[v1::ObjectStatus]| -> usize {
        objects.iter().map(atoll_proto::Message::encoded_len).sum()
    };
    if size(&objects) + reason.len() > MAX_REPORT_BYTES {
        for o in &mut objects {
            o.status.clear();
        }
        reason = truncate(
            &format!(
                "{reason} (object statuses left out: the report was over {MAX_REPORT_BYTES} bytes)"
            ),
            MAX_OBJECT_ERROR_BYTES,
        );
    }
    v1::AgentMessage::from(agent_message::Message::Report(v1::DescriptionReport {
        name: report.name.clone(),
        uid: report.uid.clone(),
        observed_generation: report.observed_generation,
        phase: report.phase.as_str().to_owned(),
        reason,
        objects,
        releases: report.releases.iter().map(release_to_wire).collect(),
        deleted: report.deleted,
    }))
}

/// `status` (JSON), or a note in its place when it is over [`MAX_OBJECT_STATUS_BYTES`].
fn capped_status(status: Vec<u8>) -> Vec<u8> {
    if status.len() <= MAX_OBJECT_STATUS_BYTES {
        return status;
    }
    serde_json::to_vec(&serde_json::json!({
        "omitted": format!(
            "the status is {} bytes of JSON, over the agent's cap of {MAX_OBJECT_STATUS_BYTES}",
            status.len()
        )
    }))
    .unwrap_or_default()
}

/// Converts a heartbeat into its protobuf message.
pub fn heartbeat_message(
    hb: &heartbeat::Heartbeat,
    period: Duration,
    hold: Option<&PruneHold>,
) -> v1::AgentMessage {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    v1::AgentMessage::from(agent_message::Message::Heartbeat(v1::Heartbeat {
        k8s_version: hb.k8s_version.clone(),
        platform: hb.platform.clone(),
        agent_version: VERSION.to_owned(),
        node_statistics: Some(v1::NodeStatistics {
            ready_nodes: hb.ready_nodes,
            not_ready_nodes: hb.not_ready_nodes,
            unknown_nodes: hb.unknown_nodes,
        }),
        capacity: hb.capacity.clone().into_iter().collect(),
        allocatable: hb.allocatable.clone().into_iter().collect(),
        healthz: hb.healthz,
        livez: hb.livez,
        readyz: hb.readyz,
        heartbeat_seconds: u32::try_from(period.as_secs()).unwrap_or(u32::MAX),
        prune_hold: hold.map(|h| v1::PruneHold {
            id: h.id.clone(),
            descriptions: h.descriptions.clone(),
            description_count: count(h.description_count),
            objects: count(h.objects),
            owned_objects: count(h.owned_objects),
            max_percent: h.max_percent,
            earlier_registration_objects: count(h.earlier_registration_objects),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_applier::model::{ObjectRef, ObjectReport, Phase};

    #[test]
    fn backoff_grows_exponentially_up_to_the_cap_with_jitter() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        let cases = [
            (0, 1.0, 100),
            (1, 1.0, 200),
            (3, 1.0, 800),
            (5, 1.0, 2000),
            (40, 1.0, 2000),
            (3, 0.5, 400),
            (3, 0.1, 400),
            (3, 7.0, 800),
        ];
        for (attempt, jitter, millis) in cases {
            assert_eq!(
                b.delay(attempt, jitter),
                Duration::from_millis(millis),
                "{attempt} {jitter}"
            );
        }
    }

    #[test]
    fn endpoint_requires_tls_settings_matching_the_url() {
        let cases = [
            ("http://127.0.0.1:1", Transport::Plaintext, true),
            ("https://127.0.0.1:1", Transport::Plaintext, false),
            (
                "http://127.0.0.1:1",
                Transport::Tls { ca_pem: vec![] },
                false,
            ),
            ("not a url", Transport::Plaintext, false),
        ];
        for (url, transport, ok) in cases {
            let mut c = AgentConfig::new(url, "07401b.f395accd246ae52d", "c");
            c.transport = transport;
            assert_eq!(c.endpoint().is_ok(), ok, "{url}");
            assert!(!format!("{c:?}").contains("f395accd"), "token redacted");
        }
    }

    #[tokio::test]
    async fn received_description_messages_show_in_the_connection_state() {
        let url = "http://127.0.0.1:1";
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let applier = Arc::new(Applier::new(client.clone(), "atoll-agent"));
        let agent = Agent::new(
            client,
            AgentConfig::new(url, "abcdef.0123456789abcdef", "c"),
            applier,
        );
        let state = agent.subscribe();
        assert_eq!(state.borrow().descriptions_received, 0);
        agent.received("default.web", 2, false);
        agent.received("default.old", 0, true);
        let s = state.borrow().clone();
        assert_eq!(s.descriptions_received, 2);
        let last = s.last_received.unwrap();
        assert_eq!(
            (last.name.as_str(), last.generation, last.deleting),
            ("default.old", 0, true)
        );
        assert!(last.at.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn upsert_objects_are_decoded_and_bad_json_is_kept_for_reporting() {
        let up = v1::DescriptionUpsert {
            seq: 1,
            name: "default.web".into(),
            uid: "u".into(),
            generation: 4,
            objects: vec![br#"{"apiVersion":"v1"}"#.to_vec(), b"{nope".to_vec()],
            ..Default::default()
        };
        let d = to_description("clusternet-abcde", &up);
        assert_eq!(d.key(), "clusternet-abcde.default.web");
        assert_eq!(d.generation, 4);
        assert_eq!(d.objects[0], serde_json::json!({"apiVersion": "v1"}));
        assert!(
            d.objects[1]
                .as_str()
                .is_some_and(|s| s.starts_with("not JSON"))
        );
    }

    #[test]
    fn oversized_statuses_and_errors_are_capped_and_reports_stay_under_the_limit() {
        let object = |i: usize, status_bytes: usize, error: &str| ObjectReport {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "default".into(),
                name: format!("cm-{i}"),
            },
            status: Some(serde_json::json!({"blob": "x".repeat(status_bytes)})),
            error: (!error.is_empty()).then(|| error.to_owned()),
        };
        let report = |objects| Report {
            name: "default.big".into(),
            uid: "u".into(),
            observed_generation: 1,
            phase: Phase::Success,
            reason: String::new(),
            objects,
            releases: Vec::new(),
            deleted: false,
        };
        let decode = |r: &Report| {
            let Some(agent_message::Message::Report(r)) = report_message(r).message else {
                unreachable!()
            };
            r
        };
        // One huge status is replaced by a note; the small one is kept.
        let r = decode(&report(vec![
            object(0, 10, ""),
            object(1, 5 << 20, &"é".repeat(5000)),
        ]));
        assert_eq!(r.objects[0].status, br#"{"blob":"xxxxxxxxxx"}"#.to_vec());
        let note: serde_json::Value = serde_json::from_slice(&r.objects[1].status).unwrap();
        assert!(
            note["omitted"]
                .as_str()
                .unwrap()
                .contains("over the agent's cap")
        );
        assert!(r.objects[1].error.len() <= MAX_OBJECT_ERROR_BYTES);
        assert!(r.objects[1].error.ends_with('…'));
        // Many statuses just under the per-object cap: all are left out, and the reason says so.
        let many = decode(&report(
            (0..100)
                .map(|i| object(i, MAX_OBJECT_STATUS_BYTES - 20, ""))
                .collect(),
        ));
        assert!(atoll_proto::Message::encoded_len(&many) <= MAX_REPORT_BYTES);
        assert!(many.objects.iter().all(|o| o.status.is_empty()));
        assert_eq!(many.objects.len(), 100);
        assert!(many.reason.contains("statuses left out"), "{}", many.reason);
    }

    #[test]
    fn reports_convert_to_protobuf_with_status_json() {
        let report = Report {
            name: "default.web".into(),
            uid: "u".into(),
            observed_generation: 2,
            phase: Phase::Failure,
            reason: "x".into(),
            objects: vec![ObjectReport {
                object: ObjectRef {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: "default".into(),
                    name: "web".into(),
                },
                status: Some(serde_json::json!({"readyReplicas": 1})),
                error: Some("boom".into()),
            }],
            releases: vec![
                ReleaseReport {
                    name: "hello".into(),
                    namespace: "demo".into(),
                    status: Some(atoll_applier::model::ReleaseStatus {
                        phase: "deployed".into(),
                        revision: 2,
                        chart_version: "0.2.0".into(),
                        notes: "n".repeat(MAX_OBJECT_STATUS_BYTES + 10),
                        ..Default::default()
                    }),
                    error: None,
                },
                ReleaseReport {
                    name: "broken".into(),
                    namespace: "demo".into(),
                    status: None,
                    error: Some("chart not found".into()),
                },
            ],
            deleted: false,
        };
        let Some(agent_message::Message::Report(r)) = report_message(&report).message else {
            unreachable!()
        };
        assert_eq!(r.phase, "Failure");
        assert_eq!(r.observed_generation, 2);
        assert_eq!(r.objects[0].status, br#"{"readyReplicas":1}"#.to_vec());
        assert_eq!(r.objects[0].error, "boom");
        let (hello, broken) = (&r.releases[0], &r.releases[1]);
        assert_eq!(
            (
                hello.phase.as_str(),
                hello.revision,
                hello.chart_version.as_str()
            ),
            ("deployed", 2, "0.2.0")
        );
        assert!(
            hello.notes.len() <= MAX_OBJECT_STATUS_BYTES,
            "notes are capped"
        );
        assert_eq!(
            (broken.phase.as_str(), broken.error.as_str()),
            ("", "chart not found")
        );
    }
}
