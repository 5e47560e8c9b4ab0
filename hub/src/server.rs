//! The gRPC server: the `Hub` service with its message-size limits, the gRPC health service,
//! and TLS through rustls (or plaintext when explicitly asked for).

use crate::Error;
use crate::service::{Backend, HubService};
use atoll_proto::v1::hub_server::HubServer;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// Default limit of one decoded message from an agent.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// How the gRPC server listens.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// PEM certificate and key; `None` serves plaintext (only with `--insecure`).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Largest message accepted from an agent (decode limit); larger ones end the stream with
    /// RESOURCE_EXHAUSTED.
    pub max_decode_bytes: usize,
    /// Largest message sent to an agent.
    pub max_encode_bytes: usize,
}

/// The `Hub` service with its size limits applied. Its streams' buffers start small (see
/// [`atoll_proto::codec`]).
pub fn hub_server<B: Backend>(
    service: HubService<B>,
    max_decode_bytes: usize,
    max_encode_bytes: usize,
) -> HubServer<HubService<B>> {
    HubServer::new(service)
        .max_decoding_message_size(max_decode_bytes)
        .max_encoding_message_size(max_encode_bytes)
}

/// Reads the TLS identity.
pub fn load_identity(cert: &PathBuf, key: &PathBuf) -> Result<Identity, Error> {
    let read = |p: &PathBuf| {
        std::fs::read(p).map_err(|source| Error::ReadTls {
            path: p.display().to_string(),
            source,
        })
    };
    Ok(Identity::from_pem(read(cert)?, read(key)?))
}

/// Binds the gRPC listen address (port 0 picks a free port; see `local_addr`).
pub fn bind(addr: SocketAddr) -> Result<TcpIncoming, Error> {
    TcpIncoming::bind(addr)
        .map(|i| i.with_nodelay(Some(true)))
        .map_err(|source| Error::BindGrpc {
            addr: addr.to_string(),
            source,
        })
}

/// Serves the `Hub` and health services on `incoming` (from [`bind`]) until `shutdown`
/// resolves.
pub async fn serve<B: Backend>(
    service: HubService<B>,
    config: &ServerConfig,
    incoming: TcpIncoming,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<HubServer<HubService<B>>>().await;
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    if let Some((cert, key)) = &config.tls {
        let identity = load_identity(cert, key)?;
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .map_err(|source| Error::ConfigureTls {
                path: cert.display().to_string(),
                source,
            })?;
    }
    builder
        .add_service(health)
        .add_service(hub_server(
            service,
            config.max_decode_bytes,
            config.max_encode_bytes,
        ))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|source| Error::ServeGrpc {
            addr: config.listen.to_string(),
            source,
        })
}
