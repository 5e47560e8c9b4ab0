//! The life of an atoll controller process, written once: tracing, the kube client, the metrics
//! registry, the admin server, readiness, and a graceful stop on SIGINT/SIGTERM.
//!
//! Every binary's `app::run` has the same shape:
//!
//! ```ignore
//! let mut process = Process::start(&args.telemetry, &args.client).await?;
//! let metrics = Metrics::register(process.registry());     // every metric, before serving
//! let client = process.client();
//! process.run(&args.admin, |shutdown| async move {
//!     // the work, which stops cleanly once `shutdown.requested()` completes
//! }).await
//! ```

use crate::Error;
use crate::admin::{self, Readiness};
use crate::args::{AdminArgs, ClientArgs, TelemetryArgs};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// A started process: tracing installed, the client connected, metrics not yet served.
pub struct Process {
    client: kube::Client,
    registry: Registry,
    readiness: Readiness,
}

impl Process {
    /// Installs tracing (`--log`, `--log-format`, `RUST_LOG`) and connects the kube client
    /// (`--kubeconfig`, `--context`, or inferred as kubectl does). When a tracing subscriber is
    /// already installed (a test or an embedder running several processes in one), it is kept.
    pub async fn start(telemetry: &TelemetryArgs, client: &ClientArgs) -> Result<Process, Error> {
        if let Err(e) = crate::telemetry::init(telemetry) {
            tracing::debug!(error = %e, "keeping the tracing subscriber already installed");
        }
        let client = crate::client::client(client).await?;
        Ok(Process {
            client,
            registry: Registry::default(),
            readiness: Readiness::default(),
        })
    }

    /// The process's kube client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The registry the process's metrics go into; `/metrics` serves it once [`Process::run`]
    /// starts, so everything is registered before then.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The flag `/readyz` reports; the work sets it once it does its job, and it falls back to
    /// false when the process stops.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Serves the admin endpoints and runs `work` until it returns. `work` is handed the
    /// [`Shutdown`] that SIGINT or SIGTERM triggers and stops cleanly on it (releasing leases,
    /// closing streams); a failing admin server ends the process without waiting for it.
    pub async fn run<Work, E>(
        self,
        admin: &AdminArgs,
        work: impl FnOnce(Shutdown) -> Work,
    ) -> Result<(), E>
    where
        Work: Future<Output = Result<(), E>>,
        E: From<Error>,
    {
        let readiness = self.readiness.clone();
        let (addr, serving) =
            admin::serve(admin.admin_listen, Arc::new(self.registry), self.readiness).await?;
        tracing::info!(%addr, "admin server listening");
        let (trigger, requested) = watch::channel(false);
        let signal = tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            let _ = trigger.send(true);
        });
        let result = tokio::select! {
            r = work(Shutdown(requested)) => r,
            r = serving => Err(E::from(r.err().unwrap_or(Error::StopAdmin))),
        };
        signal.abort();
        readiness.set(false);
        if result.is_ok() {
            tracing::info!("stopped");
        }
        result
    }
}

/// Completes when the process is asked to stop (SIGINT or SIGTERM). Clones share the one
/// signal.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Waits for the stop request.
    pub async fn requested(mut self) {
        // A dropped sender means the process is going away: that is a stop request too.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// A shutdown that `trigger` requests, for tests and embedders that stop a process's work
    /// themselves.
    pub fn manual() -> (watch::Sender<bool>, Shutdown) {
        let (trigger, requested) = watch::channel(false);
        (trigger, Shutdown(requested))
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM (what Kubernetes sends a pod it stops).
pub async fn shutdown_signal() {
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
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shutdown_completes_once_triggered_and_not_before() {
        let (trigger, shutdown) = Shutdown::manual();
        let waiting = tokio::spawn(shutdown.clone().requested());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        trigger.send(true).unwrap_or_else(|e| unreachable!("{e}"));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .unwrap_or_else(|e| unreachable!("{e}"))
            .unwrap_or_else(|e| unreachable!("{e}"));
        // A second waiter sees the request that was already made.
        tokio::time::timeout(std::time::Duration::from_secs(5), shutdown.requested())
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
    }
}
