//! What one Subscription should look like in the parent, computed from plain inputs: the
//! placement, each bound cluster's rendered objects, and the status conditions. No I/O, so the
//! whole decision is unit-tested without a server; the reconciler only gathers inputs and writes
//! the plan out.

use crate::Error;
use crate::overrides::helm::RenderedChart;
use crate::overrides::{self, DividedReplicas, OverrideSet};
use crate::placement::{self, ClusterInfo, FeedReplicas, Placement};
use atoll_crds::apps::{
    Deployer, DescriptionSpec, Feed, Globalization, Localization, Manifest, SchedulingStrategy,
    SubscriptionSpec,
};
use atoll_crds::known;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// More feeds than this in one Subscription are refused with a condition, before any write.
pub const MAX_FEEDS: usize = 1000;
/// A rendered Description larger than this (serialized) is refused with a condition rather than
/// sent to an API server that would reject it.
pub const MAX_DESCRIPTION_BYTES: usize = 1024 * 1024;

/// Condition types the scheduler owns on a Subscription.
pub mod condition {
    /// The Subscription was placed on clusters.
    pub const SCHEDULED: &str = "Scheduled";
    /// Every feed resolved to an object.
    pub const FEEDS_RESOLVED: &str = "FeedsResolved";
    /// Every override applied cleanly to every bound cluster.
    pub const OVERRIDES_APPLIED: &str = "OverridesApplied";
    /// The Subscription's HelmChart feeds are distributed (present, `False`, only while some
    /// are not: a Dividing Subscription does not divide charts).
    pub const CHARTS_DISTRIBUTED: &str = "ChartsDistributed";
}

/// A feed and what it resolved to.
#[derive(Debug, Clone)]
pub struct ResolvedFeed {
    /// The feed as written in the Subscription.
    pub feed: Feed,
    /// Its object (Manifest template or live object), or why there is none.
    pub object: Result<Value, Unresolved>,
}

/// Why a feed has no object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The `FeedsResolved` reason this problem gives.
    pub reason: &'static str,
    /// What is missing or refused, and what to do about it.
    pub message: String,
}

impl Unresolved {
    /// A feed (or its kind) that does not exist yet.
    pub fn missing(message: String) -> Self {
        Self {
            reason: REASON_NOT_FOUND,
            message,
        }
    }

    /// A feed the Subscription may not use (no FeedGrant allows it).
    pub fn not_granted(message: String) -> Self {
        Self {
            reason: REASON_NOT_GRANTED,
            message,
        }
    }

    /// A feed of a kind atoll does not distribute.
    pub fn not_supported(message: String) -> Self {
        Self {
            reason: REASON_NOT_SUPPORTED,
            message,
        }
    }

    /// Whether the feed is of a kind atoll does not distribute (it waits for nothing).
    pub fn is_not_supported(&self) -> bool {
        self.reason == REASON_NOT_SUPPORTED
    }

    // Why a feed is not resolved, in the words the Subscription's conditions use (the
    // scheduler and `kubectl atoll plan` say the same).

    /// A HelmChart feed of a Dividing Subscription: a chart's replicas are not divided.
    pub fn divided_chart(feed: &Feed) -> Self {
        Self::not_supported(format!(
            "HelmChart {} is not distributed: a Dividing Subscription divides the replicas of \
             Deployments, StatefulSets and ReplicaSets, not of charts; subscribe the chart with \
             a Replication Subscription and set each cluster's replica count in its values with \
             a Localization of type Helm",
            feed_location(feed)
        ))
    }

    /// A feed of a kind the parent does not serve.
    pub fn kind_not_served(feed: &Feed) -> Self {
        Self::missing(format!(
            "{} {}: the parent cluster does not serve {} {}; install its CRD first",
            feed.kind,
            feed_location(feed),
            feed.api_version,
            feed.kind
        ))
    }

    /// A feed with neither a live object in the parent nor a Manifest.
    pub fn not_found(feed: &Feed) -> Self {
        Self::missing(format!(
            "{} {} not found: create it in the parent, or a Manifest for it in {}",
            feed.kind,
            feed_location(feed),
            known::NAMESPACE_RESERVED
        ))
    }

