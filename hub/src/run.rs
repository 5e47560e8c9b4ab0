//! Wiring: the controllers, the backend, the gRPC service and server, started together. Used by
//! the binary and by the integration tests.

use crate::Error;
use crate::args::HubArgs;
use crate::backend::{BackendConfig, KubeBackend};
use crate::controllers::{ControllerConfig, Controllers};
use crate::index::{Index, Limits};
use crate::metrics::Metrics;
use crate::push::PushManager;
use crate::server::{self, ServerConfig};
use crate::service::{HubService, StreamConfig};
use crate::streams::OpenStreams;
use atoll_runtime::admin::Readiness;
use atoll_runtime::leader::LeaderElection;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Everything the hub needs to run.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// gRPC server.
    pub server: ServerConfig,
    /// Streams.
    pub stream: StreamConfig,
    /// Registration and write-back.
    pub backend: BackendConfig,
    /// Watches, finalizers, lost clusters.
    pub controllers: ControllerConfig,
    /// Push-mode clusters.
    pub push: PushConfig,
}

/// How the hub serves Push-mode clusters.
#[derive(Clone, Debug, Default)]
pub struct PushConfig {
    /// `Some`: one replica, elected through this Lease, serves every Push cluster and repairs
    /// drift in them. `None`: every replica serves every Push cluster, without drift repair.
    pub leader: Option<PushLeader>,
    /// How charts are installed in the Push clusters; `None`: they are not (their releases fail
    /// saying so).
    pub helm: Option<PushHelm>,
    /// Serve children over plain `http://` and without TLS verification.
    pub allow_insecure: bool,
}

pub use crate::push::PushHelm;

/// The Lease the replicas contend for to serve the Push clusters.
#[derive(Clone, Debug)]
pub struct PushLeader {
    /// Namespace of the Lease [`crate::push::PUSH_LEASE`].
    pub namespace: String,
    /// Validity of the Lease without renewal.
    pub lease_duration: Duration,
    /// This replica's identity in the Lease.
    pub identity: String,
}

impl HubConfig {
    /// The configuration the flags describe.
    pub fn from_args(a: &HubArgs) -> HubConfig {
        let tls = match (&a.tls_cert, &a.tls_key) {
            (Some(c), Some(k)) if !a.insecure => Some((c.clone(), k.clone())),
            _ => None,
        };
        let silent = SilentDetection::new(
            Duration::from_secs(u64::from(a.heartbeat_seconds.max(1))),
            a.silent_heartbeats,
        );
        HubConfig {
            server: ServerConfig {
                listen: a.listen,
                tls,
                max_decode_bytes: a.max_message_bytes,
                max_encode_bytes: a.max_message_bytes,
            },
            stream: StreamConfig {
                heartbeat_seconds: a.heartbeat_seconds.max(1),
                window: a.window.max(1),
                hello_timeout: a.hello_timeout,
                max_handshakes: a.max_handshakes.max(1),
                max_report_bytes: a.max_report_bytes.min(a.max_message_bytes),
                credentials_recheck: a.chart_credentials_recheck,
                ..StreamConfig::default()
            },
            backend: BackendConfig {
                manual_approval: !a.auto_approve,
                kube_system_bootstrap_tokens: a.kube_system_bootstrap_tokens,
                disconnect_grace: a.disconnect_grace,
                approval_poll: Duration::from_secs(1),
                approval_wait: a.approval_wait,
                max_waiting_registrations: a
                    .max_waiting_registrations
                    .clamp(1, a.max_handshakes.max(1)),
                cluster_token_lifetime: a.cluster_token_lifetime.filter(|d| !d.is_zero()),
            },
            controllers: ControllerConfig {
                lost_cluster_timeout: a.lost_cluster_timeout,
                sweep_every: silent.sweep_every,
                limits: Limits {
                    max_objects_per_description: a.max_objects_per_description,
                    max_description_bytes: a.max_message_bytes.saturating_sub(64 * 1024),
                },
                heartbeat_grace: silent.overdue_after,
            },
            push: PushConfig {
                leader: a.push_leader_elect.then(|| PushLeader {
                    namespace: a.push_leader_elect_namespace.clone(),
                    lease_duration: Duration::from_secs(u64::from(
                        a.push_leader_elect_lease_seconds.max(2),
                    )),
                    identity: a
                        .push_leader_elect_identity
                        .clone()
                        .unwrap_or_else(atoll_runtime::leader::default_identity),
                }),
                helm: Some(PushHelm {
                    binary: a.helm.clone(),
                    home: a.helm_home.clone(),
                }),
                allow_insecure: a.push_allow_insecure,
            },
        }
    }

