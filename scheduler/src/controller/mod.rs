//! The scheduler's control loop: one shared watch per kind feeding indexed stores, a
//! `kube::runtime::Controller` over Subscriptions, and triggers from every other kind mapped to
//! the Subscriptions they affect.
//!
//! Triggers:
//! - a ManagedCluster whose labels, taints, readiness or allocatable changed (not its heartbeat
//!   timestamps): every Subscription is reconciled again, so Replication adds or drops the
//!   cluster and Dividing rebalances over the clusters now eligible;
//! - a Globalization or Localization with `overridePolicy: ApplyNow` created, changed or
//!   deleted: the Subscriptions whose feeds it targets. `ApplyLater` overrides take effect on the
//!   next render of the Subscription for any other reason (or the periodic resync);
//! - a Manifest or a live feed object created, changed or deleted: the Subscriptions naming it;
//! - a FeedGrant created, changed or deleted: the Subscriptions with feeds its namespace owns,
//!   so that a grant takes effect, and a revocation refuses the feed again, at once;
//! - a Description deleted by someone else: its Subscription, which writes it again.

mod epoch;
mod feeds;
mod index;
mod metrics;
pub mod plan;
mod reconcile;

pub use metrics::Metrics;
pub use reconcile::{Config, Context, DEFAULT_SCHEDULER_NAME, Stores, error_policy, reconcile};

use crate::Error;
use crate::placement::ClusterInfo;
use atoll_crds::apps::{
    Description, Globalization, Localization, Manifest, OverridePolicy, Subscription,
};
use atoll_crds::atoll::FeedGrant;
use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster};
use atoll_crds::known;
use atoll_runtime::ready::Ready;
use futures::{FutureExt, StreamExt};
use kube::api::PartialObjectMeta;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Capacity of the trigger queue between the watches and the reconcile loop.
const TRIGGER_QUEUE: usize = 4096;

/// Starts a reflector for `api`, calling `on_event` for every change after the initial list.
/// A later list (the watch expired, or the API server restarted) asks for a pass of every
/// Subscription on `relisted`: what changed while the watch was down comes only in that list.
fn spawn_reflector<K, F>(
    api: Api<K>,
    config: watcher::Config,
    epoch: &epoch::InputEpoch,
    relisted: &mpsc::Sender<()>,
    on_event: F,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(&Event<K>) -> Vec<Trigger> + Send + 'static,
{
    reflect_stream(
        watcher::watcher(api, config),
        epoch.clone(),
        relisted.clone(),
        on_event,
    )
}

/// Whether a watch's `InitDone` is that of a re-list (not the first list): then changes may
/// have been missed, and every Subscription needs a pass. `listed` remembers the first one.
pub fn is_relist<K>(event: &Event<K>, listed: &mut bool) -> bool {
    if !matches!(event, Event::InitDone) {
        return false;
    }
    std::mem::replace(listed, true)
}

/// Reflects a watch stream into a store, calling `on_event` for every event.
fn reflect_stream<K, S, F>(
    stream: S,
    epoch: epoch::InputEpoch,
    relisted: mpsc::Sender<()>,
    mut on_event: F,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    S: futures::Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
    F: FnMut(&Event<K>) -> Vec<Trigger> + Send + 'static,
{
    let (store, writer) = reflector::store();
    let stream = stream
        .default_backoff()
        .modify(drop_managed_fields)
        .reflect(writer);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    // A (re-)list may hide changes made while the watch was down.
                    if matches!(event, Event::InitDone) {
                        epoch.bump();
                    }
                    if is_relist(&event, &mut listed)
                        && Trigger::All(relisted.clone()).send().await.is_err()
                    {
                        return;
                    }
                    for trigger in on_event(&event) {
                        if trigger.send().await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed"),
            }
        }
    });
    store
}

/// managedFields are never read by the scheduler and are often the largest part of an object;
/// leaving them out of the caches keeps memory proportional to what is used.
fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// Reconciles running at once; bounds the requests in flight against the parent.
const RECONCILE_CONCURRENCY: u16 = 16;

