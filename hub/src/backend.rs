//! The [`Backend`] implementation on a real parent API server: bootstrap and cluster-token
//! checks, registration (ClusterRegistrationRequest, dedicated namespace, ManagedCluster,
//! cluster token), and the status writes of connected streams.

use crate::Error;
use crate::domain::{
    Admission, AgentHello, ClusterHeartbeat, Credentials, PullCredentials, SecretString, Session,
};
use crate::flow;
use crate::index::DescEntry;
use crate::metrics::Metrics;
use crate::service::Backend;
use crate::status;
use crate::streams::{
    ANNOTATION_STREAM_EPOCH, ANNOTATION_STREAM_EPOCH_CLAIM, epoch_claimed_by,
    newer_stream_recorded, recorded_epoch,
};
use crate::token::{
    self, ANNOTATION_ROTATE_TOKEN, BOOTSTRAP_TOKEN_NAMESPACE, BootstrapToken, CLUSTER_TOKEN_SECRET,
    TokenMatch, TokenRecord, TokenRejection,
};
use atoll_applier::model::Report;
use atoll_crds::apps::DescriptionStatus;
use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ManagedCluster, ManagedClusterSpec,
    ManagedClusterStatus, SyncMode,
};
use atoll_crds::{conditions, known};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

mod registration;

/// The hub's name as the reporting controller of its Events. (What it creates is labelled
/// `clusternet.io/created-by=clusternet-hub`, [`known::CREATED_BY_HUB`], as in Clusternet.)
pub const REPORTING_CONTROLLER: &str = "atoll-hub";

/// Registration and write-back settings.
#[derive(Clone, Copy, Debug)]
pub struct BackendConfig {
    /// Wait for a user to approve each ClusterRegistrationRequest.
    pub manual_approval: bool,
    /// Look for bootstrap-token Secrets in kube-system too, after clusternet-system.
    pub kube_system_bootstrap_tokens: bool,
    /// How long after its stream ends a cluster is marked `Ready=Unknown` and tainted.
    pub disconnect_grace: Duration,
    /// How often a pending registration is re-read while waiting for approval.
    pub approval_poll: Duration,
    /// How long a Hello is held waiting for an administrator's decision; then the agent is
    /// told to retry (`UNAVAILABLE`) and the request stays for the decision.
    pub approval_wait: Duration,
    /// How many Hellos may wait for a decision at once; more are refused at once
    /// (`RESOURCE_EXHAUSTED`), so that waiting registrations never hold every handshake slot.
    pub max_waiting_registrations: usize,
    /// How long a cluster token is accepted after it is issued (`None`: until revoked). Agents
    /// get a new one half-way through.
    pub cluster_token_lifetime: Option<Duration>,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            // As the hub's own default: a library user who forgets to choose approves nothing.
            manual_approval: true,
            kube_system_bootstrap_tokens: false,
            disconnect_grace: Duration::from_secs(20),
            approval_poll: Duration::from_secs(1),
            approval_wait: Duration::from_secs(60),
            max_waiting_registrations: 64,
            cluster_token_lifetime: None,
        }
    }
}

/// Conflicting writes in a row after which claiming a stream epoch gives up (the agent retries).
const EPOCH_CLAIM_ATTEMPTS: usize = 10;

/// How long the token a rotation replaced is still accepted: an agent that could not store its
/// new token reconnects with the old one within its backoff, and then gets another new one.
const PREVIOUS_TOKEN_GRACE: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(600);

/// The parent-cluster backend.
#[derive(Clone)]
pub struct KubeBackend {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    config: BackendConfig,
    clusters: Store<ManagedCluster>,
    metrics: Arc<Metrics>,
    /// Bumped on every connection of a cluster, so that a pending disconnection mark is
    /// cancelled by a reconnection.
    connections: Mutex<HashMap<String, u64>>,
    /// Tokens this replica issued at a registration that their agent has not shown it holds
    /// yet, by dedicated namespace: the hash recorded as `awaiting-agent`, cleared on the
    /// cluster's first heartbeat (the agent stores its token before it beats).
    tokens_awaiting_agent: Mutex<HashMap<String, String>>,
    /// Records the Warning events, which repeat (a denied agent retrying, a cluster going
    /// unknown again) and are deduplicated into series by the recorder's cache.
    recorder: Recorder,
    reporter: Reporter,
    /// Bounds the API calls made on behalf of agent streams (registration, heartbeat and report
    /// status writes, the epoch annotation): a thousand agents connecting or beating at once
    /// would otherwise open as many connections to the API server, and the client's pool keeps
    /// them, each with its buffers, long after the burst.
    calls: tokio::sync::Semaphore,
    /// The same bound for handshakes (bootstrap-token checks, registrations, cluster-token
    /// checks), a pool of its own: a flood of bad Hellos waits here and never delays the
    /// heartbeats of clusters that are connected.
    handshake_calls: tokio::sync::Semaphore,
    /// Hellos waiting for an administrator's decision ([`BackendConfig::max_waiting_registrations`]).
    waiting_registrations: Arc<tokio::sync::Semaphore>,
    /// The same bound for heartbeats, a pool of their own: under a flood of status reports
    /// heartbeats waiting behind them went overdue and marked every cluster `Ready=Unknown`.
    heartbeat_calls: tokio::sync::Semaphore,
    /// The Descriptions (`namespace`, `name`) that have HelmReleases, read from the parent by
    /// the first report after a start and kept current since: a report removes the HelmReleases
    /// of charts a Description no longer has without a list call for every other Description.
    helm_owners: tokio::sync::Mutex<Option<HashSet<(String, String)>>>,
    /// What this hub last wrote to each Description's status, until the watch shows it.
    written_statuses: WrittenStatuses,
    /// The sequence number of this process's last report write ([`status::next_report_sequence`]).
    report_sequence: std::sync::atomic::AtomicI64,
}

