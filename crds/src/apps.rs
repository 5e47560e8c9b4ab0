//! `apps.clusternet.io/v1alpha1`: what to distribute (feeds), where (subscribers), how
//! (scheduling strategy), per-cluster overrides, and the rendered per-cluster Descriptions.

// kube's `printcolumn(...)` attributes repeat `type_ = "string"`; that is not a mistake.
#![allow(clippy::duplicated_attributes)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PreferredSchedulingTerm, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::known;

/// API group of every kind in this module.
pub const GROUP: &str = "apps.clusternet.io";
/// API version of every kind in this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kind in this module.
pub const API_VERSION: &str = "apps.clusternet.io/v1alpha1";

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// A reference to one Kubernetes object to distribute (a "feed").
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct Feed {
    /// APIVersion of the referenced object, for example `apps/v1`, `v1` or
    /// `apps.clusternet.io/v1alpha1`.
    pub api_version: String,
    /// Kind of the referenced object, in CamelCase, for example `Deployment` or `HelmChart`.
    pub kind: String,
    /// Namespace of the referenced object. Leave it empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the referenced object.
    pub name: String,
}

impl Feed {
    /// The feed key used in `Subscription.status.replicas`:
    /// `<apiVersion>/<kind>/<namespace>/<name>`, or `<apiVersion>/<kind>/<name>` when the feed has
    /// no (or an empty) namespace. Example: `apps/v1/Deployment/bar/my-nginx`.
    pub fn key(&self) -> String {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => {
                format!("{}/{}/{}/{}", self.api_version, self.kind, ns, self.name)
            }
            _ => format!("{}/{}/{}", self.api_version, self.kind, self.name),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Subscription
// ---------------------------------------------------------------------------------------------

/// SubscriptionSpec defines what to distribute (`feeds`), to which clusters (`subscribers`) and
/// how (`schedulingStrategy`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Subscription",
    namespaced,
    status = "SubscriptionStatus",
    shortname = "sub",
    shortname = "subs",
    category = "clusternet",
    derive = "PartialEq",
    doc = "Subscription distributes the objects listed in `spec.feeds` to the child clusters selected by `spec.subscribers`.",
    printcolumn(
        name = "STRATEGY",
        type_ = "string",
        json_path = ".spec.schedulingStrategy",
        description = "How replicas are placed: Replication or Dividing."
    ),
    printcolumn(
        name = "CLUSTERS",
        type_ = "integer",
        json_path = ".status.desiredReleases",
        description = "Number of clusters the Subscription is bound to."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.completedReleases",
        description = "Number of bound clusters whose Description is Success."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = require_subscribers_and_feeds)]
pub struct SubscriptionSpec {
    /// If specified, the Subscription will be handled by the specified scheduler. If not
    /// specified, the Subscription will be handled by the default scheduler (`default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub scheduler_name: Option<String>,

    /// If specified, the Subscription is scheduled by subgroup: every subscriber must then set
    /// `subGroupStrategy`, and `minClusters` clusters are picked from each subscriber.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_by_sub_group: Option<bool>,

    /// How the feeds are placed: `Replication` deploys every feed unchanged to every selected
    /// cluster; `Dividing` divides the replicas of each workload among the selected clusters.
    #[serde(default)]
    pub scheduling_strategy: SchedulingStrategy,

    /// How replicas are divided. Only used when `schedulingStrategy` is `Dividing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dividing_scheduling: Option<DividingScheduling>,

    /// Scheduling priority: the higher the value, the earlier the Subscription is scheduled.
    /// Unset means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,

    /// Whether this Subscription may preempt lower-priority Subscriptions (reserved, not
    /// enforced yet). One of `PreemptLowerPriority` (default) or `PreemptNever`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "PreemptionPolicy", extend("default" = "PreemptLowerPriority"))]
    pub preemption_policy: Option<PreemptionPolicy>,

    /// Subscribers select the child clusters (ManagedClusters, by their labels) to distribute
    /// the feeds to. A cluster matched by any subscriber is a candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscribers: Vec<Subscriber>,

    /// Tolerations of cluster taints (`ManagedCluster.spec.taints`), with Kubernetes toleration
    /// semantics. A cluster with a `NoSchedule` or `NoExecute` taint that is not tolerated is
    /// never selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,