    /// A plaintext configuration on `127.0.0.1:0` with short timers, for tests.
    pub fn for_tests() -> HubConfig {
        HubConfig {
            server: ServerConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                tls: None,
                max_decode_bytes: server::DEFAULT_MAX_MESSAGE_BYTES,
                max_encode_bytes: server::DEFAULT_MAX_MESSAGE_BYTES,
            },
            stream: StreamConfig {
                heartbeat_seconds: 1,
                window: 16,
                ..StreamConfig::default()
            },
            backend: BackendConfig {
                manual_approval: false,
                kube_system_bootstrap_tokens: false,
                disconnect_grace: Duration::from_millis(500),
                approval_poll: Duration::from_millis(100),
                approval_wait: Duration::from_secs(60),
                max_waiting_registrations: 64,
                cluster_token_lifetime: None,
            },
            controllers: ControllerConfig {
                lost_cluster_timeout: Duration::from_secs(300),
                sweep_every: Duration::from_millis(500),
                limits: Limits::default(),
                heartbeat_grace: Duration::from_secs(3),
            },
            // Test children are devclusters serving plain http on loopback.
            push: PushConfig {
                allow_insecure: true,
                ..PushConfig::default()
            },
        }
    }
}

/// A running hub.
pub struct RunningHub {
    /// The bound gRPC address.
    pub addr: SocketAddr,
    /// The Description index.
    pub index: Arc<Index>,
    /// The controllers.
    pub controllers: Arc<Controllers>,
    streams: Arc<OpenStreams>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), Error>>,
    background: Vec<JoinHandle<()>>,
    /// The Push sessions, stopped with the hub.
    push: Arc<PushManager>,
    /// The Push clusters' Lease, given up on a graceful stop so that another replica takes
    /// them over at once.
    push_election: Option<LeaderElection>,
}

impl RunningHub {
    /// Waits until every watch of the hub has listed (what `/readyz` reports).
    pub async fn wait_ready(&self) {
        self.controllers.wait_ready().await;
    }

    /// Completes when the gRPC server ends by itself (its TLS identity could not be loaded,
    /// its listener failed): with the server's error, or [`Error::GrpcServerStopped`]. A hub
    /// that cannot serve agents must not look alive, so the process ends with it.
    pub async fn server_ended(&mut self) -> Error {
        match (&mut self.server).await {
            Ok(Err(e)) => e,
            Ok(Ok(())) | Err(_) => Error::GrpcServerStopped {
                addr: self.addr.to_string(),
            },
        }
    }

    /// Stops serving and every background loop.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Open streams would keep a graceful shutdown waiting: tell their agents to reconnect.
        self.streams.close_all(|| {
            tonic::Status::unavailable("the hub is shutting down; reconnect to another replica")
        });
        for t in &self.background {
            t.abort();
        }
        self.push.shutdown();
        // The Push sessions are stopped: hand their clusters over.
        if let Some(election) = &self.push_election
            && let Err(e) = election.release().await
        {
            tracing::warn!(error = %e, "releasing the Push clusters' Lease failed");
        }
        let r = tokio::time::timeout(Duration::from_secs(5), &mut self.server).await;
        self.server.abort();
        match r {
            Ok(Ok(r)) => r,
            _ => Ok(()),
        }
    }
}

impl Drop for RunningHub {
    fn drop(&mut self) {
        self.server.abort();
        for t in &self.background {
            t.abort();
        }
        self.push.shutdown();
    }
}

