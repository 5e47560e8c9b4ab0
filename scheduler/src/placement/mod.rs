//! Placement: which clusters a Subscription binds, and how many replicas each gets.
//!
//! [`schedule`] is a pure function of the Subscription spec, the clusters and the feeds' replica
//! counts. It follows Clusternet's scheduler (`pkg/scheduler`), with these deliberate
//! differences, each visible to a user:
//! - Not-Ready clusters are filtered directly ([`plugins::Readiness`]), not minutes later through
//!   the `unschedulable` taint.
//! - Dynamic dividing is recomputed from scratch from the current capacity on every pass, so a
//!   lost cluster's replicas fail over to the remaining ones (Clusternet scales incrementally from
//!   the previous result and never removes a cluster). `minClusters` and `maxClusters` are
//!   honoured (Clusternet ignores them); `Binpack` is rejected instead of silently binding nothing.
//! - Dividing with no divisible feed at all is an error ([`Error::FindDivisibleFeed`]); a
//!   non-divisible feed next to a divisible one is fine and gets `[]`, as in Clusternet.
//! - Static dividing with every weight 0 is an error ([`Error::DivideStatic`]) instead of silently
//!   writing no replicas.
//! - Ties are broken deterministically (binding name ascending) where Clusternet uses unstable
//!   sorts.
//!
//! An unknown `schedulingStrategy`, `dividingScheduling.type` or `dynamicDividing.strategy` cannot
//! be represented in [`SubscriptionSpec`]: the CRD's enum validation rejects it at admission (HTTP
//! 422), so there is no error for it here.

pub mod divide;
pub mod plugins;
pub mod quantity;
pub mod taints;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;

use atoll_crds::apps::{
    DividingType, DynamicDividingStrategy, Feed, SchedulingStrategy, SubscriptionSpec,
};
use atoll_crds::clusters::ManagedCluster;
use atoll_crds::known;
use k8s_openapi::api::core::v1::Taint;
use serde_json::Value;

use crate::error::Error;
use crate::overrides::replica_path;
use crate::selector::Selector;
pub use divide::{ResourceRequests, Resources};
use plugins::{FilterInput, Score};

/// What the scheduler needs to know about one ManagedCluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterInfo {
    /// The cluster's dedicated namespace (where its ManagedCluster lives).
    pub namespace: String,
    /// The ManagedCluster name.
    pub name: String,
    /// `spec.clusterId`.
    pub id: String,
    /// The ManagedCluster's labels, matched by `subscribers[].clusterAffinity`.
    pub labels: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// True when the `Ready` condition is `True`.
    pub ready: bool,
    /// `status.allocatable` in milli-units (see [`quantity::parse_milli`]).
    pub allocatable: Resources,
}

impl ClusterInfo {
    /// The binding name, `<namespace>/<name>`, as written to `status.bindingClusters`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Reads a ManagedCluster. An allocatable quantity that cannot be parsed is left out (so it
    /// fits no replica that requests that resource) rather than failing every Subscription.
    pub fn from_managed_cluster(cluster: &ManagedCluster) -> Self {
        let status = cluster.status.as_ref();
        let ready = status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == known::CONDITION_READY && c.status == "True")
        });
        let allocatable = status
            .map(|s| {
                s.allocatable
                    .iter()
                    .filter_map(|(k, q)| quantity::parse_milli(q).ok().map(|v| (k.clone(), v)))
                    .collect()
            })
            .unwrap_or_default();
        ClusterInfo {
            namespace: cluster.metadata.namespace.clone().unwrap_or_default(),
            name: cluster.metadata.name.clone().unwrap_or_default(),
            id: cluster.spec.cluster_id.clone(),
            labels: cluster.metadata.labels.clone().unwrap_or_default(),
            taints: cluster.spec.taints.clone(),
            ready,
            allocatable,
        }
    }
}

impl From<&ManagedCluster> for ClusterInfo {
    fn from(cluster: &ManagedCluster) -> Self {
        ClusterInfo::from_managed_cluster(cluster)
    }
}

/// The replica facts of one feed (Clusternet's FeedInventory entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedReplicas {
    /// [`Feed::key`] of the feed.
    pub feed_key: String,
    /// Desired replicas; `None` when the feed's kind has no replica field (not divisible).
    pub desired: Option<i32>,
    /// Resources one replica requests; `None` when the pod template requests nothing.
    pub per_replica_request: Option<ResourceRequests>,
}

