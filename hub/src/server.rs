//! The gRPC server: the `Hub` service with its message-size limits, the gRPC health service,
//! and TLS through rustls (or plaintext when explicitly asked for).

use crate::Error;
use crate::service::{Backend, HubService};
use atoll_proto::v1;
use atoll_proto::v1::hub_server::Hub;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tonic::codec::{BufferSettings, Codec};
use tonic::codegen::{Arc, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic_prost::{ProstDecoder, ProstEncoder};

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

/// Initial size of each stream's encode and decode buffers. tonic's default (8 KiB each,
/// allocated per call) is sized for unary calls; a `Sync` stream lives as long as its agent and
/// mostly carries acks, heartbeats and reports of a few hundred bytes, so the default would keep
/// 16 KiB per connected agent. Larger messages grow the buffers as needed.
pub const STREAM_BUFFER_BYTES: usize = 1024;

/// The `Hub` service with its size limits applied: the routing of the generated
/// `atoll_proto::v1::hub_server::HubServer`, with a codec whose per-stream buffers start at
/// [`STREAM_BUFFER_BYTES`] (the generated server always uses tonic's defaults).
pub fn hub_server<B: Backend>(
    service: HubService<B>,
    max_decode_bytes: usize,
    max_encode_bytes: usize,
) -> HubGrpc<B> {
    HubGrpc {
        service: Arc::new(service),
        max_decode_bytes,
        max_encode_bytes,
    }
}

/// The `atoll.hub.v1.Hub` gRPC service (see [`hub_server`]).
pub struct HubGrpc<B> {
    service: Arc<HubService<B>>,
    max_decode_bytes: usize,
    max_encode_bytes: usize,
}

impl<B> Clone for HubGrpc<B> {
    fn clone(&self) -> Self {
        HubGrpc {
            service: self.service.clone(),
            max_decode_bytes: self.max_decode_bytes,
            max_encode_bytes: self.max_encode_bytes,
        }
    }
}

impl<B> NamedService for HubGrpc<B> {
    const NAME: &'static str = v1::hub_server::SERVICE_NAME;
}

/// Protobuf codec of the `Sync` stream with small initial buffers.
#[derive(Clone, Copy, Debug, Default)]
struct StreamCodec;

impl Codec for StreamCodec {
    type Encode = v1::HubMessage;
    type Decode = v1::AgentMessage;
    type Encoder = ProstEncoder<v1::HubMessage>;
    type Decoder = ProstDecoder<v1::AgentMessage>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(stream_buffers())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(stream_buffers())
    }
}

fn stream_buffers() -> BufferSettings {
    // The yield threshold stays tonic's default (32 KiB).
    BufferSettings::new(STREAM_BUFFER_BYTES, 32 * 1024)
}

struct SyncMethod<B>(Arc<HubService<B>>);

impl<B: Backend> StreamingService<v1::AgentMessage> for SyncMethod<B> {
    type Response = v1::HubMessage;
    type ResponseStream = <HubService<B> as Hub>::SyncStream;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, tonic::Status>;

    fn call(
        &mut self,
        request: tonic::Request<tonic::Streaming<v1::AgentMessage>>,
    ) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.sync(request).await })
    }
}

impl<B, Body> Service<http::Request<Body>> for HubGrpc<B>
where
    B: Backend,
    Body: tonic::codegen::Body + Send + 'static,
    Body::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() != "/atoll.hub.v1.Hub/Sync" {
            return Box::pin(async {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(
                    tonic::Status::GRPC_STATUS,
                    (tonic::Code::Unimplemented as i32).into(),
                );
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        let method = SyncMethod(self.service.clone());
        let mut grpc = Grpc::new(StreamCodec).apply_max_message_size_config(
            Some(self.max_decode_bytes),
            Some(self.max_encode_bytes),
        );
        Box::pin(async move { Ok(grpc.streaming(method, req).await) })
    }
}

/// Reads the TLS identity.
pub fn load_identity(cert: &PathBuf, key: &PathBuf) -> Result<Identity, Error> {
    let read = |p: &PathBuf| {
        std::fs::read(p).map_err(|e| Error::LoadTls {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    };
    Ok(Identity::from_pem(read(cert)?, read(key)?))
}

/// Binds the gRPC listen address (port 0 picks a free port; see `local_addr`).
pub fn bind(addr: SocketAddr) -> Result<TcpIncoming, Error> {
    TcpIncoming::bind(addr)
        .map(|i| i.with_nodelay(Some(true)))
        .map_err(|e| Error::ServeGrpc {
            addr: addr.to_string(),
            message: e.to_string(),
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
    reporter.set_serving::<HubGrpc<B>>().await;
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    if let Some((cert, key)) = &config.tls {
        let identity = load_identity(cert, key)?;
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .map_err(|e| Error::LoadTls {
                path: cert.display().to_string(),
                message: e.to_string(),
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
        .map_err(|e| Error::ServeGrpc {
            addr: config.listen.to_string(),
            message: e.to_string(),
        })
}
