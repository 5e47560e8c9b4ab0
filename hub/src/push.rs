//! Push mode: a ManagedCluster with `syncMode: Push` has no agent stream. The hub runs the
//! agent's applier itself, with the credentials of Secret `child-cluster-deployer` in the
//! cluster's dedicated namespace, fed from the same in-memory index as the streams. It writes
//! status back through the same [`KubeBackend`] paths (reports, heartbeats).

use crate::Error;
use crate::backend::KubeBackend;
use crate::domain::{ClusterHeartbeat, ObjectReport, Report, Session};
use crate::index::{Change, Index, Next};
use crate::service::Backend;
use atoll_agent::{Applier, heartbeat, model};
use atoll_crds::clusters::{ManagedCluster, SyncMode};
use atoll_crds::known;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Secret in a Push cluster's dedicated namespace holding the child's credentials: either a
/// `kubeconfig` key, or Clusternet's `apiserver-advertise-url`, `token` and `ca.crt`.
pub const DEPLOYER_SECRET: &str = "child-cluster-deployer";

/// Builds a kubeconfig for the child from the deployer Secret's data.
pub fn child_kubeconfig(data: &BTreeMap<String, Vec<u8>>) -> Result<Kubeconfig, Error> {
    let fail = |message: String| Error::CallApiServer {
        operation: "read child credentials".into(),
        object: DEPLOYER_SECRET.into(),
        message,
    };
    if let Some(raw) = data.get("kubeconfig") {
        let text = String::from_utf8(raw.clone()).map_err(|e| fail(e.to_string()))?;
        return Kubeconfig::from_yaml(&text).map_err(|e| fail(e.to_string()));
    }
    let url = data
        .get("apiserver-advertise-url")
        .and_then(|v| String::from_utf8(v.clone()).ok())
        .ok_or_else(|| {
            fail(
                "the Secret has neither `kubeconfig` nor `apiserver-advertise-url`; add one".into(),
            )
        })?;
    let token = data
        .get("token")
        .and_then(|v| String::from_utf8(v.clone()).ok())
        .unwrap_or_default();
    let ca = data
        .get("ca.crt")
        .map(|c| format!("\n    certificate-authority-data: {}", STANDARD.encode(c)))
        .unwrap_or_default();
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: child\n  cluster:\n    server: {url}{ca}\n\
         users:\n- name: deployer\n  user:\n    token: {token}\ncontexts:\n- name: child\n  context:\n    cluster: child\n    user: deployer\n\
         current-context: child\n"
    );
    Kubeconfig::from_yaml(&yaml).map_err(|e| fail(e.to_string()))
}

/// Converts the applier's report into the hub's domain report.
pub fn domain_report(r: &model::Report) -> Report {
    Report {
        name: r.name.clone(),
        uid: r.uid.clone(),
        observed_generation: r.observed_generation,
        phase: r.phase.as_str().to_string(),
        reason: r.reason.clone(),
        objects: r
            .objects
            .iter()
            .map(|o| ObjectReport {
                api_version: o.object.api_version.clone(),
                kind: o.object.kind.clone(),
                namespace: o.object.namespace.clone(),
                name: o.object.name.clone(),
                status: o.status.clone(),
                error: o.error.clone().unwrap_or_default(),
            })
            .collect(),
        deleted: r.deleted,
    }
}

fn domain_heartbeat(h: &heartbeat::Heartbeat, period: Duration) -> ClusterHeartbeat {
    ClusterHeartbeat {
        k8s_version: h.k8s_version.clone(),
        platform: h.platform.clone(),
        agent_version: format!("atoll-hub {} (push)", env!("CARGO_PKG_VERSION")),
        ready_nodes: h.ready_nodes,
        not_ready_nodes: h.not_ready_nodes,
        unknown_nodes: h.unknown_nodes,
        capacity: h.capacity.clone(),
        allocatable: h.allocatable.clone(),
        healthz: h.healthz,
        livez: h.livez,
        readyz: h.readyz,
        heartbeat_seconds: u32::try_from(period.as_secs()).unwrap_or(u32::MAX),
    }
}

/// Runs one push session per `syncMode: Push` ManagedCluster.
pub struct PushManager {
    client: Client,
    index: Arc<Index>,
    clusters: Store<ManagedCluster>,
    backend: Arc<KubeBackend>,
    heartbeat_every: Duration,
    sessions: Mutex<HashMap<(String, String), JoinHandle<()>>>,
}

