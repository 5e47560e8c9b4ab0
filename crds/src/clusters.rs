//! `clusters.clusternet.io/v1beta1`: child cluster registration and the parent's record of each
//! child cluster.

// kube's `printcolumn(...)` attributes repeat `type_ = "string"`; that is not a mistake.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of every kind in this module.
pub const GROUP: &str = "clusters.clusternet.io";
/// API version of every kind in this module.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of every kind in this module.
pub const API_VERSION: &str = "clusters.clusternet.io/v1beta1";

fn is_false(b: &bool) -> bool {
    !*b
}

/// How objects reach a child cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SyncMode {
    /// The parent (hub) applies objects in the child cluster.
    Push,
    /// The agent in the child cluster pulls its Descriptions and applies them.
    #[default]
    Pull,
    /// Both: the agent pulls, and the parent may push.
    Dual,
}

// ---------------------------------------------------------------------------------------------
// ClusterRegistrationRequest
// ---------------------------------------------------------------------------------------------

/// ClusterRegistrationRequestSpec is what an agent asks for when it registers its cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "clusters.clusternet.io",
    version = "v1beta1",
    kind = "ClusterRegistrationRequest",
    status = "ClusterRegistrationRequestStatus",
    shortname = "clsrr",
    category = "clusternet",
    derive = "PartialEq",
    doc = "ClusterRegistrationRequest is a child cluster's request to join the parent; it is named clusternet-<clusterId>.",
    printcolumn(
        name = "CLUSTER ID",
        type_ = "string",
        json_path = ".spec.clusterId",
        description = "The child cluster's id."
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.result",
        description = "Approved, Denied or Failed."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRegistrationRequestSpec {
    /// The unique id of the child cluster (a UUID: the uid of its `kube-system` namespace).
    #[schemars(regex(
        pattern = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    ))]
    pub cluster_id: String,

    /// The type of the cluster: `StandardCluster` (default) or `EdgeCluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_type: Option<String>,

    /// The name the cluster registers with; becomes the ManagedCluster's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 30),
        regex(pattern = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([a-z0-9]([-a-z0-9]*[a-z0-9]))*")
    )]
    pub cluster_name: Option<String>,

    /// The dedicated namespace to use for this cluster in the parent. Generated
    /// (`clusternet-xxxxx`) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"))]
    pub cluster_namespace: Option<String>,

    /// Extra labels to set on the ManagedCluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_labels: BTreeMap<String, String>,

    /// How objects reach this cluster: `Push`, `Pull` (default) or `Dual`.
    #[serde(default)]
    pub sync_mode: SyncMode,
}

/// ClusterRegistrationRequestStatus is the parent's answer to a registration request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRegistrationRequestStatus {
    /// The dedicated namespace of the cluster in the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_namespace: Option<String>,

    /// A token the child uses to access its dedicated namespace (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::bytes")]
    pub token: Option<ByteString>,

    /// The parent's CA certificate, PEM (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::bytes")]
    pub ca_certificate: Option<ByteString>,

    /// The result of the request: `Approved`, `Denied` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ApprovedResult")]
    pub result: Option<ApprovedResult>,

    /// Why the request was denied or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,

    /// The name of the ManagedCluster created for this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_cluster_name: Option<String>,

    /// A request to register this cluster again, made with a bootstrap token while it is
    /// registered (atoll). It is kept apart so that it never changes the registration above:
    /// nothing happens until an administrator sets its `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re_registration: Option<ReRegistration>,
}

/// A bootstrap token's request to register a cluster that is registered already. Approving it
/// gives the requester a new cluster token for the same dedicated namespace (and so the
/// cluster's workloads, Secrets included), and the current token stops working; denying it
/// leaves the registration as it is. A newer request replaces this one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReRegistration {
    /// Identifies this request; the hub acts on a decision only for the request it recorded.
    pub id: String,

    /// When the hub received the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<Time>,

    /// The id of the bootstrap token the request presented (never its secret).
    pub bootstrap_token_id: String,

    /// The network address the request came from, as the hub saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,

    /// The cluster name the request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,

    /// What approving the request replaces.
    pub replaces: ReRegistrationReplaces,

    /// An administrator's decision: `Approved` or `Denied`. Unset while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<ApprovedResult>")]
    pub result: Option<ApprovedResult>,

    /// Why an administrator denied the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// What a re-registration would replace.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReRegistrationReplaces {
    /// The cluster's token is valid and its agent has shown that it holds it: approving hands
    /// the cluster to the requester and locks the current agent out.
    #[default]
    LiveRegistration,
    /// The cluster's token no longer works: it was revoked (its `cluster-token` Secret or its
    /// ManagedCluster in the dedicated namespace was deleted) or it expired.
    RevokedToken,
    /// The cluster's dedicated namespace is gone; approving creates a new one.
    LostNamespace,
}

/// The result of a registration request.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApprovedResult {
    /// The cluster was registered.
    Approved,
    /// The request was refused (for example its clusterId does not match its name).
    Denied,
    /// Registration failed; see `errorMessage`.
    Failed,
}