/// The fingerprint of the status last written to each Description (`namespace`, `name`), kept
/// until the watch shows it: see [`status::description_status_write_needed`].
#[derive(Default)]
struct WrittenStatuses(Mutex<HashMap<(String, String), u64>>);

impl WrittenStatuses {
    /// Whether `wanted` must be written to `key`, whose status the watch shows as `watched`;
    /// forgets the last write once the watch shows it.
    fn write_needed(
        &self,
        key: &(String, String),
        watched: Option<&DescriptionStatus>,
        wanted: &DescriptionStatus,
    ) -> bool {
        let mut written = self.0.lock();
        let mut last = written.get(key).copied();
        if last.is_some() && last == watched.map(status::status_fingerprint) {
            written.remove(key);
            last = None;
        }
        status::description_status_write_needed(watched, last, wanted)
    }

    fn wrote(&self, key: (String, String), status: &DescriptionStatus) {
        self.0
            .lock()
            .insert(key, status::status_fingerprint(status));
    }

    fn forget(&self, key: &(String, String)) {
        self.0.lock().remove(key);
    }
}

/// API calls on behalf of handshakes in flight at once.
const HANDSHAKE_CALLS_IN_FLIGHT: usize = 8;

/// API calls on behalf of heartbeats in flight at once.
const HEARTBEAT_CALLS_IN_FLIGHT: usize = 8;

/// API calls on behalf of agent streams in flight at once.
const CALLS_IN_FLIGHT: usize = 32;

pub(crate) fn api_err(operation: &str, object: &str) -> impl FnOnce(kube::Error) -> Error {
    let operation = operation.to_string();
    let object = object.to_string();
    move |source| Error::CallApiServer {
        operation,
        object,
        source,
    }
}

/// `namespace/name` of the stream's ManagedCluster, for error messages.
fn cluster_target(session: &Session) -> String {
    format!("{}/{}", session.namespace, session.managed_cluster_name)
}

fn mgr() -> PatchParams {
    PatchParams::apply(known::FIELD_MANAGER_HUB).force()
}

/// A fresh dedicated namespace name: `clusternet-` and five random `[a-z0-9]`.
pub fn random_namespace_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| {
            let i = rng.random_range(0..ALPHABET.len());
            char::from(ALPHABET.get(i).copied().unwrap_or(b'x'))
        })
        .collect();
    format!("{}{suffix}", known::DEDICATED_NAMESPACE_PREFIX)
}

