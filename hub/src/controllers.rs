//! The hub's watches and the work they drive: one shared watch of Descriptions feeding the
//! [`Index`], reflectors of ManagedClusters and Subscriptions, the Description finalizer rule,
//! lost-cluster cleanup, and the Subscription status aggregation.

use crate::Error;
use crate::backend::{add_finalizer, api_err, remove_finalizer};
use crate::index::{DescEntry, Index, Limits, Update};
use crate::metrics::Metrics;
use crate::status::{self, ClusterState, FinalizerAction};
use crate::streams::OpenStreams;
use crate::token::CLUSTER_TOKEN_SECRET;
use crate::watched::WatchedDescription;
use atoll_crds::apps::{Description, DescriptionPhase, DescriptionStatus, Subscription};
use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster};
use atoll_crds::known;
use atoll_runtime::ready::Ready;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Finalizer writes in flight at once.
const FINALIZER_WRITES: usize = 8;

/// Attempts at writing back a Description status taken back to an older generation, one
/// [`STATUS_RESTORE_RETRY`] apart, while the parent does not answer.
const STATUS_RESTORE_ATTEMPTS: usize = 10;
const STATUS_RESTORE_RETRY: Duration = Duration::from_secs(1);

/// Keys (`namespace`, `name`) of objects with work due, each queued once however often it is
/// marked, and a wake-up for the loop that does the work: memory stays proportional to the
/// objects, never to the events about them.
#[derive(Default)]
struct DueKeys {
    keys: Mutex<HashSet<(String, String)>>,
    notify: Notify,
}

impl DueKeys {
    fn mark(&self, namespace: String, name: String) {
        self.keys.lock().insert((namespace, name));
        self.notify.notify_one();
    }

    /// Takes every key queued now.
    fn take(&self) -> HashSet<(String, String)> {
        std::mem::take(&mut *self.keys.lock())
    }

    /// Waits until a key is queued and takes every key queued then.
    async fn next_batch(&self) -> HashSet<(String, String)> {
        loop {
            let batch = self.take();
            if !batch.is_empty() {
                return batch;
            }
            self.notify.notified().await;
        }
    }
}

/// Settings of the controllers.
#[derive(Clone, Copy, Debug)]
pub struct ControllerConfig {
    /// A cluster not Ready for this long is lost: its Descriptions' finalizers are released.
    pub lost_cluster_timeout: Duration,
    /// How often finalizers and lost clusters are re-checked.
    pub sweep_every: Duration,
    /// Limits on delivered Descriptions.
    pub limits: Limits,
    /// Heartbeats are overdue after three periods, and never sooner than this.
    pub heartbeat_grace: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            lost_cluster_timeout: Duration::from_secs(300),
            sweep_every: Duration::from_secs(15),
            limits: Limits::default(),
            heartbeat_grace: Duration::from_secs(20),
        }
    }
}

/// The shared state of the hub's controllers.
pub struct Controllers {
    client: Client,
    index: Arc<Index>,
    clusters: Store<ManagedCluster>,
    clusters_writer: Mutex<Option<reflector::store::Writer<ManagedCluster>>>,
    registrations: Store<ClusterRegistrationRequest>,
    registrations_writer: Mutex<Option<reflector::store::Writer<ClusterRegistrationRequest>>>,
    subs: Store<Subscription>,
    subs_writer: Mutex<Option<reflector::store::Writer<Subscription>>>,
    metrics: Arc<Metrics>,
    config: ControllerConfig,
    /// Subscriptions whose aggregated status is to be recomputed.
    aggregation_due: DueKeys,
    /// Descriptions whose finalizer may need adding or releasing.
    finalizers_due: DueKeys,
    clusters_ready: Ready,
    subs_ready: Ready,
    streams: Arc<OpenStreams>,
}

