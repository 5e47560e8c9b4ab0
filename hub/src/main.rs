//! `atoll-hub`: parses flags, initialises tracing, starts the admin server and the hub, and
//! runs until SIGINT/SIGTERM.

use anyhow::Context;
use atoll_hub::args::HubArgs;
use atoll_hub::run::{self, HubConfig};
use atoll_runtime::admin::{self, Readiness};
use clap::Parser;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = HubArgs::parse();
    atoll_runtime::telemetry::init(&args.telemetry)?;
    if args.insecure {
        tracing::warn!(
            "serving plaintext gRPC (--insecure): use --tls-cert/--tls-key outside local demos"
        );
    }
    let client = atoll_runtime::client::client(&args.client)
        .await
        .context("connecting to the parent cluster")?;
    let mut registry = Registry::default();
    let readiness = Readiness::default();
    let hub = run::start(
        client,
        HubConfig::from_args(&args),
        &mut registry,
        readiness.clone(),
    )
    .await
    .context("starting the hub")?;
    let (admin_addr, admin) = admin::serve(args.admin.admin_listen, Arc::new(registry), readiness)
        .await
        .context("starting the admin server")?;
    tracing::info!(%admin_addr, "admin server listening");
    tokio::select! {
        r = admin => r.context("admin server")?,
        () = shutdown_signal() => tracing::info!("shutting down"),
    }
    hub.stop().await.context("stopping the hub")?;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