    /// Feeds are the objects to distribute: Manifests (workload templates) or live objects of
    /// the parent cluster, and HelmCharts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feeds: Vec<Feed>,

    /// What happens to the objects in a child cluster when they leave it: when the Subscription
    /// is deleted, the cluster is no longer selected, or a feed is removed. `Delete` (default)
    /// deletes them; `Orphan` leaves them running, no longer managed (they keep their
    /// ownership annotation, so a Subscription that delivers them again takes them back). An
    /// atoll extension; Clusternet has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "DeletionPolicy", extend("default" = "Delete"))]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// What happens to a Subscription's objects in a child cluster when they leave it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeletionPolicy {
    /// The agent deletes them.
    #[default]
    Delete,
    /// The agent leaves them running and stops managing them.
    Orphan,
}

impl DeletionPolicy {
    /// The policy a Description's [`known::LABEL_DELETION_POLICY`] label value stands for: only
    /// `Orphan` is ever written, anything else (or no label) means `Delete`.
    pub fn from_label(value: Option<&str>) -> Self {
        if value == Some(known::DELETION_POLICY_ORPHAN) {
            Self::Orphan
        } else {
            Self::Delete
        }
    }
}

fn require_subscribers_and_feeds(schema: &mut Schema) {
    crate::schema::require(schema, &["subscribers", "feeds"]);
}

/// How the feeds of a Subscription are placed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SchedulingStrategy {
    /// Every selected cluster runs every feed unchanged.
    #[default]
    Replication,
    /// The replicas of each workload are divided among the selected clusters.
    Dividing,
}

/// How replicas are divided among clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DividingScheduling {
    /// `Static` divides replicas by subscriber weights; `Dynamic` divides them by the capacity
    /// each cluster reports.
    #[serde(rename = "type", default)]
    pub type_: DividingType,

    /// Parameters of dynamic dividing. Required when `type` is `Dynamic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_dividing: Option<DynamicDividing>,
}

/// The dividing algorithm.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DividingType {
    /// Divide replicas in proportion to the `weight` of the subscribers matching each cluster.
    #[default]
    Static,
    /// Divide replicas by the capacity each cluster can still accommodate.
    Dynamic,
}

/// Parameters of dynamic dividing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DynamicDividing {
    /// `Spread` spreads replicas over the clusters by their available capacity; `Binpack`
    /// (reserved) packs them into as few clusters as possible.
    #[serde(default)]
    pub strategy: DynamicDividingStrategy,

    /// How replicas spread across topology domains of clusters (reserved, not used yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// Clusters to prefer, by weight (reserved, not used yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_clusters: Vec<PreferredSchedulingTerm>,

    /// The minimum number of clusters to divide replicas among: scheduling fails with a condition
    /// when fewer clusters are feasible (atoll honours it; Clusternet ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_clusters: Option<i32>,

    /// The maximum number of clusters to divide replicas among: the clusters with the most
    /// available capacity are kept (atoll honours it; Clusternet ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clusters: Option<i32>,
}

/// The dynamic dividing strategy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DynamicDividingStrategy {
    /// Spread replicas over the clusters in proportion to their available capacity.
    #[default]
    Spread,
    /// Pack replicas into as few clusters as possible (reserved).
    Binpack,
}

/// Whether a Subscription may preempt lower-priority Subscriptions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum PreemptionPolicy {
    /// May preempt lower-priority Subscriptions.
    #[default]
    PreemptLowerPriority,
    /// Never preempts. (Clusternet's Go constant is `Never`; its CRD, and atoll, use
    /// `PreemptNever`.)
    PreemptNever,
}

/// A set of clusters selected by labels, with a weight for static dividing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subscriber {
    /// Selects ManagedClusters (in any namespace) by their labels, for example
    /// `clusters.clusternet.io/cluster-id` or `clusters.clusternet.io/cluster-name`.
    pub cluster_affinity: LabelSelector,

    /// Static dividing weight of the matched clusters. A cluster matched by several subscribers
    /// gets the sum of their weights.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0), extend("default" = 0))]
    pub weight: i32,

    /// How many clusters to pick from this subscriber when `schedulingBySubGroup` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_strategy: Option<SubGroupStrategy>,
}