impl FeedReplicas {
    /// Reads the replica facts of `feed` from its object (a Manifest template or the live
    /// object). A divisible kind without `spec.replicas` counts as 1 replica, Kubernetes' default.
    /// Per-replica requests are the sum over containers (a request defaults to its limit), raised
    /// to any init container's larger amount, as Clusternet's FeedInventory computes them.
    pub fn from_object(feed: &Feed, object: &Value) -> Result<Self, Error> {
        let desired = replica_path(&feed.api_version, &feed.kind).map(|path| {
            object
                .pointer(path)
                .and_then(Value::as_i64)
                .map_or(1, |n| i32::try_from(n.max(0)).unwrap_or(i32::MAX))
        });
        let per_replica_request = match desired {
            Some(_) => pod_template_requests(object)?,
            None => None,
        };
        Ok(FeedReplicas {
            feed_key: feed.key(),
            desired,
            per_replica_request,
        })
    }
}

/// Per-replica requests of a workload's pod template (`spec.template.spec`); `None` when nothing
/// is requested.
pub fn pod_template_requests(object: &Value) -> Result<Option<ResourceRequests>, Error> {
    let Some(pod) = object.pointer("/spec/template/spec") else {
        return Ok(None);
    };
    let container_requests = |c: &Value| -> Result<Resources, Error> {
        let mut out = Resources::new();
        for field in ["limits", "requests"] {
            // requests override limits: read limits first, then requests on top
            if let Some(map) = c
                .pointer(&format!("/resources/{field}"))
                .and_then(Value::as_object)
            {
                for (name, q) in map {
                    let text = match q {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        _ => continue,
                    };
                    out.insert(name.clone(), quantity::parse_milli_str(&text)?);
                }
            }
        }
        Ok(out)
    };
    let mut total = Resources::new();
    for c in pod
        .get("containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (name, v) in container_requests(c)? {
            let slot = total.entry(name).or_insert(0);
            *slot = slot.saturating_add(v);
        }
    }
    for c in pod
        .get("initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (name, v) in container_requests(c)? {
            let slot = total.entry(name).or_insert(0);
            *slot = (*slot).max(v);
        }
    }
    total.retain(|_, v| *v > 0);
    Ok(if total.is_empty() { None } else { Some(total) })
}

/// The result of scheduling one Subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Bound clusters as `<namespace>/<name>`, sorted ascending.
    pub binding_clusters: Vec<String>,
    /// Feed key → replicas per binding cluster (same index as `binding_clusters`). Dividing:
    /// one entry per feed, `[]` for a non-divisible feed (and for every feed when no cluster is
    /// bound). Replication: empty.
    pub replicas: BTreeMap<String, Vec<i32>>,
    /// Clusters that matched a subscriber but were left out, with the reason (cluster key,
    /// reason), sorted by cluster key so that the result does not depend on the input order.
    pub unschedulable: Vec<(String, String)>,
    /// Feed key → replicas that could not be placed (capacity or weights too small); only
    /// feeds with a shortfall appear.
    pub unplaced: BTreeMap<String, i32>,
    /// Number of clusters that matched at least one subscriber's clusterAffinity.
    pub matched: usize,
}

struct Candidate<'a> {
    cluster: &'a ClusterInfo,
    key: String,
    /// weight from matching subscribers (static dividing)
    weight: i64,
    /// indices of the subscribers whose selector matches (filled for subgroup scheduling only)
    subscribers: Vec<usize>,
    /// index of this cluster in the flat lists of [`Hot`]
    slot: usize,
    /// the first 16 bytes of `key`, big-endian, zero-padded: orders like `key` on those bytes,
    /// so most comparisons of the binding sort never touch the strings
    prefix: u128,
}

fn key_prefix(key: &str) -> u128 {
    let mut bytes = [0u8; 16];
    for (slot, b) in bytes.iter_mut().zip(key.bytes()) {
        *slot = b;
    }
    u128::from_be_bytes(bytes)
}