    /// A feed whose Manifest holds another object than its labels name.
    pub fn manifest_not_its_feed(feed: &Feed, difference: &str) -> Self {
        Self {
            reason: REASON_MANIFEST_NOT_ITS_FEED,
            message: format!(
                "the Manifest of {} {} in {} is refused: its template has {difference}; a \
                 Manifest's template must be the object its apps.clusternet.io/config.* labels \
                 name",
                feed.kind,
                feed_location(feed),
                known::NAMESPACE_RESERVED
            ),
        }
    }

    /// A feed the Subscription may not use, and the FeedGrant that would allow it.
    pub fn refused(feed: &Feed, refusal: &crate::tenancy::Refusal) -> Self {
        Self::not_granted(refusal.message(&format!("{} {}", feed.kind, feed_location(feed))))
    }
}

/// The reasons of [`Unresolved`] feeds.
const REASON_NOT_FOUND: &str = "FeedNotFound";
const REASON_NOT_GRANTED: &str = "FeedNotGranted";
const REASON_NOT_SUPPORTED: &str = "FeedNotSupported";
const REASON_MANIFEST_NOT_ITS_FEED: &str = "ManifestNotItsFeed";

/// Whether a feed names a Clusternet HelmChart (installed as a Helm release in each child).
pub fn is_helm_chart(feed: &Feed) -> bool {
    feed.kind == atoll_crds::helm::HELM_CHART_KIND
        && feed.api_version == atoll_crds::apps::API_VERSION
}

/// `namespace/name` of a feed, or `name` without a namespace.
pub fn feed_location(feed: &Feed) -> String {
    match &feed.namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", feed.name),
        _ => feed.name.clone(),
    }
}

/// `(group, version)` of an apiVersion; the core group is `""`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// Whether `manifest` holds `feed`: in `clusternet-reserved`, not being deleted, and labelled
/// `apps.clusternet.io/config.{group,version,kind,name,namespace}` as the feed's object.
pub fn manifest_holds(manifest: &Manifest, feed: &Feed) -> bool {
    let (group, version) = split_api_version(&feed.api_version);
    let label_is = |key: &str, value: &str| {
        let found = manifest.metadata.labels.as_ref().and_then(|l| l.get(key));
        found.map_or("", String::as_str) == value
    };
    manifest.metadata.namespace.as_deref() == Some(known::NAMESPACE_RESERVED)
        && manifest.metadata.deletion_timestamp.is_none()
        && label_is(known::LABEL_CONFIG_GROUP, group)
        && label_is(known::LABEL_CONFIG_VERSION, version)
        && label_is(known::LABEL_CONFIG_KIND, &feed.kind)
        && label_is(known::LABEL_CONFIG_NAME, &feed.name)
        && label_is(
            known::LABEL_CONFIG_NAMESPACE,
            feed.namespace.as_deref().unwrap_or(""),
        )
}

/// How a Manifest's template differs from the object its labels (and so `feed`) name, if it
/// does: its apiVersion, kind, name or, for a namespaced kind, namespace (omitted meaning
/// `default` on either side). A cluster-scoped object's namespace is dropped by the API server.
pub fn manifest_difference(feed: &Feed, template: &Value, namespaced: bool) -> Option<String> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let namespace_of = |ns: &str| {
        if ns.is_empty() {
            "default".to_owned()
        } else {
            ns.to_owned()
        }
    };
    let mut differences = Vec::new();
    let mut compare = |what: &str, labelled: String, held: String| {
        if labelled != held {
            differences.push(format!("{what} {held:?} where its labels say {labelled:?}"));
        }
    };
    compare(
        "apiVersion",
        feed.api_version.clone(),
        text(&template["apiVersion"]),
    );
    compare("kind", feed.kind.clone(), text(&template["kind"]));
    compare(
        "name",
        feed.name.clone(),
        text(&template["metadata"]["name"]),
    );
    if namespaced {
        compare(
            "namespace",
            namespace_of(feed.namespace.as_deref().unwrap_or("")),
            namespace_of(&text(&template["metadata"]["namespace"])),
        );
    }
    (!differences.is_empty()).then(|| differences.join(", "))
}

/// One status condition as the plan wants it (`type`, `status`, `reason`, `message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCondition {
    /// Condition type, one of [`condition`].
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// What happened, and for failures what to change.
    pub message: String,
}

/// The rendered objects of one bound cluster, or why they could not be rendered.
#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// The bound cluster.
    pub cluster: ClusterInfo,
    /// The objects for its Description, in feed order, with their content hash; an error keeps
    /// the cluster's current Description untouched. Clusters rendered from the same overrides
    /// and replica counts share one rendering.
    pub objects: Result<Rendered, String>,
}