/// How many clusters to pick from one subscriber's subgroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupStrategy {
    /// The number of clusters to select from this subgroup.
    #[schemars(range(min = 0))]
    pub min_clusters: i32,
}

/// SubscriptionStatus is the observed state of a Subscription: where it is bound, how replicas
/// are divided, and the aggregated status of every feed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    /// The clusters the Subscription is bound to, as `<dedicated-namespace>/<managedcluster-name>`,
    /// sorted ascending, for example `clusternet-qm42m/child1`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_clusters: Vec<String>,

    /// Replicas per feed key (`<apiVersion>/<kind>/<namespace>/<name>`) and per binding cluster
    /// (same index as `bindingClusters`). Only set for `Dividing`; feeds without replicas map
    /// to an empty list.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, Vec<i32>>,

    /// Hash of the spec that was scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<i64>,

    /// Number of clusters the Subscription should be released to (= length of
    /// `bindingClusters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_releases: Option<i32>,

    /// Number of bound clusters whose Description reached phase `Success`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_releases: Option<i32>,

    /// Status of every feed, aggregated over the bound clusters, in the order of `spec.feeds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_statuses: Vec<AggregatedStatus>,

    /// The latest observations of the Subscription's state, keyed by `type` (for example
    /// `Scheduled`, `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The status of one feed, aggregated over every bound cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatus {
    /// The feed this status is about.
    #[serde(flatten)]
    pub feed: Feed,

    /// Summary over all bound clusters: available only if available everywhere; replica counts
    /// summed; observedGeneration the maximum.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub feed_status_summary: FeedStatus,

    /// The status of the feed in each bound cluster, in the order of `bindingClusters`. Past
    /// 50 bound clusters, only clusters where the feed is not available are listed (at most
    /// 50), so that the status stays small at any fleet size; every cluster's own status is in
    /// its Description.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feed_status_details: Vec<FeedStatusPerCluster>,

    /// How many bound clusters `feedStatusDetails` leaves out (unset when it lists every one).
    /// The summary counts them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feed_status_details_omitted: Option<i32>,
}

/// The status of one feed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedStatus {
    /// Whether the object exists (and reports status) in the cluster(s).
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub available: bool,

    /// Replica counts of the object, for workloads.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub replica_status: ReplicaStatus,
}

/// The status of one feed in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedStatusPerCluster {
    /// The cluster id (`ManagedCluster.spec.clusterId`).
    #[schemars(regex(
        pattern = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    ))]
    pub cluster_id: String,

    /// The cluster name (the ManagedCluster's name).
    #[schemars(
        length(max = 30),
        regex(pattern = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([a-z0-9]([-a-z0-9]*[a-z0-9]))*")
    )]
    pub cluster_name: String,

    /// Whether the object exists (and reports status) in this cluster.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub available: bool,

    /// Replica counts of the object in this cluster, for workloads.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub replica_status: ReplicaStatus,
}

/// Replica counts of a workload (Deployment, StatefulSet, Job) in one or all clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The most recent generation observed by the workload's controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Total number of non-terminated pods targeted by the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Number of non-terminated pods that have the desired template spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Number of pods created from the current revision (StatefulSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// Number of pods with a Ready condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Number of pods available for at least minReadySeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Number of pods still required for the workload to have 100% available capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// Number of pending and running pods (Job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    /// Number of pods which reached phase Succeeded (Job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Number of pods which reached phase Failed (Job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
}

// ---------------------------------------------------------------------------------------------
// Localization and Globalization
// ---------------------------------------------------------------------------------------------

fn default_override_priority() -> i32 {
    500
}

/// LocalizationSpec overrides one feed for the one cluster whose dedicated namespace holds the
/// Localization.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Localization",
    namespaced,
    shortname = "loc",
    shortname = "local",
    category = "clusternet",
    derive = "PartialEq",
    doc = "Localization overrides a feed for one child cluster; it must live in that cluster's dedicated namespace.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct LocalizationSpec {
    /// When the overrides take effect: `ApplyNow` re-renders the affected Descriptions at once;
    /// `ApplyLater` (default) waits for the next change of the Subscription or the feed.
    #[serde(default)]
    pub override_policy: OverridePolicy,

    /// The overrides, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideConfig>,

    /// Order among overrides of the same kind: lower values are applied first, so higher values
    /// win. Range 0 to 1000, default 500.
    #[serde(default = "default_override_priority")]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,

    /// The object these overrides apply to.
    pub feed: Feed,
}