impl KubeBackend {
    /// Writes the HelmRelease of each chart of a Description (spec and status) and deletes
    /// those of charts it no longer has.
    fn write_helm_releases(
        &self,
        session: &Session,
        entry: &DescEntry,
        report: &Report,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let this = self.clone();
        let namespace = session.namespace.clone();
        let releases = status::helm_releases(&namespace, entry, report);
        let owner = (namespace.clone(), entry.name.clone());
        async move {
            let had_releases = this.helm_owner(&owner).await?;
            if releases.is_empty() && !had_releases {
                return Ok(());
            }
            let api: Api<atoll_crds::helm::HelmRelease> =
                Api::namespaced(this.client(), &namespace);
            let _permit = this.permit().await;
            for (name, object, status) in &releases {
                let target = format!("{namespace}/{name}");
                api.patch(name, &mgr(), &Patch::Apply(object))
                    .await
                    .map_err(api_err("apply HelmRelease", &target))?;
                api.patch_status(name, &mgr(), &Patch::Apply(status))
                    .await
                    .map_err(api_err("write HelmRelease status", &target))?;
                this.inner.metrics.write("helmrelease");
            }
            if let Some(owners) = this.inner.helm_owners.lock().await.as_mut()
                && !releases.is_empty()
            {
                owners.insert(owner.clone());
            }
            if !had_releases {
                return Ok(());
            }
            let selector = format!("{}={}", known::LABEL_CONFIG_NAME, owner.1);
            let existing = api
                .list_metadata(&ListParams::default().labels(&selector))
                .await
                .map_err(api_err("list HelmReleases", &namespace))?;
            let wanted = |name: &str| releases.iter().any(|(n, _, _)| n == name);
            for stale in existing.items.iter().filter(|hr| !wanted(&hr.name_any())) {
                let name = stale.name_any();
                match api.delete(&name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        return Err(api_err(
                            "delete HelmRelease",
                            &format!("{namespace}/{name}"),
                        )(e));
                    }
                }
            }
            if releases.is_empty()
                && let Some(owners) = this.inner.helm_owners.lock().await.as_mut()
            {
                owners.remove(&owner);
            }
            Ok(())
        }
    }

    /// Whether the Description `owner` had HelmReleases; the first call after a start reads
    /// every HelmRelease's owner from the parent.
    async fn helm_owner(&self, owner: &(String, String)) -> Result<bool, Error> {
        let mut owners = self.inner.helm_owners.lock().await;
        if owners.is_none() {
            let api: Api<atoll_crds::helm::HelmRelease> = Api::all(self.client());
            let _permit = self.permit().await;
            let list = api
                .list_metadata(&ListParams::default().labels(known::LABEL_CONFIG_NAME))
                .await
                .map_err(api_err("list HelmReleases", "all namespaces"))?;
            *owners = Some(
                list.items
                    .iter()
                    .filter_map(|hr| {
                        let name = hr.labels().get(known::LABEL_CONFIG_NAME)?;
                        Some((hr.namespace()?, name.clone()))
                    })
                    .collect(),
            );
        }
        Ok(owners.as_ref().is_some_and(|o| o.contains(owner)))
    }

    /// A backend writing through `client`; `clusters` is the shared ManagedCluster reflector.
    pub fn new(
        client: Client,
        config: BackendConfig,
        clusters: Store<ManagedCluster>,
        metrics: Arc<Metrics>,
    ) -> KubeBackend {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        KubeBackend {
            inner: Arc::new(Inner {
                recorder: Recorder::new(client.clone(), reporter.clone()),
                reporter,
                client,
                config,
                clusters,
                metrics,
                connections: Mutex::new(HashMap::new()),
                tokens_awaiting_agent: Mutex::new(HashMap::new()),
                calls: tokio::sync::Semaphore::new(CALLS_IN_FLIGHT),
                handshake_calls: tokio::sync::Semaphore::new(HANDSHAKE_CALLS_IN_FLIGHT),
                heartbeat_calls: tokio::sync::Semaphore::new(HEARTBEAT_CALLS_IN_FLIGHT),
                waiting_registrations: Arc::new(tokio::sync::Semaphore::new(
                    config.max_waiting_registrations.max(1),
                )),
                helm_owners: tokio::sync::Mutex::new(None),
                written_statuses: WrittenStatuses::default(),
                report_sequence: std::sync::atomic::AtomicI64::new(0),
            }),
        }
    }

    /// The next report sequence number of this process.
    fn next_report_sequence(&self) -> i64 {
        use std::sync::atomic::Ordering;
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros(),
        )
        .unwrap_or(i64::MAX);
        let step = |last| Some(status::next_report_sequence(last, now));
        let last = self
            .inner
            .report_sequence
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, step)
            .unwrap_or_else(|last| last);
        status::next_report_sequence(last, now)
    }

    /// A permit for API calls on behalf of a stream (see `Inner::calls`). The semaphore is
    /// never closed; without a permit the call just goes unbounded.
    async fn permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.inner.calls.acquire().await.ok()
    }

    /// A permit for API calls of a handshake (see `Inner::handshake_calls`).
    async fn handshake_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.inner.handshake_calls.acquire().await.ok()
    }

    /// A permit for API calls of a heartbeat (see `Inner::heartbeat_calls`).
    async fn heartbeat_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.inner.heartbeat_calls.acquire().await.ok()
    }

    fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// Publishes an Event about `obj`; a failure is only logged.
    async fn event(
        &self,
        obj: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        // A Normal event (`Registered`) happens once per registration: a recorder of its own,
        // dropped after publishing, so that the shared recorder's cache does not keep one
        // event per registered cluster for minutes.
        let once;
        let recorder = if type_ == EventType::Normal {
            once = Recorder::new(self.client(), self.inner.reporter.clone());
            &once
        } else {
            &self.inner.recorder
        };
        if let Err(e) = recorder.publish(&ev, &obj).await {
            tracing::debug!(error = %e, "publishing an Event failed");
        }
    }

    /// A Warning Event on the ManagedCluster when its agent starts holding a prune back (or
    /// holds back another one), once per hold.
    async fn prune_hold_event(&self, cached: Option<&ManagedCluster>, new: &ManagedClusterStatus) {
        let held = |s: Option<&ManagedClusterStatus>| {
            s.and_then(|s| conditions::get(&s.conditions, known::CONDITION_PRUNE_HELD))
                .filter(|c| c.status == "True")
                .map(|c| c.message.clone())
        };
        let Some(message) = held(Some(new)) else {
            return;
        };
        let Some(mc) = cached else { return };
        if held(mc.status.as_ref()).as_ref() == Some(&message) {
            return;
        }
        tracing::warn!(cluster = %mc.name_any(), namespace = %mc.namespace().unwrap_or_default(), %message, "an agent holds back a prune");
        self.event(
            mc.object_ref(&()),
            EventType::Warning,
            "PruneHeld",
            message,
            "Prune",
        )
        .await;
    }

    async fn check_bootstrap(&self, hello: &AgentHello, t: &BootstrapToken) -> Result<(), Error> {
        let secret = self.bootstrap_secret(t).await?;
        let rejection = match secret {
            None => Err(TokenRejection::Unknown),
            Some(s) => {
                let data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                token::check_bootstrap_secret(t, s.type_.as_deref(), &data, Timestamp::now())
            }
        };
        rejection.map_err(|r| Error::Authenticate {
            cluster_id: hello.cluster_id.clone(),
            reason: format!("bootstrap token {}: {r}", t.id),
        })
    }

    /// The Secret of bootstrap token `t`: in clusternet-system, else (when enabled) in
    /// kube-system, where kubeadm and Clusternet keep them.
    async fn bootstrap_secret(&self, t: &BootstrapToken) -> Result<Option<Secret>, Error> {
        let name = t.secret_name();
        let namespaces: &[&str] = if self.inner.config.kube_system_bootstrap_tokens {
            &[BOOTSTRAP_TOKEN_NAMESPACE, "kube-system"]
        } else {
            &[BOOTSTRAP_TOKEN_NAMESPACE]
        };
        for namespace in namespaces {
            let secrets: Api<Secret> = Api::namespaced(self.client(), namespace);
            if let Some(secret) = secrets.get_opt(&name).await.map_err(api_err(
                "get bootstrap-token Secret",
                &format!("{namespace}/{name}"),
            ))? {
                return Ok(Some(secret));
            }
        }
        Ok(None)
    }

    async fn crr(&self, cluster_id: &str) -> Result<Option<ClusterRegistrationRequest>, Error> {
        let api: Api<ClusterRegistrationRequest> = Api::all(self.client());
        let name = known::cluster_registration_request_name(cluster_id);
        api.get_opt(&name)
            .await
            .map_err(api_err("get ClusterRegistrationRequest", &name))
    }

    async fn admit_cluster_token(&self, hello: &AgentHello) -> Result<Admission, Error> {
        let refuse = |reason: String| Error::Authenticate {
            cluster_id: hello.cluster_id.clone(),
            reason,
        };
        let crr = self
            .crr(&hello.cluster_id)
            .await?
            .ok_or_else(|| refuse(TokenRejection::ClusterTokenMismatch.to_string()))?;
        let st = crr.status.clone().unwrap_or_default();
        if st.result == Some(ApprovedResult::Denied) {
            return Err(Error::RegistrationDenied {
                cluster_id: hello.cluster_id.clone(),
                reason: st
                    .error_message
                    .unwrap_or_else(|| "denied by an administrator".into()),
            });
        }
        let ns = st
            .dedicated_namespace
            .ok_or_else(|| refuse(TokenRejection::ClusterTokenMismatch.to_string()))?;
        let (record, version) = self.token_record(&ns).await?;
        let now = Timestamp::now();
        let presented = token::sha256_hex(&hello.token.0);
        let matched = record
            .check(&presented, now)
            .map_err(|r| refuse(r.to_string()))?;
        let name = st
            .managed_cluster_name
            .unwrap_or_else(|| hello.cluster_name.clone());
        let mc = self
            .ensure_managed_cluster(hello, &ns, &name, false)
            .await?;
        let requested = mc
            .as_ref()
            .and_then(|mc| mc.annotations().get(ANNOTATION_ROTATE_TOKEN).cloned());
        if !record.needs_rotation(matched, requested.as_deref(), now) {
            if matched == TokenMatch::Current
                && (record.previous.is_some() || record.awaiting_agent)
            {
                // The agent has the new token: the replaced one stops working now, and a
                // bootstrap token may no longer register the cluster again unapproved.
                let mut settled = record.clone();
                settled.previous = None;
                settled.previous_until = None;
                settled.awaiting_agent = false;
                if let Err(e) = self.replace_token_record(&ns, &settled, version).await {
                    tracing::info!(namespace = %ns, error = %e, "could not drop the replaced cluster token's hash; it expires on its own");
                }
            }
            return Ok(Admission {
                namespace: ns,
                managed_cluster_name: name,
                cluster_token: None,
                credentials: credentials_of(&record, presented),
            });
        }
        // A new token, answered in the Welcome. The presented one stays valid for a while, in
        // case the agent cannot store the new one; a concurrent rotation of the same cluster on
        // another replica fails this write (the Secret's resourceVersion), and the agent retries.
        let fresh = token::mint_cluster_token();
        let mut rotated = TokenRecord::issue(
            &fresh,
            now,
            self.inner.config.cluster_token_lifetime,
            requested.or(record.rotation.clone()),
        );
        rotated.previous = Some(presented);
        // Never beyond the replaced token's own expiry.
        rotated.previous_until = now
            .checked_add(PREVIOUS_TOKEN_GRACE)
            .ok()
            .map(|grace| record.expires_at.map_or(grace, |e| e.min(grace)));
        self.replace_token_record(&ns, &rotated, version).await?;
        self.inner.metrics.write("token_rotation");
        tracing::info!(cluster_id = %hello.cluster_id, namespace = %ns, "issued a new cluster token");
        if let Some(mc) = &mc {
            self.event(
                mc.object_ref(&()),
                EventType::Normal,
                "ClusterTokenRotated",
                format!(
                    "the agent got a new cluster token; the one it replaces is accepted until {}",
                    rotated
                        .previous_until
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                ),
                "RotateToken",
            )
            .await;
        }
        Ok(Admission {
            namespace: ns,
            managed_cluster_name: name,
            credentials: credentials_of(&rotated, rotated.current.clone()),
            cluster_token: Some(SecretString(fresh)),
        })
    }

    /// Creates the ManagedCluster, or restores the labels the hub owns on it. The agent's own
    /// labels are taken at registration only (`registering`): afterwards they are the
    /// administrator's, and a reconnecting agent does not put back a label someone removed.
    async fn ensure_managed_cluster(
        &self,
        hello: &AgentHello,
        ns: &str,
        name: &str,
        registering: bool,
    ) -> Result<Option<ManagedCluster>, Error> {
        let api: Api<ManagedCluster> = Api::namespaced(self.client(), ns);
        // The hub's own labels name the registered cluster, never what a Hello says: an agent
        // must not take another cluster's name (and the Subscriptions that select it).
        let hub_labels = managed_cluster_labels(&hello.cluster_id, name);
        let mut labels = hello.cluster_labels.clone();
        labels.extend(hub_labels.clone());
        let obj = format!("{ns}/{name}");
        match api
            .get_opt(name)
            .await
            .map_err(api_err("get ManagedCluster", &obj))?
        {
            Some(mc) => {
                let labels = if registering { labels } else { hub_labels };
                let missing = labels.iter().any(|(k, v)| mc.labels().get(k) != Some(v));
                if missing {
                    let patch = json!({"metadata": {"labels": labels}});
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(api_err("label ManagedCluster", &obj))?;
                }
                Ok(Some(mc))
            }
            // A cluster token with no ManagedCluster: an administrator deleted it, which ends
            // the cluster's membership until it registers (and is approved) again.
            None if !registering => Err(Error::Authenticate {
                cluster_id: hello.cluster_id.clone(),
                reason: format!(
                    "the cluster's ManagedCluster {obj} was deleted; register again with a \
                     bootstrap token"
                ),
            }),
            None => {
                let mut mc = ManagedCluster::new(
                    name,
                    ManagedClusterSpec {
                        cluster_id: hello.cluster_id.clone(),
                        cluster_type: Some(hello.cluster_type.clone()),
                        cluster_init_base_name: None,
                        sync_mode: SyncMode::Pull,
                        taints: Vec::new(),
                    },
                );
                mc.metadata.namespace = Some(ns.to_string());
                mc.metadata.labels = Some(labels);
                match api.create(&PostParams::default(), &mc).await {
                    Ok(_) => Ok(None),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                    Err(e) => Err(api_err("create ManagedCluster", &obj)(e)),
                }
            }
        }
    }

    /// The first heartbeat of a cluster whose token this replica issued at its registration:
    /// the agent stored the token before beating, so a bootstrap token may no longer register
    /// the cluster again unapproved. A failure is only logged: the agent's next stream, with
    /// the token, settles it.
    async fn token_reached_agent(&self, session: &Session) {
        let Some(issued) = self
            .inner
            .tokens_awaiting_agent
            .lock()
            .remove(&session.namespace)
        else {
            return;
        };
        let _permit = self.permit().await;
        let settled = match self.token_record(&session.namespace).await {
            Ok((record, version)) if record.awaiting_agent && record.current == issued => {
                let settled = TokenRecord {
                    awaiting_agent: false,
                    ..record
                };
                self.replace_token_record(&session.namespace, &settled, version)
                    .await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = settled {
            tracing::info!(namespace = %session.namespace, error = %e, "could not record that the agent holds its cluster token; its next stream does");
        }
    }

    /// The cluster-token record kept in dedicated namespace `ns` (an empty record when there
    /// is none) and the Secret's resourceVersion.
    async fn token_record(&self, ns: &str) -> Result<(TokenRecord, Option<String>), Error> {
        let secret = Api::<Secret>::namespaced(self.client(), ns)
            .get_opt(CLUSTER_TOKEN_SECRET)
            .await
            .map_err(api_err(
                "get Secret",
                &format!("{ns}/{CLUSTER_TOKEN_SECRET}"),
            ))?;
        Ok(match secret {
            Some(s) => (record_of_secret(&s), s.metadata.resource_version),
            None => (TokenRecord::default(), None),
        })
    }

    /// Writes a record at registration (server-side apply: creates or replaces it).
    async fn store_token_record(&self, ns: &str, record: &TokenRecord) -> Result<(), Error> {
        let api: Api<Secret> = Api::namespaced(self.client(), ns);
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": CLUSTER_TOKEN_SECRET,
                "labels": { known::LABEL_CREATED_BY: known::CREATED_BY_HUB },
            },
            "type": "Opaque",
            "data": secret_data(record),
        });
        api.patch(CLUSTER_TOKEN_SECRET, &mgr(), &Patch::Apply(&secret))
            .await
            .map_err(api_err(
                "apply Secret",
                &format!("{ns}/{CLUSTER_TOKEN_SECRET}"),
            ))?;
        Ok(())
    }

    /// Replaces the record read at `version` (optimistic concurrency: a concurrent rotation
    /// makes this fail instead of losing one of the two tokens). A JSON patch whose `test` of the
    /// resourceVersion guards the replacement of `data`: the hub needs no `update` on Secrets.
    async fn replace_token_record(
        &self,
        ns: &str,
        record: &TokenRecord,
        version: Option<String>,
    ) -> Result<(), Error> {
        let api: Api<Secret> = Api::namespaced(self.client(), ns);
        let object = format!("{ns}/{CLUSTER_TOKEN_SECRET}");
        let version = version.ok_or_else(|| Error::WriteParentObject {
            operation: "replace Secret".into(),
            object: object.clone(),
            reason: "it has no resourceVersion to guard the replacement".into(),
        })?;
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "replace", "path": "/data", "value": secret_data(record)},
        ]))
        .map_err(|source| Error::EncodePatch {
            object: object.clone(),
            source,
        })?;
        api.patch(
            CLUSTER_TOKEN_SECRET,
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .map_err(api_err("replace Secret", &object))?;
        Ok(())
    }

    /// Whether a newer stream of this cluster exists on any replica (from the shared cache).
    fn superseded(&self, session: &Session) -> bool {
        session.epoch > 0
            && self
                .cached_cluster(session)
                .is_some_and(|mc| newer_stream_recorded(&mc, session.epoch))
    }

    /// Claims the next stream epoch of the cluster on its ManagedCluster: take the recorded
    /// epoch (from the cache first), write one more with the resourceVersion it came with as a
    /// precondition, and read again on a conflict (a stale cache, or another replica claimed
    /// one meanwhile).
    async fn claim_next_epoch(&self, namespace: &str, name: &str) -> Result<u64, Error> {
        let api: Api<ManagedCluster> = Api::namespaced(self.client(), namespace);
        let object = format!("{namespace}/{name}");
        let _permit = self.handshake_permit().await;
        // The shared cache usually has the ManagedCluster at its latest version already (the
        // handshake just read it); a stale copy only costs a conflict and a read.
        let mut cached = self
            .inner
            .clusters
            .get(&ObjectRef::new(name).within(namespace))
            .map(|mc| (*mc).clone());
        // The epoch this attempt wrote, and its mark: after a conflict, the object read again
        // may show that the write landed after all.
        let mut tried: Option<(u64, String)> = None;
        for _ in 0..EPOCH_CLAIM_ATTEMPTS {
            let mc = match cached.take() {
                Some(mc) => mc,
                None => api
                    .get(name)
                    .await
                    .map_err(api_err("get ManagedCluster", &object))?,
            };
            if let Some((epoch, claim)) = tried.take()
                && epoch_claimed_by(&mc, epoch, &claim)
            {
                return Ok(epoch);
            }
            let epoch = flow::next_epoch(recorded_epoch(&mc));
            let claim = format!("{:016x}", rand::random::<u64>());
            let patch = json!({"metadata": {
                "resourceVersion": mc.metadata.resource_version,
                "annotations": {
                    ANNOTATION_STREAM_EPOCH: epoch.to_string(),
                    ANNOTATION_STREAM_EPOCH_CLAIM: claim,
                },
            }});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(epoch),
                Err(kube::Error::Api(s)) if s.code == 409 => tried = Some((epoch, claim)),
                Err(e) => {
                    return Err(api_err(
                        "record the stream epoch on ManagedCluster",
                        &object,
                    )(e));
                }
            }
        }
        Err(Error::WriteParentObject {
            operation: "record the stream epoch on ManagedCluster".into(),
            object,
            reason: format!("{EPOCH_CLAIM_ATTEMPTS} conflicting writes in a row; retry"),
        })
    }

    /// The ManagedCluster API of the stream's dedicated namespace.
    fn cluster_api(&self, session: &Session) -> Api<ManagedCluster> {
        Api::namespaced(self.client(), &session.namespace)
    }

    fn cached_cluster(&self, session: &Session) -> Option<Arc<ManagedCluster>> {
        self.inner
            .clusters
            .get(&ObjectRef::new(&session.managed_cluster_name).within(&session.namespace))
    }

    async fn fresh_cluster(&self, session: &Session) -> Result<Option<ManagedCluster>, Error> {
        let api = self.cluster_api(session);
        api.get_opt(&session.managed_cluster_name)
            .await
            .map_err(api_err("get ManagedCluster", &cluster_target(session)))
    }

    async fn set_taint(
        &self,
        session: &Session,
        mc: &ManagedCluster,
        reason: Option<&str>,
    ) -> Result<(), Error> {
        let Some(taints) = status::with_unschedulable_taint(&mc.spec.taints, reason) else {
            return Ok(());
        };
        let api = self.cluster_api(session);
        let patch = json!({"spec": {"taints": taints}});
        api.patch(
            &session.managed_cluster_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(api_err("taint ManagedCluster", &cluster_target(session)))?;
        self.inner.metrics.write("taint");
        Ok(())
    }

    async fn mark_disconnected(&self, session: &Session) -> Result<(), Error> {
        let Some(mc) = self.fresh_cluster(session).await? else {
            return Ok(());
        };
        // Another hub replica may be serving a newer stream of this cluster: it recorded that
        // stream's epoch on the ManagedCluster when it started, and then this replica leaves
        // the cluster alone.
        if newer_stream_recorded(&mc, session.epoch) {
            return Ok(());
        }
        write_unknown(&self.client(), &self.inner.metrics, &mc).await?;
        self.event(
            mc.object_ref(&()),
            EventType::Warning,
            known::REASON_CLUSTER_STATUS_UNKNOWN,
            "the agent's stream to the hub ended and it has not reconnected; the cluster is tainted unschedulable".into(),
            "MarkUnknown",
        )
        .await;
        Ok(())
    }
}

