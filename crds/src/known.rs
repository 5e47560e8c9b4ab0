//! Well-known names: label, annotation, finalizer, namespace and taint keys (Clusternet's
//! `pkg/known`), atoll's own names, and the functions that build generated names.

// ----- namespaces -----------------------------------------------------------------------------

/// Namespace the Clusternet/atoll components run in.
pub const NAMESPACE_SYSTEM: &str = "clusternet-system";
/// Namespace holding Manifests (workload templates that never run in the parent).
pub const NAMESPACE_RESERVED: &str = "clusternet-reserved";
/// Namespace of multi-cluster services.
pub const NAMESPACE_MCS: &str = "clusternet-mcs";
/// Prefix (`metadata.generateName`) of each child cluster's dedicated namespace,
/// `clusternet-xxxxx`.
pub const DEDICATED_NAMESPACE_PREFIX: &str = "clusternet-";

// ----- labels ---------------------------------------------------------------------------------

/// Label every object of atoll's own install carries (`manifests/*/kustomization.yaml`), value
/// [`PART_OF_ATOLL`]: the agent never takes such an object over for a Description.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// Value of [`LABEL_PART_OF`] on atoll's install.
pub const PART_OF_ATOLL: &str = "atoll";
/// Label on a ClusterRegistrationRequest: who registered it (value [`CREATED_BY_AGENT`]).
pub const LABEL_REGISTERED_BY: &str = "clusters.clusternet.io/registered-by";
/// Label: the child cluster's id (on CRRs, dedicated namespaces, ManagedClusters, Descriptions).
pub const LABEL_CLUSTER_ID: &str = "clusters.clusternet.io/cluster-id";
/// Label: the child cluster's name (on CRRs, dedicated namespaces, ManagedClusters, Descriptions).
pub const LABEL_CLUSTER_NAME: &str = "clusters.clusternet.io/cluster-name";
/// Label on credentials and RBAC objects: `credentials-auto` or `rbac-defaults`.
pub const LABEL_CLUSTER_BOOTSTRAPPING: &str = "clusters.clusternet.io/bootstrapping";
/// Value of [`LABEL_CLUSTER_BOOTSTRAPPING`] on credential Secrets.
pub const BOOTSTRAPPING_CREDENTIALS_AUTO: &str = "credentials-auto";
/// Value of [`LABEL_CLUSTER_BOOTSTRAPPING`] on RBAC objects.
pub const BOOTSTRAPPING_RBAC_DEFAULTS: &str = "rbac-defaults";
/// Label: the component that created the object.
pub const LABEL_CREATED_BY: &str = "clusternet.io/created-by";
/// Value of [`LABEL_CREATED_BY`] / [`LABEL_REGISTERED_BY`] for the agent.
pub const CREATED_BY_AGENT: &str = "clusternet-agent";
/// Value of [`LABEL_CREATED_BY`] for the hub.
pub const CREATED_BY_HUB: &str = "clusternet-hub";
/// Value of [`LABEL_CREATED_BY`] for Clusternet's controller manager.
pub const CREATED_BY_CONTROLLER_MANAGER: &str = "clusternet-controller-manager";
/// Value of [`LABEL_CREATED_BY`] for the atoll scheduler.
pub const CREATED_BY_SCHEDULER: &str = "clusternet-scheduler";

/// Label: API group of the source object (`""` for the core group), on Manifests.
pub const LABEL_CONFIG_GROUP: &str = "apps.clusternet.io/config.group";
/// Label: API version of the source object, on Manifests.
pub const LABEL_CONFIG_VERSION: &str = "apps.clusternet.io/config.version";
/// Label: kind of the source/owner object.
pub const LABEL_CONFIG_KIND: &str = "apps.clusternet.io/config.kind";
/// Label: name of the source/owner object.
pub const LABEL_CONFIG_NAME: &str = "apps.clusternet.io/config.name";
/// Label: namespace of the source/owner object (`""` for cluster-scoped objects).
pub const LABEL_CONFIG_NAMESPACE: &str = "apps.clusternet.io/config.namespace";
/// Label: uid of the source/owner object.
pub const LABEL_CONFIG_UID: &str = "apps.clusternet.io/config.uid";
/// Label: name of the Subscription an object was generated for (atoll always sets it on
/// Descriptions; Clusternet forgot to).
pub const LABEL_SUBS_NAME: &str = "apps.clusternet.io/subs.name";
/// Label: namespace of the Subscription an object was generated for.
pub const LABEL_SUBS_NAMESPACE: &str = "apps.clusternet.io/subs.namespace";
/// Label on a Description: its Subscription's `deletionPolicy`, set only when it is `Orphan`
/// (the agent then leaves the Description's objects running when they leave the cluster).
pub const LABEL_DELETION_POLICY: &str = "apps.atoll.dev/deletion-policy";
/// Value of [`LABEL_DELETION_POLICY`] for `Orphan`.
pub const DELETION_POLICY_ORPHAN: &str = "Orphan";
/// Label: uid of the Subscription an object was generated for.
pub const LABEL_SUBS_UID: &str = "apps.clusternet.io/subs.uid";
/// Prefix of node labels aggregated onto ManagedClusters.
pub const LABEL_PREFIX_NODE: &str = "node.clusternet.io/";
/// Label on multi-cluster service objects: the service name.
pub const LABEL_MCS_NAME: &str = "services.clusternet.io/multi-cluster-service-name";
/// Label on multi-cluster service objects: the service namespace.
pub const LABEL_MCS_NAMESPACE: &str = "services.clusternet.io/multi-cluster-service-namespace";