impl Controllers {
    /// Controllers over `client`, feeding `index`.
    pub fn new(
        client: Client,
        index: Arc<Index>,
        metrics: Arc<Metrics>,
        config: ControllerConfig,
        streams: Arc<OpenStreams>,
    ) -> Arc<Controllers> {
        let (clusters, cw) = reflector::store();
        let (registrations, rw) = reflector::store();
        let (subs, sw) = reflector::store();
        Arc::new(Controllers {
            client,
            index,
            clusters,
            clusters_writer: Mutex::new(Some(cw)),
            registrations,
            registrations_writer: Mutex::new(Some(rw)),
            subs,
            subs_writer: Mutex::new(Some(sw)),
            metrics,
            config,
            aggregation_due: DueKeys::default(),
            finalizers_due: DueKeys::default(),
            clusters_ready: Ready::new(),
            subs_ready: Ready::new(),
            streams,
        })
    }

    /// The ManagedCluster reflector's store (shared with the backend).
    pub fn clusters(&self) -> Store<ManagedCluster> {
        self.clusters.clone()
    }

    /// The ClusterRegistrationRequest reflector's store: which ManagedClusters the hub
    /// registered.
    pub fn registrations(&self) -> Store<ClusterRegistrationRequest> {
        self.registrations.clone()
    }

    /// Resolves once every watch has completed its first list.
    pub async fn wait_ready(&self) {
        self.clusters_ready.wait().await;
        self.subs_ready.wait().await;
        self.index.wait_synced().await;
    }

    /// Runs every loop until one fails for good (they retry API errors with backoff).
    pub async fn run(self: Arc<Self>) {
        tokio::join!(
            self.clone().watch_clusters(),
            self.clone().watch_subscriptions(),
            self.clone().watch_descriptions(),
            self.clone().watch_cluster_tokens(),
            self.clone().watch_registrations(),
            self.clone().aggregate_loop(),
            self.clone().finalizer_loop(),
            self.clone().sweep_loop(),
        );
    }