impl KubeBackend {
    /// Publishes a Warning Event on `object`.
    pub async fn warn(&self, object: ObjectReference, reason: &str, note: String) {
        self.event(object, EventType::Warning, reason, note, "Check")
            .await;
    }

    /// A Push cluster's deployer Secret cannot be used: `Ready=False`
    /// (`PushCredentialsRefused`, with `message`) and a Warning Event on its ManagedCluster.
    pub async fn push_credentials_refused(&self, session: &Session, message: &str) {
        let mc = match self.fresh_cluster(session).await {
            Ok(Some(mc)) => mc,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "push mode: reading the ManagedCluster failed");
                return;
            }
        };
        let st =
            status::status_push_credentials_refused(mc.status.as_ref(), message, Timestamp::now());
        let write = self
            .cluster_api(session)
            .patch_status(
                &session.managed_cluster_name,
                &mgr(),
                &Patch::Apply(&status::managed_cluster_status_patch(&st)),
            )
            .await;
        if let Err(e) = write {
            tracing::warn!(cluster = %cluster_target(session), error = %e, "push mode: writing the refusal to the ManagedCluster status failed");
        }
        self.event(
            mc.object_ref(&()),
            EventType::Warning,
            status::REASON_PUSH_CREDENTIALS_REFUSED,
            message.to_string(),
            "ReadPushCredentials",
        )
        .await;
    }
}

