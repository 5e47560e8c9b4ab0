//! The one error type of the scheduler crate.
//!
//! Variants are named after the operation that failed; every message says what the user has to
//! change. [`Error::label`] gives a short stable label for metrics.

/// Everything that can go wrong while placing a Subscription or rendering its objects.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `spec.subscribers` is empty.
    #[error(
        "spec.subscribers is empty: add at least one subscriber with a clusterAffinity \
         (an empty clusterAffinity `{{}}` selects every cluster)"
    )]
    ValidateSubscribers,

    /// A subscriber carries a negative weight.
    #[error(
        "spec.subscribers[{index}].weight is {weight}: weights must be 0 or more; set a \
         non-negative weight"
    )]
    ValidateWeight {
        /// Index of the subscriber in `spec.subscribers`.
        index: usize,
        /// The offending weight.
        weight: i32,
    },

    /// A label selector cannot be turned into a Kubernetes selector.
    #[error("{location} is not a valid label selector: {reason}")]
    ParseLabelSelector {
        /// Where the selector lives, e.g. `spec.subscribers[0].clusterAffinity`.
        location: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },

    /// Static dividing was asked for, but every subscriber has weight 0.
    #[error(
        "static Dividing needs weights: every subscriber has weight 0, so there is nothing to \
         divide replicas by; give at least one subscriber a weight above 0"
    )]
    DivideStatic,

    /// `schedulingStrategy: Dividing` without `dividingScheduling`.
    #[error(
        "schedulingStrategy is Dividing but spec.dividingScheduling is missing; add \
         `dividingScheduling: {{type: Static}}` (weights) or `{{type: Dynamic, dynamicDividing: \
         {{strategy: Spread}}}}` (capacity)"
    )]
    ReadDividingScheduling,

    /// `dividingScheduling.type: Dynamic` without `dynamicDividing`.
    #[error(
        "dividingScheduling.type is Dynamic but dividingScheduling.dynamicDividing is missing; \
         add `dynamicDividing: {{strategy: Spread}}`"
    )]
    ReadDynamicDividing,

    /// `dynamicDividing.strategy: Binpack`, which atoll does not implement.
    #[error(
        "dynamicDividing.strategy Binpack is not implemented (Clusternet ignores it too); use \
         strategy: Spread"
    )]
    DivideBinpack,

    /// `dynamicDividing.minClusters`/`maxClusters` are out of range or contradict each other.
    #[error(
        "dynamicDividing.minClusters/maxClusters are inconsistent: {reason}; they need \
         0 <= minClusters <= maxClusters and maxClusters >= 1"
    )]
    ValidateClusterBounds {
        /// What is wrong.
        reason: String,
    },

    /// Dividing over feeds none of which has a replica field.
    #[error(
        "schedulingStrategy is Dividing but no feed has a replica count to divide (only apps/v1 \
         Deployment, StatefulSet and ReplicaSet do); add such a feed or use \
         schedulingStrategy: Replication"
    )]
    FindDivisibleFeed,

    /// Fewer feasible clusters than `dynamicDividing.minClusters`.
    #[error(
        "dynamicDividing.minClusters is {min} but only {feasible} cluster(s) are feasible; lower \
         minClusters, or make more clusters match, become ready or get capacity"
    )]
    SelectClusters {
        /// Clusters that passed every filter and have room for at least one replica.
        feasible: usize,
        /// `minClusters`.
        min: i32,
    },

    /// `schedulingBySubGroup: true` but a subscriber has no `subGroupStrategy`.
    #[error(
        "schedulingBySubGroup is true but spec.subscribers[{index}] has no subGroupStrategy; add \
         `subGroupStrategy: {{minClusters: N}}` to every subscriber or drop schedulingBySubGroup"
    )]
    GroupSubscribers {
        /// Index of the subscriber without a strategy.
        index: usize,
    },

    /// A resource quantity could not be read.
    #[error("cannot read quantity {quantity:?}: {reason}")]
    ParseQuantity {
        /// The quantity text.
        quantity: String,
        /// Why it cannot be read.
        reason: String,
    },

    /// An override's `value` is not valid YAML or JSON of the expected shape.
    #[error("{origin}: value is not valid: {reason}")]
    ParseOverrideValue {
        /// The override, e.g. `Localization ns/name override "x" (#0)`.
        origin: String,
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// A JSON patch could not be applied.
    #[error("{origin}: {reason}")]
    ApplyJsonPatch {
        /// The override.
        origin: String,
        /// The failing operation and path, and what to change.
        reason: String,
    },

    /// `fieldPath` does not point to a string.
    #[error("{origin}: fieldPath {path:?} {reason}")]
    ReadFieldPath {
        /// The override.
        origin: String,
        /// The `fieldPath`.
        path: String,
        /// What was found instead, and what to change.
        reason: String,
    },

    /// The string at `fieldPath` is not valid in its format.
    #[error("{origin}: the string at fieldPath {path:?} is not valid {format}: {reason}")]
    ParseField {
        /// The override.
        origin: String,
        /// The `fieldPath`.
        path: String,
        /// `JSON` or `YAML`.
        format: String,
        /// The parser's message.
        reason: String,
    },

    /// The patched field could not be serialised back.
    #[error("{origin}: cannot write the patched field back as {format}: {reason}")]
    WriteField {
        /// The override.
        origin: String,
        /// `JSON` or `YAML`.
        format: String,
        /// The serialiser's message.
        reason: String,
    },

    /// A `Helm` override (or `overrideChart: true`) on a feed that is not a HelmChart.
    #[error(
        "{origin}: Helm overrides (and overrideChart) apply to HelmChart feeds only; for this \
         feed use type JSONPatch, MergePatch, FieldJSONPatch or FieldMergePatch"
    )]
    ApplyHelmOverride {
        /// The override.
        origin: String,
    },

    /// An `overrideChart` override changed which chart is installed, from which repository
    /// with which credentials, or where, or the HelmChart's name or namespace.
    #[error(
        "{origin}: an override may not change the HelmChart's metadata.name, metadata.namespace, \
         spec.chart, spec.repo, spec.chartPullSecret or spec.targetNamespace (that would be \
         another release, or the chart's credentials sent elsewhere); create another HelmChart \
         instead"
    )]
    OverrideChartIdentity {
        /// The override.
        origin: String,
    },

    /// The divided replica count could not be written into the object.
    #[error("cannot place {replicas} divided replicas into {kind}: {reason}")]
    PlaceReplicas {
        /// `apiVersion/kind` of the object.
        kind: String,
        /// The replica count.
        replicas: i32,
        /// What is wrong.
        reason: String,
    },

    /// A call to the parent's API server failed (transient: retried with backoff).
    #[error("failed to {operation} {target}: {source}")]
    KubeApi {
        /// What was attempted, e.g. `apply Description`.
        operation: &'static str,
        /// The object, `namespace/name`.
        target: String,
        /// The API error.
        source: kube::Error,
    },

    /// Discovery of a feed's kind failed for another reason than "not served".
    #[error("failed to discover {kind} in the parent cluster: {source}")]
    DiscoverFeedKind {
        /// `apiVersion Kind` of the feed.
        kind: String,
        /// The API error.
        source: kube::Error,
    },

    /// The watch of a newly named feed kind did not sync in time.
    #[error("the watch of {kind} did not sync in time; retrying")]
    SyncFeedKind {
        /// `apiVersion Kind` of the feed.
        kind: String,
    },

    /// A cache of the scheduler ended before it synced (the process is shutting down).
    #[error("the {kind} cache stopped before it synced")]
    SyncCache {
        /// The kind whose cache failed.
        kind: &'static str,
    },

    /// An object kept changing under a guarded write; the pass is retried.
    #[error("failed to {operation} {target}: it kept changing; retrying")]
    ConflictRetries {
        /// What was attempted.
        operation: &'static str,
        /// The object, `namespace/name`.
        target: String,
    },

    /// The shared plumbing failed: the kubeconfig, tracing, the admin server, a finalizer edit.
    #[error(transparent)]
    Runtime(#[from] atoll_runtime::Error),

    /// Another scheduler took the leadership Lease over.
    #[error("lost leadership; exiting so that a new contender takes over")]
    KeepLeadership,

    /// An object could not be encoded as JSON.
    #[error("failed to encode {what}: {reason}")]
    EncodeObject {
        /// What was encoded.
        what: String,
        /// The serde error.
        reason: String,
    },
}

