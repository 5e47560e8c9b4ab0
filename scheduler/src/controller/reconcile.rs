//! The Subscription reconciler: gathers inputs from the shared stores, asks [`plan`] what the
//! parent should hold, and writes Descriptions and status with server-side apply.

use super::feeds::{FeedProblem, FeedWatches};
use super::index::{self, DescriptionRecord};
use super::metrics::{ErrorLabels, Metrics};
use super::plan::{self, Plan, PlannedCondition, Rendered, ResolvedFeed, Unresolved};
use crate::Error;
use crate::overrides::helm::RenderedChart;
use crate::placement::{self, ClusterInfo};
use atoll_crds::apps::{
    ChartReference, DeletionPolicy, Deployer, Description, Globalization, Localization, Manifest,
    SchedulingStrategy, Subscription, SubscriptionStatus,
};
use atoll_crds::atoll::FeedGrant;
use atoll_crds::clusters::{
    ClusterRegistrationRequest, ManagedCluster, REASON_UNREGISTERED_CLUSTER, check_registered,
};
use atoll_crds::{conditions, known};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `spec.schedulerName` Clusternet defaults to.
pub const DEFAULT_SCHEDULER_NAME: &str = "default";

/// Tunables of the reconcile loop.
#[derive(Clone, Debug)]
pub struct Config {
    /// Every Subscription is reconciled at least this often, repairing drift.
    pub resync: Duration,
    /// How long to wait for a newly watched feed kind to sync.
    pub feed_ready_timeout: Duration,
    /// How often to look again while a feed is missing or Descriptions are being removed.
    pub retry: Duration,
    /// Only Subscriptions whose `spec.schedulerName` is this (or unset) are handled, so that
    /// another scheduler can own the rest.
    pub scheduler_name: String,
    /// How often feed watches of kinds no Subscription names any more are released (a deleted
    /// Subscription releases them at once).
    pub feed_release_interval: Duration,
    /// What the HelmChart lookup may reach and read.
    pub charts: crate::charts::ChartPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(300),
            feed_ready_timeout: Duration::from_secs(10),
            retry: Duration::from_secs(2),
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_owned(),
            feed_release_interval: Duration::from_secs(30),
            charts: crate::charts::ChartPolicy::default(),
        }
    }
}

/// The shared, indexed caches of every kind the scheduler reads (one watch each).
#[derive(Clone)]
pub struct Stores {
    /// ManagedClusters, all namespaces.
    pub clusters: Store<ManagedCluster>,
    /// ClusterRegistrationRequests (cluster-scoped): which ManagedClusters the hub registered.
    pub registrations: Store<ClusterRegistrationRequest>,
    /// Globalizations (cluster-scoped).
    pub globalizations: Store<Globalization>,
    /// Localizations, all namespaces.
    pub localizations: Store<Localization>,
    /// Manifests in `clusternet-reserved`.
    pub manifests: Store<Manifest>,
    /// FeedGrants, all namespaces.
    pub grants: Store<FeedGrant>,
    /// What decides writes and deletes of the scheduler's Descriptions, by key and by
    /// Subscription uid.
    pub descriptions: super::index::DescriptionIndex,
}

/// Everything a reconcile needs.
pub struct Context {
    /// Client of the parent cluster.
    pub client: Client,
    /// Publishes Events on Subscriptions.
    pub recorder: Recorder,
    /// The shared caches.
    pub stores: Stores,
    /// Live feed objects, per kind.
    pub feeds: FeedWatches,
    /// Metrics.
    pub metrics: Metrics,
    /// Tunables.
    pub config: Config,
    /// Counts changes of every input a render reads.
    pub inputs: super::epoch::InputEpoch,
    /// The last complete pass of each Subscription.
    pub passes: super::epoch::Passes,
    /// ManagedClusters left out as unregistered (`namespace/name` -> why), so that each gets
    /// one Event and log line per reason, not one per reconcile.
    pub unregistered: parking_lot::Mutex<std::collections::HashMap<String, String>>,
    /// Failed reconciles in a row of each Subscription (`namespace/name`) whose last error was
    /// transient: the retry delay doubles with each.
    pub failures: parking_lot::Mutex<std::collections::HashMap<String, u32>>,
}