/// Marks a cluster `Ready=Unknown` (`ClusterStatusUnknown`) and taints it unschedulable.
pub(crate) async fn write_unknown(
    client: &Client,
    metrics: &Metrics,
    mc: &ManagedCluster,
) -> Result<(), Error> {
    let ns = mc.namespace().unwrap_or_default();
    let name = mc.name_any();
    let obj = format!("{ns}/{name}");
    let st = status::status_disconnected(mc.status.as_ref(), Timestamp::now());
    let api: Api<ManagedCluster> = Api::namespaced(client.clone(), &ns);
    api.patch_status(
        &name,
        &mgr(),
        &Patch::Apply(&status::managed_cluster_status_patch(&st)),
    )
    .await
    .map_err(api_err("write ManagedCluster status", &obj))?;
    metrics.write("managedcluster_status");
    if let Some(taints) = status::with_unschedulable_taint(
        &mc.spec.taints,
        Some(known::REASON_CLUSTER_STATUS_UNKNOWN),
    ) {
        let patch = json!({"spec": {"taints": taints}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("taint ManagedCluster", &obj))?;
        metrics.write("taint");
    }
    Ok(())
}

fn secret_data(record: &TokenRecord) -> BTreeMap<String, ByteString> {
    record
        .to_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect()
}

/// The token record a cluster-token Secret holds.
pub fn record_of_secret(secret: &Secret) -> TokenRecord {
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .as_ref()
        .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default();
    TokenRecord::from_data(&data)
}

/// What a stream authenticated with the token hashing to `token_sha256` holds, under `record`.
fn credentials_of(record: &TokenRecord, token_sha256: String) -> Credentials {
    Credentials {
        token_sha256,
        rotation: record.rotation.clone(),
        renew_at: record.renew_at(),
    }
}

/// The labels the hub keeps on the ManagedCluster `name` of cluster `cluster_id`.
fn managed_cluster_labels(cluster_id: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (known::LABEL_CLUSTER_ID.to_string(), cluster_id.to_string()),
        (known::LABEL_CLUSTER_NAME.to_string(), name.to_string()),
        (
            known::LABEL_CREATED_BY.to_string(),
            known::CREATED_BY_HUB.to_string(),
        ),
    ])
}

