//! The agent's one error type.

/// Failures of the agent. Each variant is named after the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An object inside a Description is not a valid Kubernetes object.
    #[error("invalid object: {0}; fix the object in the Subscription's feed or its overrides")]
    InvalidObject(String),
    /// The API server does not serve the object's kind.
    #[error(
        "kind {kind} of {api_version} is not served by the child cluster; install its CRD first"
    )]
    ResolveKind {
        /// apiVersion of the object.
        api_version: String,
        /// kind of the object.
        kind: String,
    },
    /// Discovery of an API group version failed.
    #[error("discovery of {api_version} failed: {source}")]
    Discover {
        /// The group version asked for.
        api_version: String,
        /// The API error.
        source: kube::Error,
    },
    /// An existing object is not owned by this Description and adoption was not allowed.
    #[error(
        "{object} already exists and is not owned by Description {description} (owned by {owner}); annotate it with apps.clusternet.io/adopt=\"true\" in the child cluster or run the agent with --adopt-existing to take it over"
    )]
    OwnershipConflict {
        /// The object, `kind namespace/name`.
        object: String,
        /// The Description that wanted it.
        description: String,
        /// Its current owner annotation, or `nobody`.
        owner: String,
    },
    /// The object is outside the namespaces the agent may write (`--namespaces`).
    #[error(
        "{object} is outside the namespaces this agent may write ({allowed}); the agent runs with --namespaces, so list the namespace there and grant the agent a RoleBinding in it (manifests/agent/namespaced), or send the object to a cluster whose agent may write it"
    )]
    NamespaceNotAllowed {
        /// The object, `kind namespace/name`.
        object: String,
        /// The namespaces the agent may write, comma-separated.
        allowed: String,
    },
    /// Server-side apply of an object failed.
    #[error("applying {object} failed: {source}")]
    ApplyObject {
        /// The object, `kind namespace/name`.
        object: String,
        /// The API error.
        source: kube::Error,
    },
    /// Reading an object failed.
    #[error("reading {object} failed: {source}")]
    GetObject {
        /// The object, `kind namespace/name`.
        object: String,
        /// The API error.
        source: kube::Error,
    },
    /// Deleting an object failed.
    #[error("deleting {object} failed: {source}")]
    DeleteObject {
        /// The object, `kind namespace/name`.
        object: String,
        /// The API error.
        source: kube::Error,
    },
    /// An object was still present after the deletion deadline.
    #[error(
        "{object} is still present {seconds}s after its deletion; check its finalizers in the child cluster"
    )]
    DeletionTimeout {
        /// The object, `kind namespace/name`.
        object: String,
        /// How long the agent waited.
        seconds: u64,
    },
    /// A CustomResourceDefinition did not become Established in time.
    #[error(
        "CustomResourceDefinition {name} did not become Established within {seconds}s; check its conditions in the child cluster"
    )]
    WaitEstablished {
        /// The CRD name.
        name: String,
        /// How long the agent waited.
        seconds: u64,
    },
    /// Reading or writing the inventory ConfigMap failed.
    #[error("writing the inventory of Description {description} failed: {source}")]
    WriteInventory {
        /// The Description key.
        description: String,
        /// The API error.
        source: kube::Error,
    },
    /// Listing the inventories failed.
    #[error("listing the agent inventories in namespace clusternet-system failed: {0}")]
    ListInventory(#[source] kube::Error),
    /// Reading the cluster identity (the kube-system namespace) failed.
    #[error(
        "reading namespace kube-system for the cluster id failed: {0}; grant the agent get on namespaces"
    )]
    ReadClusterId(#[source] kube::Error),
    /// Reading or writing the parent-cluster Secret failed.
    #[error(
        "accessing Secret clusternet-system/parent-cluster failed: {0}; grant the agent get/patch on secrets in clusternet-system"
    )]
    ParentSecret(#[source] kube::Error),
    /// Collecting heartbeat data from the child failed.
    #[error("collecting the heartbeat from the child cluster failed: {0}")]
    CollectHeartbeat(#[source] kube::Error),
    /// The hub URL or TLS settings are unusable.
    #[error("invalid hub connection settings: {0}")]
    HubEndpoint(String),
    /// Reading the CA file failed.
    #[error("reading CA file {path} failed: {source}")]
    ReadCaFile {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The hub refused the connection or the stream broke.
    #[error("hub stream failed: {0}")]
    HubStream(#[source] tonic::Status),
    /// Connecting to the hub failed.
    #[error("connecting to the hub failed: {0}")]
    ConnectHub(#[source] tonic::transport::Error),
    /// The hub refused the registration for good.
    #[error(
        "the hub denied the registration: {0}; ask the parent cluster's admin to approve the cluster"
    )]
    RegistrationDenied(String),
    /// The hub and agent speak different protocol versions.
    #[error("the hub does not speak this agent's protocol: {0}; upgrade the agent or the hub")]
    ProtocolMismatch(String),
    /// The cluster name is not a DNS label of at most 30 characters.
    #[error(
        "invalid --cluster-name {0:?}: use at most 30 lowercase letters, digits and '-', starting and ending with a letter or digit"
    )]
    ParseClusterName(String),
    /// A cluster-labels flag is malformed.
    #[error("invalid --cluster-labels entry {0:?}: expected key=value")]
    ParseLabels(String),
}

impl Error {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::InvalidObject(_) => "invalid_object",
            Error::ResolveKind { .. } => "resolve_kind",
            Error::Discover { .. } => "discover",
            Error::OwnershipConflict { .. } => "ownership_conflict",
            Error::NamespaceNotAllowed { .. } => "namespace_not_allowed",
            Error::ApplyObject { .. } => "apply_object",
            Error::GetObject { .. } => "get_object",
            Error::DeleteObject { .. } => "delete_object",
            Error::DeletionTimeout { .. } => "deletion_timeout",
            Error::WaitEstablished { .. } => "wait_established",
            Error::WriteInventory { .. } => "write_inventory",
            Error::ListInventory(_) => "list_inventory",
            Error::ReadClusterId(_) => "read_cluster_id",
            Error::ParentSecret(_) => "parent_secret",
            Error::CollectHeartbeat(_) => "collect_heartbeat",
            Error::HubEndpoint(_) => "hub_endpoint",
            Error::ReadCaFile { .. } => "read_ca_file",
            Error::HubStream(_) => "hub_stream",
            Error::ConnectHub(_) => "connect_hub",
            Error::RegistrationDenied(_) => "registration_denied",
            Error::ProtocolMismatch(_) => "protocol_mismatch",
            Error::ParseLabels(_) => "parse_labels",
            Error::ParseClusterName(_) => "parse_cluster_name",
        }
    }
}