/// Per-candidate numbers computed in the first pass over the clusters, while each cluster is
/// hot in the cache (input order is memory order; binding order is not), stored flat.
struct Hot {
    /// per-feed capacities (dynamic dividing only), `caps_width` per candidate
    caps: Vec<i64>,
    caps_width: usize,
    /// raw score of each score plugin (when scores are needed), `scores_width` per candidate
    raw_scores: Vec<i64>,
    scores_width: usize,
}

impl Hot {
    fn caps(&self, c: &Candidate<'_>) -> &[i64] {
        let at = c.slot * self.caps_width;
        self.caps.get(at..at + self.caps_width).unwrap_or(&[])
    }

    fn raw_score(&self, c: &Candidate<'_>, plugin: usize) -> i64 {
        self.raw_scores
            .get(c.slot * self.scores_width + plugin)
            .copied()
            .unwrap_or(0)
    }
}

/// Places `sub` over `clusters`, given the replica facts of its feeds.
///
/// Steps: validate the spec; keep clusters matching at least one subscriber; run the filters
/// ([`plugins::default_filters`]); optionally pick per subgroup; then Replication binds every
/// feasible cluster, static Dividing splits by weight ([`divide::divide_static`]) and dynamic
/// Dividing splits by capacity ([`divide::divide`]). Zero feasible clusters is not an error: the
/// placement is empty and `unschedulable` says why, so previously bound clusters are released
/// (as Clusternet binds the empty result). The one exception is dynamic dividing with
/// `minClusters` set: fewer feasible clusters than that is [`Error::SelectClusters`], and the
/// caller keeps the previous placement.
pub fn schedule(
    sub: &SubscriptionSpec,
    clusters: &[ClusterInfo],
    feeds: &[FeedReplicas],
) -> Result<Placement, Error> {
    if sub.subscribers.is_empty() {
        return Err(Error::ValidateSubscribers);
    }
    let mut selectors = Vec::with_capacity(sub.subscribers.len());
    for (index, s) in sub.subscribers.iter().enumerate() {
        if s.weight < 0 {
            return Err(Error::ValidateWeight {
                index,
                weight: s.weight,
            });
        }
        selectors.push(Selector::compile(
            &s.cluster_affinity,
            &format!("spec.subscribers[{index}].clusterAffinity"),
        )?);
    }
    let by_subgroup = sub.scheduling_by_sub_group == Some(true);
    if by_subgroup
        && let Some(index) = sub
            .subscribers
            .iter()
            .position(|s| s.sub_group_strategy.is_none())
    {
        return Err(Error::GroupSubscribers { index });
    }

    // which feeds are divisible, in spec order, keyed once
    let facts: HashMap<&str, &FeedReplicas> =
        feeds.iter().map(|f| (f.feed_key.as_str(), f)).collect();
    let mut feed_plan: Vec<(String, Option<&FeedReplicas>)> = Vec::new();
    for feed in &sub.feeds {
        let key = feed.key();
        if feed_plan.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let divisible = facts
            .get(key.as_str())
            .copied()
            .filter(|f| f.desired.is_some());
        feed_plan.push((key, divisible));
    }

    let mode = Mode::from_spec(sub)?;
    if !matches!(mode, Mode::Replication) && feed_plan.iter().all(|(_, f)| f.is_none()) {
        return Err(Error::FindDivisibleFeed);
    }

    // match and filter
    let input = FilterInput {
        tolerations: &sub.cluster_tolerations,
    };
    let filters = plugins::default_filters();
    let mut placement = Placement::default();
    let mut feasible: Vec<Candidate<'_>> = Vec::new();
    let fits: Vec<divide::ReplicaFit<'_>> = match mode {
        Mode::Dynamic { .. } => feed_plan
            .iter()
            .filter_map(|(_, f)| *f)
            .map(|f| divide::ReplicaFit::new(f.per_replica_request.as_ref()))
            .collect(),
        _ => Vec::new(),
    };
    let scorers = match mode {
        Mode::Dynamic { max: Some(_), .. } => plugins::default_scores(),
        _ if by_subgroup => plugins::default_scores(),
        _ => Vec::new(),
    };
    let mut hot = Hot {
        caps: Vec::new(),
        caps_width: fits.len(),
        raw_scores: Vec::new(),
        scores_width: scorers.len(),
    };
    for cluster in clusters {
        // no allocation on the hot path: matched flag and summed weight first
        let mut matched = false;
        let mut weight: i64 = 0;
        for (s, selector) in sub.subscribers.iter().zip(&selectors) {
            if selector.matches(&cluster.labels) {
                matched = true;
                weight += i64::from(s.weight.max(0));
            }
        }
        if !matched {
            continue;
        }
        placement.matched += 1;
        let rejected = filters
            .iter()
            .find_map(|f| f.filter(&input, cluster).err().map(|r| (f.name(), r)));
        if let Some((plugin, reason)) = rejected {
            placement
                .unschedulable
                .push((cluster.key(), format!("{plugin}: {reason}")));
            continue;
        }
        let subscribers = if by_subgroup {
            selectors
                .iter()
                .enumerate()
                .filter(|(_, s)| s.matches(&cluster.labels))
                .map(|(i, _)| i)
                .collect()
        } else {
            Vec::new()
        };
        hot.caps.extend(
            fits.iter()
                .map(|fit| fit.max_replicas(&cluster.allocatable)),
        );
        hot.raw_scores
            .extend(scorers.iter().map(|p| p.score(&input, cluster)));
        feasible.push(Candidate {
            cluster,
            key: cluster.key(),
            weight,
            subscribers,
            slot: feasible.len(),
            prefix: 0,
        });
    }
    for c in feasible.iter_mut() {
        c.prefix = key_prefix(&c.key);
    }
    feasible.sort_by(|a, b| a.prefix.cmp(&b.prefix).then_with(|| a.key.cmp(&b.key)));
    feasible.dedup_by(|a, b| a.key == b.key);

    if by_subgroup {
        feasible = pick_subgroups(sub, &scorers, &hot, feasible);
    }

    match mode {
        Mode::Replication => {
            placement.binding_clusters = feasible.into_iter().map(|c| c.key).collect();
        }
        Mode::Static => {
            let weights: Vec<i64> = feasible.iter().map(|c| c.weight).collect();
            for (key, fact) in &feed_plan {
                let replicas = match fact.and_then(|f| f.desired) {
                    Some(desired) => {
                        let desired = desired.max(0);
                        let r = divide::divide_static(desired, &weights);
                        let placed: i64 = r.iter().map(|x| i64::from(*x)).sum();
                        if placed < i64::from(desired) {
                            let short = i64::from(desired) - placed;
                            placement
                                .unplaced
                                .insert(key.clone(), i32::try_from(short).unwrap_or(i32::MAX));
                        }
                        r
                    }
                    None => Vec::new(),
                };
                placement.replicas.insert(key.clone(), replicas);
            }
            placement.binding_clusters = feasible.into_iter().map(|c| c.key).collect();
        }
        Mode::Dynamic { min, max } => {
            dynamic(
                &mut placement,
                &scorers,
                &hot,
                feasible,
                &feed_plan,
                min,
                max,
            )?;
        }
    }
    // keys are unique; a stable sort on them alone keeps reasons of a repeated key in order
    placement.unschedulable.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(placement)
}