/// Rendered objects of one Description and their [`placement::content_hash`].
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The objects of the feeds that are not HelmCharts, in feed order.
    pub objects: Arc<Vec<Value>>,
    /// The HelmChart feeds, in feed order, each with its chart and values after overrides.
    pub charts: Arc<Vec<RenderedChart>>,
    /// Hash of `objects` (and `charts`, when there are any), stored on the Description to tell
    /// whether a write is needed.
    pub hash: String,
}

/// The plan for one Subscription.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The new placement; `None` keeps the current binding and Descriptions (an invalid spec or
    /// unresolved feeds must not remove what already runs).
    pub placement: Option<Placement>,
    /// Bound clusters and their rendered objects, in binding order.
    pub clusters: Vec<ClusterPlan>,
    /// Conditions to set.
    pub conditions: Vec<PlannedCondition>,
}

fn cond(
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
) -> PlannedCondition {
    PlannedCondition {
        type_,
        status,
        reason,
        message,
    }
}

/// Plans one Subscription. `bound` is its current `status.bindingClusters`.
///
/// HelmChart feeds are rendered like the others (into the Description's `charts`), except under
/// Dividing, whose charts are not distributed: they do not hold the others back, the rest is
/// planned without them, and the condition `ChartsDistributed=False` names them. A Subscription
/// with no other feed then places nothing (`FeedsResolved=False`).
///
/// A bound cluster that becomes unreachable (not `Ready`, or tainted
/// `clusters.clusternet.io/unschedulable` by the hub when its agent's stream dropped) stays bound:
/// what already runs there keeps running, and nothing is deleted when its agent comes back.
/// Under Replication it keeps its objects; under Dividing its replicas fail over to the reachable
/// clusters and it keeps its other objects with 0 replicas until it is reachable again. A cluster
/// that is unreachable and not yet bound is never bound.
pub fn plan(
    spec: &SubscriptionSpec,
    feeds: &[ResolvedFeed],
    clusters: &[ClusterInfo],
    globalizations: &[&Globalization],
    localizations: &[&Localization],
    bound: &[String],
) -> Plan {
    let refuse_divided_charts = |f: &ResolvedFeed| match spec.scheduling_strategy {
        SchedulingStrategy::Dividing if is_helm_chart(&f.feed) => ResolvedFeed {
            feed: f.feed.clone(),
            object: Err(Unresolved::divided_chart(&f.feed)),
        },
        _ => f.clone(),
    };
    let feeds: Vec<ResolvedFeed> = feeds.iter().map(refuse_divided_charts).collect();
    let feeds = feeds.as_slice();
    let not_supported =
        |f: &&ResolvedFeed| f.object.as_ref().is_err_and(Unresolved::is_not_supported);
    let (unsupported, supported): (Vec<&ResolvedFeed>, Vec<&ResolvedFeed>) =
        feeds.iter().partition(not_supported);
    if unsupported.is_empty() || supported.is_empty() {
        return plan_feeds(spec, feeds, clusters, globalizations, localizations, bound);
    }
    let supported: Vec<ResolvedFeed> = supported.into_iter().cloned().collect();
    let mut plan = plan_feeds(
        spec,
        &supported,
        clusters,
        globalizations,
        localizations,
        bound,
    );
    let messages: Vec<&str> = unsupported
        .iter()
        .filter_map(|f| f.object.as_ref().err())
        .map(|u| u.message.as_str())
        .collect();
    plan.conditions.push(cond(
        condition::CHARTS_DISTRIBUTED,
        false,
        REASON_NOT_SUPPORTED,
        format!("{}; the other feeds are distributed", messages.join("; ")),
    ));
    plan
}

