//! A request fault proxy: an HTTP/1.1 relay in front of an API server's byte proxy that, while
//! a step of its seeded [`RequestSchedule`] lasts, does one of two things to each write (POST,
//! PUT, PATCH, DELETE):
//!
//! - [`RequestFault::Repeat`]: sends it twice and answers with the second response. That is
//!   what a client sees when its request landed but the answer was lost and the request went
//!   again (a retrying client library, proxy or load balancer): a create answered 409
//!   AlreadyExists, a delete 404 NotFound, an update with the old resourceVersion 409 Conflict,
//!   and whatever the first one did done twice.
//! - [`RequestFault::ReplayLate`]: sends it once, answers, and sends it again seconds later on a
//!   connection of its own, dropping that answer: a request held up in the network while its
//!   client went on, landing after newer writes (an apply without a resourceVersion undoes them
//!   until someone notices).
//!
//! The byte proxy cannot do this, for the reason the message proxy exists ([`super::messages`]):
//! a repeated byte range is a corrupt stream.
//!
//! It speaks plaintext HTTP/1.1 on both sides to devcluster. In front of kube-apiserver (the
//! real tier) it ends the client's TLS with the API server's own serving certificate, so the
//! components' kubeconfigs (the cluster's CA, a ServiceAccount token) work unchanged, and opens
//! its own TLS connection upstream, trusting that CA; the token travels in the relayed headers.
//! A client certificate cannot be relayed: for clients that authenticate with one (the hub's
//! Push connections, as the child's administrator), the proxy presents the same identity
//! upstream itself, read from the cluster's admin kubeconfig ([`ServerTls::presenting`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rand::Rng;
use rand::rngs::StdRng;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};

use super::proxy::{ProxyTasks, bind, loaded, timed_steps};
use crate::Error;

/// What a step does to each write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFault {
    /// Sent twice at once; the client gets the second answer.
    Repeat,
    /// Sent once and answered; sent again `after` that, its answer dropped.
    ReplayLate {
        /// How long the copy is held.
        after: Duration,
    },
}

impl RequestFault {
    /// Its name in the run's report.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestFault::Repeat => "repeat writes",
            RequestFault::ReplayLate { .. } => "replay writes late",
        }
    }
}

/// One step of a request schedule: `fault` done to writes from `at` for `lasting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestStep {
    /// When it starts, from the start of the schedule.
    pub at: Duration,
    /// How long it lasts.
    pub lasting: Duration,
    /// What it does.
    pub fault: RequestFault,
}

/// Repeated writes over time, drawn from a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSchedule {
    /// The steps, in time order, never overlapping.
    pub steps: Vec<RequestStep>,
}

impl RequestSchedule {
    /// A schedule of `span` from a caller's generator: steps of 1-4 s, 2-8 s apart (the
    /// components write in bursts when something changes; a step must last to meet some), each
    /// repeating writes or, one in three, replaying them 1-5 s late.
    pub fn generate_with(rng: &mut StdRng, span: Duration) -> RequestSchedule {
        let draw = |rng: &mut StdRng| {
            if rng.random_ratio(1, 3) {
                RequestFault::ReplayLate {
                    after: Duration::from_millis(rng.random_range(1000..5000)),
                }
            } else {
                RequestFault::Repeat
            }
        };
        let steps = timed_steps(rng, span, 1000..4000, 1000..4000, 2000..8000, draw)
            .into_iter()
            .map(|(at, lasting, fault)| RequestStep { at, lasting, fault })
            .collect();
        RequestSchedule { steps }
    }

    /// The same steps, those that would send writes again late repeating them at once instead.
    pub fn without_late_copies(mut self) -> RequestSchedule {
        for step in &mut self.steps {
            step.fault = RequestFault::Repeat;
        }
        self
    }

    /// One step from now on for `lasting`, doing `fault` (for tests).
    pub fn from_now(fault: RequestFault, lasting: Duration) -> RequestSchedule {
        RequestSchedule {
            steps: vec![RequestStep {
                at: Duration::ZERO,
                lasting,
                fault,
            }],
        }
    }
}