/// The ManagedClusters a placement may choose: not being deleted, and registered by the hub
/// ([`check_registered`]). Each one left out gets a Warning Event and a log line once per
/// reason.
async fn registered_clusters(ctx: &Context) -> Vec<Arc<ManagedCluster>> {
    let mut trusted = Vec::new();
    let mut newly_refused = Vec::new();
    {
        let mut reported = ctx.unregistered.lock();
        for mc in ctx.stores.clusters.state() {
            if mc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let crr_name = known::cluster_registration_request_name(&mc.spec.cluster_id);
            let crr = ctx
                .stores
                .registrations
                .get(&kube::runtime::reflector::ObjectRef::new(&crr_name));
            let key = format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any());
            match check_registered(&mc, crr.as_deref()) {
                Ok(()) => {
                    reported.remove(&key);
                    trusted.push(mc);
                }
                Err(reason) => {
                    if reported.get(&key) != Some(&reason) {
                        reported.insert(key, reason.clone());
                        newly_refused.push((mc, reason));
                    }
                }
            }
        }
    }
    for (mc, reason) in newly_refused {
        tracing::warn!(cluster = %format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any()), %reason, "left a ManagedCluster out of every placement");
        let event = Event {
            type_: EventType::Warning,
            reason: REASON_UNREGISTERED_CLUSTER.to_owned(),
            note: Some(reason),
            action: "Schedule".to_owned(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &mc.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing an Event failed");
        }
    }
    trusted
}

/// Reconciles one Subscription.
#[tracing::instrument(skip_all, fields(namespace = sub.namespace().unwrap_or_default(), name = sub.name_any()))]
pub async fn reconcile(sub: Arc<Subscription>, ctx: Arc<Context>) -> Result<Action, Error> {
    let scheduler_name = sub
        .spec
        .scheduler_name
        .as_deref()
        .unwrap_or(DEFAULT_SCHEDULER_NAME);
    // A Subscription handed to another scheduler is left alone, except that a deletion still
    // releases what this scheduler wrote (its finalizer is still on it).
    if scheduler_name != ctx.config.scheduler_name && sub.meta().deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = if sub.meta().deletion_timestamp.is_some() {
        cleanup(&sub, &ctx).await
    } else {
        apply(&sub, &ctx).await
    };
    ctx.metrics
        .schedule_duration
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.failures.lock().remove(&sub_key(&sub));
    }
    result
}

/// Logs and counts a failed reconcile. A permanent error (the user's objects are wrong) waits
/// for a change of the Subscription, since retrying the same inputs cannot help; a transient
/// one (the API server, a watch not synced yet) is retried after a delay that doubles with each
/// failure in a row, from [`Config::retry`] up to [`MAX_RETRY_DELAY`].
pub fn error_policy(sub: Arc<Subscription>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        namespace = sub.namespace().unwrap_or_default(),
        name = sub.name_any(),
        error = %error,
        "reconcile failed"
    );
    ctx.metrics
        .errors
        .get_or_create(&ErrorLabels {
            error: error.label().to_owned(),
        })
        .inc();
    if error.is_permanent() {
        ctx.failures.lock().remove(&sub_key(&sub));
        return Action::await_change();
    }
    let failures = {
        let mut failures = ctx.failures.lock();
        let count = failures.entry(sub_key(&sub)).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    Action::requeue(retry_delay(ctx.config.retry, failures))
}

/// The longest wait before a Subscription whose reconciles keep failing is tried again.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// The delay before the retry after `failures` transient failures in a row: `base`, doubled
/// for each failure after the first, at most [`MAX_RETRY_DELAY`].
pub fn retry_delay(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    base.max(Duration::from_millis(100))
        .saturating_mul(1 << doublings)
        .min(MAX_RETRY_DELAY)
}

fn subscription_api(client: &Client, sub: &Subscription) -> Api<Subscription> {
    Api::namespaced(client.clone(), &sub.namespace().unwrap_or_default())
}

fn api_error(operation: &'static str, target: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::KubeApi {
        operation,
        target,
        source,
    }
}

fn sub_key(sub: &Subscription) -> String {
    format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any())
}