/// [`plan`] for feeds that hold every one back until it resolves.
fn plan_feeds(
    spec: &SubscriptionSpec,
    feeds: &[ResolvedFeed],
    clusters: &[ClusterInfo],
    globalizations: &[&Globalization],
    localizations: &[&Localization],
    bound: &[String],
) -> Plan {
    let keep = |conditions: Vec<PlannedCondition>| Plan {
        placement: None,
        clusters: Vec::new(),
        conditions,
    };
    if spec.feeds.len() > MAX_FEEDS {
        return keep(vec![cond(
            condition::SCHEDULED,
            false,
            "TooManyFeeds",
            format!(
                "spec.feeds has {} entries, more than the {MAX_FEEDS} atoll accepts in one \
                 Subscription; split it into several Subscriptions",
                spec.feeds.len()
            ),
        )]);
    }

    let unresolved: Vec<&Unresolved> = feeds
        .iter()
        .filter_map(|f| f.object.as_ref().err())
        .collect();
    if !unresolved.is_empty() {
        // A refusal needs someone else's action (a FeedGrant or a Manifest's fix), and an
        // unsupported kind the Subscription's own, so they name the condition before a feed
        // that is only missing.
        let reason = [
            REASON_NOT_GRANTED,
            REASON_MANIFEST_NOT_ITS_FEED,
            REASON_NOT_SUPPORTED,
        ]
        .into_iter()
        .find(|r| unresolved.iter().any(|u| u.reason == *r))
        .unwrap_or(REASON_NOT_FOUND);
        let messages: Vec<&str> = unresolved.iter().map(|u| u.message.as_str()).collect();
        return keep(vec![
            cond(
                condition::FEEDS_RESOLVED,
                false,
                reason,
                messages.join("; "),
            ),
            cond(
                condition::SCHEDULED,
                false,
                "FeedsNotResolved",
                "waiting for every feed to exist and be granted; the current placement and \
                 Descriptions are kept (clusters keep what they received before)"
                    .to_owned(),
            ),
        ]);
    }
    let feeds_resolved = cond(
        condition::FEEDS_RESOLVED,
        true,
        "FeedsResolved",
        format!("all {} feeds resolved", feeds.len()),
    );

    let mut replica_facts = Vec::with_capacity(feeds.len());
    for f in feeds {
        let Ok(object) = &f.object else { continue };
        match FeedReplicas::from_object(&f.feed, object) {
            Ok(facts) => replica_facts.push(facts),
            Err(e) => return keep(vec![feeds_resolved, invalid_spec(&e)]),
        }
    }
    let (reachable_view, unreachable) = as_if_reachable(clusters, bound);
    let placement = match spec.scheduling_strategy {
        SchedulingStrategy::Replication => {
            placement::schedule(spec, &reachable_view, &replica_facts)
        }
        SchedulingStrategy::Dividing => placement::schedule(spec, clusters, &replica_facts)
            .and_then(|placement| {
                if unreachable.is_empty() {
                    return Ok(placement);
                }
                // Which unreachable clusters would still be selected if they were reachable.
                let mut replication = spec.clone();
                replication.scheduling_strategy = SchedulingStrategy::Replication;
                let still_selected =
                    placement::schedule(&replication, &reachable_view, &replica_facts)?;
                let keep: Vec<&String> = still_selected
                    .binding_clusters
                    .iter()
                    .filter(|key| unreachable.contains(key.as_str()))
                    .collect();
                Ok(keep_bound_with_zero_replicas(
                    placement,
                    &keep,
                    &replica_facts,
                ))
            }),
    };
    let placement = match placement {
        Ok(placement) => placement,
        Err(e) => return keep(vec![feeds_resolved, invalid_spec(&e)]),
    };

    let mut conditions = vec![feeds_resolved, scheduled_condition(&placement)];
    let mut cluster_plans = Vec::with_capacity(placement.binding_clusters.len());
    let mut override_errors = Vec::new();
    let by_key: std::collections::HashMap<String, &ClusterInfo> =
        clusters.iter().map(|c| (c.key(), c)).collect();
    // Most clusters share their overrides and replica counts (all of them under Replication
    // without overrides): render each distinct recipe once.
    let mut renders: HashMap<Recipe, Result<Rendered, String>> = HashMap::new();
    for (index, key) in placement.binding_clusters.iter().enumerate() {
        let Some(cluster) = by_key.get(key).copied() else {
            continue;
        };
        let objects = recipe(
            cluster,
            index,
            feeds,
            &placement,
            globalizations,
            localizations,
        )
        .and_then(|(recipe, sets)| {
            renders
                .entry(recipe.clone())
                .or_insert_with(|| render(&recipe, &sets, feeds))
                .clone()
        });
        if let Err(message) = &objects {
            override_errors.push(format!("cluster {key}: {message}"));
        }
        cluster_plans.push(ClusterPlan {
            cluster: cluster.clone(),
            objects,
        });
    }
    conditions.push(if override_errors.is_empty() {
        cond(
            condition::OVERRIDES_APPLIED,
            true,
            "OverridesApplied",
            "every override applied to every bound cluster".to_owned(),
        )
    } else {
        cond(
            condition::OVERRIDES_APPLIED,
            false,
            "InvalidOverride",
            format!(
                "{}; those clusters keep their previous objects",
                override_errors.join("; ")
            ),
        )
    });
    Plan {
        placement: Some(placement),
        clusters: cluster_plans,
        conditions,
    }
}