/// The dividing mode, validated.
enum Mode {
    Replication,
    Static,
    Dynamic { min: Option<i32>, max: Option<i32> },
}

impl Mode {
    fn from_spec(sub: &SubscriptionSpec) -> Result<Self, Error> {
        match sub.scheduling_strategy {
            SchedulingStrategy::Replication => Ok(Mode::Replication),
            SchedulingStrategy::Dividing => {
                let dividing = sub
                    .dividing_scheduling
                    .as_ref()
                    .ok_or(Error::ReadDividingScheduling)?;
                match dividing.type_ {
                    DividingType::Static => {
                        if sub.subscribers.iter().all(|s| s.weight == 0) {
                            return Err(Error::DivideStatic);
                        }
                        Ok(Mode::Static)
                    }
                    DividingType::Dynamic => {
                        let dynamic = dividing
                            .dynamic_dividing
                            .as_ref()
                            .ok_or(Error::ReadDynamicDividing)?;
                        if dynamic.strategy == DynamicDividingStrategy::Binpack {
                            return Err(Error::DivideBinpack);
                        }
                        let (min, max) = (dynamic.min_clusters, dynamic.max_clusters);
                        let bad = |reason: String| Err(Error::ValidateClusterBounds { reason });
                        if let Some(m) = min.filter(|m| *m < 0) {
                            return bad(format!("minClusters is {m}"));
                        }
                        if let Some(m) = max.filter(|m| *m < 1) {
                            return bad(format!("maxClusters is {m}"));
                        }
                        if let (Some(lo), Some(hi)) = (min, max)
                            && lo > hi
                        {
                            return bad(format!("minClusters {lo} > maxClusters {hi}"));
                        }
                        Ok(Mode::Dynamic { min, max })
                    }
                }
            }
        }
    }
}