async fn apply(sub: &Subscription, ctx: &Context) -> Result<Action, Error> {
    ensure_finalizer(sub, ctx).await?;
    let uid = sub.uid().unwrap_or_default();
    // Read before the inputs, so that a change during this pass makes the next one run.
    let epoch = ctx.inputs.get();
    if let Some(due) = ctx
        .passes
        .skip_for(&uid, sub.metadata.generation, epoch, ctx.config.resync)
    {
        return Ok(Action::requeue(due));
    }
    ctx.passes.forget(&uid);

    let mut resolved = Vec::with_capacity(sub.spec.feeds.len());
    if sub.spec.feeds.len() <= plan::MAX_FEEDS {
        let grant_state = ctx.stores.grants.state();
        let grants: Vec<&FeedGrant> = grant_state.iter().map(AsRef::as_ref).collect();
        let namespace = sub.namespace().unwrap_or_default();
        for feed in &sub.spec.feeds {
            let resolution = ctx
                .feeds
                .resolve(feed, &ctx.stores.manifests, &namespace, &grants)
                .await?;
            let object = match resolution {
                Ok(object) => Ok(object),
                Err(FeedProblem::KindNotServed) => Err(Unresolved::kind_not_served(feed)),
                Err(FeedProblem::NotFound) => Err(Unresolved::not_found(feed)),
                Err(FeedProblem::NotGranted(refusal)) => Err(Unresolved::refused(feed, &refusal)),
                Err(FeedProblem::ManifestNotItsFeed(difference)) => {
                    Err(Unresolved::manifest_not_its_feed(feed, &difference))
                }
            };
            resolved.push(ResolvedFeed {
                feed: feed.clone(),
                object,
            });
        }
    }
    let clusters: Vec<ClusterInfo> = registered_clusters(ctx)
        .await
        .iter()
        .map(|c| ClusterInfo::from_managed_cluster(c))
        .collect();
    let globalizations = ctx.stores.globalizations.state();
    let localizations = ctx.stores.localizations.state();
    let globs: Vec<&Globalization> = globalizations.iter().map(AsRef::as_ref).collect();
    let locs: Vec<&Localization> = localizations.iter().map(AsRef::as_ref).collect();

    let bound = sub
        .status
        .as_ref()
        .map(|s| s.binding_clusters.clone())
        .unwrap_or_default();
    let plan = plan::plan(&sub.spec, &resolved, &clusters, &globs, &locs, &bound);
    let mut waiting = resolved.iter().any(|f| f.object.is_err());
    if let Some(placement) = &plan.placement {
        if sub.spec.scheduling_strategy == SchedulingStrategy::Dividing {
            // Break before make: the clusters whose replicas go down (and the Descriptions of
            // clusters no longer bound) first, and only once those writes succeeded the clusters
            // whose replicas go up, so that the parent never holds more replicas of a divided
            // feed than the feed has (the writes of one wave run concurrently). Which write is
            // needed is decided on the Descriptions as read now, not on the index: a write whose
            // response was lost applied without the index knowing, and skipping the write that
            // lowers such a cluster again would leave its replicas on top of the others'. When
            // the index sees no rendering change (the common resync) nothing is read: a write
            // the index missed shows up in it later and brings the Subscription back here.
            let current = if renders_as_indexed(sub, &plan, ctx) {
                None
            } else {
                Some(current_descriptions(sub, &plan, ctx).await?)
            };
            let lowering = |ns: &str| current.as_ref().is_none_or(|c| c.lowering.contains(ns));
            let fresh = current.as_ref().map(|c| &c.hashes);
            waiting |= write_descriptions(sub, &plan, ctx, lowering, fresh).await?;
            remove_unbound_descriptions(sub, &placement.binding_clusters, ctx).await?;
            waiting |= write_descriptions(sub, &plan, ctx, |ns| !lowering(ns), fresh).await?;
        } else {
            waiting |= write_descriptions(sub, &plan, ctx, |_| true, None).await?;
            remove_unbound_descriptions(sub, &placement.binding_clusters, ctx).await?;
        }
    }
    write_status(sub, &plan, ctx).await?;
    if !waiting {
        ctx.passes.record(&uid, sub.metadata.generation, epoch);
    }

    Ok(if waiting {
        Action::requeue(ctx.config.retry.max(Duration::from_secs(1)) * 5)
    } else {
        Action::requeue(ctx.config.resync)
    })
}