/// Starts the hub: watches, backend, gRPC server. `readiness` turns true once every watch has
/// listed.
pub async fn start(
    client: kube::Client,
    config: HubConfig,
    registry: &mut Registry,
    readiness: Readiness,
) -> Result<RunningHub, Error> {
    let metrics = Arc::new(Metrics::register(registry));
    let index = Arc::new(Index::new());
    let streams = Arc::new(OpenStreams::default());
    let controllers = Controllers::new(
        client.clone(),
        index.clone(),
        metrics.clone(),
        config.controllers,
        streams.clone(),
    );
    let backend = Arc::new(KubeBackend::new(
        client.clone(),
        config.backend,
        controllers.clusters(),
        metrics.clone(),
    ));
    let push = Arc::new(
        PushManager::new(
            client.clone(),
            index.clone(),
            controllers.clusters(),
            controllers.registrations(),
            backend.clone(),
            Duration::from_secs(u64::from(config.stream.heartbeat_seconds.max(1))),
            config.push.leader.as_ref().map(|l| {
                LeaderElection::new(
                    client.clone(),
                    &l.namespace,
                    crate::push::PUSH_LEASE,
                    &l.identity,
                    l.lease_duration,
                )
            }),
        )
        .with_helm(config.push.helm.clone())
        .allowing_insecure_transport(config.push.allow_insecure)
        .with_chart_credentials(
            config.stream.credentials_retry,
            config.stream.credentials_recheck,
        ),
    );
    let push_election = push.election().cloned();
    let push_handle = push.clone();
    let service = HubService::new(backend, index.clone(), config.stream, metrics)
        .with_open_streams(streams.clone());
    let incoming = server::bind(config.server.listen)?;
    let addr = incoming.local_addr().map_err(|source| Error::BindGrpc {
        addr: config.server.listen.to_string(),
        source,
    })?;
    let mut background = vec![
        tokio::spawn(controllers.clone().run()),
        tokio::spawn(push.run()),
    ];
    let c = controllers.clone();
    background.push(tokio::spawn(async move {
        c.wait_ready().await;
        readiness.set(true);
        tracing::info!("hub caches synced; ready");
    }));
    let (tx, rx) = oneshot::channel::<()>();
    let server_config = config.server.clone();
    let server = tokio::spawn(async move {
        server::serve(service, &server_config, incoming, async {
            let _ = rx.await;
        })
        .await
    });
    tracing::info!(%addr, tls = config.server.tls.is_some(), "hub gRPC server listening");
    Ok(RunningHub {
        addr,
        index,
        controllers,
        streams,
        shutdown: Some(tx),
        server,
        background,
        push: push_handle,
        push_election,
    })
}

/// When the sweep looks for clusters whose heartbeats stopped, and how old a heartbeat makes
/// one overdue, so that a silent cluster is marked within `heartbeats` periods of its last
/// heartbeat: the sweep runs every half period and the threshold is half a period earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SilentDetection {
    /// How often the sweep runs.
    pub sweep_every: Duration,
    /// A last heartbeat older than this is overdue.
    pub overdue_after: Duration,
}

impl SilentDetection {
    /// For a heartbeat `period` and `heartbeats` periods (at least 2: one late heartbeat is
    /// not silence).
    pub fn new(period: Duration, heartbeats: u32) -> SilentDetection {
        let sweep_every = (period / 2).max(Duration::from_millis(500));
        SilentDetection {
            sweep_every,
            overdue_after: (period * heartbeats.max(2)).saturating_sub(sweep_every),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_cluster_is_marked_within_the_given_periods_of_its_last_heartbeat() {
        let ms = Duration::from_millis;
        // (period, heartbeats) -> (sweep every, overdue after)
        let cases = [
            ((10_000, 3), (5_000, 25_000)),
            ((10_000, 1), (5_000, 15_000)),
            ((1_000, 3), (500, 2_500)),
            ((2_000, 3), (1_000, 5_000)),
        ];
        for ((period, heartbeats), (sweep, overdue)) in cases {
            let d = SilentDetection::new(ms(period), heartbeats);
            assert_eq!((d.sweep_every, d.overdue_after), (ms(sweep), ms(overdue)));
            // The last sweep that can see it overdue runs at most `heartbeats` periods after
            // the last heartbeat.
            assert!(d.overdue_after + d.sweep_every <= ms(period) * heartbeats.max(2));
        }
    }
}