/// GlobalizationSpec overrides one feed for every cluster matched by `clusterAffinity`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Globalization",
    shortname = "glob",
    shortname = "global",
    category = "clusternet",
    derive = "PartialEq",
    doc = "Globalization overrides a feed for every child cluster matched by spec.clusterAffinity (all clusters when unset); Localizations are applied after it.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalizationSpec {
    /// When the overrides take effect: `ApplyNow` re-renders the affected Descriptions at once;
    /// `ApplyLater` (default) waits for the next change of the Subscription or the feed.
    #[serde(default)]
    pub override_policy: OverridePolicy,

    /// The overrides, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideConfig>,

    /// Order among overrides of the same kind: lower values are applied first, so higher values
    /// win. Range 0 to 1000, default 500.
    #[serde(default = "default_override_priority")]
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,

    /// The object these overrides apply to.
    pub feed: Feed,

    /// Selects the ManagedClusters this Globalization applies to. Unset means every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<LabelSelector>,
}

/// When overrides take effect.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OverridePolicy {
    /// Re-render the affected Descriptions as soon as the override is created, changed or
    /// deleted.
    ApplyNow,
    /// Take effect the next time the Descriptions are rendered.
    #[default]
    ApplyLater,
}

/// One override.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideConfig {
    /// A name for the override (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// The patch or Helm values, as YAML or JSON.
    pub value: String,

    /// How `value` is applied: `Helm` (Helm values, HelmChart feeds only), `JSONPatch`
    /// (RFC 6902), `MergePatch` (RFC 7386), or `FieldJSONPatch` / `FieldMergePatch` (patch the
    /// JSON or YAML document held in the string field at `fieldPath`).
    #[serde(rename = "type")]
    pub type_: OverrideType,

    /// Helm overrides only: patch the HelmChart object itself (merge patch) instead of its
    /// values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_chart: Option<bool>,

    /// `FieldJSONPatch` / `FieldMergePatch` only: JSON pointer to a string field that holds an
    /// embedded JSON or YAML document, for example `/data/config.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,

    /// `FieldJSONPatch` / `FieldMergePatch` only: the format of the document at `fieldPath`,
    /// `YAML` or `JSON`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "FieldFormat")]
    pub field_format: Option<FieldFormat>,
}

/// How an override's value is applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum OverrideType {
    /// Helm values, deep-merged over the chart's values (override wins).
    Helm,
    /// An RFC 6902 JSON patch.
    JSONPatch,
    /// An RFC 7386 JSON merge patch.
    MergePatch,
    /// An RFC 6902 JSON patch applied to the document in the string field at `fieldPath`.
    FieldJSONPatch,
    /// An RFC 7386 merge patch applied to the document in the string field at `fieldPath`.
    FieldMergePatch,
}

/// The format of an embedded document.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FieldFormat {
    /// YAML.
    YAML,
    /// JSON.
    JSON,
}

// ---------------------------------------------------------------------------------------------
// Description
// ---------------------------------------------------------------------------------------------

