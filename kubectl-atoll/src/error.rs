/// Failures of `kubectl atoll`, named after what failed. Each is printed as one line on stderr
/// and the plugin exits with 1 (see [`crate::app::exit`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kube client could not be built from the kubeconfig.
    #[error("cannot reach the parent cluster")]
    Connect(#[source] atoll_runtime::Error),
    /// Listing the ManagedClusters failed.
    #[error("failed to list ManagedClusters")]
    ListManagedClusters(#[source] kube::Error),
    /// Listing the ClusterRegistrationRequests failed.
    #[error("failed to list ClusterRegistrationRequests")]
    ListRegistrationRequests(#[source] kube::Error),
    /// No ClusterRegistrationRequest matches the cluster named on the command line.
    #[error(
        "no cluster registration request for cluster {cluster:?} (give its name, id, or clusternet-<id>; see `kubectl atoll clusters`)"
    )]
    UnknownCluster {
        /// The name given.
        cluster: String,
    },
    /// Several ClusterRegistrationRequests match the cluster name given.
    #[error("cluster name {cluster:?} matches several registration requests ({}): give one of them", candidates.join(", "))]
    AmbiguousCluster {
        /// The name given.
        cluster: String,
        /// The names of the matching requests.
        candidates: Vec<String>,
    },
    /// Patching a ClusterRegistrationRequest's status (approve, deny) failed.
    #[error("failed to patch the status of ClusterRegistrationRequest {name}")]
    PatchRegistrationStatus {
        /// The request's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the Subscription failed.
    #[error("failed to get Subscription {namespace}/{name}")]
    GetSubscription {
        /// The Subscription's namespace.
        namespace: String,
        /// The Subscription's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Subscription does not exist.
    #[error("subscription {name:?} not found in namespace {namespace:?}")]
    UnknownSubscription {
        /// The namespace looked in.
        namespace: String,
        /// The name given.
        name: String,
    },
    /// Listing a Subscription's Descriptions failed.
    #[error("failed to list the Descriptions of Subscription {namespace}/{name}")]
    ListDescriptions {
        /// The Subscription's namespace.
        namespace: String,
        /// The Subscription's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Encoding the objects as JSON failed.
    #[error("failed to encode the output as JSON")]
    EncodeJson(#[source] serde_json::Error),
    /// Encoding the objects as YAML failed.
    #[error("failed to encode the output as YAML")]
    EncodeYaml(#[source] serde_yaml::Error),
    /// Writing to stdout failed.
    #[error("failed to write the output")]
    WriteOutput(#[source] std::io::Error),
}
