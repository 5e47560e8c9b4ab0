/// Failures of the shared process plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig (`--kubeconfig`, `--context`) could not be read or used.
    #[error("failed to load the kubeconfig: {0}")]
    LoadKubeconfig(#[source] kube::config::KubeconfigError),
    /// No kubeconfig (`KUBECONFIG`, `~/.kube/config`) and no in-cluster configuration was found.
    #[error("failed to infer the kube client configuration: {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    /// The kube client could not be built from the configuration.
    #[error("failed to build the kube client: {0}")]
    BuildClient(#[source] kube::Error),
    /// The admin server could not bind its address.
    #[error("failed to bind the admin server to {addr}: {source}")]
    BindAdmin {
        /// The address from `--admin-listen`.
        addr: String,
        /// The bind error.
        source: std::io::Error,
    },
    /// The admin server stopped with an I/O error.
    #[error("admin server failed: {0}")]
    ServeAdmin(#[source] std::io::Error),
    /// Reading or writing the leader-election Lease failed.
    #[error("leader election on Lease {namespace}/{name} failed: {source}")]
    LeaderLease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// The admin server stopped although the process was still running.
    #[error("the admin server stopped")]
    StopAdmin,
    /// Installing the tracing subscriber failed (it was already installed).
    #[error("failed to initialise tracing: {0}")]
    InitTracing(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Reading or patching an object to add or remove a finalizer failed.
    #[error("failed to edit finalizer {finalizer} of {name}: {source}")]
    EditFinalizer {
        /// The finalizer.
        finalizer: String,
        /// The object's name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// The object kept changing while a finalizer was added or removed.
    #[error("failed to edit finalizer {finalizer} of {name}: it kept changing; retrying")]
    FinalizerConflicts {
        /// The finalizer.
        finalizer: String,
        /// The object's name.
        name: String,
    },
    /// The finalizer patch could not be built.
    #[error("failed to build the finalizer patch: {0}")]
    EncodeFinalizerPatch(#[source] serde_json::Error),
}