/// Adds the scheduler's finalizer, so that deleting the Subscription waits for its Descriptions.
async fn ensure_finalizer(sub: &Subscription, ctx: &Context) -> Result<(), Error> {
    if sub.finalizers().iter().any(|f| f == known::FINALIZER) {
        return Ok(());
    }
    let api = subscription_api(&ctx.client, sub);
    let resource_version = sub.resource_version().unwrap_or_default();
    let seen = atoll_runtime::finalizer::Seen {
        resource_version: &resource_version,
        finalizers: sub.finalizers(),
        deleting: sub.metadata.deletion_timestamp.is_some(),
    };
    atoll_runtime::finalizer::add_seen(&api, &sub.name_any(), known::FINALIZER, seen).await?;
    Ok(())
}

/// The labels every Description of `sub` for `cluster` carries.
fn description_labels(sub: &Subscription, cluster: &ClusterInfo) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (known::LABEL_SUBS_NAME.to_owned(), sub.name_any()),
        (
            known::LABEL_SUBS_NAMESPACE.to_owned(),
            sub.namespace().unwrap_or_default(),
        ),
        (
            known::LABEL_SUBS_UID.to_owned(),
            sub.uid().unwrap_or_default(),
        ),
        (known::LABEL_CLUSTER_ID.to_owned(), cluster.id.clone()),
        (known::LABEL_CLUSTER_NAME.to_owned(), cluster.name.clone()),
        (
            known::LABEL_CREATED_BY.to_owned(),
            known::CREATED_BY_SCHEDULER.to_owned(),
        ),
    ]);
    if sub.spec.deletion_policy == Some(DeletionPolicy::Orphan) {
        labels.insert(
            known::LABEL_DELETION_POLICY.to_owned(),
            known::DELETION_POLICY_ORPHAN.to_owned(),
        );
    }
    labels
}

/// The server-side apply body of a Description, borrowing the rendered objects (serialised
/// once per write, never copied into a `Value`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DescriptionApply<'a> {
    api_version: Cow<'static, str>,
    kind: Cow<'static, str>,
    metadata: DescriptionApplyMeta<'a>,
    spec: DescriptionApplySpec<'a>,
}

#[derive(serde::Serialize)]
struct DescriptionApplyMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    annotations: BTreeMap<&'static str, &'a str>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DescriptionApplySpec<'a> {
    deployer: &'static str,
    #[serde(serialize_with = "atoll_crds::json_text::serialize")]
    raw: &'a [Value],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    charts: Vec<ChartReference>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "atoll_crds::json_text::serialize"
    )]
    chart_raw: Vec<&'a Value>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "atoll_crds::json_text::serialize"
    )]
    chart_values: Vec<&'a Value>,
}

impl<'a> DescriptionApplySpec<'a> {
    /// The spec of a Description carrying `rendered`, borrowing it (as
    /// [`Rendered::description_spec`], without copying the objects).
    fn of(rendered: &'a Rendered) -> Self {
        let charts = rendered.charts.as_slice();
        DescriptionApplySpec {
            deployer: match rendered.deployer() {
                Deployer::Helm => "Helm",
                Deployer::Generic => "Generic",
            },
            raw: rendered.objects.as_slice(),
            charts: charts.iter().map(RenderedChart::reference).collect(),
            chart_raw: charts.iter().map(|c| &c.chart).collect(),
            chart_values: charts.iter().map(|c| &c.values).collect(),
        }
    }
}

/// How many Description writes of one Subscription are in flight at once.
const WRITE_CONCURRENCY: usize = 32;

