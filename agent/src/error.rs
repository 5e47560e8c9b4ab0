//! The agent's one error type: its own failures (identity, hub connection, flags) and the
//! applier's.

/// Failures of the agent. Each variant is named after the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    /// The hub URL or TLS settings are unusable.
    #[error("invalid hub connection settings: {0}")]
    HubEndpoint(String),
    /// The hub URL is not a URL.
    #[error("invalid --hub {url}: {source}")]
    ParseHubUrl {
        /// The URL given.
        url: String,
        /// The parse error.
        source: tonic::transport::Error,
    },
    /// The hub's CA bundle cannot be used for TLS.
    #[error("cannot use the CA bundle of --ca-file for TLS to the hub: {0}")]
    ConfigureHubTls(#[source] tonic::transport::Error),
    /// Reading the CA file failed.
    #[error("reading CA file {path} failed: {source}")]
    ReadCaFile {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
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
    /// The shared plumbing failed: the kubeconfig, tracing, the admin server, a finalizer edit.
    #[error(transparent)]
    Runtime(#[from] atoll_runtime::Error),
    /// Applying, deleting or pruning in the child cluster failed.
    #[error(transparent)]
    Apply(#[from] atoll_applier::Error),
}

impl Error {
    /// A short stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Error::ReadClusterId(_) => "read_cluster_id",
            Error::ParentSecret(_) => "parent_secret",
            Error::HubEndpoint(_) => "hub_endpoint",
            Error::ParseHubUrl { .. } => "parse_hub_url",
            Error::ConfigureHubTls(_) => "configure_hub_tls",
            Error::ReadCaFile { .. } => "read_ca_file",
            Error::RegistrationDenied(_) => "registration_denied",
            Error::ProtocolMismatch(_) => "protocol_mismatch",
            Error::ParseClusterName(_) => "parse_cluster_name",
            Error::ParseLabels(_) => "parse_labels",
            Error::Runtime(_) => "runtime",
            Error::Apply(e) => e.label(),
        }
    }
}
