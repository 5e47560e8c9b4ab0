/// Failures of the shared process plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or no in-cluster configuration was found.
    #[error("failed to load the kube client configuration: {0}")]
    LoadKubeconfig(String),
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
    /// Installing the tracing subscriber failed (it was already installed).
    #[error("failed to initialise tracing: {0}")]
    InitTracing(String),
}