// ----- annotations ----------------------------------------------------------------------------

/// Annotation: `"false"` stops the system from reconciling the object (RBAC, secrets).
pub const ANNOTATION_AUTO_UPDATE: &str = "clusternet.io/autoupdate";
/// Annotation on a Manifest/HelmChart whose deletion is blocked: why.
pub const ANNOTATION_FEED_PROTECTION: &str = "apps.clusternet.io/feed-protection";
/// Annotation on a shadow object: `"true"` skips dry-run validation.
pub const ANNOTATION_SKIP_VALIDATING: &str = "apps.clusternet.io/skip-validating";
/// Annotation on every object deployed to a child: `<description-namespace>.<description-name>`.
pub const ANNOTATION_OWNED_BY_DESCRIPTION: &str = "apps.clusternet.io/owned-by-description";
/// Annotation on a Description: hash of its rendered `spec`, so the scheduler can tell from
/// metadata alone (without caching every rendered object) whether a write is needed.
pub const ANNOTATION_RENDER_HASH: &str = "apps.clusternet.io/render-hash";
/// Annotation on deployed objects: the last applied configuration, for three-way patches.
pub const ANNOTATION_LAST_APPLIED_CONFIG: &str = "clusternet.io/last-applied-configuration";
/// Annotation on a Subscription: `"true"` marks the default ClusterInit workload.
pub const ANNOTATION_IS_DEFAULT_CLUSTER_INIT: &str = "apps.clusternet.io/is-default-cluster-init";
/// Annotation on a ManagedCluster: the Base to use for ClusterInit.
pub const ANNOTATION_CLUSTER_INIT_BASE: &str = "apps.clusternet.io/cluster-init-base";
/// Annotation on a ManagedCluster: `"true"` skips ClusterInit.
pub const ANNOTATION_SKIP_CLUSTER_INIT: &str = "clusters.clusternet.io/skip-cluster-init";

// ----- finalizers -----------------------------------------------------------------------------

/// The finalizer on Subscriptions, Descriptions, Manifests, Localizations, Globalizations.
pub const FINALIZER: &str = "apps.clusternet.io/finalizer";
/// The finalizer protecting a feed (Manifest, HelmChart) still used by a Subscription.
pub const FINALIZER_FEED_PROTECTION: &str = "apps.clusternet.io/feed-protection";

// ----- taints and conditions ------------------------------------------------------------------

/// Taint (effect `NoSchedule`, value = the Ready condition's reason) on a cluster whose Ready
/// condition is not True.
pub const TAINT_UNSCHEDULABLE: &str = "clusters.clusternet.io/unschedulable";
/// Taint (effect `NoSchedule`, value `ClusterInitWaiting`) on a cluster not yet initialized.
pub const TAINT_INITIALIZATION: &str = "clusters.clusternet.io/initialization";

/// Condition type: the cluster (or object) is ready.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the cluster finished ClusterInit.
pub const CONDITION_CLUSTER_INIT: &str = "ClusterInit";
/// Condition type on a Subscription: it has been scheduled.
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// ManagedCluster condition: the agent holds back a prune after a snapshot that would delete
/// more than its limit allows (`True`), until it is confirmed with
/// [`ANNOTATION_CONFIRM_PRUNE`].
pub const CONDITION_PRUNE_HELD: &str = "PruneHeld";
/// Annotation on a ManagedCluster confirming the prune its agent holds back; the value is the
/// hold's id, as the `PruneHeld` condition's message gives it.
pub const ANNOTATION_CONFIRM_PRUNE: &str = "hub.atoll.io/confirm-prune";
/// Ready reason: the agent reports a healthy cluster.
pub const REASON_MANAGED_CLUSTER_READY: &str = "ManagedClusterReady";
/// Ready reason: the agent reports an unhealthy cluster.
pub const REASON_MANAGED_CLUSTER_NOT_READY: &str = "ManagedClusterNotReady";
/// Ready reason: the cluster never reported status.
pub const REASON_CLUSTER_STATUS_NEVER_UPDATED: &str = "ClusterStatusNeverUpdated";
/// Ready reason: the cluster stopped reporting status (or its agent stream dropped).
pub const REASON_CLUSTER_STATUS_UNKNOWN: &str = "ClusterStatusUnknown";
/// ClusterInit reason: waiting for the init workload.
pub const REASON_CLUSTER_INIT_WAITING: &str = "ClusterInitWaiting";
/// ClusterInit reason: ClusterInit is disabled.
pub const REASON_CLUSTER_INIT_DISABLED: &str = "ClusterInitDisabled";
/// ClusterInit reason: the init workload is deployed.
pub const REASON_CLUSTER_INIT_DONE: &str = "ClusterInitDone";