/// What the proxy has done, for the run's report.
#[derive(Debug, Default)]
pub struct RequestCounters {
    /// Client connections relayed.
    pub connections: AtomicU64,
    /// Requests relayed.
    pub requests: AtomicU64,
    /// Writes sent twice.
    pub repeated: AtomicU64,
    /// Of those, the ones whose second answer was not the first's status (a 409 after a 201).
    pub answered_otherwise: AtomicU64,
    /// Writes sent again late.
    pub replayed_late: AtomicU64,
    /// Of those, the ones the server took again (a 2xx answer): a late apply or create landed.
    pub replayed_late_taken: AtomicU64,
}

impl RequestCounters {
    /// Each counter with its name in the run's report.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        loaded(&[
            ("connections", &self.connections),
            ("requests", &self.requests),
            ("repeated", &self.repeated),
            ("answered otherwise", &self.answered_otherwise),
            ("replayed late", &self.replayed_late),
            ("replayed late and taken", &self.replayed_late_taken),
        ])
    }
}

/// The files of an API server that speaks TLS, read at each new client connection: they are
/// written when the cluster starts, after the proxy is up.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// Its serving certificate (PEM), which the proxy presents as its own.
    pub cert: PathBuf,
    /// That certificate's key (PEM).
    pub key: PathBuf,
    /// The CA (PEM) that signed it, which the proxy trusts upstream.
    pub ca: PathBuf,
    /// A kubeconfig whose client certificate the proxy presents upstream, for clients that
    /// authenticate with one (a client certificate cannot pass through a proxy that ends TLS):
    /// the proxy then acts with that identity for whoever connects. `None`: no certificate
    /// (clients send bearer tokens, which pass through).
    pub client_identity: Option<PathBuf>,
}

/// The two TLS ends of the proxy's connections.
#[derive(Clone)]
struct TlsEnds {
    accept: tokio_rustls::TlsAcceptor,
    connect: tokio_rustls::TlsConnector,
}

impl ServerTls {
    /// The files of a real cluster's kube-apiserver.
    pub fn of(cluster: &crate::control_plane::ClusterFiles) -> ServerTls {
        let (cert, key) = cluster.serving();
        ServerTls {
            cert,
            key,
            ca: cluster.ca_cert(),
            client_identity: None,
        }
    }

    /// Presents the client certificate of `kubeconfig` upstream (see `client_identity`).
    pub fn presenting(mut self, kubeconfig: PathBuf) -> ServerTls {
        self.client_identity = Some(kubeconfig);
        self
    }

    fn load(&self) -> Result<TlsEnds, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .map_err(|e| relay_error("reading the serving certificate", e))?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| relay_error("reading the serving key", e))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| relay_error("the TLS versions", e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| relay_error("the serving certificate", e))?;
        // HTTP/1.1 only: the relay speaks it upstream, one request at a time.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        for ca in
            CertificateDer::pem_file_iter(&self.ca).map_err(|e| relay_error("reading the CA", e))?
        {
            let ca = ca.map_err(|e| relay_error("reading the CA", e))?;
            roots
                .add(ca)
                .map_err(|e| relay_error("trusting the CA", e))?;
        }
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| relay_error("the TLS versions", e))?
            .with_root_certificates(roots);
        let client = match &self.client_identity {
            None => client.with_no_client_auth(),
            Some(kubeconfig) => {
                let (certs, key) = client_certificate(kubeconfig)?;
                client
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| relay_error("the client certificate", e))?
            }
        };
        Ok(TlsEnds {
            accept: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connect: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }
}

/// The client certificate chain and key of the user of `kubeconfig`
/// (`client-certificate-data`, `client-key-data`; a kubeconfig of the fleet's, one user).
fn client_certificate(
    kubeconfig: &std::path::Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    use base64::Engine;
    let text = std::fs::read_to_string(kubeconfig)
        .map_err(|e| relay_error("reading the client kubeconfig", e))?;
    let field = |name: &str| -> Result<Vec<u8>, Error> {
        let data = text
            .lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| relay_error("reading the client kubeconfig", format!("no {name}")))?;
        base64::engine::general_purpose::STANDARD
            .decode(data.trim().trim_matches('"'))
            .map_err(|e| relay_error("decoding the client certificate", e))
    };
    let certs = CertificateDer::pem_slice_iter(&field("client-certificate-data")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| relay_error("reading the client certificate", e))?;
    let key = PrivateKeyDer::from_pem_slice(&field("client-key-data")?)
        .map_err(|e| relay_error("reading the client key", e))?;
    Ok((certs, key))
}