/// Writes the Description of every bound cluster whose objects rendered and changed and whose
/// dedicated namespace `include` accepts. Whether they changed is judged on the render hashes
/// in `fresh` (dedicated namespace -> hash, as just read) when given, else on the index.
/// Returns true when some cluster must be looked at again (its old Description is still being
/// deleted).
async fn write_descriptions(
    sub: &Subscription,
    plan: &Plan,
    ctx: &Context,
    include: impl Fn(&str) -> bool,
    fresh: Option<&BTreeMap<String, String>>,
) -> Result<bool, Error> {
    let name = known::description_name(&sub.namespace().unwrap_or_default(), &sub.name_any());
    let params = PatchParams::apply(known::FIELD_MANAGER_SCHEDULER).force();
    let mut waiting = false;
    let mut writes = Vec::new();
    for cluster_plan in plan
        .clusters
        .iter()
        .filter(|c| include(&c.cluster.namespace))
    {
        let Ok(rendered) = &cluster_plan.objects else {
            continue;
        };
        let hash = &rendered.hash;
        let namespace = cluster_plan.cluster.namespace.clone();
        let labels = description_labels(sub, &cluster_plan.cluster);
        let labels_print = super::index::labels_fingerprint(&labels);
        if let Some(existing) = ctx.stores.descriptions.get(&namespace, &name) {
            if existing.deleting {
                // It is being removed (e.g. the cluster was unbound a moment ago); write it anew
                // once it is gone.
                waiting = true;
                continue;
            }
            let fresh_hash = fresh.map(|hashes| hashes.get(&namespace).map(String::as_str));
            if up_to_date(&existing, labels_print, hash, fresh_hash) {
                continue;
            }
        }
        // Serialised now, borrowing the rendered objects; the write futures own only bytes.
        let description = DescriptionApply {
            api_version: Description::api_version(&()),
            kind: Description::kind(&()),
            metadata: DescriptionApplyMeta {
                name: &name,
                namespace: &namespace,
                labels: &labels,
                annotations: BTreeMap::from([(known::ANNOTATION_RENDER_HASH, hash.as_str())]),
            },
            spec: DescriptionApplySpec::of(rendered),
        };
        // The watch of Descriptions feeds the index, so the response is not decoded: ask for
        // metadata only and drop it.
        let request = kube::core::Request::new(Description::url_path(&(), Some(&namespace)))
            .patch_metadata(&name, &params, &Patch::Apply(&description));
        let written = DescriptionRecord {
            subscription_uid: sub.uid().unwrap_or_default(),
            written: Some(index::hash_fingerprint(Some(hash))),
            render_hash: Some(hash.clone()),
            labels: labels_print,
            deleting: false,
            edited: false,
        };
        writes.push(((namespace, name.clone()), request, written));
    }
    stream::iter(writes)
        .map(|(key, request, written)| async move {
            let target = format!("{}/{}", key.0, key.1);
            let request = request.map_err(|e| {
                api_error("apply Description", target.clone())(kube::Error::BuildRequest(e))
            })?;
            ctx.client
                .request_text(request)
                .await
                .map_err(api_error("apply Description", target))?;
            ctx.stores.descriptions.record_write(key, written);
            ctx.metrics.descriptions_written.inc();
            Ok::<(), Error>(())
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(waiting)
}

/// Whether the Description `existing` (as the index knows it) already holds the rendering of
/// `hash` with the labels of `labels_print`. `fresh_hash`, when given, is its render hash as
/// just read (`Some(None)`: it is not there), and is believed over the index's. An edit by
/// someone else is never up to date: applying the rendered content again undoes it.
fn up_to_date(
    existing: &DescriptionRecord,
    labels_print: u64,
    hash: &str,
    fresh_hash: Option<Option<&str>>,
) -> bool {
    let current_hash = fresh_hash.unwrap_or(existing.render_hash.as_deref());
    existing.labels == labels_print && !existing.edited && current_hash == Some(hash)
}

/// Whether every bound cluster's rendering is what the index says its Description holds.
fn renders_as_indexed(sub: &Subscription, plan: &Plan, ctx: &Context) -> bool {
    let name = known::description_name(&sub.namespace().unwrap_or_default(), &sub.name_any());
    plan.clusters.iter().all(|c| match &c.objects {
        Ok(rendered) => ctx
            .stores
            .descriptions
            .get(&c.cluster.namespace, &name)
            .is_some_and(|d| d.render_hash.as_deref() == Some(rendered.hash.as_str())),
        Err(_) => true,
    })
}

/// What a Dividing Subscription's Descriptions hold now, read afresh (the index keeps no
/// objects, and may miss a write whose response was lost).
struct CurrentDescriptions {
    /// Dedicated namespaces of the bound clusters whose rendered objects raise no replica count
    /// above what their Description holds now.
    lowering: BTreeSet<String>,
    /// Dedicated namespace -> the render hash of its Description now.
    hashes: BTreeMap<String, String>,
}

async fn current_descriptions(
    sub: &Subscription,
    plan: &Plan,
    ctx: &Context,
) -> Result<CurrentDescriptions, Error> {
    let uid = sub.uid().unwrap_or_default();
    let listed = Api::<Description>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&format!("{}={uid}", known::LABEL_SUBS_UID)))
        .await
        .map_err(api_error("list Descriptions", sub_key(sub)))?;
    let hashes = listed
        .items
        .iter()
        .filter_map(|d| {
            let hash = d.annotations().get(known::ANNOTATION_RENDER_HASH)?;
            Some((d.namespace().unwrap_or_default(), hash.clone()))
        })
        .collect();
    let counts: BTreeMap<String, BTreeMap<String, i64>> = listed
        .items
        .iter()
        .map(|d| {
            (
                d.namespace().unwrap_or_default(),
                replica_counts(&d.spec.raw),
            )
        })
        .collect();
    let none = BTreeMap::new();
    let lowering = plan
        .clusters
        .iter()
        .filter(|c| {
            let Ok(rendered) = &c.objects else {
                // Not written at all.
                return true;
            };
            let now = counts.get(&c.cluster.namespace).unwrap_or(&none);
            !raises(now, &replica_counts(&rendered.objects))
        })
        .map(|c| c.cluster.namespace.clone())
        .collect();
    Ok(CurrentDescriptions { lowering, hashes })
}