/// What a watch event asks of the reconcile loop.
enum Trigger {
    One(
        mpsc::Sender<ObjectRef<Subscription>>,
        ObjectRef<Subscription>,
    ),
    All(mpsc::Sender<()>),
}

impl Trigger {
    async fn send(self) -> Result<(), ()> {
        match self {
            Trigger::One(tx, r) => tx.send(r).await.map_err(|_| ()),
            // A full queue already holds a reconcile-all; dropping this one loses nothing.
            Trigger::All(tx) => match tx.try_send(()) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(())) => Ok(()),
                Err(mpsc::error::TrySendError::Closed(())) => Err(()),
            },
        }
    }
}

/// What of a ManagedCluster affects scheduling (not its heartbeat timestamps).
fn cluster_fingerprint(cluster: &ManagedCluster) -> u64 {
    let info = ClusterInfo::from_managed_cluster(cluster);
    let mut hasher = DefaultHasher::new();
    info.labels.hash(&mut hasher);
    info.ready.hash(&mut hasher);
    info.allocatable.hash(&mut hasher);
    for taint in &info.taints {
        (&taint.key, &taint.value, &taint.effect).hash(&mut hasher);
    }
    cluster
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    hasher.finish()
}

/// The objects of `event` that changed (not the initial list).
fn changed<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(k) | Event::Delete(k) => Some(k),
        _ => None,
    }
}