/// Subgroup scheduling (Clusternet `SubGroup`): for each subscriber in order, the feasible
/// clusters matching it, best score first (ties by binding name), up to its `minClusters`.
/// Unlike Clusternet a cluster is picked once even when it matches several subscribers.
fn pick_subgroups<'a>(
    sub: &SubscriptionSpec,
    scorers: &[Box<dyn Score + Send + Sync>],
    hot: &Hot,
    feasible: Vec<Candidate<'a>>,
) -> Vec<Candidate<'a>> {
    let refs: Vec<&Candidate<'_>> = feasible.iter().collect();
    let scores = total_scores(scorers, hot, &refs);
    let mut order: Vec<usize> = (0..feasible.len()).collect();
    // feasible is in key order; stable sort keeps key order on equal scores
    order.sort_by(|a, b| scores[*b].cmp(&scores[*a]));
    let mut picked = vec![false; feasible.len()];
    for (i, s) in sub.subscribers.iter().enumerate() {
        let want = s
            .sub_group_strategy
            .as_ref()
            .map_or(0, |g| usize::try_from(g.min_clusters.max(0)).unwrap_or(0));
        let mut taken = 0;
        for idx in &order {
            if taken >= want {
                break;
            }
            if !picked[*idx] && feasible[*idx].subscribers.contains(&i) {
                picked[*idx] = true;
                taken += 1;
            }
        }
    }
    feasible
        .into_iter()
        .zip(picked)
        .filter_map(|(c, p)| p.then_some(c))
        .collect()
}