/// `kind namespace/name` -> `spec.replicas` of the objects that have one.
fn replica_counts(objects: &[Value]) -> BTreeMap<String, i64> {
    objects
        .iter()
        .filter_map(|o| {
            let replicas = o.pointer("/spec/replicas")?.as_i64()?;
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            Some((key, replicas))
        })
        .collect()
}

/// Whether going from the replica counts `now` to `next` raises any (an object not there yet
/// counts as 0).
fn raises(now: &BTreeMap<String, i64>, next: &BTreeMap<String, i64>) -> bool {
    next.iter()
        .any(|(key, r)| *r > now.get(key).copied().unwrap_or(0))
}

/// Deletes the Descriptions of `sub` in clusters that are no longer bound.
async fn remove_unbound_descriptions(
    sub: &Subscription,
    binding_clusters: &[String],
    ctx: &Context,
) -> Result<(), Error> {
    let bound: BTreeSet<&str> = binding_clusters
        .iter()
        .filter_map(|key| key.split_once('/').map(|(ns, _)| ns))
        .collect();
    let uid = sub.uid().unwrap_or_default();
    for (namespace, name) in ctx.stores.descriptions.of(&uid) {
        if bound.contains(namespace.as_str()) {
            continue;
        }
        let deleting = ctx
            .stores
            .descriptions
            .get(&namespace, &name)
            .is_some_and(|d| d.deleting);
        if !deleting {
            delete_description(&ctx.client, &namespace, &name, ctx).await?;
        }
    }
    Ok(())
}

async fn delete_description(
    client: &Client,
    namespace: &str,
    name: &str,
    ctx: &Context,
) -> Result<(), Error> {
    match Api::<Description>::namespaced(client.clone(), namespace)
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => {
            ctx.metrics.descriptions_deleted.inc();
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(api_error(
            "delete Description",
            format!("{namespace}/{name}"),
        )(e)),
    }
}

/// Deletes every Description of a deleted Subscription and releases it once they are gone.
async fn cleanup(sub: &Subscription, ctx: &Context) -> Result<Action, Error> {
    ctx.passes.forget(&sub.uid().unwrap_or_default());
    if !sub.finalizers().iter().any(|f| f == known::FINALIZER) {
        return Ok(Action::await_change());
    }
    let uid = sub.uid().unwrap_or_default();
    // Not from the cache: releasing the Subscription too early would orphan child objects.
    let remaining = Api::<Description>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&format!("{}={uid}", known::LABEL_SUBS_UID)))
        .await
        .map_err(api_error("list Descriptions", sub_key(sub)))?;
    if !remaining.items.is_empty() {
        for description in &remaining.items {
            if description.metadata.deletion_timestamp.is_none() {
                let namespace = description.namespace().unwrap_or_default();
                delete_description(&ctx.client, &namespace, &description.name_any(), ctx).await?;
            }
        }
        return Ok(Action::requeue(ctx.config.retry));
    }
    let released = atoll_runtime::finalizer::remove(
        &subscription_api(&ctx.client, sub),
        &sub.name_any(),
        known::FINALIZER,
    )
    .await;
    // This Subscription no longer needs its feed kinds; others may not either.
    ctx.feeds.release_unused().await;
    released?;
    Ok(Action::await_change())
}