fn cluster_labels(hello: &AgentHello, crr: bool) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(
        known::LABEL_CLUSTER_ID.to_string(),
        hello.cluster_id.clone(),
    );
    l.insert(
        known::LABEL_CLUSTER_NAME.to_string(),
        hello.cluster_name.clone(),
    );
    if crr {
        l.insert(
            known::LABEL_REGISTERED_BY.to_string(),
            known::CREATED_BY_AGENT.to_string(),
        );
    } else {
        l.insert(
            known::LABEL_CREATED_BY.to_string(),
            known::CREATED_BY_HUB.to_string(),
        );
    }
    l
}

/// What the index saw of a Description, for a finalizer edit that reads it only on a conflict.
fn seen(entry: &DescEntry) -> atoll_runtime::finalizer::Seen<'_> {
    atoll_runtime::finalizer::Seen {
        resource_version: &entry.resource_version,
        finalizers: &entry.finalizers,
        deleting: entry.deleting,
    }
}

/// Removes the hub's finalizer from Description `entry`. Returns whether it was removed.
pub async fn remove_finalizer(client: &Client, entry: &DescEntry) -> Result<bool, Error> {
    let api: Api<atoll_crds::apps::Description> = Api::namespaced(client.clone(), &entry.namespace);
    Ok(
        atoll_runtime::finalizer::remove_seen(&api, &entry.name, known::FINALIZER, seen(entry))
            .await?,
    )
}