/// Weighted sum of the normalised scores of every score plugin, per candidate.
fn total_scores(
    scorers: &[Box<dyn Score + Send + Sync>],
    hot: &Hot,
    candidates: &[&Candidate<'_>],
) -> Vec<i64> {
    let mut total = vec![0i64; candidates.len()];
    for (i, plugin) in scorers.iter().enumerate() {
        let mut scores: Vec<i64> = candidates.iter().map(|c| hot.raw_score(c, i)).collect();
        plugin.normalize(&mut scores);
        for (t, s) in total.iter_mut().zip(scores) {
            *t = t.saturating_add(s.clamp(0, plugins::MAX_SCORE) * plugin.weight());
        }
    }
    total
}

fn describe_allocatable(allocatable: &Resources) -> String {
    if allocatable.is_empty() {
        return "the cluster reports no allocatable resources".to_owned();
    }
    let parts: Vec<String> = allocatable
        .iter()
        .map(|(k, v)| format!("{k}={v}m"))
        .collect();
    format!("allocatable {}", parts.join(", "))
}

/// Dynamic dividing by capacity, from scratch.
fn dynamic(
    placement: &mut Placement,
    scorers: &[Box<dyn Score + Send + Sync>],
    hot: &Hot,
    feasible: Vec<Candidate<'_>>,
    feed_plan: &[(String, Option<&FeedReplicas>)],
    min: Option<i32>,
    max: Option<i32>,
) -> Result<(), Error> {
    let mut kept: Vec<Candidate<'_>> = Vec::with_capacity(feasible.len());
    for c in feasible {
        if hot.caps(&c).iter().all(|x| *x <= 0) {
            placement.unschedulable.push((
                c.key.clone(),
                format!(
                    "Capacity: no room for one replica of any divisible feed ({})",
                    describe_allocatable(&c.cluster.allocatable)
                ),
            ));
            continue;
        }
        kept.push(c);
    }
    if let Some(max) = max.and_then(|m| usize::try_from(m).ok())
        && kept.len() > max
    {
        let refs: Vec<&Candidate<'_>> = kept.iter().collect();
        let scores = total_scores(scorers, hot, &refs);
        let mut order: Vec<usize> = (0..kept.len()).collect();
        let total_cap: Vec<i64> = kept
            .iter()
            .map(|c| hot.caps(c).iter().fold(0i64, |a, b| a.saturating_add(*b)))
            .collect();
        // largest total capacity first, then best score, then binding name (stable sort)
        order.sort_by(|a, b| {
            total_cap[*b]
                .cmp(&total_cap[*a])
                .then(scores[*b].cmp(&scores[*a]))
        });
        let mut keep = vec![false; kept.len()];
        for idx in order.into_iter().take(max) {
            keep[idx] = true;
        }
        let reason = format!(
            "MaxClusters: not among the {max} clusters with the most capacity \
             (dynamicDividing.maxClusters)"
        );
        let mut next = Vec::with_capacity(max);
        for (c, k) in kept.into_iter().zip(keep) {
            if k {
                next.push(c);
            } else {
                placement.unschedulable.push((c.key, reason.clone()));
            }
        }
        kept = next;
    }
    if let Some(min) = min
        && kept.len() < usize::try_from(min).unwrap_or(0)
    {
        return Err(Error::SelectClusters {
            feasible: kept.len(),
            min,
        });
    }
    let mut divisible_index = 0;
    for (key, fact) in feed_plan {
        let replicas = match fact.and_then(|f| f.desired) {
            Some(desired) => {
                let desired = desired.max(0);
                let capacity: Vec<i64> = kept
                    .iter()
                    .map(|c| hot.caps(c).get(divisible_index).copied().unwrap_or(0))
                    .collect();
                divisible_index += 1;
                let r = divide::divide(i64::from(desired), &capacity);
                let placed: i64 = r.iter().sum();
                if placed < i64::from(desired) {
                    let short = i64::from(desired) - placed;
                    placement
                        .unplaced
                        .insert(key.clone(), i32::try_from(short).unwrap_or(i32::MAX));
                }
                r.into_iter()
                    .map(|x| i32::try_from(x.max(0)).unwrap_or(i32::MAX))
                    .collect()
            }
            None => Vec::new(),
        };
        placement.replicas.insert(key.clone(), replicas);
    }
    placement.binding_clusters = kept.into_iter().map(|c| c.key).collect();
    Ok(())
}

/// A deterministic hash of the spec, stored in `status.specHash`: FNV-1a 64 over the canonical
/// JSON of the spec (object keys sorted, no whitespace), as `i64`. Clusternet hashes differently
/// (FNV-32a over a go-spew dump); only atoll compares the values, so they need not match.
pub fn spec_hash(spec: &SubscriptionSpec) -> i64 {
    // Serialising these derive-generated types cannot fail (all map keys are strings); if it ever
    // did, every spec would hash the same and change detection would fall back to the generation.
    let value = serde_json::to_value(spec).unwrap_or(Value::Null);
    let mut hasher = Fnv1a64::default();
    write_canonical(&value, &mut hasher);
    i64::from_ne_bytes(hasher.finish().to_ne_bytes())
}

/// A deterministic hash of any JSON value (FNV-1a 64 over its canonical form, map keys sorted),
/// as 16 hex digits. The scheduler stores it on each Description to see, from metadata alone,
/// whether the rendered objects changed.
pub fn content_hash(value: &Value) -> String {
    let mut hasher = Fnv1a64::default();
    write_canonical(value, &mut hasher);
    format!("{:016x}", hasher.finish())
}

/// FNV-1a, 64 bit.
struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a64 {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn write_canonical(value: &Value, out: &mut Fnv1a64) {
    match value {
        Value::Null => out.write(b"null"),
        Value::Bool(b) => out.write(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.write(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.write(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                write_canonical(item, out);
            }
            out.write(b"]");
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.write(b"{");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                write_string(k, out);
                out.write(b":");
                if let Some(v) = map.get(k) {
                    write_canonical(v, out);
                }
            }
            out.write(b"}");
        }
    }
}

fn write_string(s: &str, out: &mut Fnv1a64) {
    // serde_json's string escaping is canonical for a given string
    let escaped = Value::String(s.to_owned()).to_string();
    out.write(escaped.as_bytes());
}

#[cfg(test)]
mod tests;