impl PushManager {
    /// A manager reading ManagedClusters from `clusters`.
    pub fn new(
        client: Client,
        index: Arc<Index>,
        clusters: Store<ManagedCluster>,
        backend: Arc<KubeBackend>,
        heartbeat_every: Duration,
    ) -> Arc<PushManager> {
        Arc::new(PushManager {
            client,
            index,
            clusters,
            backend,
            heartbeat_every,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// Starts and stops sessions as ManagedClusters come, go and change mode (checked every
    /// second from the shared ManagedCluster cache).
    pub async fn run(self: Arc<Self>) {
        self.index.wait_synced().await;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let desired: HashMap<(String, String), Arc<ManagedCluster>> = self
                .clusters
                .state()
                .into_iter()
                .filter(|mc| mc.spec.sync_mode == SyncMode::Push)
                .filter(|mc| mc.metadata.deletion_timestamp.is_none())
                .map(|mc| ((mc.namespace().unwrap_or_default(), mc.name_any()), mc))
                .collect();
            let mut sessions = self.sessions.lock();
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

    async fn child_client(&self, namespace: &str) -> Result<Client, Error> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = secrets
            .get_opt(DEPLOYER_SECRET)
            .await
            .map_err(crate::backend::api_err(
                "get Secret",
                &format!("{namespace}/{DEPLOYER_SECRET}"),
            ))?
            .ok_or_else(|| Error::CallApiServer {
                operation: "get Secret".into(),
                object: format!("{namespace}/{DEPLOYER_SECRET}"),
                message: "not found; create it with the child's kubeconfig to use Push mode".into(),
            })?;
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let kubeconfig = child_kubeconfig(&data)?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::CallApiServer {
                operation: "load child kubeconfig".into(),
                object: format!("{namespace}/{DEPLOYER_SECRET}"),
                message: e.to_string(),
            })?;
        Client::try_from(config).map_err(|e| Error::CallApiServer {
            operation: "build child client".into(),
            object: format!("{namespace}/{DEPLOYER_SECRET}"),
            message: e.to_string(),
        })
    }

    async fn session(self: Arc<Self>, session: Session) {
        let child = loop {
            match self.child_client(&session.namespace).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(namespace = %session.namespace, error = %e, "push mode: no child credentials yet");
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
            }
        };
        tracing::info!(namespace = %session.namespace, cluster = %session.managed_cluster_name, "push mode: serving cluster from the hub");
        self.backend.connected(&session).await;
        let applier = Applier::new(child.clone(), known::FIELD_MANAGER_HUB);
        let queue = self.index.subscribe(&session.namespace);
        let _guard = Unsubscribe(self.index.clone(), session.namespace.clone(), queue.clone());
        let mut keep: HashSet<String> = HashSet::new();
        let mut pending_deletions: HashMap<String, String> = HashMap::new();
        let mut last_heartbeat = heartbeat::Heartbeat::default();
        let mut tick = tokio::time::interval(self.heartbeat_every);
        loop {
            tokio::select! {
                () = queue.notified() => {
                    while let Some(next) = queue.next() {
                        self.handle(&session, &applier, next, &mut keep, &mut pending_deletions).await;
                    }
                }
                _ = tick.tick() => {
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
                    let retry: Vec<(String, String)> = pending_deletions.iter().map(|(n, u)| (n.clone(), u.clone())).collect();
                    for (name, uid) in retry {
                        let r = applier.delete(&session.namespace, &name, &uid).await;
                        if r.deleted {
                            pending_deletions.remove(&name);
                            self.write(&session, &r).await;
                        }
                    }
                }
            }
        }
    }

    async fn handle(
        &self,
        session: &Session,
        applier: &Applier,
        next: Next,
        keep: &mut HashSet<String>,
        pending_deletions: &mut HashMap<String, String>,
    ) {
        let ns = &session.namespace;
        match next {
            Next::Change(name, Change::Upsert(e)) => {
                let key = known::owned_by_description(ns, &name);
                if e.deleting {
                    let r = applier.delete(ns, &name, &e.uid).await;
                    if r.deleted {
                        keep.remove(&key);
                        pending_deletions.remove(name.as_ref());
                    } else {
                        pending_deletions.insert(name.to_string(), e.uid.clone());
                    }
                    self.write(session, &r).await;
                } else {
                    keep.insert(key);
                    let desc = model::Description {
                        namespace: ns.clone(),
                        name: name.to_string(),
                        uid: e.uid.clone(),
                        generation: e.generation,
                        objects: e
                            .objects
                            .iter()
                            .map(|b| serde_json::from_slice(b).unwrap_or(serde_json::Value::Null))
                            .collect(),
                    };
                    let r = applier.apply(&desc).await;
                    self.write(session, &r).await;
                }
            }
            Next::Change(name, Change::Removed { uid }) => {
                keep.remove(&known::owned_by_description(ns, &name));
                pending_deletions.remove(name.as_ref());
                let _ = applier.delete(ns, &name, &uid).await;
            }
            Next::SnapshotComplete => {
                if let Err(e) = applier.prune_except(keep).await {
                    tracing::warn!(namespace = %ns, error = %e, "push mode: prune after snapshot failed");
                }
            }
        }
    }

    async fn write(&self, session: &Session, r: &model::Report) {
        let Some(entry) = self.index.get(&session.namespace, &r.name) else {
            return;
        };
        if let Err(e) = self.backend.report(session, entry, domain_report(r)).await {
            tracing::warn!(error = %e, "push mode: writing Description status failed");
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
    fn child_kubeconfig_from_either_secret_layout() {
        let kc = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://child.example:6443\ncontexts: []\nusers: []\n";
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

    #[test]
    fn applier_reports_convert_field_by_field() {
        let r = model::Report {
            name: "apps.web".into(),
            uid: "u".into(),
            observed_generation: 3,
            phase: model::Phase::Failure,
            reason: "boom".into(),
            objects: vec![model::ObjectReport {
                object: model::ObjectRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: "d".into(),
                    name: "cm".into(),
                },
                status: None,
                error: Some("denied".into()),
            }],
            deleted: false,
        };
        let d = domain_report(&r);
        assert_eq!(
            (d.phase.as_str(), d.observed_generation, d.reason.as_str()),
            ("Failure", 3, "boom")
        );
        assert_eq!(d.objects[0].error, "denied");
        assert_eq!(d.objects[0].kind, "ConfigMap");
    }
}
