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
    /// An approval would hand a registered cluster, whose agent holds a valid token, to
    /// whoever asked to register it again, and `--replace` was not given.
    #[error(
        "cluster {name} is registered and its agent holds a valid cluster token; a bootstrap \
         token (id {bootstrap_token_id}) from {peer} asked at {requested_at} to register it \
         again. Approving hands the cluster, its Descriptions and their Secrets, to that \
         requester and locks the current agent out. If the cluster's own agent lost its \
         token, run `kubectl atoll approve {name} --replace`; otherwise run `kubectl atoll \
         deny {name} --reason REASON` (the registration stays) and delete bootstrap token \
         {bootstrap_token_id}"
    )]
    ReplaceNeeded {
        /// The request's name.
        name: String,
        /// The bootstrap token id the re-registration presented.
        bootstrap_token_id: String,
        /// Where it came from.
        peer: String,
        /// When it was made.
        requested_at: String,
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
    /// No ManagedCluster has the name or cluster id given.
    #[error("no ManagedCluster with name or cluster id {cluster:?} (see `kubectl atoll clusters`)")]
    UnknownManagedCluster {
        /// The name given.
        cluster: String,
    },
    /// Several ManagedClusters (in different dedicated namespaces) have the name given.
    #[error("cluster name {cluster:?} matches several ManagedClusters ({}): give its cluster id", candidates.join(", "))]
    AmbiguousManagedCluster {
        /// The name given.
        cluster: String,
        /// `<namespace>/<name>` of each match.
        candidates: Vec<String>,
    },
    /// Listing the Descriptions in a cluster's dedicated namespace failed.
    #[error("failed to list the Descriptions in namespace {namespace}")]
    ListNamespaceDescriptions {
        /// The dedicated namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the Events about an object failed.
    #[error("failed to list the Events in namespace {namespace}")]
    ListEvents {
        /// The namespace of the object.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a file, a directory or stdin failed.
    #[error("failed to read {input}")]
    ReadInput {
        /// The file or directory, or `-`.
        input: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An input is not valid YAML.
    #[error("{input}{position}: invalid YAML")]
    ParseYaml {
        /// The file, `-`, or `kustomize DIR`.
        input: String,
        /// `:line:column` of the error, when known.
        position: String,
        /// The parser's error.
        #[source]
        source: atoll_yaml::Error,
    },
    /// An input is not valid JSON.
    #[error("{input}:{line}:{column}: invalid JSON")]
    ParseJson {
        /// The file, `-`, or `kustomize DIR`.
        input: String,
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A document is no object that can be applied.
    #[error("{input}: document {document}: {problem}")]
    InvalidObject {
        /// The file, `-`, or `kustomize DIR`.
        input: String,
        /// The document's number in the input, from 1.
        document: usize,
        /// What it lacks.
        problem: &'static str,
    },
    /// The inputs hold no object.
    #[error("no objects passed to {verb}")]
    NoObjects {
        /// `apply` or `delete`.
        verb: &'static str,
    },
    /// `kubectl kustomize` could not be started.
    #[error("failed to run `kubectl kustomize {dir}`")]
    RunKustomize {
        /// The kustomization directory.
        dir: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `kubectl kustomize` failed.
    #[error("`kubectl kustomize {dir}` failed: {message}")]
    Kustomize {
        /// The kustomization directory.
        dir: String,
        /// What it printed on stderr, on one line.
        message: String,
    },
    /// API discovery does not know an object's kind.
    #[error("unknown kind {kind:?} in {api_version:?}: the parent cluster does not serve it")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// Server-side applying a Manifest failed.
    #[error("failed to apply Manifest {name}")]
    ApplyManifest {
        /// The Manifest's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A Manifest's fields belong to another field manager (another user's apply).
    #[error(
        "Manifest {name} holds fields another user applied (you apply as {manager}): {message}; \
         run again with --force-conflicts to take them over"
    )]
    ManifestConflict {
        /// The Manifest's name.
        name: String,
        /// The field manager this apply used.
        manager: String,
        /// The API server's account of the conflicting fields and their managers.
        message: String,
    },
    /// Asking the parent's API server who this client is (a SelfSubjectReview) failed.
    #[error("failed to ask the parent cluster who you are (SelfSubjectReview)")]
    ReviewSelf(#[source] kube::Error),
    /// Deleting a Manifest failed.
    #[error("failed to delete Manifest {name}")]
    DeleteManifest {
        /// The Manifest's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Some Manifests to delete do not exist (the others were deleted).
    #[error("Manifests not found: {}", names.join(", "))]
    ManifestsNotFound {
        /// The names of the missing Manifests.
        names: Vec<String>,
    },
    /// Listing the Manifests failed.
    #[error("failed to list Manifests")]
    ListManifests(#[source] kube::Error),
    /// Watching a Subscription or its Descriptions failed.
    #[error("failed to watch Subscription {namespace}/{name} and its Descriptions")]
    WatchSubscription {
        /// The Subscription's namespace.
        namespace: String,
        /// The Subscription's name.
        name: String,
        /// The watch error.
        #[source]
        source: kube::runtime::watcher::Error,
    },
    /// The input of `plan -f` holds no object, or more than one.
    #[error("{input}: {found} objects, expected one Subscription")]
    NotOneSubscription {
        /// The file or `-`.
        input: String,
        /// How many objects it holds.
        found: usize,
    },
    /// The input of `plan -f` is an object of another kind.
    #[error("{input}: a {api_version} {kind}, not an apps.clusternet.io/v1alpha1 Subscription")]
    NotASubscription {
        /// The file or `-`.
        input: String,
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// The Subscription of `plan -f` does not match the Subscription schema.
    #[error("{input}: invalid Subscription")]
    ParseSubscription {
        /// The file or `-`.
        input: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// Listing the Globalizations failed.
    #[error("failed to list Globalizations")]
    ListGlobalizations(#[source] kube::Error),
    /// Listing the Localizations failed.
    #[error("failed to list Localizations")]
    ListLocalizations(#[source] kube::Error),
    /// Listing the FeedGrants failed.
    #[error("failed to list FeedGrants")]
    ListFeedGrants(#[source] kube::Error),
    /// API discovery of a feed's kind failed (other than not finding it).
    #[error("failed to discover the kind of feed {feed}")]
    DiscoverFeedKind {
        /// The feed's key.
        feed: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// Reading a feed's live object failed.
    #[error("failed to get feed {feed}")]
    GetFeed {
        /// The feed's key.
        feed: String,
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