/// DescriptionSpec is what one child cluster must run for one Subscription: the rendered objects
/// (Generic) or chart references (Helm), after all overrides.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Description",
    namespaced,
    status = "DescriptionStatus",
    shortname = "desc",
    category = "clusternet",
    derive = "PartialEq",
    doc = "Description holds what one child cluster runs for one Subscription. It lives in the cluster's dedicated namespace and is named <subscription-namespace>.<subscription-name>.",
    printcolumn(
        name = "CLUSTER",
        type_ = "string",
        json_path = ".metadata.labels['clusters\\.clusternet\\.io/cluster-name']",
        description = "The child cluster this Description is for."
    ),
    printcolumn(
        name = "DEPLOYER",
        type_ = "string",
        json_path = ".spec.deployer",
        description = "Generic (raw objects) or Helm (charts)."
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "Deployment phase reported by the cluster."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DescriptionSpec {
    /// How the objects are deployed: `Generic` applies the objects in `raw`; `Helm` installs the
    /// charts in `charts` (and applies the objects in `raw` too, when the Subscription mixes
    /// HelmChart feeds with other feeds: atoll carries both in one Description, where Clusternet
    /// writes a `-generic` and a `-helm` one).
    pub deployer: Deployer,

    /// The HelmCharts to install, in feed order; each is installed as a Helm release named after
    /// the HelmChart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charts: Vec<ChartReference>,

    /// The rendered objects of the feeds that are not HelmCharts, in feed order, after all
    /// overrides: each a string holding the object's JSON text (`kubectl get desc -o
    /// jsonpath='{.spec.raw[0]}' | jq` reads one).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "crate::json_text"
    )]
    #[schemars(schema_with = "crate::schema::json_texts")]
    pub raw: Vec<Value>,

    /// The HelmChart objects after chart-level overrides (`overrideChart: true`), one per entry
    /// of `charts`, each as JSON text.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "crate::json_text"
    )]
    #[schemars(schema_with = "crate::schema::json_texts")]
    pub chart_raw: Vec<Value>,

    /// The Helm values of each chart after the overrides of type `Helm` (a map, empty for the
    /// chart's defaults), one per entry of `charts`, each as JSON text.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "crate::json_text"
    )]
    #[schemars(schema_with = "crate::schema::json_texts")]
    pub chart_values: Vec<Value>,
}

/// How a Description is deployed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Deployer {
    /// Install the HelmCharts listed in `charts`.
    Helm,
    /// Apply the objects in `raw`.
    #[default]
    Generic,
}

/// A reference to a HelmChart object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartReference {
    /// Namespace of the HelmChart.
    pub namespace: String,
    /// Name of the HelmChart.
    pub name: String,
}

/// DescriptionStatus is what the child cluster reported about a Description.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescriptionStatus {
    /// The deployment phase: `Pending`, `Success`, `Failure`, `Installing`, `Upgrading`,
    /// `Uninstalling`, `Superseded` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "DescriptionPhase")]
    pub phase: Option<DescriptionPhase>,

    /// Why the Description is in this phase (for example the aggregated apply errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// The `.status` of each deployed object, as observed in the child cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_statuses: Vec<ManifestStatus>,

    /// The `metadata.generation` of the Description the cluster has applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The latest observations of the Description's state, keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Where this status stands among the hub's writes of reports from the cluster's agent. A
    /// write held up in the network can land after a newer one; at the same
    /// `observedGeneration`, only this order tells the two apart, and the hub writes the newer
    /// status again. Absent for a cluster the hub pushes to: every hub replica writes its
    /// statuses from its own view, which no number orders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_order: Option<ReportOrder>,
}

/// The order of the hub's writes of a cluster's reports: by stream epoch, then by sequence.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ReportOrder {
    /// The epoch of the agent stream the report came on: each new stream of a cluster has a
    /// higher one, whichever hub replica serves it.
    pub epoch: i64,
    /// The writing hub's sequence number within the epoch; it never goes back within a hub
    /// process, and starts past the last one of an earlier process (it starts at the wall
    /// clock's microseconds).
    pub sequence: i64,
}

/// The deployment phase of a Description.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DescriptionPhase {
    /// Not deployed yet.
    Pending,
    /// Every object was applied.
    Success,
    /// At least one object could not be applied; see `reason`.
    Failure,
    /// A Helm release is being installed.
    Installing,
    /// A Helm release is being upgraded.
    Upgrading,
    /// A Helm release is being uninstalled.
    Uninstalling,
    /// A Helm release was superseded.
    Superseded,
    /// The state is not known.
    #[default]
    Unknown,
}

