//! Push mode: a ManagedCluster with `syncMode: Push` has no agent stream. The hub runs the
//! agent's applier itself, with the credentials of Secret `child-cluster-deployer` in the
//! cluster's dedicated namespace, fed from the same in-memory index as the streams. It writes
//! status back through the same [`KubeBackend`] paths (reports, heartbeats).

use crate::Error;
use crate::backend::KubeBackend;
use crate::domain::{ClusterHeartbeat, Session};
use crate::index::{Change, Index, Next};
use crate::service::Backend;
use atoll_applier::helm::Helm;
use atoll_applier::{Applier, Notice, heartbeat, model};
use atoll_crds::clusters::{
    ClusterRegistrationRequest, ManagedCluster, REASON_UNREGISTERED_CLUSTER, SyncMode,
    check_registered,
};
use atoll_crds::known;
use atoll_runtime::leader::LeaderElection;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::Api;
use kube::config::{
    AuthInfo, Cluster, Config, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The `helm` the hub runs for the Push clusters.
#[derive(Clone, Debug)]
pub struct PushHelm {
    /// The binary.
    pub binary: std::path::PathBuf,
    /// The directory under which each Push cluster gets its own helm home and kubeconfig.
    pub home: std::path::PathBuf,
}

/// Secret in a Push cluster's dedicated namespace holding the child's credentials: either a
/// `kubeconfig` key, or Clusternet's `apiserver-advertise-url`, `token` and `ca.crt`.
pub const DEPLOYER_SECRET: &str = "child-cluster-deployer";

/// Whether the hub may talk to the child `kubeconfig` describes: over TLS it verifies, unless
/// the administrator allowed plain `http://` servers and `insecure-skip-tls-verify` (a local
/// test fleet) with `--push-allow-insecure`.
pub fn transport_allowed(kubeconfig: &Kubeconfig, allow_insecure: bool) -> Result<(), String> {
    if allow_insecure {
        return Ok(());
    }
    for cluster in kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
    {
        if cluster
            .server
            .as_deref()
            .is_some_and(|s| s.starts_with("http://"))
        {
            return Err(
                "the child's server is plain http://, which would send the deployer's token in \
                 the clear; give an https:// server, or start the hub with --push-allow-insecure \
                 (local test fleets only)"
                    .into(),
            );
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            return Err(
                "the kubeconfig sets insecure-skip-tls-verify, so anyone on the path could pose as \
                 the child; give its CA (certificate-authority-data), or start the hub with \
                 --push-allow-insecure (local test fleets only)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Builds a kubeconfig for the child from the deployer Secret's data. The Secret is data, never
/// code: of a `kubeconfig` only the current context's server, CA data, TLS settings, bearer token
/// and client certificate data are kept, and anything that would make the hub run a program or
/// read its own files (`exec`, `auth-provider`, `tokenFile`, `client-certificate`, `client-key`,
/// `certificate-authority` paths), act as someone else (`as`) or go through a proxy is refused
/// with a message naming the field. Clusternet's layout (`apiserver-advertise-url`, `token`,
/// `ca.crt`) is turned into the same shape as values, never pasted into YAML text.
pub fn child_kubeconfig(data: &BTreeMap<String, Vec<u8>>) -> Result<Kubeconfig, String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        data.get(key)
            .map(|v| String::from_utf8(v.clone()).map_err(|_| format!("`{key}` is not UTF-8")))
            .transpose()
    };
    if let Some(raw) = text("kubeconfig")? {
        let parsed = Kubeconfig::from_yaml(&raw).map_err(|e| format!("`kubeconfig`: {e}"))?;
        return data_only(parsed);
    }
    let url = text("apiserver-advertise-url")?.ok_or_else(|| {
        "the Secret has neither `kubeconfig` nor `apiserver-advertise-url`; add one".to_string()
    })?;
    let mut cluster = serde_json::json!({ "server": url.trim() });
    if let Some(ca) = data.get("ca.crt") {
        cluster["certificate-authority-data"] = STANDARD.encode(ca).into();
    }
    let mut user = serde_json::json!({});
    if let Some(token) = text("token")? {
        user["token"] = token.trim().into();
    }
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "child", "cluster": cluster }],
        "users": [{ "name": "deployer", "user": user }],
        "contexts": [{ "name": "child", "context": { "cluster": "child", "user": "deployer" } }],
        "current-context": "child",
    });
    let parsed: Kubeconfig = serde_json::from_value(kubeconfig).map_err(|e| e.to_string())?;
    data_only(parsed)
}