/// Where and when the late copies a server took landed (request path, time), the last
/// [`LATE_COPIES_KEPT`]: a check that meets a state a late copy brought back can tell it from
/// one its writer made.
#[derive(Clone, Default)]
pub struct LateCopies(Arc<std::sync::Mutex<std::collections::VecDeque<(String, Instant)>>>);

/// How many landings [`LateCopies`] keeps.
pub(crate) const LATE_COPIES_KEPT: usize = 1000;

impl LateCopies {
    fn landed(&self, path: &str) {
        self.landed_at(path, Instant::now());
    }

    /// Records a landing on `path` at `at`.
    pub(crate) fn landed_at(&self, path: &str, at: Instant) {
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() == LATE_COPIES_KEPT {
            log.pop_front();
        }
        log.push_back((path.to_owned(), at));
    }

    /// One line per landing, oldest first: how long ago, and the path.
    pub fn lines(&self) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .map(|(path, at)| format!("{:.3}s ago {path}", at.elapsed().as_secs_f64()))
            .collect()
    }

    /// Whether a late copy of a write to a path ending in `suffix` landed between `from` and
    /// `to`.
    pub fn landed_between(&self, suffix: &str, from: Instant, to: Instant) -> bool {
        let log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .any(|(path, at)| (from..=to).contains(at) && path.ends_with(suffix))
    }
}

struct Shared {
    upstream: SocketAddr,
    late_copies: LateCopies,
    tls: Option<ServerTls>,
    /// `tls` loaded, once its files could be read (the cluster writes them after the proxy
    /// starts, and keeps them over restarts).
    tls_ends: std::sync::Mutex<Option<TlsEnds>>,
    /// The fault of the step in force, if any.
    fault: watch::Sender<Option<RequestFault>>,
    counters: RequestCounters,
}

/// A running request proxy; dropping it stops accepting (open connections end with their
/// peers).
pub struct RequestProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: ProxyTasks,
}

impl RequestProxy {
    /// Serves on `127.0.0.1:<free port>`, relaying to the server at `upstream` (plain HTTP, or
    /// HTTPS on both sides with `tls`), passing everything once until a schedule is played.
    pub async fn start(
        upstream: SocketAddr,
        tls: Option<ServerTls>,
    ) -> Result<RequestProxy, Error> {
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let shared = Arc::new(Shared {
            upstream,
            late_copies: LateCopies::default(),
            tls,
            tls_ends: std::sync::Mutex::default(),
            fault: watch::channel(None).0,
            counters: RequestCounters::default(),
        });
        let server = tokio::spawn(accept(listener, shared.clone()));
        Ok(RequestProxy {
            addr,
            shared,
            tasks: ProxyTasks::new(server),
        })
    }

    /// Where clients connect (`http://` it, or `https://` with TLS).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has done so far.
    pub fn counters(&self) -> &RequestCounters {
        &self.shared.counters
    }

    /// The log of the late copies the server took.
    pub fn late_copies(&self) -> LateCopies {
        self.shared.late_copies.clone()
    }

    /// Back to sending everything once, now (also ends a schedule being played).
    pub fn heal(&mut self) {
        self.tasks.stop_playing();
        self.shared.fault.send_replace(None);
    }

    /// Plays `schedule` from now on, in the background (replacing one being played).
    pub fn play(&mut self, schedule: RequestSchedule) {
        self.heal();
        let shared = self.shared.clone();
        let steps = schedule
            .steps
            .iter()
            .map(|s| (s.at, s.lasting, s.fault))
            .collect();
        self.tasks.play_steps(steps, move |fault| {
            shared.fault.send_replace(fault);
        });
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        tokio::spawn(async move {
            let Some(tls) = &shared.tls else {
                return serve(client, None, shared.clone()).await;
            };
            // Until the cluster has written its certificates, or when its TLS handshake fails,
            // the client's connection ends, as an API server not yet up would end it.
            let Ok(ends) = shared.tls_ends(tls) else {
                return;
            };
            if let Ok(client) = ends.accept.accept(client).await {
                serve(client, Some(ends.connect), shared.clone()).await;
            }
        });
    }
}