/// Whether a cluster cannot be reached now: not ready, or tainted unschedulable by the hub.
fn unreachable_now(cluster: &ClusterInfo) -> bool {
    !cluster.ready
        || cluster
            .taints
            .iter()
            .any(|t| t.key == known::TAINT_UNSCHEDULABLE)
}

/// The clusters as the scheduler sees them, with every *bound* unreachable cluster shown as
/// reachable, and the keys of those clusters. Borrows the input when there are none (the
/// common case), so a pass does not copy every cluster.
fn as_if_reachable<'a>(
    clusters: &'a [ClusterInfo],
    bound: &[String],
) -> (Cow<'a, [ClusterInfo]>, HashSet<String>) {
    let bound: HashSet<&str> = bound.iter().map(String::as_str).collect();
    let unreachable: HashSet<String> = clusters
        .iter()
        .filter(|c| unreachable_now(c))
        .map(ClusterInfo::key)
        .filter(|key| bound.contains(key.as_str()))
        .collect();
    if unreachable.is_empty() {
        return (Cow::Borrowed(clusters), unreachable);
    }
    let view = clusters
        .iter()
        .map(|cluster| {
            let mut shown = cluster.clone();
            if unreachable.contains(&cluster.key()) {
                shown.ready = true;
                shown.taints.retain(|t| t.key != known::TAINT_UNSCHEDULABLE);
            }
            shown
        })
        .collect();
    (Cow::Owned(view), unreachable)
}

/// Adds `keep` to a Dividing placement with 0 replicas of every divisible feed.
fn keep_bound_with_zero_replicas(
    mut placement: Placement,
    keep: &[&String],
    facts: &[FeedReplicas],
) -> Placement {
    // Told apart by the feed, not by the length of its list: with no cluster placed (every
    // matching cluster unreachable) a divisible feed's list is empty too, and taking it for
    // non-divisible would give each kept cluster the feed's whole replica count.
    let divisible: HashSet<&str> = facts
        .iter()
        .filter(|f| f.desired.is_some())
        .map(|f| f.feed_key.as_str())
        .collect();
    for key in keep {
        if placement.binding_clusters.contains(key) {
            continue;
        }
        let index = placement
            .binding_clusters
            .partition_point(|existing| existing.as_str() < key.as_str());
        placement.binding_clusters.insert(index, (*key).clone());
        for (feed, replicas) in placement.replicas.iter_mut() {
            // Non-divisible feeds have no per-cluster entries.
            if divisible.contains(feed.as_str()) {
                replicas.insert(index.min(replicas.len()), 0);
            }
        }
    }
    placement
}

fn invalid_spec(e: &Error) -> PlannedCondition {
    cond(condition::SCHEDULED, false, "InvalidSpec", e.to_string())
}

fn scheduled_condition(placement: &Placement) -> PlannedCondition {
    if placement.binding_clusters.is_empty() {
        let reasons: Vec<String> = placement
            .unschedulable
            .iter()
            .map(|(cluster, reason)| format!("{cluster}: {reason}"))
            .collect();
        let message = if placement.matched == 0 {
            "0 clusters match any subscriber's clusterAffinity; check the selectors and the \
             ManagedCluster labels (kubectl get mcls -A --show-labels)"
                .to_owned()
        } else {
            format!(
                "0/{} matching clusters are available: {}",
                placement.matched,
                reasons.join("; ")
            )
        };
        return cond(condition::SCHEDULED, false, "NoClusterAvailable", message);
    }
    let mut message = format!(
        "bound to {} cluster(s): {}",
        placement.binding_clusters.len(),
        placement.binding_clusters.join(", ")
    );
    if !placement.unplaced.is_empty() {
        let unplaced: Vec<String> = placement
            .unplaced
            .iter()
            .map(|(feed, n)| format!("{feed}: {n}"))
            .collect();
        message.push_str(&format!(
            "; replicas that found no capacity: {}",
            unplaced.join(", ")
        ));
    }
    cond(condition::SCHEDULED, true, "Scheduled", message)
}