    async fn watch_clusters(self: Arc<Self>) {
        let Some(writer) = self.clusters_writer.lock().take() else {
            return;
        };
        let api: Api<ManagedCluster> = Api::all(self.client.clone());
        // managedFields are never read here and are half of a ManagedCluster's size.
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|mc: &mut ManagedCluster| mc.metadata.managed_fields = None),
        );
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    self.clusters_ready.set();
                }
                Ok(watcher::Event::Delete(mc)) => {
                    self.streams.cluster_changed(&mc, true);
                    let ns = mc.namespace().unwrap_or_default();
                    for e in self.index.namespace_entries(&ns) {
                        self.reconcile_finalizer(&e);
                    }
                }
                Ok(watcher::Event::Apply(mc) | watcher::Event::InitApply(mc)) => {
                    // A newer stream on another replica, or a rotation asked for.
                    self.streams.cluster_changed(&mc, false);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching ManagedClusters failed (retrying); if the resource is not found, install the CRDs: kubectl apply -k manifests/crds")
                }
            }
        }
    }

    async fn watch_subscriptions(self: Arc<Self>) {
        let Some(writer) = self.subs_writer.lock().take() else {
            return;
        };
        let api: Api<Subscription> = Api::all(self.client.clone());
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|s: &mut Subscription| s.metadata.managed_fields = None),
        );
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    self.subs_ready.set();
                }
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    self.aggregation_due
                        .mark(s.namespace().unwrap_or_default(), s.name_any());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching Subscriptions failed (retrying); if the resource is not found, install the CRDs: kubectl apply -k manifests/crds")
                }
            }
        }
    }

    async fn watch_descriptions(self: Arc<Self>) {
        self.clusters_ready.wait().await;
        let api: Api<WatchedDescription> = Api::all(self.client.clone());
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => self.index.begin_relist(),
                Ok(watcher::Event::InitApply(d) | watcher::Event::Apply(d)) => {
                    let u = self
                        .index
                        .apply(DescEntry::from_watched(&d, self.config.limits));
                    self.after_update(u);
                }
                Ok(watcher::Event::Delete(d)) => {
                    let u = self
                        .index
                        .delete(&d.namespace().unwrap_or_default(), &d.name_any());
                    self.after_update(u);
                }
                Ok(watcher::Event::InitDone) => {
                    for u in self.index.finish_relist() {
                        self.after_update(u);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching Descriptions failed (retrying); if the resource is not found, install the CRDs: kubectl apply -k manifests/crds")
                }
            }
        }
    }

    /// Closes open streams whose cluster token was revoked, replaced or let expire. Only
    /// Secrets named `cluster-token` are watched (the hub's RBAC allows no other list).
    async fn watch_cluster_tokens(self: Arc<Self>) {
        let api: Api<Secret> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("metadata.name={CLUSTER_TOKEN_SECRET}"));
        let stream = watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let now = Timestamp::now();
            match ev {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    let record = crate::backend::record_of_secret(&s);
                    self.streams.token_changed(
                        &s.namespace().unwrap_or_default(),
                        Some(&record),
                        now,
                    );
                }
                Ok(watcher::Event::Delete(s)) => {
                    self.streams
                        .token_changed(&s.namespace().unwrap_or_default(), None, now);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching cluster-token Secrets failed (retrying); revoked tokens close open streams only once it works")
                }
            }
        }
    }

    /// Keeps the registrations (which ManagedClusters the hub registered) and closes the
    /// streams of clusters whose registration an administrator denied.
    async fn watch_registrations(self: Arc<Self>) {
        let Some(writer) = self.registrations_writer.lock().take() else {
            return;
        };
        let api: Api<ClusterRegistrationRequest> = Api::all(self.client.clone());
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff(),
        );
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(crr) | watcher::Event::InitApply(crr)) => {
                    self.streams.registration_changed(&crr);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching ClusterRegistrationRequests failed (retrying)")
                }
            }
        }
    }

    fn after_update(&self, u: Update) {
        let entry = u.current.as_ref().or(u.previous.as_ref());
        if let Some(e) = entry {
            let status_changed = u.current.as_ref().map(|c| &c.status)
                != u.previous.as_ref().map(|p| &p.status)
                || u.current.is_none()
                || u.previous.is_none()
                || u.current.as_ref().map(|c| c.deleting)
                    != u.previous.as_ref().map(|p| p.deleting);
            if status_changed && let Some((ns, name)) = e.subscription() {
                self.aggregation_due.mark(ns, name);
            }
        }
        if let (Some(c), Some(p)) = (&u.current, &u.previous)
            && let Some(before) = status::status_taken_back(p, c)
        {
            self.restore_status(c, before);
        }
        if let Some(c) = &u.current {
            self.reconcile_finalizer(c);
            if let Some(reason) = &c.rejected {
                self.write_rejection(c, reason);
            }
        }
    }

    fn cluster_state(&self, namespace: &str, now: Timestamp) -> ClusterState {
        let mcs = self
            .clusters
            .state_filter(|mc| mc.metadata.namespace.as_deref() == Some(namespace));
        match mcs.first() {
            None => ClusterState::Absent,
            Some(mc) => {
                let created = mc.metadata.creation_timestamp.as_ref().map(|t| t.0);
                if status::cluster_lost(
                    mc.status.as_ref(),
                    created,
                    now,
                    self.config.lost_cluster_timeout,
                ) {
                    ClusterState::Lost
                } else {
                    ClusterState::Registered
                }
            }
        }
    }

    /// Queues the finalizer rule for `e` when its outcome depends on the cluster. Only the key
    /// is queued: one spawned write per Description update (and per sweep) piled up faster than
    /// the parent took them at 100,000 Descriptions (the hub grew by 60 MB/s).
    fn reconcile_finalizer(&self, e: &Arc<DescEntry>) {
        // Looking the cluster up scans every ManagedCluster; on every Description update that
        // was quadratic in the clusters (17% of the hub's CPU in a 1,000-cluster edit).
        if status::finalizer_depends_on_cluster(e) {
            self.finalizers_due
                .mark(e.namespace.clone(), e.name.clone());
        }
    }

    /// Applies the finalizer rule to the queued Descriptions, [`FINALIZER_WRITES`] at a time,
    /// each as the index shows it when its turn comes.
    async fn finalizer_loop(self: Arc<Self>) {
        loop {
            let batch = self.finalizers_due.next_batch().await;
            futures::stream::iter(batch)
                .for_each_concurrent(FINALIZER_WRITES, |(ns, name)| {
                    let this = self.clone();
                    async move { this.settle_finalizer(&ns, &name).await }
                })
                .await;
        }
    }

    async fn settle_finalizer(&self, ns: &str, name: &str) {
        let Some(e) = self.index.get(ns, name) else {
            return;
        };
        if !status::finalizer_depends_on_cluster(&e) {
            return;
        }
        let state = self.cluster_state(ns, Timestamp::now());
        let r = match status::finalizer_action(&e, state) {
            FinalizerAction::Keep => return,
            FinalizerAction::Add => add_finalizer(&self.client, &e).await,
            FinalizerAction::Remove => {
                tracing::info!(namespace = %ns, name = %name, cluster = ?state, "releasing a Description of a lost or deleted cluster");
                remove_finalizer(&self.client, &e).await
            }
        };
        match r {
            Ok(true) => self.metrics.write("finalizer"),
            Ok(false) => {}
            Err(e) => {
                // The next sweep queues it again.
                self.metrics.error(&e);
                tracing::warn!(error = %e, "updating a Description finalizer failed");
            }
        }
    }

    /// Writes `status` back on `e`, whose status went back to an older generation or report
    /// ([`status::status_taken_back`]); nothing else would until the cluster reports again.
    /// Tried again while the parent does not answer, and given up once the Description changed
    /// (409): its own watch event decides then.
    fn restore_status(&self, e: &Arc<DescEntry>, status: &DescriptionStatus) {
        let now = e.status.as_ref();
        tracing::info!(namespace = %e.namespace, name = %e.name, was = ?status.observed_generation, now = ?now.and_then(|s| s.observed_generation), was_report = ?status.report_order, now_report = ?now.and_then(|s| s.report_order), "a Description's status went back to an older generation or report; writing the newer one again");
        let api: Api<Description> = Api::namespaced(self.client.clone(), &e.namespace);
        let name = e.name.clone();
        let obj = format!("{}/{}", e.namespace, e.name);
        let patch = status::status_restore_patch(status, &e.resource_version);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            for _ in 0..STATUS_RESTORE_ATTEMPTS {
                let r = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                match r {
                    Ok(_) => {
                        metrics.write("description_status");
                        return;
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return,
                    Err(source) => {
                        let e = api_err("restore Description status", &obj)(source);
                        metrics.error(&e);
                        tracing::warn!(error = %e, "restoring a Description status failed; retrying");
                        tokio::time::sleep(STATUS_RESTORE_RETRY).await;
                    }
                }
            }
        });
    }

    fn write_rejection(&self, e: &Arc<DescEntry>, reason: &str) {
        let already = e.status.as_ref().is_some_and(|s| {
            s.phase == Some(DescriptionPhase::Failure) && s.reason.as_deref() == Some(reason)
        });
        if already {
            return;
        }
        let st = DescriptionStatus {
            phase: Some(DescriptionPhase::Failure),
            reason: Some(reason.to_string()),
            observed_generation: e.status.as_ref().and_then(|s| s.observed_generation),
            ..DescriptionStatus::default()
        };
        let api: Api<Description> = Api::namespaced(self.client.clone(), &e.namespace);
        let name = e.name.clone();
        let obj = format!("{}/{}", e.namespace, e.name);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let r = api
                .patch_status(
                    &name,
                    &PatchParams::apply(known::FIELD_MANAGER_HUB).force(),
                    &Patch::Apply(&status::description_status_patch(&st)),
                )
                .await
                .map_err(api_err("write Description status", &obj));
            if let Err(e) = r {
                metrics.error(&e);
                tracing::warn!(error = %e, "recording a rejected Description failed");
            }
        });
    }

    async fn aggregate_loop(self: Arc<Self>) {
        self.wait_ready().await;
        loop {
            let mut batch = self.aggregation_due.next_batch().await;
            // Let a burst of reports on one Subscription settle into one write.
            tokio::time::sleep(Duration::from_millis(100)).await;
            batch.extend(self.aggregation_due.take());
            for (ns, name) in batch {
                if let Err(e) = self.aggregate(&ns, &name).await {
                    self.metrics.error(&e);
                    tracing::warn!(error = %e, "writing Subscription aggregated status failed");
                }
            }
        }
    }

    /// Recomputes and, when changed, writes the aggregated status of Subscription `ns/name`.
    pub async fn aggregate(&self, ns: &str, name: &str) -> Result<(), Error> {
        let Some(sub) = self.subs.get(&ObjectRef::new(name).within(ns)) else {
            return Ok(());
        };
        let descs = self.index.by_subscription(ns, name);
        let clusters: HashMap<(String, String), String> = self
            .clusters
            .state()
            .iter()
            .map(|mc| {
                (
                    (mc.namespace().unwrap_or_default(), mc.name_any()),
                    mc.spec.cluster_id.clone(),
                )
            })
            .collect();
        let patch = status::subscription_status_patch(&sub, &descs, |cns, cname| {
            clusters.get(&(cns.to_string(), cname.to_string())).cloned()
        });
        let Some(patch) = patch else {
            return Ok(());
        };
        let api: Api<Subscription> = Api::namespaced(self.client.clone(), ns);
        api.patch_status(
            name,
            &PatchParams::apply(known::FIELD_MANAGER_HUB).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(api_err(
            "write Subscription status",
            &format!("{ns}/{name}"),
        ))?;
        self.metrics.write("subscription_status");
        Ok(())
    }

    async fn sweep_loop(self: Arc<Self>) {
        self.wait_ready().await;
        let watching_since = Timestamp::now();
        let mut tick = tokio::time::interval(self.config.sweep_every);
        loop {
            tick.tick().await;
            for e in self.index.all_entries() {
                self.reconcile_finalizer(&e);
            }
            let overdue = |mc: &ManagedCluster| {
                status::heartbeat_overdue(
                    mc.status.as_ref(),
                    Timestamp::now(),
                    self.config.heartbeat_grace,
                    watching_since,
                )
            };
            for cached in self.clusters.state() {
                if !overdue(&cached) {
                    continue;
                }
                // The watch may lag behind the heartbeats written meanwhile (a parent under
                // load delivers events late): judge the cluster as it is now.
                let (ns, name) = (cached.namespace().unwrap_or_default(), cached.name_any());
                let api: Api<ManagedCluster> = Api::namespaced(self.client.clone(), &ns);
                let mc = match api.get_opt(&name).await {
                    Ok(Some(mc)) if overdue(&mc) => mc,
                    Ok(_) => continue,
                    Err(e) => {
                        let e = api_err("read ManagedCluster", &format!("{ns}/{name}"))(e);
                        self.metrics.error(&e);
                        tracing::warn!(error = %e, "checking a silent cluster failed");
                        continue;
                    }
                };
                tracing::info!(namespace = %ns, name = %name, "heartbeats overdue: marking the cluster Ready=Unknown");
                if let Err(e) =
                    crate::backend::write_unknown(&self.client, &self.metrics, &mc).await
                {
                    self.metrics.error(&e);
                    tracing::warn!(error = %e, "marking a silent cluster failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> (String, String) {
        (ns.to_string(), name.to_string())
    }

    #[tokio::test]
    async fn a_key_marked_many_times_is_due_once() {
        let due = DueKeys::default();
        for _ in 0..1000 {
            due.mark("clusternet-a".into(), "default.web".into());
        }
        due.mark("clusternet-b".into(), "default.web".into());
        let batch = due.next_batch().await;
        assert_eq!(
            batch,
            HashSet::from([
                key("clusternet-a", "default.web"),
                key("clusternet-b", "default.web")
            ])
        );
        assert!(due.take().is_empty());
    }

    #[tokio::test]
    async fn a_key_marked_while_its_batch_is_worked_on_is_due_again() {
        let due = Arc::new(DueKeys::default());
        due.mark("ns".into(), "d".into());
        assert_eq!(due.next_batch().await.len(), 1);
        let waiter = tokio::spawn({
            let due = due.clone();
            async move { due.next_batch().await }
        });
        tokio::task::yield_now().await;
        due.mark("ns".into(), "d".into());
        let batch = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .ok()
            .and_then(Result::ok);
        assert_eq!(batch, Some(HashSet::from([key("ns", "d")])));
    }
}