impl Shared {
    /// The TLS ends of `tls`, read from its files the first time they can be.
    fn tls_ends(&self, tls: &ServerTls) -> Result<TlsEnds, Error> {
        let mut cached = self.tls_ends.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ends) = cached.as_ref() {
            return Ok(ends.clone());
        }
        let ends = tls.load()?;
        *cached = Some(ends.clone());
        Ok(ends)
    }
}

/// The upstream connection of one client connection: HTTP/1.1 carries one request at a time,
/// so one upstream connection serves it, opened at its first request and again after a
/// failure (the byte proxy behind may cut it).
type Upstream = Arc<Mutex<Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>>;

async fn serve(
    client: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    tls: Option<tokio_rustls::TlsConnector>,
    shared: Arc<Shared>,
) {
    let upstream: Upstream = Arc::default();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let shared = shared.clone();
        let upstream = upstream.clone();
        let tls = tls.clone();
        async move { relay(request, &shared, tls.as_ref(), &upstream).await }
    });
    // An error here is the client's or the upstream's connection ending: the client sees what
    // a cut would show it.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client), service)
        .await;
}

/// Sends `request` upstream, twice when it is a write and a step repeats writes (answering
/// with the last answer), or once and again later when a step replays them late. A failure
/// closes the client's connection.
async fn relay(
    request: Request<Incoming>,
    shared: &Arc<Shared>,
    tls: Option<&tokio_rustls::TlsConnector>,
    upstream: &Upstream,
) -> Result<Response<Incoming>, Error> {
    let counters = &shared.counters;
    counters.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| relay_error("reading a request", e))?
        .to_bytes();
    let is_write = matches!(
        parts.method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let fault = if is_write {
        *shared.fault.borrow()
    } else {
        None
    };
    let copy = || {
        let mut request = Request::new(Full::new(body.clone()));
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = parts.uri.clone();
        *request.version_mut() = parts.version;
        *request.headers_mut() = parts.headers.clone();
        request
    };
    let mut sender = upstream.lock().await;
    let sender = &mut *sender;
    let mut first_status = None;
    match fault {
        None => {}
        Some(RequestFault::Repeat) => {
            counters.repeated.fetch_add(1, Ordering::Relaxed);
            let first = send(sender, shared.upstream, tls, copy()).await?;
            first_status = Some(first.status());
            // The connection carries the next request only once this answer is read.
            first
                .into_body()
                .collect()
                .await
                .map_err(|e| relay_error("reading a repeated request's answer", e))?;
        }
        Some(RequestFault::ReplayLate { after }) => {
            let late = copy();
            let path = parts.uri.path().to_owned();
            let shared = shared.clone();
            let tls = tls.cloned();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                shared
                    .counters
                    .replayed_late
                    .fetch_add(1, Ordering::Relaxed);
                let mut own = None;
                // A failure here is a replay the network lost after all: nothing to report.
                if let Ok(answer) = send(&mut own, shared.upstream, tls.as_ref(), late).await {
                    if answer.status().is_success() {
                        shared
                            .counters
                            .replayed_late_taken
                            .fetch_add(1, Ordering::Relaxed);
                        shared.late_copies.landed(&path);
                    }
                    let _ = answer.into_body().collect().await;
                }
            });
        }
    }
    let answer = send(sender, shared.upstream, tls, copy()).await?;
    if first_status.is_some_and(|s| s != answer.status()) {
        counters.answered_otherwise.fetch_add(1, Ordering::Relaxed);
    }
    Ok(answer)
}

