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
mod watches;

pub use metrics::Metrics;
pub use reconcile::{Config, Context, DEFAULT_SCHEDULER_NAME, Stores, error_policy, reconcile};

use crate::Error;
use atoll_crds::apps::Subscription;
use atoll_runtime::ready::Ready;
use futures::{FutureExt, StreamExt};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Controller, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
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

/// What every watch hands its changes to: the Subscriptions (to find those a change affects),
/// the queue of single Subscriptions, the queue of passes over all of them, and the input epoch.
struct Wiring {
    subscriptions: Store<Subscription>,
    one: mpsc::Sender<ObjectRef<Subscription>>,
    all: mpsc::Sender<()>,
    inputs: epoch::InputEpoch,
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
    let (controller, subscriptions) = subscription_controller(&client);
    let wiring = Wiring {
        subscriptions,
        one: one_tx,
        all: all_tx,
        inputs,
    };

    let clusters = watches::clusters(&client, &wiring);
    let globalizations = watches::globalizations(&client, &wiring);
    let localizations = watches::localizations(&client, &wiring);
    let manifests = watches::manifests(&client, &wiring);
    let grants = watches::grants(&client, &wiring);
    let registrations = watches::registrations(&client, &wiring);
    let (descriptions, descriptions_synced) = watches::descriptions(&client, &wiring);
    let stores = Stores {
        clusters,
        registrations,
        globalizations,
        localizations,
        manifests,
        grants,
        descriptions,
    };
    wait_until_synced(&stores, &descriptions_synced).await?;
    ready();

    // HelmChart status (found in its repository or not) is written while this scheduler leads.
    let charts = tokio::spawn(crate::charts::run(
        client.clone(),
        wiring.subscriptions.clone(),
        config.charts.clone(),
    ));
    let context = new_context(client, config, &metrics, reporter, &wiring, stores);
    spawn_feed_release(&context);
    run_controller(controller, one_rx, all_rx, &wiring.one, &metrics, context).await;
    charts.abort();
    // The trigger queues stay open for as long as the controller runs.
    drop(wiring);
    Ok(())
}

/// The Subscription watch, reflected into the store every trigger maps through, and the
/// controller over it. Nothing starts here: the watch is polled once the controller runs.
fn subscription_controller(client: &Client) -> (Controller<Subscription>, Store<Subscription>) {
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
    (controller, subscriptions)
}

/// Waits until every shared cache and the Description index have synced.
/// Reconciling before every cache is complete would unbind clusters not yet seen.
async fn wait_until_synced(stores: &Stores, descriptions_synced: &Ready) -> Result<(), Error> {
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
    Ok(())
}

/// The state every reconcile shares: the synced stores, the Event recorder, and the feed
/// watches, which trigger the Subscriptions naming a feed object on the single queue.
fn new_context(
    client: Client,
    config: Config,
    metrics: &Metrics,
    reporter: Reporter,
    wiring: &Wiring,
    stores: Stores,
) -> Arc<Context> {
    Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        feeds: feeds::FeedWatches::new(
            client.clone(),
            wiring.subscriptions.clone(),
            wiring.one.clone(),
            config.feed_ready_timeout,
            wiring.inputs.clone(),
            metrics.feed_watches.clone(),
        ),
        inputs: wiring.inputs.clone(),
        passes: epoch::Passes::default(),
        unregistered: parking_lot::Mutex::new(HashMap::new()),
        failures: parking_lot::Mutex::new(HashMap::new()),
        client,
        stores,
        metrics: metrics.clone(),
        config,
    })
}

/// Starts the periodic release of feed watches no Subscription uses any more.
/// Subscriptions deleted without a pass of this scheduler (its finalizer removed by hand,
/// handed to another scheduler) or edited to drop a kind release their watches here.
fn spawn_feed_release(context: &Arc<Context>) {
    // Weak, so that the sweep ends with the control loop.
    let sweeping = Arc::downgrade(context);
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
}

/// Runs the Subscription controller until it ends: a pass of each Subscription queued on
/// `one_rx` (recording the queue depth as it is taken) and of every one on `all_rx`.
async fn run_controller(
    controller: Controller<Subscription>,
    one_rx: mpsc::Receiver<ObjectRef<Subscription>>,
    all_rx: mpsc::Receiver<()>,
    one_tx: &mpsc::Sender<ObjectRef<Subscription>>,
    metrics: &Metrics,
    context: Arc<Context>,
) {
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