/// What a cluster's rendering depends on: per feed, the override sets that apply (by name, in
/// order) and its divided replica count.
type Recipe = Vec<(Vec<String>, Option<i32>)>;

/// The recipe of the cluster at binding `index`, with the override sets it names.
fn recipe(
    cluster: &ClusterInfo,
    index: usize,
    feeds: &[ResolvedFeed],
    placement: &Placement,
    globalizations: &[&Globalization],
    localizations: &[&Localization],
) -> Result<(Recipe, Vec<Vec<OverrideSet>>), String> {
    let mut recipe = Vec::with_capacity(feeds.len());
    let mut all_sets = Vec::with_capacity(feeds.len());
    for f in feeds {
        let sets = overrides::select_overrides(
            &f.feed,
            &cluster.namespace,
            &cluster.labels,
            globalizations.iter().copied(),
            localizations.iter().copied(),
        )
        .map_err(|e| e.to_string())?;
        let divided = placement
            .replicas
            .get(&f.feed.key())
            .and_then(|per_cluster| per_cluster.get(index))
            .copied();
        recipe.push((sets.iter().map(OverrideSet::describe).collect(), divided));
        all_sets.push(sets);
    }
    Ok((recipe, all_sets))
}

/// Renders every feed by its recipe.
fn render(
    recipe: &Recipe,
    sets: &[Vec<OverrideSet>],
    feeds: &[ResolvedFeed],
) -> Result<Rendered, String> {
    let mut objects = Vec::with_capacity(feeds.len());
    let mut charts = Vec::new();
    for ((f, (_, divided)), sets) in feeds.iter().zip(recipe).zip(sets) {
        let Ok(template) = &f.object else {
            return Err(format!("feed {} is not resolved", f.feed.key()));
        };
        if is_helm_chart(&f.feed) {
            let chart = overrides::helm::render_chart(template, sets)
                .map_err(|e| format!("HelmChart {}: {e}", feed_location(&f.feed)))?;
            charts.push(chart);
            continue;
        }
        let divided = divided.map(|replicas| DividedReplicas { replicas });
        objects.push(overrides::render(template, sets, divided).map_err(|e| e.to_string())?);
    }
    let size = serde_json::to_vec(&objects).map(|b| b.len()).unwrap_or(0)
        + serde_json::to_vec(&charts_json(&charts))
            .map(|b| b.len())
            .unwrap_or(0);
    if size > MAX_DESCRIPTION_BYTES {
        return Err(format!(
            "the rendered objects take {size} bytes, more than the {MAX_DESCRIPTION_BYTES} a \
             Description may hold; split the Subscription"
        ));
    }
    let objects = Value::Array(objects);
    // Without charts the hash is the objects' alone, as before charts were rendered, so that
    // no Description is rewritten for an unchanged rendering.
    let hash = if charts.is_empty() {
        placement::content_hash(&objects)
    } else {
        placement::content_hash(&Value::Array(vec![objects.clone(), charts_json(&charts)]))
    };
    let Value::Array(objects) = objects else {
        return Err("rendering produced no list".to_owned());
    };
    Ok(Rendered {
        objects: Arc::new(objects),
        charts: Arc::new(charts),
        hash,
    })
}

impl Rendered {
    /// `Helm` when the Description installs charts (beside any plain objects), `Generic`
    /// otherwise.
    pub fn deployer(&self) -> Deployer {
        if self.charts.is_empty() {
            Deployer::Generic
        } else {
            Deployer::Helm
        }
    }

    /// The Description spec carrying this rendering.
    pub fn description_spec(&self) -> DescriptionSpec {
        DescriptionSpec {
            deployer: self.deployer(),
            charts: self.charts.iter().map(RenderedChart::reference).collect(),
            raw: self.objects.as_ref().clone(),
            chart_raw: self.charts.iter().map(|c| c.chart.clone()).collect(),
            chart_values: self.charts.iter().map(|c| c.values.clone()).collect(),
        }
    }
}