/// Sends `request` on the client's upstream connection, opening it first when there is none
/// or the last one failed.
async fn send(
    sender: &mut Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    upstream: SocketAddr,
    tls: Option<&tokio_rustls::TlsConnector>,
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Error> {
    let open = match sender.take() {
        Some(s) if !s.is_closed() => s,
        _ => {
            let stream = TcpStream::connect(upstream)
                .await
                .map_err(|e| relay_error("connecting upstream", e))?;
            match tls {
                None => handshake(stream).await?,
                Some(tls) => {
                    // The serving certificate names 127.0.0.1, where the byte proxy is.
                    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
                    let stream = tls
                        .connect(name, stream)
                        .await
                        .map_err(|e| relay_error("the upstream TLS handshake", e))?;
                    handshake(stream).await?
                }
            }
        }
    };
    let mut open = open;
    let answer = open
        .send_request(request)
        .await
        .map_err(|e| relay_error("relaying a request", e))?;
    *sender = Some(open);
    Ok(answer)
}

/// An HTTP/1.1 client connection over `stream`, driven in the background.
async fn handshake(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, Error> {
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| relay_error("the upstream handshake", e))?;
    tokio::spawn(connection);
    Ok(sender)
}

fn relay_error(what: &'static str, e: impl std::fmt::Display) -> Error {
    Error::RelayRequest {
        what,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While a step lasts, a write lands twice and its client gets the second answer (a create
    /// answered 409, a delete 404); reads and, outside a step, writes go once.
    #[tokio::test]
    async fn writes_go_twice_while_a_step_lasts_and_the_client_gets_the_second_answer() {
        let server = devcluster::DevCluster::start_default().await.unwrap();
        let proxy = RequestProxy::start(server.addr(), None).await.unwrap();
        let config = kube::Config::new(format!("http://{}", proxy.addr()).parse().unwrap());
        writes_go_twice(proxy, kube::Client::try_from(config).unwrap()).await;
    }

    /// In front of a server that speaks TLS, the proxy ends the client's TLS with that
    /// server's certificate (the client trusts the same CA, unchanged) and speaks TLS upstream.
    #[tokio::test]
    async fn in_front_of_a_tls_server_the_client_keeps_its_ca_and_writes_still_go_twice() {
        behind_tls(false).await;
    }

    /// In front of a server that requires a client certificate, the proxy presents the one of
    /// the kubeconfig it was given (a client's own cannot pass a proxy that ends TLS).
    #[tokio::test]
    async fn in_front_of_a_server_requiring_a_client_certificate_the_proxy_presents_one() {
        behind_tls(true).await;
    }

    /// `writes_go_twice` through a request proxy in front of devcluster behind a TLS front with
    /// a real cluster's PKI, which requires the admin client certificate when `mutual`.
    async fn behind_tls(mutual: bool) {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let files =
            crate::control_plane::ClusterFiles::new(dir.path(), "server", kubeconfig.clone());
        std::fs::create_dir_all(files.ca_cert().parent().unwrap()).unwrap();
        let pki = crate::control_plane::write_pki(&files, None).unwrap();
        let admin = crate::control_plane::Credential::Certificate {
            cert_pem: &pki.admin_cert_pem,
            key_pem: &pki.admin_key_pem,
        };
        let text = crate::control_plane::kubeconfig("server", 1, &pki.ca_pem, &admin);
        std::fs::write(&kubeconfig, text).unwrap();
        let mut tls = ServerTls::of(&files);
        let mut accept = tls.load().unwrap().accept;
        if mutual {
            tls = tls.presenting(kubeconfig);
            accept = mutual_acceptor(&files);
        }
        // The TLS server: devcluster behind a TLS front with the same certificate.
        let server = devcluster::DevCluster::start_default().await.unwrap();
        let plain = server.addr();
        let (front, front_addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        tokio::spawn(async move {
            while let Ok((client, _)) = front.accept().await {
                let accept = accept.clone();
                tokio::spawn(async move {
                    // Refused without a client certificate when `mutual`.
                    let Ok(mut client) = accept.accept(client).await else {
                        return;
                    };
                    let mut upstream = TcpStream::connect(plain).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        let proxy = RequestProxy::start(front_addr, Some(tls)).await.unwrap();
        let mut config = kube::Config::new(format!("https://{}", proxy.addr()).parse().unwrap());
        let ca = CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap();
        config.root_cert = Some(vec![ca.to_vec()]);
        writes_go_twice(proxy, kube::Client::try_from(config).unwrap()).await;
    }

    /// A TLS acceptor with the cluster's serving certificate that requires a client certificate
    /// signed by its CA.
    fn mutual_acceptor(files: &crate::control_plane::ClusterFiles) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert, key) = files.serving();
        let certs = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(files.ca_cert()).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(server))
    }

    /// While a late-replay step lasts, a write is answered once and lands again later, after a
    /// newer write, undoing it.
    #[tokio::test]
    async fn a_write_replayed_late_lands_after_a_newer_one() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, Patch, PatchParams};

        let server = devcluster::DevCluster::start_default().await.unwrap();
        let mut proxy = RequestProxy::start(server.addr(), None).await.unwrap();
        let through_proxy = kube::Config::new(format!("http://{}", proxy.addr()).parse().unwrap());
        let direct = kube::Config::new(format!("http://{}", server.addr()).parse().unwrap());
        let cms = |config| {
            Api::<ConfigMap>::namespaced(kube::Client::try_from(config).unwrap(), "default")
        };
        let (late, now) = (cms(through_proxy), cms(direct));
        let apply = |value: &str| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "late"}, "data": {"k": value}
            })
        };
        let params = PatchParams::apply("replay-test").force();
        proxy.play(RequestSchedule::from_now(
            RequestFault::ReplayLate {
                after: Duration::from_millis(500),
            },
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = Instant::now();
        late.patch("late", &params, &Patch::Apply(apply("old")))
            .await
            .unwrap();
        now.patch("late", &params, &Patch::Apply(apply("new")))
            .await
            .unwrap();
        proxy.heal();
        let data = |cm: ConfigMap| cm.data.unwrap_or_default()["k"].clone();
        assert_eq!(data(now.get("late").await.unwrap()), "new");
        atoll_testkit::eventually(
            "the late replay to land",
            Duration::from_secs(10),
            || async { data(now.get("late").await.unwrap()) == "old" },
        )
        .await;
        let counts: std::collections::BTreeMap<_, _> =
            proxy.counters().counts().into_iter().collect();
        let copies = proxy.late_copies();
        let (from, to) = (sent, Instant::now());
        assert!(copies.landed_between("/configmaps/late", from, to));
        assert!(!copies.landed_between("/configmaps/other", from, to));
        assert!(!copies.landed_between("/configmaps/late", to, to + Duration::from_secs(1)));
        assert_eq!(counts["replayed late"], 1, "{counts:?}");
        assert_eq!(counts["replayed late and taken"], 1, "{counts:?}");
        assert_eq!(counts["repeated"], 0, "{counts:?}");
    }

    async fn writes_go_twice(mut proxy: RequestProxy, client: kube::Client) {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, DeleteParams, PostParams};

        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let cm = |name: &str| {
            serde_json::from_value::<ConfigMap>(serde_json::json!({
                "metadata": {"name": name}, "data": {"k": "v"}
            }))
            .unwrap()
        };

        cms.create(&PostParams::default(), &cm("once"))
            .await
            .unwrap();
        proxy.play(RequestSchedule::from_now(
            RequestFault::Repeat,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let created = cms.create(&PostParams::default(), &cm("twice")).await;
        assert!(
            matches!(&created, Err(kube::Error::Api(e)) if e.code == 409),
            "{created:?}"
        );
        assert!(cms.get_opt("twice").await.unwrap().is_some());
        let deleted = cms.delete("once", &DeleteParams::default()).await;
        assert!(
            matches!(&deleted, Err(kube::Error::Api(e)) if e.code == 404),
            "{deleted:?}"
        );
        assert!(cms.get_opt("once").await.unwrap().is_none());
        proxy.heal();
        cms.delete("twice", &DeleteParams::default()).await.unwrap();
        let counts: std::collections::BTreeMap<_, _> =
            proxy.counters().counts().into_iter().collect();
        assert_eq!(counts["repeated"], 2, "{counts:?}");
        assert_eq!(counts["answered otherwise"], 2, "{counts:?}");
    }
}