// ----- headers --------------------------------------------------------------------------------

/// Proxy header carrying a child-cluster bearer token.
pub const HEADER_TOKEN: &str = "Clusternet-Token";
/// Proxy header carrying a child-cluster client certificate.
pub const HEADER_CERTIFICATE: &str = "Clusternet-Certificate";
/// Proxy header carrying a child-cluster client key.
pub const HEADER_PRIVATE_KEY: &str = "Clusternet-PrivateKey";

// ----- field managers -------------------------------------------------------------------------

/// Server-side apply field manager of the scheduler.
pub const FIELD_MANAGER_SCHEDULER: &str = "atoll-scheduler";
/// Server-side apply field manager of the hub.
pub const FIELD_MANAGER_HUB: &str = "atoll-hub";
/// Server-side apply field manager of the agent (in child clusters).
pub const FIELD_MANAGER_AGENT: &str = "atoll-agent";

// ----- generated names ------------------------------------------------------------------------

/// Prefix of a ClusterRegistrationRequest's name.
pub const CRR_NAME_PREFIX: &str = "clusternet-";

/// The name of the Description rendered for a Subscription: `<sub-namespace>.<sub-name>` (in
/// each bound cluster's dedicated namespace).
pub fn description_name(sub_namespace: &str, sub_name: &str) -> String {
    format!("{sub_namespace}.{sub_name}")
}

/// The Subscription a Description name was built from (the inverse of [`description_name`]),
/// as `(namespace, name)`. Namespaces cannot contain dots, so the first dot splits the two.
pub fn parse_description_name(description_name: &str) -> Option<(&str, &str)> {
    match description_name.split_once('.') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Some((ns, name)),
        _ => None,
    }
}

/// The name of a cluster's ClusterRegistrationRequest: `clusternet-<clusterId>`.
pub fn cluster_registration_request_name(cluster_id: &str) -> String {
    format!("{CRR_NAME_PREFIX}{cluster_id}")
}

/// The value of [`ANNOTATION_OWNED_BY_DESCRIPTION`]: `<description-namespace>.<description-name>`.
pub fn owned_by_description(description_namespace: &str, description_name: &str) -> String {
    format!("{description_namespace}.{description_name}")
}

/// A binding cluster entry of `Subscription.status.bindingClusters`:
/// `<dedicated-namespace>/<managedcluster-name>`.
pub fn binding_cluster(dedicated_namespace: &str, managed_cluster_name: &str) -> String {
    format!("{dedicated_namespace}/{managed_cluster_name}")
}

/// Splits a `bindingClusters` entry into `(dedicated namespace, ManagedCluster name)`.
pub fn parse_binding_cluster(entry: &str) -> Option<(&str, &str)> {
    match entry.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Some((ns, name)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_name_joins_subscription_namespace_and_name_with_a_dot() {
        let cases = [
            ("default", "app-demo", "default.app-demo"),
            ("qux", "nginx", "qux.nginx"),
        ];
        for (ns, name, want) in cases {
            assert_eq!(description_name(ns, name), want);
            assert_eq!(parse_description_name(want), Some((ns, name)));
        }
    }

    #[test]
    fn parse_description_name_splits_at_the_first_dot_and_rejects_malformed_names() {
        let cases = [
            ("ns.a.b", Some(("ns", "a.b"))),
            ("nodot", None),
            (".name", None),
            ("ns.", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_description_name(input), want, "{input}");
        }
    }

    #[test]
    fn crr_name_is_clusternet_dash_cluster_id() {
        let id = "dc91021d-2361-4f6d-a404-7c33b9e01118";
        assert_eq!(
            cluster_registration_request_name(id),
            format!("clusternet-{id}")
        );
    }

    #[test]
    fn binding_cluster_round_trips_namespace_and_name() {
        let entry = binding_cluster("clusternet-qm42m", "child1");
        assert_eq!(entry, "clusternet-qm42m/child1");
        assert_eq!(
            parse_binding_cluster(&entry),
            Some(("clusternet-qm42m", "child1"))
        );
        assert_eq!(parse_binding_cluster("no-slash"), None);
    }

    #[test]
    fn keys_match_clusternet_pkg_known() {
        let cases = [
            (TAINT_UNSCHEDULABLE, "clusters.clusternet.io/unschedulable"),
            (LABEL_CLUSTER_ID, "clusters.clusternet.io/cluster-id"),
            (LABEL_CLUSTER_NAME, "clusters.clusternet.io/cluster-name"),
            (LABEL_SUBS_NAME, "apps.clusternet.io/subs.name"),
            (FINALIZER, "apps.clusternet.io/finalizer"),
            (NAMESPACE_RESERVED, "clusternet-reserved"),
            (NAMESPACE_SYSTEM, "clusternet-system"),
            (
                ANNOTATION_OWNED_BY_DESCRIPTION,
                "apps.clusternet.io/owned-by-description",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
