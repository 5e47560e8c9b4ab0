//! The applier's one error type.

/// Failures of the applier. Each variant is named after the operation that failed.
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
    /// The object is in (or is) the namespace the agent keeps its own state and credentials
    /// in: a Pod there could mount the agent's cluster token and ServiceAccount.
    #[error(
        "{object} is in {namespace}, where the agent keeps its cluster token and inventories; \
         no Description may write there: deploy it to another namespace"
    )]
    ReservedNamespace {
        /// The object, `kind namespace/name`.
        object: String,
        /// The agent's own namespace.
        namespace: String,
    },
    /// The object exists and belongs to atoll's own install (the agent's RBAC, say): no
    /// Description takes it over, whatever `--adopt-existing` or an adopt annotation says.
    #[error(
        "{object} is part of atoll's own install (label app.kubernetes.io/part-of: atoll); no \
         Description may take it over: give the object another name"
    )]
    AtollOwnObject {
        /// The object, `kind namespace/name`.
        object: String,
    },
    /// The `helm` binary could not be started (or fed, or waited for).
    #[error(
        "cannot run {binary}: {source}; the agent installs HelmChart feeds with helm v3: ship it \
         in the agent's image or point --helm at it"
    )]
    RunHelm {
        /// The binary.
        binary: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Helm exited with an error.
    #[error("{command} failed: {message}")]
    HelmFailed {
        /// `helm <subcommand>`.
        command: String,
        /// Helm's error message.
        message: String,
    },
    /// Helm did not finish in time.
    #[error("{command} did not finish within {seconds} s")]
    HelmTimedOut {
        /// `helm <subcommand>`.
        command: String,
        /// The time allowed.
        seconds: u64,
    },
    /// `helm status` printed something that is not a release status.
    #[error("reading the status of {release} failed: {reason}")]
    DecodeHelmStatus {
        /// The release.
        release: String,
        /// The decoder's message.
        reason: String,
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
    /// Making the identity a release's helm acts as (its namespace, ServiceAccount or
    /// RoleBinding) failed.
    #[error("{what} that helm acts as for a release failed: {source}")]
    ReleaseIdentity {
        /// What was being done, with the ServiceAccount's `namespace/name`.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// The RoleBinding of a release's identity did not take effect in time.
    #[error(
        "{user} may still not read the Secrets of its namespace {seconds}s after its RoleBinding was made; check the ClusterRole admin and the agent's right to bind it"
    )]
    ReleaseIdentityNotEffective {
        /// The identity's user name.
        user: String,
        /// How long the applier waited.
        seconds: u64,
    },
    /// Collecting heartbeat data from the child failed.
    #[error("collecting the heartbeat from the child cluster failed: {0}")]
    CollectHeartbeat(#[source] kube::Error),
}

impl Error {
    /// A short stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Error::InvalidObject(_) => "invalid_object",
            Error::ResolveKind { .. } => "resolve_kind",
            Error::Discover { .. } => "discover",
            Error::OwnershipConflict { .. } => "ownership_conflict",
            Error::RunHelm { .. } => "run_helm",
            Error::HelmFailed { .. } => "helm_failed",
            Error::HelmTimedOut { .. } => "helm_timed_out",
            Error::DecodeHelmStatus { .. } => "decode_helm_status",
            Error::NamespaceNotAllowed { .. } => "namespace_not_allowed",
            Error::ReservedNamespace { .. } => "reserved_namespace",
            Error::AtollOwnObject { .. } => "atoll_own_object",
            Error::ApplyObject { .. } => "apply_object",
            Error::GetObject { .. } => "get_object",
            Error::DeleteObject { .. } => "delete_object",
            Error::DeletionTimeout { .. } => "deletion_timeout",
            Error::WaitEstablished { .. } => "wait_established",
            Error::WriteInventory { .. } => "write_inventory",
            Error::ListInventory(_) => "list_inventory",
            Error::ReleaseIdentity { .. } => "release_identity",
            Error::ReleaseIdentityNotEffective { .. } => "release_identity_not_effective",
            Error::CollectHeartbeat(_) => "collect_heartbeat",
        }
    }
}
