//! The one error type of the hub crate.
//!
//! Variants are named after the operation that failed; every message says what to change.
//! [`Error::label`] gives a short stable label for metrics.

/// Everything that can go wrong in the hub.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent's token was refused (bad, expired or revoked). The message never holds the
    /// token.
    #[error(
        "cluster {cluster_id}: the token was refused: {reason}; give the agent a valid bootstrap \
         token (a bootstrap.kubernetes.io/token Secret in clusternet-system)"
    )]
    Authenticate {
        /// The cluster id the agent claimed.
        cluster_id: String,
        /// Why (without the token).
        reason: String,
    },
    /// The cluster's ClusterRegistrationRequest was denied.
    #[error("cluster {cluster_id}: registration denied: {reason}")]
    RegistrationDenied {
        /// The cluster id.
        cluster_id: String,
        /// The reason recorded on the ClusterRegistrationRequest.
        reason: String,
    },
    /// The registration waits for an administrator's decision longer than the hub holds a
    /// Hello, or too many Hellos wait already; the agent retries, and the request stays.
    #[error("cluster {cluster_id}: {reason}")]
    AwaitApproval {
        /// The cluster id.
        cluster_id: String,
        /// What it waits for and how to decide it.
        reason: String,
        /// Whether the hub refused to hold it at all (too many Hellos wait).
        full: bool,
    },
    /// The agent speaks a protocol version this hub does not.
    #[error(
        "unsupported protocol version {got}; this hub speaks protocol version 1 (V1): run an \
         agent built for it"
    )]
    CheckProtocolVersion {
        /// The version the agent sent.
        got: i32,
    },
    /// The first message of a stream was not a valid Hello.
    #[error("invalid Hello: {reason}")]
    ParseHello {
        /// What is wrong.
        reason: String,
    },
    /// An agent reported on a Description that is not its cluster's.
    #[error(
        "Description {name} is not in namespace {namespace} of this cluster; an agent may only \
         report on its own cluster's Descriptions"
    )]
    AuthoriseReport {
        /// The Description named in the report.
        name: String,
        /// The stream's cluster namespace.
        namespace: String,
    },
    /// A request to the parent API server failed.
    #[error("{operation} {object}: {source}")]
    CallApiServer {
        /// What the hub was doing, e.g. `create namespace`.
        operation: String,
        /// The object, `namespace/name`.
        object: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A write to the parent could not complete although each request succeeded or was
    /// retried: the object kept changing, or was not as the write needs it.
    #[error("{operation} {object}: {reason}")]
    WriteParentObject {
        /// What the hub was doing.
        operation: String,
        /// The object, `namespace/name`.
        object: String,
        /// What stood in the way.
        reason: String,
    },
    /// A JSON patch could not be built.
    #[error("building the patch of {object}: {source}")]
    EncodePatch {
        /// The object, `namespace/name`.
        object: String,
        /// The serde error.
        source: serde_json::Error,
    },
    /// A Push cluster's kubeconfig (from its deployer Secret) cannot be used.
    #[error("loading the child's kubeconfig from Secret {secret}: {source}")]
    LoadPushKubeconfig {
        /// `namespace/name` of the deployer Secret.
        secret: String,
        /// Why it cannot be used.
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig helm is to use for a Push cluster could not be written.
    #[error("writing the kubeconfig helm uses for the Push cluster to {path}: {source}")]
    WritePushHelmKubeconfig {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The client of a Push cluster could not be built from its kubeconfig.
    #[error("building the child's client from Secret {secret}: {source}")]
    BuildPushClient {
        /// `namespace/name` of the deployer Secret.
        secret: String,
        /// The client error.
        source: kube::Error,
    },
    /// A Push cluster's deployer Secret holds no usable, plain-data credentials.
    #[error("reading the child's credentials from Secret {secret}: {reason}")]
    ReadPushCredentials {
        /// `namespace/name` of the deployer Secret.
        secret: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading the TLS certificate or key failed.
    #[error(
        "reading TLS material from {path}: {source}; pass PEM files with --tls-cert/--tls-key, or --insecure for plaintext"
    )]
    ReadTls {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TLS certificate and key could not be used.
    #[error(
        "using the TLS material of {path}: {source}; pass a PEM certificate chain and its private key"
    )]
    ConfigureTls {
        /// The certificate file.
        path: String,
        /// The TLS error.
        source: tonic::transport::Error,
    },
    /// Binding the gRPC listen address failed.
    #[error("binding gRPC to {addr}: {source}")]
    BindGrpc {
        /// The listen address.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Serving gRPC failed.
    #[error("serving gRPC on {addr}: {source}")]
    ServeGrpc {
        /// The listen address.
        addr: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The gRPC server ended while the hub was not stopping.
    #[error("serving gRPC on {addr}: the server stopped; the hub exits so that it is restarted")]
    GrpcServerStopped {
        /// The listen address.
        addr: String,
    },
    /// The shared plumbing failed: the kubeconfig, tracing, the admin server, a finalizer edit.
    #[error(transparent)]
    Runtime(#[from] atoll_runtime::Error),
    /// A field of an object's reported `.status` has the wrong type.
    #[error(
        "the status reported for {kind} has field {field} = {found}, expected a whole number; \
         the agent reporting it is out of date or the object's status is corrupt"
    )]
    ParseObservedStatus {
        /// `apiVersion/kind` of the object.
        kind: String,
        /// The status field.
        field: String,
        /// The value found, as JSON.
        found: String,
    },
}

impl Error {
    /// A short stable label for metrics (`error="..."`).
    pub fn label(&self) -> &'static str {
        match self {
            Error::Authenticate { .. } => "authenticate",
            Error::RegistrationDenied { .. } => "registration_denied",
            Error::AwaitApproval { .. } => "await_approval",
            Error::CheckProtocolVersion { .. } => "check_protocol_version",
            Error::ParseHello { .. } => "parse_hello",
            Error::AuthoriseReport { .. } => "authorise_report",
            Error::CallApiServer { .. } => "call_api_server",
            Error::WriteParentObject { .. } => "write_parent_object",
            Error::EncodePatch { .. } => "encode_patch",
            Error::LoadPushKubeconfig { .. } => "load_push_kubeconfig",
            Error::BuildPushClient { .. } => "build_push_client",
            Error::WritePushHelmKubeconfig { .. } => "write_push_helm_kubeconfig",
            Error::ReadPushCredentials { .. } => "read_push_credentials",
            Error::ReadTls { .. } => "read_tls",
            Error::ConfigureTls { .. } => "configure_tls",
            Error::BindGrpc { .. } => "bind_grpc",
            Error::ServeGrpc { .. } => "serve_grpc",
            Error::GrpcServerStopped { .. } => "grpc_server_stopped",
            Error::ParseObservedStatus { .. } => "parse_observed_status",
            Error::Runtime(_) => "runtime",
        }
    }

    /// Whether trying the same write again later may succeed: the API server was unreachable,
    /// overloaded (429), in conflict (409), failing (5xx) or refused the hub (401, 403: its
    /// RBAC may be mended). Not when the write itself is wrong (400, 422) or its object gone
    /// (404).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::CallApiServer { source, .. } => match source {
                kube::Error::Api(status) => !matches!(status.code, 400 | 404 | 422),
                _ => true,
            },
            Error::WriteParentObject { .. } => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::CallApiServer {
            operation: "write Description status".into(),
            object: "clusternet-abcde/apps.web".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("answer", "Reason")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    #[test]
    fn writes_refused_for_a_passing_reason_are_transient_and_wrong_writes_are_not() {
        for code in [401, 403, 409, 429, 500, 503, 504] {
            assert!(api(code).is_transient(), "{code}");
        }
        for code in [400, 404, 422] {
            assert!(!api(code).is_transient(), "{code}");
        }
        let unreachable = Error::CallApiServer {
            operation: "write Description status".into(),
            object: "clusternet-abcde/apps.web".into(),
            source: kube::Error::Service("connection refused".into()),
        };
        assert!(unreachable.is_transient());
        let refused = Error::AuthoriseReport {
            name: "x".into(),
            namespace: "y".into(),
        };
        assert!(!refused.is_transient());
    }
}
