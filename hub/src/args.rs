//! Command-line arguments of `atoll-hub` (every flag also from the environment).

use atoll_runtime::args::{AdminArgs, ClientArgs, TelemetryArgs};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `atoll-hub`: serves agents over gRPC, registers clusters, writes their status back.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "atoll-hub", version, about)]
pub struct HubArgs {
    /// Kubernetes client.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// Admin server.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Address of the gRPC server agents dial.
    #[arg(long, env = "ATOLL_HUB_LISTEN", default_value = "0.0.0.0:7443")]
    pub listen: SocketAddr,
    /// PEM certificate (chain) of the gRPC server.
    #[arg(
        long,
        env = "ATOLL_HUB_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "insecure"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the gRPC server.
    #[arg(
        long,
        env = "ATOLL_HUB_TLS_KEY",
        requires = "tls_cert",
        conflicts_with = "insecure"
    )]
    pub tls_key: Option<PathBuf>,
    /// Serve plaintext gRPC (local demos only); without it, --tls-cert and --tls-key are
    /// required.
    #[arg(long, env = "ATOLL_HUB_INSECURE", required_unless_present = "tls_cert")]
    pub insecure: bool,
    /// Approve every registration with a valid bootstrap token at once. Without it (the
    /// default) each ClusterRegistrationRequest waits for an administrator:
    /// `kubectl patch clsrr clusternet-<id> --subresource=status --type=merge -p
    /// '{"status":{"result":"Approved"}}'`.
    #[arg(long, env = "ATOLL_HUB_AUTO_APPROVE")]
    pub auto_approve: bool,
    /// Also accept the bootstrap tokens kept where kubeadm and Clusternet keep them
    /// (`bootstrap.kubernetes.io/token` Secrets in kube-system), after those of
    /// clusternet-system. Needs `get` on Secrets in kube-system: install with the
    /// `manifests/parent/kube-system-bootstrap-tokens` component.
    #[arg(long, env = "ATOLL_HUB_KUBE_SYSTEM_BOOTSTRAP_TOKENS")]
    pub kube_system_bootstrap_tokens: bool,
    /// A cluster not Ready for this long is lost: its Descriptions' finalizers are released
    /// (e.g. `5m`, `90s`, `1h`).
    #[arg(long, env = "ATOLL_HUB_LOST_CLUSTER_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub lost_cluster_timeout: Duration,
    /// Heartbeat period asked of agents, seconds.
    #[arg(long, env = "ATOLL_HUB_HEARTBEAT_SECONDS", default_value_t = 10)]
    pub heartbeat_seconds: u32,
    /// After a stream ends, wait this long for the agent to reconnect before marking the
    /// cluster `Ready=Unknown` and tainting it (e.g. `3s`).
    #[arg(long, env = "ATOLL_HUB_DISCONNECT_GRACE", default_value = "3s", value_parser = parse_duration)]
    pub disconnect_grace: Duration,
    /// A cluster whose stream stays open but whose heartbeats stop is marked `Ready=Unknown`
    /// within this many heartbeat periods of its last heartbeat.
    #[arg(long, env = "ATOLL_HUB_SILENT_HEARTBEATS", default_value_t = 3)]
    pub silent_heartbeats: u32,
    /// A stream that sends no Hello within this long is closed (e.g. `10s`).
    #[arg(long, env = "ATOLL_HUB_HELLO_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub hello_timeout: Duration,
    /// Agent streams in their handshake (before Hello, token check and registration are done)
    /// at once; more are refused with RESOURCE_EXHAUSTED and the agent retries with backoff.
    #[arg(long, env = "ATOLL_HUB_MAX_HANDSHAKES", default_value_t = 256)]
    pub max_handshakes: usize,
    /// How long a Hello is held waiting for an administrator to approve (or deny) its
    /// registration; then the agent is told to retry (UNAVAILABLE) and the request stays.
    #[arg(long, env = "ATOLL_HUB_APPROVAL_WAIT", default_value = "60s", value_parser = parse_duration)]
    pub approval_wait: Duration,
    /// Hellos that may wait for an administrator's decision at once; more are refused with
    /// RESOURCE_EXHAUSTED (their requests stay), so that pending registrations never hold
    /// every handshake slot. Keep it under --max-handshakes.
    #[arg(
        long,
        env = "ATOLL_HUB_MAX_WAITING_REGISTRATIONS",
        default_value_t = 64
    )]
    pub max_waiting_registrations: usize,
    /// How long a cluster token is accepted after it is issued (e.g. `720h`); agents get a new
    /// one half-way through, when they reconnect (the hub closes their stream then). Unset or
    /// `0`: tokens live until revoked or rotated.
    #[arg(long, env = "ATOLL_HUB_CLUSTER_TOKEN_LIFETIME", value_parser = parse_duration)]
    pub cluster_token_lifetime: Option<Duration>,
    /// Unacknowledged Description messages per agent stream.
    #[arg(long, env = "ATOLL_HUB_WINDOW", default_value_t = 16)]
    pub window: u32,
    /// Largest message accepted from (and sent to) an agent, bytes.
    #[arg(long, env = "ATOLL_HUB_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// Largest report accepted from an agent, bytes; larger ones are dropped with a logged reason
    /// and the stream goes on. Keep it under --max-message-bytes (a message over that ends the
    /// stream).
    #[arg(long, env = "ATOLL_HUB_MAX_REPORT_BYTES", default_value_t = 1024 * 1024)]
    pub max_report_bytes: usize,
    /// How often the hub reads again the chartPullSecret of each chart it delivered, so that a
    /// rotated Secret reaches the clusters without an edit (one GET per Secret, Description and
    /// cluster each time).
    #[arg(long, env = "ATOLL_HUB_CHART_CREDENTIALS_RECHECK", default_value = "5m", value_parser = parse_duration)]
    pub chart_credentials_recheck: Duration,
    /// Most objects in one Description; larger ones are not delivered and get a Failure status.
    #[arg(
        long,
        env = "ATOLL_HUB_MAX_OBJECTS_PER_DESCRIPTION",
        default_value_t = 1000
    )]
    pub max_objects_per_description: usize,
    /// Serve the Push-mode clusters from one replica only, elected through the Lease
    /// `atoll-hub-push`; that replica also repairs drift in them (re-applies what someone else
    /// changed or deleted), as an agent does. `false`: every replica serves every Push cluster
    /// and none repairs drift, since replicas whose views of a Description differ for a
    /// moment would undo each other's applies.
    #[arg(long, env = "ATOLL_HUB_PUSH_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub push_leader_elect: bool,
    /// Namespace of the Lease `atoll-hub-push`.
    #[arg(
        long,
        env = "ATOLL_HUB_PUSH_LEADER_ELECT_NAMESPACE",
        default_value = "clusternet-system"
    )]
    pub push_leader_elect_namespace: String,
    /// How long the Push leader's Lease is valid without renewal, in seconds: after the leader
    /// dies, the Push clusters wait this long for another replica.
    #[arg(
        long,
        env = "ATOLL_HUB_PUSH_LEADER_ELECT_LEASE_SECONDS",
        default_value_t = 15
    )]
    pub push_leader_elect_lease_seconds: u32,
    /// Identity of this replica in the Lease; defaults to the host name plus a random suffix.
    #[arg(long, env = "ATOLL_HUB_PUSH_LEADER_ELECT_IDENTITY")]
    pub push_leader_elect_identity: Option<String>,
    /// Serve Push-mode children whose deployer kubeconfig names a plain `http://` server or
    /// sets `insecure-skip-tls-verify` (local test fleets); refused otherwise, with the reason
    /// in the ManagedCluster's status.
    #[arg(long, env = "ATOLL_HUB_PUSH_ALLOW_INSECURE")]
    pub push_allow_insecure: bool,
    /// The `helm` v3 binary that installs HelmChart feeds as releases in the Push-mode clusters
    /// (a path, or a name looked up on PATH), as an agent's does in its own cluster.
    #[arg(long, env = "ATOLL_HELM", default_value = "helm")]
    pub helm: std::path::PathBuf,
    /// Where helm keeps its cache, configuration and data for the Push-mode clusters, one
    /// directory each (a writable directory; it also holds each cluster's kubeconfig for helm,
    /// readable by the hub's user only).
    #[arg(long, env = "ATOLL_HELM_HOME", default_value = "/tmp/atoll-helm")]
    pub helm_home: std::path::PathBuf,
}