/// The current context of `kc` with only plain-data credentials (see [`child_kubeconfig`]).
fn data_only(kc: Kubeconfig) -> Result<Kubeconfig, String> {
    let context_name = kc
        .current_context
        .clone()
        .or_else(|| kc.contexts.first().map(|c| c.name.clone()))
        .ok_or("`kubeconfig` has no context")?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| format!("`kubeconfig` has no context {context_name:?}"))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| format!("`kubeconfig` has no cluster {:?}", context.cluster))?;
    let user = match &context.user {
        Some(name) => kc
            .auth_infos
            .iter()
            .find(|u| &u.name == name)
            .and_then(|u| u.auth_info.clone())
            .ok_or_else(|| format!("`kubeconfig` has no user {name:?}"))?,
        None => AuthInfo::default(),
    };
    let refused: Vec<&str> = [
        (
            cluster.certificate_authority.is_some(),
            "certificate-authority (a file path; use certificate-authority-data)",
        ),
        (cluster.proxy_url.is_some(), "proxy-url"),
        (user.exec.is_some(), "exec (a program to run)"),
        (user.auth_provider.is_some(), "auth-provider"),
        (
            user.token_file.is_some(),
            "tokenFile (a file path; use token)",
        ),
        (
            user.client_certificate.is_some(),
            "client-certificate (a file path; use client-certificate-data)",
        ),
        (
            user.client_key.is_some(),
            "client-key (a file path; use client-key-data)",
        ),
        (
            user.username.is_some() || user.password.is_some(),
            "username/password",
        ),
        (
            user.impersonate.is_some()
                || user.impersonate_uid.is_some()
                || user.impersonate_groups.is_some()
                || user.impersonate_user_extra.is_some(),
            "as/as-groups (impersonation)",
        ),
    ]
    .into_iter()
    .filter_map(|(present, field)| present.then_some(field))
    .collect();
    if !refused.is_empty() {
        return Err(format!(
            "the deployer credentials may hold only plain data (server, certificate-authority-data, \
             token, client-certificate-data, client-key-data); refused: {}",
            refused.join(", ")
        ));
    }
    let server = cluster
        .server
        .clone()
        .filter(|s| s.starts_with("https://") || s.starts_with("http://"))
        .ok_or("the cluster's server must be an http(s) URL")?;
    Ok(Kubeconfig {
        clusters: vec![NamedCluster {
            name: "child".into(),
            cluster: Some(Cluster {
                server: Some(server),
                certificate_authority_data: cluster.certificate_authority_data,
                insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
                tls_server_name: cluster.tls_server_name,
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "deployer".into(),
            auth_info: Some(AuthInfo {
                token: user.token,
                client_certificate_data: user.client_certificate_data,
                client_key_data: user.client_key_data,
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: "child".into(),
            context: Some(Context {
                cluster: "child".into(),
                user: Some("deployer".into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some("child".into()),
        ..Kubeconfig::default()
    })
}

fn domain_heartbeat(h: &heartbeat::Heartbeat, period: Duration) -> ClusterHeartbeat {
    ClusterHeartbeat {
        cluster: h.clone(),
        agent_version: format!("atoll-hub {} (push)", env!("CARGO_PKG_VERSION")),
        heartbeat_seconds: u32::try_from(period.as_secs()).unwrap_or(u32::MAX),
        prune_hold: None,
    }
}

/// The helm that installs charts in the Push cluster whose dedicated namespace is `namespace`:
/// a home of its own under the configured one, where [`HelmKubeconfig`] writes the cluster's
/// kubeconfig for helm's `--kubeconfig` before its first chart.
fn helm_for_cluster(helm: &PushHelm, namespace: &str) -> (Helm, HelmKubeconfig) {
    let dir = helm.home.join(namespace);
    let path = dir.join("kubeconfig");
    let helm = Helm::new(&helm.binary, Some(path.clone()), None, dir.join("helm"));
    (
        helm,
        HelmKubeconfig {
            dir,
            path,
            written: false,
        },
    )
}

/// A Push cluster's kubeconfig on disk for helm: written (readable by the hub's user only: it
/// carries the cluster's credentials) when the cluster gets its first chart, so a cluster that
/// never gets one never has its credentials on disk, and removed when its session ends.
struct HelmKubeconfig {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    written: bool,
}

impl HelmKubeconfig {
    /// Writes `kubeconfig` unless it is written already.
    fn ensure(&mut self, kubeconfig: &Kubeconfig) -> Result<(), Error> {
        if self.written {
            return Ok(());
        }
        let err = |source| Error::WritePushHelmKubeconfig {
            path: self.path.display().to_string(),
            source,
        };
        let text = serde_json::to_vec(kubeconfig).map_err(|e| err(std::io::Error::other(e)))?;
        write_private(&self.dir, &self.path, &text).map_err(err)?;
        self.written = true;
        Ok(())
    }
}

impl Drop for HelmKubeconfig {
    fn drop(&mut self) {
        if self.written
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "push mode: removing a cluster's kubeconfig for helm failed");
        }
    }
}

/// Writes `contents` to `path` in `dir` (created, owner-only), owner-only, whole or not at all.
fn write_private(
    dir: &std::path::Path,
    path: &std::path::Path,
    contents: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let partial = path.with_extension("partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

/// Runs one push session per `syncMode: Push` ManagedCluster.
pub struct PushManager {
    client: Client,
    index: Arc<Index>,
    clusters: Store<ManagedCluster>,
    registrations: Store<ClusterRegistrationRequest>,
    backend: Arc<KubeBackend>,
    heartbeat_every: Duration,
    /// How often unusable credentials are read again.
    credentials_retry: Duration,
    /// When charts' pull Secrets are read again: first retry of unreadable ones (then backing
    /// off), and the recheck of readable ones (a rotation reaches the cluster).
    chart_credentials: (Duration, Duration),
    sessions: Mutex<HashMap<(String, String), JoinHandle<()>>>,
    /// Plain `http://` children and `insecure-skip-tls-verify` allowed (`--push-allow-insecure`).
    allow_insecure: bool,
    /// The helm changes all Push clusters may run at once: they share the hub's pod.
    helm_runs: atoll_applier::helm::RunLimit,
    /// Push clusters left alone as unregistered, with why (one Event per reason).
    unregistered: Mutex<HashMap<(String, String), String>>,
    /// `Some`: only the holder of this Lease serves the Push clusters, and repairs drift in
    /// them (it is their only writer). `None`: every replica serves them, without repairs.
    election: Option<LeaderElection>,
    /// Set by [`PushManager::shutdown`]: no session starts any more.
    stopped: AtomicBool,
    /// How charts are installed in the Push clusters; `None`: they are not.
    helm: Option<PushHelm>,
}

/// Name of the Lease whose holder serves the Push-mode clusters.
pub const PUSH_LEASE: &str = "atoll-hub-push";

impl PushManager {
    /// A manager reading ManagedClusters from `clusters`.
    pub fn new(
        client: Client,
        index: Arc<Index>,
        clusters: Store<ManagedCluster>,
        registrations: Store<ClusterRegistrationRequest>,
        backend: Arc<KubeBackend>,
        heartbeat_every: Duration,
        election: Option<LeaderElection>,
    ) -> PushManager {
        PushManager {
            election,
            helm: None,
            stopped: AtomicBool::new(false),
            client,
            index,
            clusters,
            registrations,
            backend,
            heartbeat_every,
            credentials_retry: heartbeat_every.max(Duration::from_secs(1)),
            chart_credentials: (Duration::from_secs(10), Duration::from_secs(300)),
            sessions: Mutex::new(HashMap::new()),
            allow_insecure: false,
            helm_runs: atoll_applier::helm::RunLimit::default(),
            unregistered: Mutex::new(HashMap::new()),
        }
    }

    /// Allows children served over plain `http://` or without TLS verification.
    pub fn allowing_insecure_transport(mut self, allow: bool) -> Self {
        self.allow_insecure = allow;
        self
    }

    /// Installs the Push clusters' charts with `helm` (`None`: their charts fail, saying so).
    pub fn with_helm(mut self, helm: Option<PushHelm>) -> Self {
        self.helm = helm;
        self
    }

    /// Reads the charts' pull Secrets again as the streams do (`--chart-credentials-retry`,
    /// `--chart-credentials-recheck`).
    pub fn with_chart_credentials(mut self, retry: Duration, recheck: Duration) -> Self {
        self.chart_credentials = (retry, recheck);
        self
    }

    /// Serves the Push clusters: at once without an election, else while this replica holds
    /// [`PUSH_LEASE`] (contending again after losing it).
    pub async fn run(self: Arc<Self>) {
        self.index.wait_synced().await;
        let Some(election) = self.election.clone() else {
            return self.serve().await;
        };
        loop {
            tracing::info!(identity = %election.identity(), lease = PUSH_LEASE, "push mode: waiting for the Lease to serve the Push clusters");
            let mut held = election.clone().acquire().await;
            tracing::info!(identity = %election.identity(), "push mode: serving the Push clusters, drift repaired");
            tokio::select! {
                () = self.clone().serve() => {}
                () = held.lost() => {
                    tracing::warn!(identity = %election.identity(), "push mode: the Lease was lost; stopping every Push session");
                }
            }
            self.stop_sessions();
        }
    }

    /// The Lease contender, when the Push clusters are served by an elected replica.
    pub fn election(&self) -> Option<&LeaderElection> {
        self.election.as_ref()
    }

    /// Stops every session for good (the hub is stopping): their tasks are not children of
    /// [`PushManager::run`]'s, so ending that one leaves them running.
    pub fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop_sessions();
    }

    fn stop_sessions(&self) {
        for (_, task) in self.sessions.lock().drain() {
            task.abort();
        }
    }

    /// Starts and stops sessions as ManagedClusters come, go and change mode (checked every
    /// second from the shared ManagedCluster cache).
    async fn serve(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let desired: HashMap<(String, String), Arc<ManagedCluster>> = self
                .clusters
                .state()
                .into_iter()
                .filter(|mc| mc.spec.sync_mode == SyncMode::Push)
                .filter(|mc| mc.metadata.deletion_timestamp.is_none())
                .filter(|mc| self.registered(mc))
                .map(|mc| ((mc.namespace().unwrap_or_default(), mc.name_any()), mc))
                .collect();
            let mut sessions = self.sessions.lock();
            // Under the lock [`PushManager::shutdown`] drains: no session starts after it.
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            sessions.retain(|key, task| {
                let keep = desired.contains_key(key) && !task.is_finished();
                if !keep {
                    task.abort();
                }
                keep
            });
            for (key, mc) in desired {
                if sessions.contains_key(&key) {
                    continue;
                }
                let session = Session {
                    cluster_id: mc.spec.cluster_id.clone(),
                    namespace: key.0.clone(),
                    managed_cluster_name: key.1.clone(),
                    epoch: 0,
                };
                let this = self.clone();
                sessions.insert(
                    key,
                    tokio::spawn(async move { this.session(session).await }),
                );
            }
        }
    }

    /// Whether the hub registered `mc` ([`check_registered`]): the credentials of a Push
    /// cluster someone created in a namespace of their own are never used. Each refusal is
    /// logged and becomes a Warning Event once per reason.
    fn registered(&self, mc: &ManagedCluster) -> bool {
        let crr_name = known::cluster_registration_request_name(&mc.spec.cluster_id);
        let crr = self.registrations.get(&ObjectRef::new(&crr_name));
        let key = (mc.namespace().unwrap_or_default(), mc.name_any());
        match check_registered(mc, crr.as_deref()) {
            Ok(()) => {
                self.unregistered.lock().remove(&key);
                true
            }
            Err(reason) => {
                let mut reported = self.unregistered.lock();
                if reported.get(&key) != Some(&reason) {
                    tracing::warn!(cluster = %format!("{}/{}", key.0, key.1), %reason, "push mode: not serving an unregistered cluster");
                    reported.insert(key, reason.clone());
                    let backend = self.backend.clone();
                    let reference = mc.object_ref(&());
                    tokio::spawn(async move {
                        backend
                            .warn(reference, REASON_UNREGISTERED_CLUSTER, reason)
                            .await;
                    });
                }
                false
            }
        }
    }

    async fn child_client(&self, namespace: &str) -> Result<(Client, Kubeconfig), Error> {
        let kubeconfig = self.child_kubeconfig(namespace).await?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
                .await
                .map_err(|source| Error::LoadPushKubeconfig {
                    secret: format!("{namespace}/{DEPLOYER_SECRET}"),
                    source,
                })?;
        let client = Client::try_from(config).map_err(|source| Error::BuildPushClient {
            secret: format!("{namespace}/{DEPLOYER_SECRET}"),
            source,
        })?;
        Ok((client, kubeconfig))
    }

    /// The child's kubeconfig, from the deployer Secret as it is now.
    async fn child_kubeconfig(&self, namespace: &str) -> Result<Kubeconfig, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = secrets
            .get_opt(DEPLOYER_SECRET)
            .await
            .map_err(crate::backend::api_err(
                "get Secret",
                &format!("{namespace}/{DEPLOYER_SECRET}"),
            ))?
            .ok_or_else(|| Error::ReadPushCredentials {
                secret: format!("{namespace}/{DEPLOYER_SECRET}"),
                reason: "not found; create it with the child's kubeconfig to use Push mode".into(),
            })?;
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        child_kubeconfig(&data)
            .and_then(|k| transport_allowed(&k, self.allow_insecure).map(|()| k))
            .map_err(|reason| Error::ReadPushCredentials {
                secret: format!("{namespace}/{DEPLOYER_SECRET}"),
                reason,
            })
    }

    /// Whether the deployer Secret now holds other credentials than `serving` (rotated, or the
    /// child moved). One that cannot be read now changes nothing: the session keeps what works.
    async fn credentials_changed(&self, namespace: &str, serving: &Kubeconfig) -> bool {
        match self.child_kubeconfig(namespace).await {
            Ok(now) => serde_json::to_value(&now).ok() != serde_json::to_value(serving).ok(),
            Err(e) => {
                tracing::debug!(%namespace, error = %e, "push mode: the child's credentials could not be read again; keeping the current ones");
                false
            }
        }
    }

    async fn session(self: Arc<Self>, session: Session) {
        let mut last_refusal = String::new();
        let (child, kubeconfig) = loop {
            match self.child_client(&session.namespace).await {
                Ok(c) => break c,
                Err(e) => {
                    // Said where the user looks once per distinct problem, retried quietly.
                    let message = e.to_string();
                    if message != last_refusal {
                        tracing::warn!(namespace = %session.namespace, error = %e, "push mode: the child's credentials cannot be used");
                        self.backend
                            .push_credentials_refused(&session, &message)
                            .await;
                        last_refusal = message;
                    }
                    tokio::time::sleep(self.credentials_retry).await;
                }
            }
        };
        tracing::info!(namespace = %session.namespace, cluster = %session.managed_cluster_name, "push mode: serving cluster from the hub");
        self.backend.connected(&session).await;
        let mut applier = Applier::new(child.clone(), known::FIELD_MANAGER_HUB);
        let mut st = SessionState::new(kubeconfig, self.chart_credentials);
        // Without helm the cluster's plain feeds still run; its charts fail saying so.
        if let Some(helm) = &self.helm {
            let (helm, file) = helm_for_cluster(helm, &session.namespace);
            applier = applier.with_helm(helm.with_run_limit(self.helm_runs.clone()));
            st.helm_kubeconfig = Some(file);
        }
        let applier = Arc::new(applier);
        // The drift watchers see each object's status as it changes after its apply (a
        // Deployment's replicas come later); a Description's report is written again when it
        // changes. Drift is repaired only by an elected replica: without an election every hub
        // replica serves this cluster, and replicas whose views of the Descriptions differ for
        // a moment would undo each other's applies.
        let (notices_tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
        applier.set_notifier(notices_tx);
        if self.election.is_some() {
            atoll_applier::start_drift_repair(&applier);
        } else {
            atoll_applier::start_status_watch(&applier);
        }
        let queue = self.index.subscribe(&session.namespace, session.epoch);
        let _guard = Unsubscribe(self.index.clone(), session.namespace.clone(), queue.clone());
        let mut last_heartbeat = heartbeat::Heartbeat::default();
        let mut tick = tokio::time::interval(self.heartbeat_every);
        loop {
            tokio::select! {
                () = queue.notified() => {
                    while let Some(next) = queue.next() {
                        self.handle(&session, &applier, next, &mut st).await;
                    }
                }
                Some(notice) = notices.recv() => {
                    if let Notice::ReportChanged(key) = notice
                        && st.keep.contains(&key)
                        && let Some(report) = applier.report(&key)
                    {
                        self.write(&session, &report, &mut st.unwritten).await;
                    }
                }
                _ = tick.tick() => {
                    if self.credentials_changed(&session.namespace, &st.kubeconfig).await {
                        // Ended: [`PushManager::serve`] starts the session again within a
                        // second, with the new credentials.
                        tracing::info!(namespace = %session.namespace, "push mode: the child's credentials changed; serving it again with the new ones");
                        return;
                    }
                    match heartbeat::collect(&child).await {
                        Ok(h) => last_heartbeat = h,
                        Err(e) => {
                            tracing::warn!(namespace = %session.namespace, error = %e, "push mode: child unreachable");
                            last_heartbeat.healthz = false;
                            last_heartbeat.livez = false;
                            last_heartbeat.readyz = false;
                        }
                    }
                    let hb = domain_heartbeat(&last_heartbeat, self.heartbeat_every);
                    if let Err(e) = self.backend.heartbeat(&session, hb).await {
                        tracing::warn!(error = %e, "push mode: writing cluster status failed");
                    }
                    self.retry(&session, &applier, &mut st).await;
                    self.check_credentials(&session, &applier, &mut st).await;
                }
            }
        }
    }

    async fn handle(
        &self,
        session: &Session,
        applier: &Applier,
        next: Next,
        st: &mut SessionState,
    ) {
        let ns = &session.namespace;
        if let Next::Change(name, _) = &next {
            // Whatever comes next for it replaces the failed version.
            st.failed.remove(name.as_ref());
        }
        match next {
            Next::Change(name, Change::Upsert(e)) => {
                let key = known::owned_by_description(ns, &name);
                if e.deleting {
                    let r = applier.delete(ns, &name, &e.uid).await;
                    if r.deleted {
                        st.keep.remove(&key);
                        st.pending_deletions.remove(name.as_ref());
                    } else {
                        st.pending_deletions.insert(name.to_string(), e.uid.clone());
                    }
                    self.write(session, &r, &mut st.unwritten).await;
                } else {
                    st.keep.insert(key);
                    self.apply(session, applier, &e, st).await;
                }
            }
            Next::Change(name, Change::Withheld(e)) => {
                // Over a limit with no version to run: keep what runs for it.
                tracing::warn!(namespace = %ns, description = %name, reason = ?e.rejected, "push mode: Description withheld; keeping what runs for it");
                st.keep.insert(known::owned_by_description(ns, &name));
            }
            Next::Change(name, Change::Removed { uid }) => {
                st.keep.remove(&known::owned_by_description(ns, &name));
                st.pending_deletions.remove(name.as_ref());
                st.credentials.forget(&name);
                let _ = applier.delete(ns, &name, &uid).await;
            }
            Next::SnapshotComplete => {
                if let Err(e) = applier.prune_except(&st.keep).await {
                    tracing::warn!(namespace = %ns, error = %e, "push mode: prune after snapshot failed");
                }
            }
        }
    }

    /// Applies `e` as it is now, its charts with the credentials of their `chartPullSecret`s
    /// read now (as for a Pull cluster's stream), and writes the report; a failure is tried
    /// again each tick.
    async fn apply(
        &self,
        session: &Session,
        applier: &Applier,
        e: &crate::index::DescEntry,
        st: &mut SessionState,
    ) {
        let (read, delivery) =
            crate::pull_secrets::read_chart_credentials(self.backend.as_ref(), e).await;
        st.credentials.record(
            &Arc::from(e.name.as_str()),
            delivery,
            tokio::time::Instant::now(),
        );
        let charts: Vec<model::ChartRelease> = e
            .charts
            .iter()
            .zip(read)
            .map(|(c, read)| {
                let auth = match read {
                    None => model::PullAuth::Anonymous,
                    Some(Ok(credentials)) => model::PullAuth::Credentials(model::PullCredentials {
                        username: credentials.username,
                        password: credentials.password.0,
                    }),
                    Some(Err(reason)) => model::PullAuth::Unavailable(reason),
                };
                model::ChartRelease::from_received(&c.chart, &c.values, auth)
            })
            .collect();
        if !charts.is_empty()
            && let Some(file) = &mut st.helm_kubeconfig
            && let Err(e) = file.ensure(&st.kubeconfig)
        {
            // helm then fails on the missing file, and the release with it.
            tracing::warn!(namespace = %session.namespace, error = %e, "push mode: charts cannot be installed in this cluster");
        }
        let desc = model::Description {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            uid: e.uid.clone(),
            generation: e.generation,
            orphan: model::orphans(e.labels.get(known::LABEL_DELETION_POLICY)),
            objects: e.objects.iter().map(|b| model::parse_received(b)).collect(),
            charts,
        };
        let r = applier.apply(&desc).await;
        if r.phase == model::Phase::Failure {
            st.failed.insert(e.name.clone());
        } else {
            st.failed.remove(&e.name);
        }
        self.write(session, &r, &mut st.unwritten).await;
    }

    /// The index's entry of Description `name` to apply now; `None` when it is gone, being
    /// deleted or withheld (its deletion or its hold is handled as it comes).
    fn to_apply(&self, namespace: &str, name: &str) -> Option<Arc<crate::index::DescEntry>> {
        self.index
            .get(namespace, name)
            .filter(|e| !e.deleting && e.rejected.is_none())
    }

    /// Looks again at the pull Secrets of the Descriptions due: applies a Description again
    /// when they now read differently (rotated, or readable at last), so that its next pull
    /// (an upgrade, a release repaired) uses them, as a stream sends it again.
    async fn check_credentials(&self, session: &Session, applier: &Applier, st: &mut SessionState) {
        let now = tokio::time::Instant::now();
        for (name, sent) in st.credentials.take_due(now) {
            let Some(e) = self.to_apply(&session.namespace, &name) else {
                st.credentials.forget(&name);
                continue;
            };
            if st.failed.contains(name.as_ref()) {
                // Applied again each tick with credentials read then.
                continue;
            }
            if let Some(fingerprint) = sent {
                let (_, now_read) =
                    crate::pull_secrets::read_chart_credentials(self.backend.as_ref(), &e).await;
                if now_read == crate::pull_secrets::Delivery::Complete(fingerprint) {
                    st.credentials.record(&name, now_read, now);
                    continue;
                }
                tracing::info!(namespace = %session.namespace, description = %name, "push mode: a chart's pull Secret changed; applying the Description again");
            }
            self.apply(session, applier, &e, st).await;
        }
    }

    /// What is tried again each tick: deletions the child has not finished, applies, report
    /// writes that failed, and any report the Description's status does not show.
    async fn retry(&self, session: &Session, applier: &Applier, st: &mut SessionState) {
        let deletions: Vec<(String, String)> = st
            .pending_deletions
            .iter()
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        for (name, uid) in deletions {
            let r = applier.delete(&session.namespace, &name, &uid).await;
            if r.deleted {
                st.pending_deletions.remove(&name);
                self.write(session, &r, &mut st.unwritten).await;
            }
        }
        let reports: Vec<model::Report> = st.unwritten.values().cloned().collect();
        for r in reports {
            self.write(session, &r, &mut st.unwritten).await;
        }
        // Every report checked against the status the watch shows, written where they differ:
        // every hub replica writes this cluster's statuses from its own view, so no order of
        // writes says which is newer, and a write of one replica's older view (or a late copy
        // of one) would otherwise stay until the child changes again.
        let current: Vec<model::Report> = st
            .keep
            .iter()
            .filter_map(|key| applier.report(key))
            .filter(|r| !st.unwritten.contains_key(&r.name) && !st.failed.contains(&r.name))
            .collect();
        for r in current {
            self.write(session, &r, &mut st.unwritten).await;
        }
        // Each as the index has it now, its charts' credentials read again: a pull Secret
        // created or granted since is used.
        let again: Vec<String> = st.failed.iter().cloned().collect();
        for name in again {
            match self.to_apply(&session.namespace, &name) {
                Some(e) => self.apply(session, applier, &e, st).await,
                None => {
                    st.failed.remove(&name);
                }
            }
        }
    }

    /// Writes `r` as its Description's status. A write that fails for a passing reason
    /// ([`Error::is_transient`]) keeps the report in `unwritten`, written again each tick until
    /// it succeeds or a newer report of the Description replaces it; there is no agent to send
    /// it again.
    async fn write(
        &self,
        session: &Session,
        r: &model::Report,
        unwritten: &mut HashMap<String, model::Report>,
    ) {
        unwritten.remove(&r.name);
        let Some(entry) = self.index.get(&session.namespace, &r.name) else {
            return;
        };
        let Err(e) = self.backend.report(session, entry, r.clone()).await else {
            return;
        };
        if e.is_transient() {
            tracing::warn!(namespace = %session.namespace, description = %r.name, error = %e, "push mode: writing Description status failed; retrying");
            unwritten.insert(r.name.clone(), r.clone());
        } else {
            tracing::warn!(namespace = %session.namespace, description = %r.name, error = %e, "push mode: writing Description status failed");
        }
    }
}

/// A Push session's record of what the child runs and what is to be tried again.
struct SessionState {
    /// The owner keys of the Descriptions the child is to run: the rest is pruned.
    keep: HashSet<String>,
    /// Descriptions being deleted whose objects the child still has, with their uids.
    pending_deletions: HashMap<String, String>,
    /// Descriptions whose last apply failed (the child unreachable for a moment, a pull Secret
    /// missing, say): applied again each tick until one succeeds, as an agent does.
    failed: HashSet<String>,
    /// Reports whose write to the parent failed for a passing reason, by Description.
    unwritten: HashMap<String, model::Report>,
    /// When each Description's pull Secrets are read again.
    credentials: crate::pull_secrets::CredentialChecks,
    /// The child's kubeconfig the session serves it with (from the deployer Secret).
    kubeconfig: Kubeconfig,
    /// Its copy on disk for helm (`None`: no helm).
    helm_kubeconfig: Option<HelmKubeconfig>,
}

impl SessionState {
    /// A session's state before anything is applied, serving the child with `kubeconfig`;
    /// `chart_credentials` as [`PushManager::with_chart_credentials`].
    fn new(kubeconfig: Kubeconfig, (retry, recheck): (Duration, Duration)) -> SessionState {
        SessionState {
            keep: HashSet::new(),
            pending_deletions: HashMap::new(),
            failed: HashSet::new(),
            unwritten: HashMap::new(),
            credentials: crate::pull_secrets::CredentialChecks::new(retry, recheck),
            kubeconfig,
            helm_kubeconfig: None,
        }
    }
}

struct Unsubscribe(Arc<Index>, String, Arc<crate::index::StreamQueue>);

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        self.0.unsubscribe(&self.1, &self.2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn each_push_cluster_gets_a_private_kubeconfig_for_helm() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let push_helm = PushHelm {
            binary: "helm".into(),
            home: home.path().join("helm-home"),
        };
        let kubeconfig = child_kubeconfig(&data(&[
            ("apiserver-advertise-url", "https://child.example:6443"),
            ("token", "t0ken"),
            ("ca.crt", "CA"),
        ]))
        .unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = push_helm.home.join("clusternet-abcde");
        let file = dir.join("kubeconfig");
        let (_, mut first) = helm_for_cluster(&push_helm, "clusternet-abcde");
        // Nothing on disk until the cluster's first chart.
        assert!(!dir.exists());
        first.ensure(&kubeconfig).unwrap();
        // Written again over the last one (a session that starts again).
        let (_, mut second) = helm_for_cluster(&push_helm, "clusternet-abcde");
        second.ensure(&kubeconfig).unwrap();
        second.ensure(&kubeconfig).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
        let written = Kubeconfig::read_from(&file).unwrap();
        let server = written.clusters[0].cluster.as_ref().unwrap().server.clone();
        assert_eq!(server.as_deref(), Some("https://child.example:6443"));
        // helm needs the credentials themselves, not a redaction of them.
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("\"token\":\"t0ken\""), "{text}");
        assert!(!dir.join("kubeconfig.partial").exists());
        // The session's end removes the credentials from disk.
        drop(second);
        assert!(!file.exists());
        // A home that cannot be created is an error naming the file, not a panic.
        let blocked = PushHelm {
            binary: "helm".into(),
            home: dir.join("blocked"),
        };
        std::fs::write(dir.join("blocked"), "a file").unwrap();
        let (_, mut blocked) = helm_for_cluster(&blocked, "clusternet-abcde");
        let err = blocked.ensure(&kubeconfig).unwrap_err();
        assert!(err.to_string().contains("kubeconfig"), "{err}");
    }

    #[test]
    fn child_kubeconfig_from_either_secret_layout() {
        let kc = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://child.example:6443\ncontexts:\n- name: x\n  context:\n    cluster: c\nusers: []\n";
        let cases = [
            (
                data(&[("kubeconfig", kc)]),
                Some("https://child.example:6443"),
            ),
            (
                data(&[
                    ("apiserver-advertise-url", "https://10.0.0.1:6443"),
                    ("token", "abc"),
                    ("ca.crt", "PEM"),
                ]),
                Some("https://10.0.0.1:6443"),
            ),
            (data(&[("token", "abc")]), None),
        ];
        for (d, server) in cases {
            let got = child_kubeconfig(&d).ok().and_then(|k| {
                k.clusters
                    .first()
                    .and_then(|c| c.cluster.as_ref())
                    .and_then(|c| c.server.clone())
            });
            assert_eq!(got.as_deref(), server);
        }
    }

    fn kubeconfig_with_user(user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://child.example:6443\n\
             users:\n- name: u\n  user:\n{user}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        )
    }

    #[test]
    fn push_credentials_are_data_never_code() {
        let refused = [
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: touch\n      args: [\"/tmp/pwned\"]",
                "exec",
            ),
            (
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "tokenFile",
            ),
            (
                "    client-certificate: /etc/hub/tls.crt\n    client-key: /etc/hub/tls.key",
                "client-certificate",
            ),
            ("    auth-provider:\n      name: oidc", "auth-provider"),
            ("    token: t\n    as: system:admin", "impersonation"),
            (
                "    username: admin\n    password: secret",
                "username/password",
            ),
        ];
        for (user, field) in refused {
            let d = data(&[("kubeconfig", &kubeconfig_with_user(user))]);
            let err = child_kubeconfig(&d).err().unwrap_or_default();
            assert!(err.contains(field), "{field}: {err}");
        }
        let ca_path = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://c:6443\n    certificate-authority: /etc/ssl/ca.pem\ncontexts:\n- name: x\n  context:\n    cluster: c\ncurrent-context: x\n";
        let err = child_kubeconfig(&data(&[("kubeconfig", ca_path)])).unwrap_err();
        assert!(err.contains("certificate-authority"), "{err}");

        // Plain data passes, and nothing else is carried over.
        let ok = child_kubeconfig(&data(&[(
            "kubeconfig",
            &kubeconfig_with_user(
                "    token: abc\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5",
            ),
        )]))
        .unwrap();
        let user = ok.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some() && user.client_key_data.is_some());
        assert!(user.exec.is_none() && user.token_file.is_none());

        // Plain http and skipped verification only where the administrator allowed them.
        let plain = child_kubeconfig(&data(&[
            ("apiserver-advertise-url", "http://10.0.0.1:8080"),
            ("token", "abc"),
        ]))
        .unwrap();
        let err = transport_allowed(&plain, false).unwrap_err();
        assert!(err.contains("plain http://"), "{err}");
        assert_eq!(transport_allowed(&plain, true), Ok(()));
        let mut skipping = ok.clone();
        if let Some(c) = skipping.clusters[0].cluster.as_mut() {
            c.insecure_skip_tls_verify = Some(true);
        }
        let err = transport_allowed(&skipping, false).unwrap_err();
        assert!(err.contains("insecure-skip-tls-verify"), "{err}");
        assert_eq!(transport_allowed(&ok, false), Ok(()));

        // Clusternet's layout: values stay values, whatever they contain.
        let sneaky = child_kubeconfig(&data(&[
            (
                "apiserver-advertise-url",
                "https://10.0.0.1:6443\n    insecure-skip-tls-verify: true",
            ),
            ("token", "abc\n  exec:\n    command: touch"),
        ]))
        .unwrap();
        let cluster = sneaky.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.insecure_skip_tls_verify, None);
        assert!(
            cluster
                .server
                .as_deref()
                .unwrap()
                .contains("insecure-skip-tls-verify")
        );
        assert!(
            sneaky.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .exec
                .is_none()
        );
    }
}