/// Runs the scheduler until the process stops. `ready` is called once every cache has synced.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Metrics,
    reporter: Reporter,
    ready: impl FnOnce() + Send,
) -> Result<(), Error> {
    let (one_tx, one_rx) = mpsc::channel::<ObjectRef<Subscription>>(TRIGGER_QUEUE);
    let inputs = epoch::InputEpoch::default();
    let (all_tx, all_rx) = mpsc::channel::<()>(1);

    let (subscriptions, writer) = reflector::store();
    let subscription_events = watcher::watcher(
        Api::<Subscription>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(drop_managed_fields)
    .reflect(writer)
    .applied_objects();
    let controller = Controller::for_stream(subscription_events, subscriptions.clone())
        .with_config(
            kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY),
        );

    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    let all = all_tx.clone();
    let bump = inputs.clone();
    let clusters = spawn_reflector(
        Api::<ManagedCluster>::all(client.clone()),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            let (cluster, initial) = match event {
                Event::Apply(c) | Event::Delete(c) => (c, false),
                Event::InitApply(c) => (c, true),
                _ => return Vec::new(),
            };
            let key = format!(
                "{}/{}",
                cluster.namespace().unwrap_or_default(),
                cluster.name_any()
            );
            let fingerprint = match event {
                Event::Delete(_) => 0,
                _ => cluster_fingerprint(cluster),
            };
            let previous = fingerprints.insert(key, fingerprint);
            if initial || previous == Some(fingerprint) {
                return Vec::new();
            }
            bump.bump();
            vec![Trigger::All(all.clone())]
        },
    );

    let override_subs = subscriptions.clone();
    let tx = one_tx.clone();
    let bump = inputs.clone();
    let globalizations = spawn_reflector(
        Api::<Globalization>::all(client.clone()),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            changed(event)
                .inspect(|_| bump.bump())
                .filter(|g| g.spec.override_policy == OverridePolicy::ApplyNow)
                .map(|g| feed_triggers(&override_subs, &g.spec.feed, &tx))
                .unwrap_or_default()
        },
    );
    let override_subs = subscriptions.clone();
    let tx = one_tx.clone();
    let bump = inputs.clone();
    let localizations = spawn_reflector(
        Api::<Localization>::all(client.clone()),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            changed(event)
                .inspect(|_| bump.bump())
                .filter(|l| l.spec.override_policy == OverridePolicy::ApplyNow)
                .map(|l| feed_triggers(&override_subs, &l.spec.feed, &tx))
                .unwrap_or_default()
        },
    );
    let manifest_subs = subscriptions.clone();
    let tx = one_tx.clone();
    let bump = inputs.clone();
    let manifests = spawn_reflector(
        Api::<Manifest>::namespaced(client.clone(), known::NAMESPACE_RESERVED),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            let Some(manifest) = changed(event) else {
                return Vec::new();
            };
            bump.bump();
            let labels = manifest.labels();
            let label = |k: &str| labels.get(k).map_or("", String::as_str);
            let group = label(known::LABEL_CONFIG_GROUP);
            let version = label(known::LABEL_CONFIG_VERSION);
            let api_version = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            feeds::subscriptions_naming(
                &manifest_subs,
                &api_version,
                label(known::LABEL_CONFIG_KIND),
                label(known::LABEL_CONFIG_NAMESPACE),
                label(known::LABEL_CONFIG_NAME),
            )
            .into_iter()
            .map(|r| Trigger::One(tx.clone(), r))
            .collect()
        },
    );
    let grant_subs = subscriptions.clone();
    let tx = one_tx.clone();
    let bump = inputs.clone();
    let grants = spawn_reflector(
        Api::<FeedGrant>::all(client.clone()),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            let Some(grant) = changed(event) else {
                return Vec::new();
            };
            bump.bump();
            feeds::subscriptions_with_feeds_owned_by(
                &grant_subs,
                &grant.namespace().unwrap_or_default(),
            )
            .into_iter()
            .map(|r| Trigger::One(tx.clone(), r))
            .collect()
        },
    );
    // Which ManagedClusters the hub registered: a registration's result or dedicated namespace
    // changing can add or remove a cluster from every placement.
    let all = all_tx.clone();
    let bump = inputs.clone();
    let mut registration_states: HashMap<String, String> = HashMap::new();
    let registrations = spawn_reflector(
        Api::<ClusterRegistrationRequest>::all(client.clone()),
        watcher::Config::default(),
        &inputs,
        &all_tx,
        move |event| {
            let (crr, initial) = match event {
                Event::Apply(c) | Event::Delete(c) => (c, false),
                Event::InitApply(c) => (c, true),
                _ => return Vec::new(),
            };
            let state = match (event, crr.status.as_ref()) {
                (Event::Delete(_), _) | (_, None) => String::new(),
                (_, Some(st)) => format!(
                    "{}:{:?}:{}",
                    crr.spec.cluster_id,
                    st.result,
                    st.dedicated_namespace.as_deref().unwrap_or_default()
                ),
            };
            let previous = registration_states.insert(crr.name_any(), state.clone());
            if initial || previous.as_ref() == Some(&state) {
                return Vec::new();
            }
            bump.bump();
            vec![Trigger::All(all.clone())]
        },
    );
    // Metadata only: the render-hash annotation tells whether a write is needed, so the
    // scheduler never holds every rendered object in memory.
    let description_index = index::DescriptionIndex::default();
    let observed = description_index.clone();
    let bump = inputs.clone();
    let tx = one_tx.clone();
    let description_events = watcher::watcher(
        Api::<PartialObjectMeta<Description>>::all(client.clone()),
        watcher::Config::default().labels(known::LABEL_SUBS_UID),
    )
    .default_backoff();
    let descriptions_synced = Ready::new();
    let synced = descriptions_synced.clone();
    let relisted = all_tx.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(description_events);
        let mut listed = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(kind = "Description", error = %e, "watch failed");
                    continue;
                }
            };
            // Descriptions deleted or edited while the watch was down: every Subscription's
            // next pass writes them again.
            if is_relist(&event, &mut listed)
                && Trigger::All(relisted.clone()).send().await.is_err()
            {
                return;
            }
            // A deleted Description, or one whose spec someone else edited, is written again
            // by its Subscription's next pass.
            let rewrite = observed.observe(&event);
            if rewrite || matches!(event, Event::InitDone) {
                bump.bump();
            }
            if observed.is_synced() {
                synced.set();
            }
            let (true, Event::Apply(description) | Event::Delete(description)) = (rewrite, &event)
            else {
                continue;
            };
            let labels = description.labels();
            if let (Some(ns), Some(name)) = (
                labels.get(known::LABEL_SUBS_NAMESPACE),
                labels.get(known::LABEL_SUBS_NAME),
            ) && tx.send(ObjectRef::new(name).within(ns)).await.is_err()
            {
                return;
            }
        }
    });

    let stores = Stores {
        clusters,
        registrations,
        globalizations,
        localizations,
        manifests,
        grants,
        descriptions: description_index,
    };
    // Reconciling before every cache is complete would unbind clusters not yet seen.
    for (kind, wait) in [
        ("ManagedCluster", stores.clusters.wait_until_ready().boxed()),
        // Before the first pass, or every cluster would look unregistered for a moment.
        (
            "ClusterRegistrationRequest",
            stores.registrations.wait_until_ready().boxed(),
        ),
        (
            "Globalization",
            stores.globalizations.wait_until_ready().boxed(),
        ),
        (
            "Localization",
            stores.localizations.wait_until_ready().boxed(),
        ),
        ("Manifest", stores.manifests.wait_until_ready().boxed()),
        // Before the first pass, or a granted feed would be refused for a moment.
        ("FeedGrant", stores.grants.wait_until_ready().boxed()),
    ] {
        wait.await.map_err(|_| Error::SyncCache { kind })?;
        tracing::debug!(kind, "cache synced");
    }
    descriptions_synced.wait().await;
    ready();

    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        feeds: feeds::FeedWatches::new(
            client.clone(),
            subscriptions.clone(),
            one_tx.clone(),
            config.feed_ready_timeout,
            inputs.clone(),
            metrics.feed_watches.clone(),
        ),
        inputs,
        passes: epoch::Passes::default(),
        unregistered: parking_lot::Mutex::new(HashMap::new()),
        failures: parking_lot::Mutex::new(HashMap::new()),
        client,
        stores,
        metrics: metrics.clone(),
        config,
    });
    // Subscriptions deleted without a pass of this scheduler (its finalizer removed by hand,
    // handed to another scheduler) or edited to drop a kind release their watches here. Weak,
    // so that the sweep ends with the control loop.
    let sweeping = Arc::downgrade(&context);
    // `interval` needs a period above zero.
    let sweep_every = context
        .config
        .feed_release_interval
        .max(std::time::Duration::from_millis(100));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(sweep_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(context) = sweeping.upgrade() else {
                return;
            };
            context.feeds.release_unused().await;
        }
    });
    let depth_tx = one_tx.clone();
    let depth = metrics.queue_depth.clone();
    controller
        .reconcile_on(ReceiverStream::new(one_rx).inspect(move |_| {
            let queued = depth_tx.max_capacity() - depth_tx.capacity();
            depth.set(i64::try_from(queued).unwrap_or(i64::MAX));
        }))
        .reconcile_all_on(ReceiverStream::new(all_rx))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    drop(all_tx);
    Ok(())
}

fn feed_triggers(
    subscriptions: &Store<Subscription>,
    feed: &atoll_crds::apps::Feed,
    tx: &mpsc::Sender<ObjectRef<Subscription>>,
) -> Vec<Trigger> {
    feeds::subscriptions_naming(
        subscriptions,
        &feed.api_version,
        &feed.kind,
        feed.namespace.as_deref().unwrap_or(""),
        &feed.name,
    )
    .into_iter()
    .map(|r| Trigger::One(tx.clone(), r))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_later_list_counts_as_a_relist() {
        let mut listed = false;
        let events: [(Event<Subscription>, bool); 6] = [
            (Event::Init, false),
            (Event::InitDone, false),
            (
                Event::Apply(Subscription::new("a", Default::default())),
                false,
            ),
            (Event::Init, false),
            (Event::InitDone, true),
            (Event::InitDone, true),
        ];
        for (i, (event, want)) in events.iter().enumerate() {
            assert_eq!(is_relist(event, &mut listed), *want, "event {i}");
        }
    }
}