/// Parses `300`, `90s`, `5m`, `1h` into a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s, 5m or 1h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{s:?} has unit {unit:?}; use s, m or h")),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn command_is_well_formed() {
        HubArgs::command().debug_assert();
    }

    #[test]
    fn tls_or_insecure_is_required_and_exclusive() {
        let cases: [(&[&str], bool); 5] = [
            (&["atoll-hub"], false),
            (&["atoll-hub", "--insecure"], true),
            (
                &["atoll-hub", "--tls-cert", "c.pem", "--tls-key", "k.pem"],
                true,
            ),
            (&["atoll-hub", "--tls-cert", "c.pem"], false),
            (
                &[
                    "atoll-hub",
                    "--insecure",
                    "--tls-cert",
                    "c.pem",
                    "--tls-key",
                    "k.pem",
                ],
                false,
            ),
        ];
        for (argv, ok) in cases {
            assert_eq!(HubArgs::try_parse_from(argv).is_ok(), ok, "{argv:?}");
        }
    }

    #[test]
    fn defaults_match_the_documentation() {
        let a = HubArgs::try_parse_from(["atoll-hub", "--insecure"]).unwrap();
        assert_eq!(a.lost_cluster_timeout, Duration::from_secs(300));
        assert_eq!(a.heartbeat_seconds, 10);
        assert_eq!(a.disconnect_grace, Duration::from_secs(3));
        assert_eq!(a.silent_heartbeats, 3);
        assert_eq!(a.max_message_bytes, 4 * 1024 * 1024);
        assert!(!a.auto_approve, "approval is manual unless asked for");
        assert_eq!(a.cluster_token_lifetime, None, "tokens live until revoked");
        assert_eq!(a.approval_wait, Duration::from_secs(60));
        assert_eq!(a.max_waiting_registrations, 64);
        assert!(a.max_waiting_registrations < a.max_handshakes);
    }

    #[test]
    fn durations_parse_with_units() {
        let cases = [
            ("5m", Some(300)),
            ("90s", Some(90)),
            ("1h", Some(3600)),
            ("42", Some(42)),
            ("5d", None),
            ("m", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).ok().map(|d| d.as_secs()), want, "{s}");
        }
    }
}