impl DescriptionPhase {
    /// Clusternet's spelling, as the status and the hub protocol carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            DescriptionPhase::Pending => "Pending",
            DescriptionPhase::Success => "Success",
            DescriptionPhase::Failure => "Failure",
            DescriptionPhase::Installing => "Installing",
            DescriptionPhase::Upgrading => "Upgrading",
            DescriptionPhase::Uninstalling => "Uninstalling",
            DescriptionPhase::Superseded => "Superseded",
            DescriptionPhase::Unknown => "Unknown",
        }
    }

    /// The phase spelled `s`; [`DescriptionPhase::Unknown`] for a spelling it does not know
    /// (a newer agent's phase reads as not known rather than failing the report).
    pub fn parse(s: &str) -> DescriptionPhase {
        [
            DescriptionPhase::Pending,
            DescriptionPhase::Success,
            DescriptionPhase::Failure,
            DescriptionPhase::Installing,
            DescriptionPhase::Upgrading,
            DescriptionPhase::Uninstalling,
            DescriptionPhase::Superseded,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
        .unwrap_or(DescriptionPhase::Unknown)
    }
}

/// The observed status of one deployed object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// The deployed object.
    #[serde(flatten)]
    pub feed: Feed,

    /// The object's `.status` in the child cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub observed_status: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// Manifest
// ---------------------------------------------------------------------------------------------

/// Manifest stores a workload template in the reserved namespace (`clusternet-reserved`), so
/// that it is distributed to child clusters without running in the parent. It has no `spec`:
/// the object is in the top-level field `template`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The full object to distribute (apiVersion, kind, metadata, spec, ...), without status.
    pub template: Value,
}

impl Manifest {
    /// Kind of the Manifest resource.
    pub const KIND: &'static str = "Manifest";
    /// Plural resource name.
    pub const PLURAL: &'static str = "manifests";

    /// A Manifest named `name` holding `template`.
    pub fn new(name: &str, template: Value) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            template,
        }
    }
}

impl kube::Resource for Manifest {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Self::KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(API_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Self::PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestRef<'a> {
    api_version: &'a str,
    kind: &'a str,
    metadata: &'a ObjectMeta,
    template: &'a Value,
}

#[derive(Deserialize)]
struct ManifestOwned {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    template: Value,
}

impl Serialize for Manifest {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ManifestRef {
            api_version: API_VERSION,
            kind: Self::KIND,
            metadata: &self.metadata,
            template: &self.template,
        }
        .serialize(ser)
    }
}

impl<'de> Deserialize<'de> for Manifest {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let owned = ManifestOwned::deserialize(de)?;
        Ok(Self {
            metadata: owned.metadata,
            template: owned.template,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_spelled_as_serde_spells_it_and_parses_back() {
        let all = [
            DescriptionPhase::Pending,
            DescriptionPhase::Success,
            DescriptionPhase::Failure,
            DescriptionPhase::Installing,
            DescriptionPhase::Upgrading,
            DescriptionPhase::Uninstalling,
            DescriptionPhase::Superseded,
            DescriptionPhase::Unknown,
        ];
        for phase in all {
            assert_eq!(
                serde_json::to_value(phase).unwrap(),
                serde_json::json!(phase.as_str())
            );
            assert_eq!(DescriptionPhase::parse(phase.as_str()), phase);
        }
        assert_eq!(DescriptionPhase::parse("Sucess"), DescriptionPhase::Unknown);
    }

    #[test]
    fn feed_key_includes_the_namespace_only_when_set() {
        let feed = |ns: Option<&str>, kind: &str, name: &str, api: &str| Feed {
            api_version: api.to_string(),
            kind: kind.to_string(),
            namespace: ns.map(str::to_string),
            name: name.to_string(),
        };
        let cases = [
            (
                feed(Some("bar"), "Deployment", "my-nginx", "apps/v1"),
                "apps/v1/Deployment/bar/my-nginx",
            ),
            (feed(None, "Namespace", "bar", "v1"), "v1/Namespace/bar"),
            (feed(Some(""), "Namespace", "bar", "v1"), "v1/Namespace/bar"),
            (
                feed(Some("bar"), "Service", "my-nginx-svc", "v1"),
                "v1/Service/bar/my-nginx-svc",
            ),
        ];
        for (f, want) in cases {
            assert_eq!(f.key(), want);
        }
    }

    #[test]
    fn manifest_serializes_with_api_version_kind_and_top_level_template() {
        let m = Manifest::new(
            "deployments.qux.my-nginx",
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        );
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["apiVersion"], "apps.clusternet.io/v1alpha1");
        assert_eq!(v["kind"], "Manifest");
        assert_eq!(v["template"]["kind"], "Deployment");
        assert!(v.get("spec").is_none());
        let back: Manifest = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }
}