impl Error {
    /// A short stable label for metrics (`error="..."`).
    pub fn label(&self) -> &'static str {
        match self {
            Error::ValidateSubscribers => "validate_subscribers",
            Error::ValidateWeight { .. } => "validate_weight",
            Error::ParseLabelSelector { .. } => "parse_label_selector",
            Error::DivideStatic => "divide_static",
            Error::ReadDividingScheduling => "read_dividing_scheduling",
            Error::ReadDynamicDividing => "read_dynamic_dividing",
            Error::DivideBinpack => "divide_binpack",
            Error::ValidateClusterBounds { .. } => "validate_cluster_bounds",
            Error::FindDivisibleFeed => "find_divisible_feed",
            Error::SelectClusters { .. } => "select_clusters",
            Error::GroupSubscribers { .. } => "group_subscribers",
            Error::ParseQuantity { .. } => "parse_quantity",
            Error::ParseOverrideValue { .. } => "parse_override_value",
            Error::ApplyJsonPatch { .. } => "apply_json_patch",
            Error::ReadFieldPath { .. } => "read_field_path",
            Error::ParseField { .. } => "parse_field",
            Error::WriteField { .. } => "write_field",
            Error::ApplyHelmOverride { .. } => "apply_helm_override",
            Error::OverrideChartIdentity { .. } => "override_chart_identity",
            Error::PlaceReplicas { .. } => "place_replicas",
            Error::KubeApi { .. } => "kube_api",
            Error::DiscoverFeedKind { .. } => "discover_feed_kind",
            Error::SyncFeedKind { .. } => "sync_feed_kind",
            Error::SyncCache { .. } => "sync_cache",
            Error::EncodeObject { .. } => "encode_object",
            Error::ConflictRetries { .. } => "conflict_retries",
            Error::Runtime(_) => "runtime",
            Error::KeepLeadership => "keep_leadership",
        }
    }

    /// True when the error comes from the user's objects (spec or overrides) and retrying without
    /// a change cannot help: report it as a condition and wait for the next change.
    pub fn is_permanent(&self) -> bool {
        // Every error of the pure core is a property of its inputs; API failures are transient.
        !matches!(
            self,
            Error::KubeApi { .. }
                | Error::DiscoverFeedKind { .. }
                | Error::SyncFeedKind { .. }
                | Error::SyncCache { .. }
                | Error::ConflictRetries { .. }
                | Error::Runtime(_)
                | Error::KeepLeadership
        )
    }
}

/// Placement errors: the crate's one [`Error`] type, named for the `schedule` contract.
pub type ScheduleError = Error;

/// Rendering errors: the crate's one [`Error`] type, named for the `render` contract.
pub type OverrideError = Error;