/// The rendered charts as one JSON list (for the hash and the size check).
fn charts_json(charts: &[RenderedChart]) -> Value {
    Value::Array(
        charts
            .iter()
            .map(|c| Value::Array(vec![c.chart.clone(), c.values.clone()]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_template_must_be_the_object_its_labels_name() {
        let feed = Feed {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("team".into()),
            name: "web".into(),
        };
        let template = |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| {
            let mut t = serde_json::json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": name}});
            if let Some(ns) = namespace {
                t["metadata"]["namespace"] = ns.into();
            }
            t
        };
        let same = template("apps/v1", "Deployment", Some("team"), "web");
        assert_eq!(manifest_difference(&feed, &same, true), None);
        // Another tenant's namespace, another name, another kind: each named.
        let elsewhere = template("apps/v1", "Deployment", Some("shop"), "web");
        assert_eq!(
            manifest_difference(&feed, &elsewhere, true).as_deref(),
            Some(r#"namespace "shop" where its labels say "team""#)
        );
        let other = template(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            None,
            "x",
        );
        let difference = manifest_difference(&feed, &other, true).unwrap_or_default();
        for part in ["apiVersion", "kind", "name", "namespace \"default\""] {
            assert!(difference.contains(part), "{part}: {difference}");
        }
        // An omitted namespace is `default` on either side; cluster-scoped kinds have none.
        let in_default = Feed {
            namespace: None,
            ..feed.clone()
        };
        let defaulted = template("apps/v1", "Deployment", Some("default"), "web");
        assert_eq!(manifest_difference(&in_default, &defaulted, true), None);
        assert_eq!(manifest_difference(&feed, &elsewhere, false), None);
    }

    #[test]
    fn unreachable_clusters_kept_bound_hold_no_replica_even_when_none_is_placed() {
        // Found by chaos: every cluster of a Dividing Subscription unreachable at once left the
        // divided feed's list empty, and each kept cluster got the feed's whole count.
        let facts = |desired| FeedReplicas {
            feed_key: "apps/v1/Deployment/default/web".into(),
            desired,
            per_replica_request: None,
        };
        let config = FeedReplicas {
            feed_key: "v1/ConfigMap/default/cfg".into(),
            desired: None,
            per_replica_request: None,
        };
        let nothing_placed = Placement {
            binding_clusters: Vec::new(),
            replicas: [
                ("apps/v1/Deployment/default/web".to_owned(), Vec::new()),
                ("v1/ConfigMap/default/cfg".to_owned(), Vec::new()),
            ]
            .into_iter()
            .collect(),
            unschedulable: Vec::new(),
            unplaced: Default::default(),
            matched: 2,
        };
        let (a, b) = ("ns-a/a".to_owned(), "ns-b/b".to_owned());
        let kept = keep_bound_with_zero_replicas(
            nothing_placed.clone(),
            &[&b, &a],
            &[facts(Some(8)), config.clone()],
        );
        assert_eq!(kept.binding_clusters, vec![a.clone(), b.clone()]);
        assert_eq!(kept.replicas["apps/v1/Deployment/default/web"], vec![0, 0]);
        assert!(kept.replicas["v1/ConfigMap/default/cfg"].is_empty());

        // Beside a placed cluster, in key order.
        let mut one_placed = nothing_placed;
        one_placed.binding_clusters = vec![b.clone()];
        one_placed
            .replicas
            .insert("apps/v1/Deployment/default/web".into(), vec![8]);
        let kept = keep_bound_with_zero_replicas(one_placed, &[&a], &[facts(Some(8)), config]);
        assert_eq!(kept.binding_clusters, vec![a, b]);
        assert_eq!(kept.replicas["apps/v1/Deployment/default/web"], vec![0, 8]);
    }

    #[test]
    fn feed_problems_name_the_feed_and_what_to_do() {
        let feed = Feed {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        assert_eq!(Unresolved::not_found(&feed).reason, "FeedNotFound");
        assert_eq!(
            Unresolved::not_found(&feed).message,
            "Deployment shop/web not found: create it in the parent, or a Manifest for it in \
             clusternet-reserved"
        );
        assert!(
            Unresolved::kind_not_served(&feed)
                .message
                .ends_with("does not serve apps/v1 Deployment; install its CRD first")
        );
        let chart = Feed {
            api_version: atoll_crds::apps::API_VERSION.into(),
            kind: "HelmChart".into(),
            namespace: None,
            name: "redis".into(),
        };
        assert!(is_helm_chart(&chart) && !is_helm_chart(&feed));
        let refused = Unresolved::divided_chart(&chart);
        assert!(refused.is_not_supported());
        assert!(
            refused
                .message
                .starts_with("HelmChart redis is not distributed: a Dividing Subscription")
        );
    }
}