/// Adds the hub's finalizer to Description `entry` unless it is being deleted.
pub async fn add_finalizer(client: &Client, entry: &DescEntry) -> Result<bool, Error> {
    let api: Api<atoll_crds::apps::Description> = Api::namespaced(client.clone(), &entry.namespace);
    Ok(
        atoll_runtime::finalizer::add_seen(&api, &entry.name, known::FINALIZER, seen(entry))
            .await?,
    )
}

impl Backend for KubeBackend {
    fn admit(&self, hello: &AgentHello) -> impl Future<Output = Result<Admission, Error>> + Send {
        let this = self.clone();
        let hello = hello.clone();
        async move {
            match BootstrapToken::parse(&hello.token.0) {
                Some(t) => {
                    let permit = this.handshake_permit().await;
                    this.check_bootstrap(&hello, &t).await?;
                    drop(permit);
                    this.register(&hello, &t).await
                }
                None => {
                    let _permit = this.handshake_permit().await;
                    this.admit_cluster_token(&hello).await
                }
            }
        }
    }

    fn connected(&self, session: &Session) -> impl Future<Output = ()> + Send {
        let this = self.clone();
        let session = session.clone();
        async move {
            *this
                .inner
                .connections
                .lock()
                .entry(session.cluster_id.clone())
                .or_insert(0) += 1;
            let _permit = this.permit().await;
            let mc = match this.cached_cluster(&session) {
                Some(mc) => Some((*mc).clone()),
                None => this.fresh_cluster(&session).await.ok().flatten(),
            };
            if let Some(mc) = mc
                && let Err(e) = this.set_taint(&session, &mc, None).await
            {
                this.inner.metrics.error(&e);
                tracing::warn!(error = %e, "clearing the unschedulable taint failed");
            }
        }
    }

    fn claim_epoch(
        &self,
        _cluster_id: &str,
        admission: &Admission,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        let this = self.clone();
        let (ns, name) = (
            admission.namespace.clone(),
            admission.managed_cluster_name.clone(),
        );
        async move { this.claim_next_epoch(&ns, &name).await }
    }