/// The status fields the scheduler owns, as they should be after `plan`.
fn desired_status(sub: &Subscription, plan: &Plan, now: &Time) -> SubscriptionStatus {
    let current = sub.status.clone().unwrap_or_default();
    let generation = sub.metadata.generation;
    let mut status = SubscriptionStatus {
        conditions: current.conditions.clone(),
        observed_generation: generation,
        ..SubscriptionStatus::default()
    };
    match &plan.placement {
        Some(placement) => {
            status.binding_clusters = placement.binding_clusters.clone();
            status.replicas = placement.replicas.clone();
            status.spec_hash = Some(placement::spec_hash(&sub.spec));
            status.desired_releases = i32::try_from(placement.binding_clusters.len()).ok();
        }
        None => {
            status.binding_clusters = current.binding_clusters.clone();
            status.replicas = current.replicas.clone();
            status.spec_hash = current.spec_hash;
            status.desired_releases = current.desired_releases;
        }
    }
    for planned in &plan.conditions {
        conditions::set(
            &mut status.conditions,
            to_condition(planned, generation, now),
        );
    }
    // Present only while some HelmChart feed is not distributed.
    if !plan
        .conditions
        .iter()
        .any(|c| c.type_ == plan::condition::CHARTS_DISTRIBUTED)
    {
        status
            .conditions
            .retain(|c| c.type_ != plan::condition::CHARTS_DISTRIBUTED);
    }
    status
}

fn to_condition(planned: &PlannedCondition, generation: Option<i64>, now: &Time) -> Condition {
    conditions::new(
        planned.type_,
        if planned.status { "True" } else { "False" },
        planned.reason,
        &planned.message,
        generation,
        now.clone(),
    )
}

/// The part of the status the scheduler owns, for comparison and for the apply patch.
fn owned_status(status: &SubscriptionStatus) -> Value {
    json!({
        "bindingClusters": status.binding_clusters,
        "replicas": status.replicas,
        "specHash": status.spec_hash,
        "desiredReleases": status.desired_releases,
        "conditions": status.conditions,
        "observedGeneration": status.observed_generation,
    })
}

/// Writes the scheduler's status fields when they changed, and publishes an Event for each
/// condition that changed.
async fn write_status(sub: &Subscription, plan: &Plan, ctx: &Context) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let desired = desired_status(sub, plan, &now);
    let current = sub.status.clone().unwrap_or_default();
    if owned_status(&desired) == owned_status(&current) {
        return Ok(());
    }
    let mut status = owned_status(&desired);
    if let Some(map) = status.as_object_mut() {
        // Server-side apply must not see nulls: leave out what is unset.
        map.retain(|_, v| !v.is_null());
    }
    let patch = json!({
        "apiVersion": Subscription::api_version(&()),
        "kind": Subscription::kind(&()),
        "metadata": {"name": sub.name_any(), "namespace": sub.namespace()},
        "status": status,
    });
    subscription_api(&ctx.client, sub)
        .patch_status(
            &sub.name_any(),
            &PatchParams::apply(known::FIELD_MANAGER_SCHEDULER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(api_error("apply Subscription status", sub_key(sub)))?;

    for planned in &plan.conditions {
        let before = conditions::get(&current.conditions, planned.type_);
        let unchanged = before.is_some_and(|c| {
            (c.status == "True") == planned.status
                && c.reason == planned.reason
                && c.message == planned.message
        });
        if !unchanged {
            publish(sub, planned, ctx).await;
        }
    }
    Ok(())
}

/// The Event reason for a condition change.
fn event_reason(planned: &PlannedCondition) -> &'static str {
    match (planned.type_, planned.status, planned.reason) {
        (plan::condition::SCHEDULED, true, _) => "Scheduled",
        (plan::condition::SCHEDULED, false, _) => "FailedScheduling",
        (plan::condition::FEEDS_RESOLVED, false, reason) => reason,
        (plan::condition::FEEDS_RESOLVED, true, _) => "FeedsResolved",
        (plan::condition::OVERRIDES_APPLIED, false, _) => "InvalidOverride",
        (plan::condition::CHARTS_DISTRIBUTED, _, reason) => reason,
        _ => "OverridesApplied",
    }
}

