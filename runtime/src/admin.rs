//! The admin server every binary runs: `/metrics` (Prometheus text format), `/healthz`
//! (the process is alive) and `/readyz` (the process does its work: caches synced, leader or
//! standing by).

use crate::Error;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Readiness flag shared between the work loops and `/readyz`.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// Builds the admin router; exposed for tests.
pub fn router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState {
            registry,
            readiness,
        })
}

/// Binds `addr` and serves the admin endpoints until the process ends. Returns the bound
/// address (useful with port 0) and the serving future.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    readiness: Readiness,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = Result<(), Error>>,
    ),
    Error,
> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::BindAdmin {
            addr: addr.to_string(),
            source,
        })?;
    let bound = listener.local_addr().map_err(Error::ServeAdmin)?;
    let app = router(registry, readiness);
    let fut = async move { axum::serve(listener, app).await.map_err(Error::ServeAdmin) };
    Ok((bound, fut))
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}"),
        ),
    }
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
