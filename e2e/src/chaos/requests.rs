//! A request fault proxy: an HTTP/1.1 relay in front of an API server's byte proxy that, while
//! a step of its seeded [`RequestSchedule`] lasts, sends each write (POST, PUT, PATCH, DELETE)
//! twice and answers with the second response.
//!
//! That is what a client sees when its request landed but the answer was lost and the request
//! went again (a retrying client library, proxy or load balancer): a create answered 409
//! AlreadyExists, a delete 404 NotFound, an update with the old resourceVersion 409 Conflict,
//! and whatever the first one did done twice. The byte proxy cannot do this, for the reason the
//! message proxy exists ([`super::messages`]): a repeated byte range is a corrupt stream.
//!
//! It speaks plaintext HTTP/1.1 on both sides, as devcluster does; on the real tier the
//! components reach kube-apiserver over TLS, and the run leaves this proxy out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};

use super::proxy::{ProxyTasks, bind, loaded, timed_steps};
use crate::Error;

/// One step of a request schedule: writes are sent twice from `at` for `lasting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestStep {
    /// When it starts, from the start of the schedule.
    pub at: Duration,
    /// How long it lasts.
    pub lasting: Duration,
}

/// Repeated writes over time, drawn from a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSchedule {
    /// The steps, in time order, never overlapping.
    pub steps: Vec<RequestStep>,
}

impl RequestSchedule {
    /// A schedule of `span` from a caller's generator: steps of 1-4 s, 2-8 s apart (the
    /// components write in bursts when something changes; a step must last to meet some).
    pub fn generate_with(rng: &mut StdRng, span: Duration) -> RequestSchedule {
        let steps = timed_steps(rng, span, 1000..4000, 1000..4000, 2000..8000, |_| ())
            .into_iter()
            .map(|(at, lasting, ())| RequestStep { at, lasting })
            .collect();
        RequestSchedule { steps }
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
}

impl RequestCounters {
    /// Each counter with its name in the run's report.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        loaded(&[
            ("connections", &self.connections),
            ("requests", &self.requests),
            ("repeated", &self.repeated),
            ("answered otherwise", &self.answered_otherwise),
        ])
    }
}

struct Shared {
    upstream: SocketAddr,
    repeating: watch::Sender<bool>,
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
    /// Serves on `127.0.0.1:<free port>`, relaying to the HTTP server at `upstream`, passing
    /// everything once until a schedule is played.
    pub async fn start(upstream: SocketAddr) -> Result<RequestProxy, Error> {
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let shared = Arc::new(Shared {
            upstream,
            repeating: watch::channel(false).0,
            counters: RequestCounters::default(),
        });
        let server = tokio::spawn(accept(listener, shared.clone()));
        Ok(RequestProxy {
            addr,
            shared,
            tasks: ProxyTasks::new(server),
        })
    }

    /// Where clients connect (`http://` it).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has done so far.
    pub fn counters(&self) -> &RequestCounters {
        &self.shared.counters
    }

    /// Back to sending everything once, now (also ends a schedule being played).
    pub fn heal(&mut self) {
        self.tasks.stop_playing();
        self.shared.repeating.send_replace(false);
    }

    /// Plays `schedule` from now on, in the background (replacing one being played).
    pub fn play(&mut self, schedule: RequestSchedule) {
        self.heal();
        let shared = self.shared.clone();
        let steps = schedule
            .steps
            .iter()
            .map(|s| (s.at, s.lasting, ()))
            .collect();
        self.tasks.play_steps(steps, move |step| {
            shared.repeating.send_replace(step.is_some());
        });
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(serve(client, shared.clone()));
    }
}

/// The upstream connection of one client connection: HTTP/1.1 carries one request at a time,
/// so one upstream connection serves it, opened at its first request and again after a
/// failure (the byte proxy behind may cut it).
type Upstream = Arc<Mutex<Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>>;

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let upstream: Upstream = Arc::default();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let shared = shared.clone();
        let upstream = upstream.clone();
        async move { relay(request, &shared, &upstream).await }
    });
    // An error here is the client's or the upstream's connection ending: the client sees what
    // a cut would show it.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client), service)
        .await;
}

/// Sends `request` upstream, twice when it is a write and a step is in force, and answers with
/// the last answer. A failure closes the client's connection.
async fn relay(
    request: Request<Incoming>,
    shared: &Shared,
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
    let twice = is_write && *shared.repeating.borrow();
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
    if twice {
        counters.repeated.fetch_add(1, Ordering::Relaxed);
        let first = send(sender, shared.upstream, copy()).await?;
        first_status = Some(first.status());
        // The connection carries the next request only once this answer is read.
        first
            .into_body()
            .collect()
            .await
            .map_err(|e| relay_error("reading a repeated request's answer", e))?;
    }
    let answer = send(sender, shared.upstream, copy()).await?;
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
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Error> {
    let open = match sender.take() {
        Some(s) if !s.is_closed() => s,
        _ => {
            let stream = TcpStream::connect(upstream)
                .await
                .map_err(|e| relay_error("connecting upstream", e))?;
            let (s, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| relay_error("the upstream handshake", e))?;
            tokio::spawn(connection);
            s
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
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, DeleteParams, PostParams};

        let server = devcluster::DevCluster::start_default().await.unwrap();
        let mut proxy = RequestProxy::start(server.addr()).await.unwrap();
        let config = kube::Config::new(format!("http://{}", proxy.addr()).parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
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
        proxy.play(RequestSchedule {
            steps: vec![RequestStep {
                at: Duration::ZERO,
                lasting: Duration::from_secs(600),
            }],
        });
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
