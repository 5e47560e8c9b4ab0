//! The HTTP server: routing, the verb handlers (HTTP layer), the write engine (storage rules),
//! watch streaming, background controllers.

pub mod controllers;
pub mod crd;
mod discovery;
pub(crate) mod engine;
pub mod error;
pub(crate) mod handlers;
mod protobuf;
pub mod registry;
pub mod request;
pub mod selector;
mod table;
mod watch;

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use parking_lot::{Mutex, RwLock};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::api::resource::ResourceInfo;
use crate::store::{ObjRef, ResKey, Store};
use error::ApiError;
use registry::Registry;
use request::Query;

/// Maximum request body (kube-apiserver's limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Shared server state.
pub struct State {
    /// The object store.
    pub store: Store,
    /// Served resources.
    pub registry: RwLock<Registry>,
    token: Option<String>,
    shutdown: tokio::sync::watch::Sender<bool>,
    wake: tokio::sync::Notify,
    gc_queue: Mutex<Vec<String>>,
    foreground: Mutex<HashSet<ObjRef>>,
    openapi_cache: Mutex<discovery::OpenApiCache>,
    terminating_since: Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl State {
    /// A state over `store`; `token` enables bearer authentication.
    pub fn new(store: Store, token: Option<String>) -> State {
        let (shutdown, _) = tokio::sync::watch::channel(false);
        State {
            store,
            registry: RwLock::new(Registry::new(builtin_resources())),
            token,
            shutdown,
            wake: tokio::sync::Notify::new(),
            gc_queue: Mutex::new(Vec::new()),
            foreground: Mutex::new(HashSet::new()),
            openapi_cache: Mutex::new(discovery::OpenApiCache::default()),
            terminating_since: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Registers stored CRDs and seeds a fresh cluster (namespaces, default service
    /// accounts, `kube-root-ca.crt`, the `kubernetes` Service) when the store is empty.
    pub fn bootstrap(&self) -> Result<(), crate::Error> {
        let crd_key = ResKey::new("apiextensions.k8s.io", "customresourcedefinitions");
        let crds = self.store.begin().list(&crd_key, None);
        for crd in crds {
            crd::register(self, &crd);
        }
        controllers::seed(self)?;
        self.resume_background_work();
        Ok(())
    }

    /// After a restart: picks up foreground deletions in progress and dependents whose owners
    /// disappeared before the garbage collector ran.
    fn resume_background_work(&self) {
        let mut uids = std::collections::HashSet::new();
        let mut owners = Vec::new();
        let mut foreground = Vec::new();
        self.store.scan(|key, obj| {
            let meta = &obj["metadata"];
            if let Some(uid) = meta["uid"].as_str() {
                uids.insert(uid.to_string());
            }
            for r in meta["ownerReferences"].as_array().into_iter().flatten() {
                if let Some(uid) = r["uid"].as_str() {
                    owners.push(uid.to_string());
                }
            }
            if meta["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion"))
            {
                foreground.push(ObjRef {
                    key: key.clone(),
                    namespace: meta["namespace"].as_str().unwrap_or("").to_string(),
                    name: meta["name"].as_str().unwrap_or("").to_string(),
                });
            }
        });
        let mut queue = self.gc_queue.lock();
        for o in owners {
            if !uids.contains(&o) {
                queue.push(o);
            }
        }
        self.foreground.lock().extend(foreground);
    }

    /// Signals watch streams and controllers to stop.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        self.wake.notify_waiters();
    }

    fn shutdown_rx(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Asks the background controllers to run now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Queues the uid of a removed object for garbage collection of its dependents.
    pub(crate) fn removed(&self, uid: &str) {
        if !uid.is_empty() {
            self.gc_queue.lock().push(uid.to_string());
            self.wake();
        }
    }

    /// Finds a served resource.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.registry.read().lookup(group, version, plural)
    }
}

/// The built-in resources served by every devcluster.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    crate::api::builtin::builtin_resources()
}

/// Accepts connections until the task is aborted; connection tasks die with it.
pub async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(state, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(io, svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Builds a JSON response by serialising `body` (a `Value`, or a borrowing view of stored
/// objects such as [`crate::store::PartialMetadata`]).
pub(crate) fn json_response(code: u16, body: &impl serde::Serialize) -> Response<Body> {
    bytes_response(
        code,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

/// Builds a JSON response from serialised bytes.
pub(crate) fn bytes_response(code: u16, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn text_response(code: u16, body: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let resp = match route(state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    tracing::debug!(%method, %uri, status = resp.status().as_u16(), "request");
    resp
}

/// One API request on a resource path.
pub(crate) struct Ctx {
    pub info: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    pub query: Query,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub method: Method,
}

async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::too_large())
            } else {
                Err(ApiError::bad_request(format!(
                    "reading the request body: {e}"
                )))
            }
        }
    }
}

async fn route(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    let query = Query::parse(parts.uri.query());
    match path.as_str() {
        "/healthz" | "/livez" | "/readyz" | "/healthz/ping" | "/livez/ping" | "/readyz/ping" => {
            return Ok(text_response(200, "ok"));
        }
        "/version" => {
            return Ok(json_response(
                200,
                &json!({"major":"1","minor":"32","gitVersion":"v1.32.0-devcluster",
                    "gitCommit":"0000000000000000000000000000000000000000","gitTreeState":"clean",
                    "buildDate":"2024-12-11T11:57:12Z","goVersion":"go1.23.3","compiler":"gc",
                    "platform":"linux/amd64"}),
            ));
        }
        _ => {}
    }
    if let Some(token) = &state.token {
        let expected = format!("Bearer {token}");
        let got = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !constant_time_eq(got.as_bytes(), expected.as_bytes()) {
            return Err(ApiError::unauthorized());
        }
    }
    if let Some(resp) = discovery::route(&state, &path, &query, &parts.headers) {
        return resp;
    }
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(request::percent_decode)
        .collect();
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 3 => (String::new(), segs[1].clone(), &segs[2..]),
        Some("apis") if segs.len() >= 4 => (segs[1].clone(), segs[2].clone(), &segs[3..]),
        _ => return Err(ApiError::unknown_path()),
    };
    let target = resolve(&state, &group, &version, rest).ok_or_else(ApiError::unknown_path)?;
    let body = match parts.method {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => read_body(body).await?,
        _ => Bytes::new(),
    };
    let ctx = Ctx {
        info: target.0,
        namespace: target.1,
        name: target.2,
        sub: target.3,
        query,
        headers: parts.headers,
        body,
        method: parts.method,
    };
    handlers::dispatch(state, ctx).await
}

type Target = (
    Arc<ResourceInfo>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn resolve(state: &State, group: &str, version: &str, rest: &[String]) -> Option<Target> {
    // Namespaced form: namespaces/{ns}/{plural}[/{name}[/{sub}]]
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(info) = state.lookup(group, version, &rest[2])
        && info.namespaced
    {
        if rest.len() > 5 {
            return None;
        }
        return Some((
            info,
            Some(rest[1].clone()),
            rest.get(3).cloned(),
            rest.get(4).cloned(),
        ));
    }
    if rest.len() > 3 {
        return None;
    }
    let info = state.lookup(group, version, &rest[0])?;
    Some((info, None, rest.get(1).cloned(), rest.get(2).cloned()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