// ---------------------------------------------------------------------------------------------
// ManagedCluster
// ---------------------------------------------------------------------------------------------

/// ManagedClusterSpec is the parent's record of one child cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "clusters.clusternet.io",
    version = "v1beta1",
    kind = "ManagedCluster",
    namespaced,
    status = "ManagedClusterStatus",
    shortname = "mcls",
    category = "clusternet",
    derive = "PartialEq",
    doc = "ManagedCluster represents one registered child cluster; it lives in the cluster's dedicated namespace.",
    printcolumn(
        name = "CLUSTER ID",
        type_ = "string",
        json_path = ".spec.clusterId",
        description = "The child cluster's id."
    ),
    printcolumn(
        name = "CLUSTER TYPE",
        type_ = "string",
        json_path = ".spec.clusterType",
        priority = 1,
        description = "StandardCluster or EdgeCluster."
    ),
    printcolumn(
        name = "SYNC MODE",
        type_ = "string",
        json_path = ".spec.syncMode",
        description = "Push, Pull or Dual."
    ),
    printcolumn(
        name = "KUBERNETES",
        type_ = "string",
        json_path = ".status.k8sVersion",
        description = "Kubernetes version of the child cluster."
    ),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the cluster is healthy and its agent connected."
    ),
    printcolumn(
        name = "NODES",
        type_ = "integer",
        json_path = ".status.nodeStatistics.readyNodes",
        description = "Number of ready nodes."
    ),
    printcolumn(
        name = "LAST HEARTBEAT",
        type_ = "date",
        json_path = ".status.lastObservedTime",
        description = "When the agent last reported status."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "AGENT VERSION",
        type_ = "string",
        json_path = ".status.agentVersion",
        priority = 1,
        description = "Version of the cluster's agent."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!has(oldSelf.clusterInitBaseName) || has(self.clusterInitBaseName)", "message": "clusterInitBaseName is required once set"}]))]
pub struct ManagedClusterSpec {
    /// The unique id of the child cluster (a UUID).
    #[schemars(regex(
        pattern = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    ))]
    pub cluster_id: String,

    /// The type of the cluster: `StandardCluster` or `EdgeCluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_type: Option<String>,

    /// The name of the Base used to initialize the cluster after it joined. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "clusterInitBaseName is immutable"}]))]
    pub cluster_init_base_name: Option<String>,

    /// How objects reach this cluster: `Push`, `Pull` or `Dual`.
    pub sync_mode: SyncMode,

    /// Taints of the cluster. Subscriptions that do not tolerate a `NoSchedule` or `NoExecute`
    /// taint are not scheduled to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// ManagedClusterStatus is the last status the cluster's agent reported, plus the conditions the
/// parent derives from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    /// When the agent collected this status (its last heartbeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<Time>,

    /// Kubernetes version of the child cluster (gitVersion), for example `v1.33.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_version: Option<String>,

    /// Version of the cluster's agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,

    /// Platform of the child cluster, for example `linux/amd64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,

    /// URL of the child cluster's API server, as the agent sees it.
    #[serde(
        rename = "apiserverURL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub apiserver_url: Option<String>,

    /// Whether the child API server's `/healthz` answered 200.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub healthz: bool,

    /// Whether the child API server's `/livez` answered 200.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub livez: bool,

    /// Whether the child API server's `/readyz` answered 200.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub readyz: bool,

    /// Whether the agent pushes applications itself (its AppPusher feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pusher: Option<bool>,

    /// Whether the agent is connected to the parent through a socket.
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_socket: bool,

    /// Queries per second the parent may use against this child cluster.
    #[serde(rename = "kubeQPS", default, skip_serializing_if = "Option::is_none")]
    pub kube_qps: Option<f64>,

    /// Burst the parent may use against this child cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_burst: Option<i32>,

    /// Sum of the allocatable resources (cpu, memory, `nvidia.com/gpu`) of the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,

    /// Sum of the capacity (cpu, memory, `nvidia.com/gpu`) of the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,

    /// The pod CIDR of the child cluster.
    #[serde(
        rename = "clusterCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_cidr: Option<String>,

    /// The service CIDR of the child cluster.
    #[serde(
        rename = "serviceCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_cidr: Option<String>,

    /// Node counts by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_statistics: Option<NodeStatistics>,

    /// Pod counts (only when the agent reads a metrics server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_statistics: Option<PodStatistics>,

    /// Resource usage (only when the agent reads a metrics server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_usage: Option<ResourceUsage>,

    /// The latest observations of the cluster's state, keyed by `type` (`Ready`, `ClusterInit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// How often the agent reports status, in seconds. The cluster is marked `Ready=Unknown`
    /// when no report arrives for three periods (atoll: as soon as the agent stream drops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_frequency_seconds: Option<i64>,

    /// Whether the cluster runs a replica predictor.
    #[serde(default, skip_serializing_if = "is_false")]
    pub predictor_enabled: bool,

    /// Address of the cluster's replica predictor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictor_address: Option<String>,

    /// Whether the predictor is reached directly rather than through the hub.
    #[serde(default)]
    #[schemars(transform = crate::schema::no_default)]
    pub predictor_direct_access: bool,
}