async fn publish(sub: &Subscription, planned: &PlannedCondition, ctx: &Context) {
    if !planned.status {
        tracing::warn!(
            condition = planned.type_,
            reason = planned.reason,
            message = %planned.message,
            "Subscription condition is False"
        );
    }
    let event = Event {
        type_: if planned.status {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: event_reason(planned).to_owned(),
        note: Some(atoll_runtime::text::truncate(&planned.message, 1000)),
        action: "Schedule".to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &sub.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing an Event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transient_failure_is_retried_after_a_delay_that_doubles_up_to_the_cap() {
        let s = Duration::from_secs;
        let cases = [
            (s(2), 1, s(2)),
            (s(2), 2, s(4)),
            (s(2), 5, s(32)),
            (s(2), 8, s(256)),
            (s(2), 9, MAX_RETRY_DELAY),
            (s(2), u32::MAX, MAX_RETRY_DELAY),
            (Duration::ZERO, 1, Duration::from_millis(100)),
        ];
        for (base, failures, want) in cases {
            assert_eq!(retry_delay(base, failures), want, "{base:?} x {failures}");
        }
    }

    #[test]
    fn a_cluster_raises_replicas_when_any_object_gets_more_than_it_has() {
        let counts = |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> {
            pairs.iter().map(|(k, r)| (k.to_string(), *r)).collect()
        };
        let cases = [
            ("same", counts(&[("a", 2)]), counts(&[("a", 2)]), false),
            ("lower", counts(&[("a", 3)]), counts(&[("a", 0)]), false),
            ("higher", counts(&[("a", 2)]), counts(&[("a", 3)]), true),
            ("new object", counts(&[]), counts(&[("a", 1)]), true),
            ("new object with 0", counts(&[]), counts(&[("a", 0)]), false),
            (
                "one up, one down",
                counts(&[("a", 2), ("b", 2)]),
                counts(&[("a", 1), ("b", 3)]),
                true,
            ),
            ("object dropped", counts(&[("a", 2)]), counts(&[]), false),
        ];
        for (name, now, next, want) in cases {
            assert_eq!(raises(&now, &next), want, "{name}");
        }
        let objects = vec![
            json!({"kind": "Namespace", "metadata": {"name": "x"}}),
            json!({"kind": "Deployment", "metadata": {"namespace": "x", "name": "web"}, "spec": {"replicas": 4}}),
        ];
        assert_eq!(replica_counts(&objects), counts(&[("Deployment x/web", 4)]));
    }

    #[test]
    fn a_description_is_up_to_date_by_what_was_just_read_over_the_index() {
        let record = |hash: &str| DescriptionRecord {
            subscription_uid: "u".into(),
            render_hash: Some(hash.into()),
            labels: 7,
            deleting: false,
            edited: false,
            written: None,
        };
        // (index hash, labels, fresh read, want up to date)
        let cases = [
            ("h", 7, None, true),
            ("old", 7, None, false),
            ("h", 8, None, false),
            // A write applied whose response was lost: the index still has the old hash, the
            // parent the new one (or the reverse): what was read decides.
            ("h", 7, Some(Some("other")), false),
            ("old", 7, Some(Some("h")), true),
            ("h", 7, Some(None), false),
        ];
        for (index_hash, labels, fresh, want) in cases {
            assert_eq!(
                up_to_date(&record(index_hash), labels, "h", fresh),
                want,
                "{index_hash} {labels} {fresh:?}"
            );
        }
        let mut edited = record("h");
        edited.edited = true;
        assert!(!up_to_date(&edited, 7, "h", Some(Some("h"))));
    }

    #[test]
    fn api_failures_are_transient_and_spec_errors_permanent() {
        assert!(Error::ValidateSubscribers.is_permanent());
        assert!(Error::DivideBinpack.is_permanent());
        assert!(
            !Error::ConflictRetries {
                operation: "apply",
                target: "ns/x".to_owned()
            }
            .is_permanent()
        );
        assert!(
            !Error::SyncCache {
                kind: "Subscription"
            }
            .is_permanent()
        );
        assert!(!Error::KeepLeadership.is_permanent());
    }
}