    fn heartbeat(
        &self,
        session: &Session,
        heartbeat: ClusterHeartbeat,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let this = self.clone();
        let session = session.clone();
        async move {
            if this.superseded(&session) {
                this.inner.metrics.report("older_stream");
                return Ok(());
            }
            this.token_reached_agent(&session).await;
            let cached = this.cached_cluster(&session);
            let st = status::status_from_heartbeat(
                &heartbeat,
                cached.as_ref().and_then(|mc| mc.status.as_ref()),
                Timestamp::now(),
            );
            let api = this.cluster_api(&session);
            let permit = this.heartbeat_permit().await;
            api.patch_status(
                &session.managed_cluster_name,
                &mgr(),
                &Patch::Apply(&status::managed_cluster_status_patch(&st)),
            )
            .await
            .map_err(api_err(
                "write ManagedCluster status",
                &cluster_target(&session),
            ))?;
            drop(permit);
            this.inner.metrics.write("managedcluster_status");
            this.prune_hold_event(cached.as_deref(), &st).await;
            // The cache may lag behind a taint just written (by this or another replica): on
            // any sign of a transition, read the cluster before clearing the taint.
            let steady = cached.as_ref().is_some_and(|mc| {
                mc.spec.taints.is_empty()
                    && mc.status.as_ref().and_then(|s| {
                        atoll_crds::conditions::status(&s.conditions, known::CONDITION_READY)
                    }) == Some("True")
            });
            if !steady {
                let _permit = this.heartbeat_permit().await;
                if let Some(mc) = this.fresh_cluster(&session).await? {
                    this.set_taint(&session, &mc, None).await?;
                }
            }
            Ok(())
        }
    }

    fn report(
        &self,
        session: &Session,
        entry: Arc<DescEntry>,
        report: Report,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let this = self.clone();
        let session = session.clone();
        async move {
            if this.superseded(&session) {
                this.inner.metrics.report("older_stream");
                return Ok(());
            }
            let key = (session.namespace.clone(), entry.name.clone());
            if report.deleted {
                this.inner.written_statuses.forget(&key);
                if entry.deleting && entry.has_finalizer() {
                    let _permit = this.permit().await;
                    remove_finalizer(&this.client(), &entry).await?;
                    this.inner.metrics.write("finalizer");
                }
                return Ok(());
            }
            if entry.rejected.is_some() {
                // The status says why the current generation is not delivered; reports on the
                // version still running must not hide that.
                return Ok(());
            }
            let mut st = status::description_status(&report, entry.status.as_ref());
            status::add_chart_statuses(&mut st, &entry.charts, &report);
            if !this
                .inner
                .written_statuses
                .write_needed(&key, entry.status.as_ref(), &st)
            {
                return Ok(());
            }
            let api: Api<atoll_crds::apps::Description> =
                Api::namespaced(this.client(), &session.namespace);
            let _permit = this.permit().await;
            // Numbered as it leaves: of two writes to a Description, the later one is higher.
            // A pushed cluster (epoch 0) has every replica writing from its own view, so no
            // number would order its writes (`status::report_order_went_back`): none is written.
            st.report_order = (session.epoch > 0).then(|| atoll_crds::apps::ReportOrder {
                epoch: i64::try_from(session.epoch).unwrap_or(i64::MAX),
                sequence: this.next_report_sequence(),
            });
            api.patch_status(
                &entry.name,
                &mgr(),
                &Patch::Apply(&status::description_status_patch(&st)),
            )
            .await
            .map_err(api_err(
                "write Description status",
                &format!("{}/{}", session.namespace, entry.name),
            ))?;
            this.inner.written_statuses.wrote(key, &st);
            this.inner.metrics.write("description_status");
            this.write_helm_releases(&session, &entry, &report).await
        }
    }

    fn disconnected(&self, session: &Session) -> impl Future<Output = ()> + Send {
        let this = self.clone();
        let session = session.clone();
        async move {
            let generation = this
                .inner
                .connections
                .lock()
                .get(&session.cluster_id)
                .copied()
                .unwrap_or(0);
            let grace = this.inner.config.disconnect_grace;
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                let now = this
                    .inner
                    .connections
                    .lock()
                    .get(&session.cluster_id)
                    .copied()
                    .unwrap_or(0);
                if now != generation {
                    return;
                }
                if let Err(e) = this.mark_disconnected(&session).await {
                    this.inner.metrics.error(&e);
                    tracing::warn!(cluster_id = %session.cluster_id, error = %e, "marking a disconnected cluster failed");
                }
            });
        }
    }

    fn confirmed_prune(&self, session: &Session) -> String {
        self.cached_cluster(session)
            .map(|mc| crate::streams::prune_confirmation(&mc))
            .unwrap_or_default()
    }

    fn pull_credentials(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<PullCredentials, String>> + Send {
        let secrets: Api<Secret> = Api::namespaced(self.client(), namespace);
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        async move {
            match secrets.get_opt(&name).await {
                Ok(Some(secret)) => pull_credentials_in(&secret)
                    .map_err(|missing| format!("Secret {namespace}/{name} {missing}")),
                Ok(None) => Err(format!("Secret {namespace}/{name} not found")),
                Err(kube::Error::Api(s)) if s.code == 403 => Err(format!(
                    "the hub may not read Secret {namespace}/{name}: grant ServiceAccount \
                     clusternet-system/atoll-hub get on it with a Role and RoleBinding in \
                     {namespace} (see the README, \"Private chart repositories\")"
                )),
                Err(e) => Err(format!("reading Secret {namespace}/{name} failed: {e}")),
            }
        }
    }
}

/// The `username` and `password` keys of a chart pull Secret (Clusternet's keys, and those of
/// type `kubernetes.io/basic-auth`), or what is missing.
fn pull_credentials_in(secret: &Secret) -> Result<PullCredentials, String> {
    let text = |key: &str| -> Result<String, String> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .ok_or_else(|| format!("has no key {key:?}"))?;
        String::from_utf8(bytes.0.clone()).map_err(|_| format!("key {key:?} is not UTF-8"))
    };
    Ok(PullCredentials {
        username: text("username")?,
        password: SecretString(text("password")?),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_library_default_approves_no_registration_by_itself() {
        assert!(super::BackendConfig::default().manual_approval);
    }
}