/// Node counts of a cluster by state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatistics {
    /// Number of nodes whose Ready condition is True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_nodes: Option<i32>,
    /// Number of nodes whose Ready condition is False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_nodes: Option<i32>,
    /// Number of nodes whose Ready condition is Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_nodes: Option<i32>,
    /// Number of nodes without a Ready condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_nodes: Option<i32>,
}

/// Pod counts of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodStatistics {
    /// Number of running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_pods: Option<i32>,
    /// Total number of pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_pods: Option<i32>,
}

/// Resource usage of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// CPU in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage: Option<Quantity>,
    /// Memory in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_usage: Option<Quantity>,
}

/// Reason of the Event on a ManagedCluster that no approved registration vouches for.
pub const REASON_UNREGISTERED_CLUSTER: &str = "UnregisteredCluster";

/// Whether `mc` is a cluster the hub registered: the approved ClusterRegistrationRequest of its
/// cluster id (`crr`, looked up by [`crate::known::cluster_registration_request_name`]) names
/// the ManagedCluster's namespace as the cluster's dedicated namespace. Only an administrator or
/// the hub writes a registration's status, so a ManagedCluster someone creates in a namespace of
/// their own (to be sent other tenants' workloads) is not trusted. `Err` says why, for the Event.
pub fn check_registered(
    mc: &ManagedCluster,
    crr: Option<&ClusterRegistrationRequest>,
) -> Result<(), String> {
    let ns = mc.metadata.namespace.as_deref().unwrap_or_default();
    let id = &mc.spec.cluster_id;
    let name = crate::known::cluster_registration_request_name(id);
    let status = crr
        .filter(|c| &c.spec.cluster_id == id)
        .and_then(|c| c.status.as_ref())
        .ok_or_else(|| {
            format!(
                "no ClusterRegistrationRequest {name} for cluster id {id:?}: only clusters the hub \
                 registered receive workloads (for a Push cluster, create and approve one naming \
                 namespace {ns})"
            )
        })?;
    if status.result != Some(ApprovedResult::Approved) {
        return Err(format!(
            "ClusterRegistrationRequest {name} is not approved: only clusters the hub registered \
             receive workloads"
        ));
    }
    if status.dedicated_namespace.as_deref() != Some(ns) {
        return Err(format!(
            "ClusterRegistrationRequest {name} names dedicated namespace {:?}, not {ns:?}: only \
             the ManagedCluster in the cluster's dedicated namespace receives workloads",
            status.dedicated_namespace.as_deref().unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod registration_tests {
    use super::*;

    fn mc(ns: &str, id: &str) -> ManagedCluster {
        let mut mc = ManagedCluster::new(
            "c",
            ManagedClusterSpec {
                cluster_id: id.into(),
                ..ManagedClusterSpec::default()
            },
        );
        mc.metadata.namespace = Some(ns.into());
        mc
    }

    fn crr(
        id: &str,
        result: Option<ApprovedResult>,
        ns: Option<&str>,
    ) -> ClusterRegistrationRequest {
        let mut c = ClusterRegistrationRequest::new(
            &crate::known::cluster_registration_request_name(id),
            ClusterRegistrationRequestSpec {
                cluster_id: id.into(),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        c.status = Some(ClusterRegistrationRequestStatus {
            result,
            dedicated_namespace: ns.map(str::to_string),
            ..ClusterRegistrationRequestStatus::default()
        });
        c
    }

    #[test]
    fn only_the_managed_cluster_in_the_approved_dedicated_namespace_is_trusted() {
        let approved = Some(ApprovedResult::Approved);
        let cases = [
            (
                mc("clusternet-a", "id-a"),
                Some(crr("id-a", approved, Some("clusternet-a"))),
                None,
            ),
            (
                mc("tenant", "id-a"),
                Some(crr("id-a", approved, Some("clusternet-a"))),
                Some("not \"tenant\""),
            ),
            (
                mc("clusternet-a", "id-a"),
                None,
                Some("no ClusterRegistrationRequest"),
            ),
            (
                mc("clusternet-a", "id-a"),
                Some(crr("id-b", approved, Some("clusternet-a"))),
                Some("no ClusterRegistrationRequest"),
            ),
            (
                mc("clusternet-a", "id-a"),
                Some(crr("id-a", None, Some("clusternet-a"))),
                Some("not approved"),
            ),
            (
                mc("clusternet-a", "id-a"),
                Some(crr(
                    "id-a",
                    Some(ApprovedResult::Denied),
                    Some("clusternet-a"),
                )),
                Some("not approved"),
            ),
        ];
        for (i, (mc, crr, want)) in cases.into_iter().enumerate() {
            match (check_registered(&mc, crr.as_ref()), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "case {i}: {e}"),
                (got, want) => panic!("case {i}: got {got:?}, want {want:?}"),
            }
        }
    }
}
