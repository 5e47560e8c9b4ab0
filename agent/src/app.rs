//! The `atoll-agent` process: its command-line flags and the wiring behind `main`.

use crate::Error;
use crate::hub::{Agent, AgentConfig, Transport};
use atoll_applier::Applier;
use atoll_applier::helm::Helm;
use atoll_runtime::args::{AdminArgs, ClientArgs, TelemetryArgs};
use atoll_runtime::process::Process;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// `atoll-agent`: registers this (child) cluster with an atoll hub, applies the Descriptions it
/// streams, repairs drift and reports status. The kubeconfig is the child cluster's; the hub is
/// reached only over gRPC.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "atoll-agent", version)]
pub struct Args {
    /// The child cluster.
    #[command(flatten)]
    pub client: ClientArgs,
    /// The hub's gRPC URL, e.g. `https://hub.example.com:8443`.
    #[arg(long, env = "ATOLL_HUB")]
    pub hub: String,
    /// Bootstrap token `<token-id>.<token-secret>` for the first registration (and when the hub
    /// no longer accepts the stored cluster token).
    #[arg(long, env = "ATOLL_BOOTSTRAP_TOKEN", hide_env_values = true)]
    pub bootstrap_token: String,
    /// Name of the ManagedCluster to register as (DNS label, at most 30 characters).
    #[arg(long, env = "ATOLL_CLUSTER_NAME")]
    pub cluster_name: String,
    /// Labels for the ManagedCluster, `k=v,k2=v2`.
    #[arg(long, env = "ATOLL_CLUSTER_LABELS", default_value = "")]
    pub cluster_labels: String,
    /// `StandardCluster` or `EdgeCluster`.
    #[arg(long, env = "ATOLL_CLUSTER_TYPE", default_value = "StandardCluster")]
    pub cluster_type: String,
    /// PEM bundle of the CA that signed the hub's certificate.
    #[arg(long, env = "ATOLL_CA_FILE", conflicts_with = "insecure")]
    pub ca_file: Option<PathBuf>,
    /// Talk to the hub in plaintext over an `http://` URL (local demos only).
    #[arg(long, env = "ATOLL_INSECURE")]
    pub insecure: bool,
    /// Take over existing objects in the child that no Description owns. Without it, only objects
    /// annotated `apps.clusternet.io/adopt: "true"` are taken over; others are reported as
    /// conflicts and left untouched.
    #[arg(long, env = "ATOLL_ADOPT_EXISTING")]
    pub adopt_existing: bool,
    /// Migration from Clusternet: take over, in place (same object, same uid), the objects a
    /// Clusternet agent deployed, that is whose `apps.clusternet.io/owned-by-description`
    /// annotation names a Clusternet Description (`<namespace>.<base>-generic`) and that no
    /// inventory of this agent lists. Without it they are reported as conflicts.
    #[arg(long, env = "ATOLL_ADOPT_CLUSTERNET")]
    pub adopt_clusternet: bool,
    /// Write only namespaced objects in these namespaces, `a,b` (empty: no restriction). For an
    /// agent installed with the narrower role of `manifests/agent/namespaced`: other objects are
    /// refused before the API server is called, each with a clear error in its Description's
    /// status, and drift repair watches only these namespaces.
    #[arg(long, env = "ATOLL_NAMESPACES", default_value = "")]
    pub namespaces: String,
    /// A prune after a snapshot (Descriptions the hub no longer has) that would delete more than
    /// this percent of the objects the agent owns waits for confirmation: the ManagedCluster
    /// shows a `PruneHeld` condition and an Event, and the annotation
    /// `hub.atoll.io/confirm-prune=<id>` on it lets the prune go on. 100 turns the limit off.
    #[arg(long, env = "ATOLL_MAX_PRUNE_PERCENT", default_value_t = crate::hub::DEFAULT_MAX_PRUNE_PERCENT,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub max_prune_percent: u32,
    /// The `helm` v3 binary that installs HelmChart feeds as releases (a path, or a name looked
    /// up on `PATH`). It talks to the child with the agent's own kubeconfig (or in-cluster
    /// credentials), and keeps its cache under `--helm-home`.
    #[arg(long, env = "ATOLL_HELM", default_value = "helm")]
    pub helm: std::path::PathBuf,
    /// Where helm keeps its cache, configuration and data (a writable directory; the agent's
    /// image mounts an emptyDir there).
    #[arg(long, env = "ATOLL_HELM_HOME", default_value = "/tmp/atoll-helm")]
    pub helm_home: std::path::PathBuf,
    /// How many helm installs, upgrades and uninstalls run at once; the others wait their turn
    /// (each helm process takes memory of the agent's pod). A release's `timeoutSeconds` is
    /// bounded to an hour.
    #[arg(long, env = "ATOLL_MAX_HELM_RUNS", default_value_t = atoll_applier::helm::DEFAULT_CONCURRENT_RUNS)]
    pub max_helm_runs: usize,
    /// The ServiceAccount helm acts as for each release, in the release's own namespace (made by
    /// the agent and bound to the ClusterRole `admin` there only), so that the child's RBAC
    /// refuses what a chart may not create: cluster-scoped objects, other namespaces. Empty
    /// (the default): helm acts with the agent's own rights.
    #[arg(long, env = "ATOLL_HELM_SERVICE_ACCOUNT", default_value = "")]
    pub helm_service_account: String,
    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// The admin server.
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// Parses `k=v,k2=v2` (empty → no labels).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, Error> {
    let mut labels = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                labels.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            _ => return Err(Error::ParseLabels(part.to_owned())),
        }
    }
    Ok(labels)
}

/// Parses `a,b` into a set of namespace names (empty → none).
pub fn parse_namespaces(s: &str) -> std::collections::BTreeSet<String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Checks that a ManagedCluster name is a DNS label of at most 30 characters.
pub fn validate_cluster_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 30
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(Error::ParseClusterName(name.to_owned()))
    }
}

impl Args {
    /// The agent settings these flags describe.
    pub fn agent_config(&self) -> Result<AgentConfig, Error> {
        validate_cluster_name(&self.cluster_name)?;
        let mut config = AgentConfig::new(&self.hub, &self.bootstrap_token, &self.cluster_name);
        config.cluster_labels = parse_labels(&self.cluster_labels)?;
        config.cluster_type = self.cluster_type.clone();
        config.max_prune_percent = self.max_prune_percent;
        config.transport = match (&self.ca_file, self.insecure) {
            (Some(path), _) => Transport::Tls {
                ca_pem: std::fs::read(path).map_err(|source| Error::ReadCaFile {
                    path: path.display().to_string(),
                    source,
                })?,
            },
            (None, true) => Transport::Plaintext,
            (None, false) => Transport::Tls { ca_pem: Vec::new() },
        };
        config.endpoint()?;
        Ok(config)
    }
}

/// Runs the agent until SIGINT/SIGTERM.
pub async fn run(args: Args) -> Result<(), Error> {
    let mut process = Process::start(&args.telemetry, &args.client).await?;
    let child = process.client();
    let agent = build(&args, child, process.registry())?;
    let readiness = process.readiness();
    // Ready while connected to the hub.
    let mut state = agent.subscribe();
    tokio::spawn(async move {
        while state.changed().await.is_ok() {
            let connected = state.borrow().connected;
            readiness.set(connected);
        }
    });
    process
        .run(&args.admin, |shutdown| agent.run(shutdown.requested()))
        .await
}

/// The agent these flags describe, applying to `child`, its metrics registered in `registry`:
/// what [`run`] runs, and what a process hosting many children (the fleet's `fleet-children`)
/// builds for each of them.
pub fn build(
    args: &Args,
    child: kube::Client,
    registry: &mut prometheus_client::registry::Registry,
) -> Result<Agent, Error> {
    let config = args.agent_config()?;
    let (metrics, applier_metrics) = crate::metrics::Metrics::register(registry);
    let applier = Arc::new(
        Applier::new(child.clone(), atoll_crds::known::FIELD_MANAGER_AGENT)
            .with_adopt_existing(args.adopt_existing)
            .with_adopt_clusternet(args.adopt_clusternet)
            .with_allowed_namespaces(parse_namespaces(&args.namespaces))
            .with_helm(
                Helm::new(
                    &args.helm,
                    args.client.kubeconfig.clone(),
                    args.client.context.clone(),
                    &args.helm_home,
                )
                .with_concurrent_runs(args.max_helm_runs)
                .with_release_account(Some(args.helm_service_account.clone())),
            )
            .with_metrics(applier_metrics),
    );
    Ok(Agent::new(child, config, applier).with_metrics(metrics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn cluster_labels_parse_as_key_value_pairs() {
        let cases = [
            ("", Some(vec![])),
            ("a=b", Some(vec![("a", "b")])),
            ("a=b, c=d ,", Some(vec![("a", "b"), ("c", "d")])),
            ("a=", Some(vec![("a", "")])),
            ("a", None),
            ("=b", None),
        ];
        for (input, expected) in cases {
            let got = parse_labels(input).ok();
            let expected = expected.map(|v| {
                v.into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect::<BTreeMap<_, _>>()
            });
            assert_eq!(got, expected, "{input}");
        }
    }

    #[test]
    fn allowed_namespaces_parse_as_a_comma_separated_set() {
        let cases: [(&str, &[&str]); 4] = [
            ("", &[]),
            ("shop", &["shop"]),
            (" shop, web ,,shop", &["shop", "web"]),
            (",", &[]),
        ];
        for (input, want) in cases {
            let want: std::collections::BTreeSet<String> =
                want.iter().map(|s| s.to_string()).collect();
            assert_eq!(parse_namespaces(input), want, "{input}");
        }
    }

    #[test]
    fn cluster_names_must_be_short_dns_labels() {
        let cases = [
            ("edge-1", true),
            ("a", true),
            ("abcdefghijabcdefghijabcdefghij", true),
            ("abcdefghijabcdefghijabcdefghijk", false),
            ("", false),
            ("Edge", false),
            ("-edge", false),
            ("edge-", false),
            ("edge_1", false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_cluster_name(name).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn ca_file_and_insecure_exclude_each_other() {
        let base = [
            "atoll-agent",
            "--hub",
            "http://h:1",
            "--bootstrap-token",
            "a.b",
            "--cluster-name",
            "c",
        ];
        let mut both = base.to_vec();
        both.extend(["--ca-file", "/x", "--insecure"]);
        assert!(Args::try_parse_from(both).is_err());
        let mut insecure = base.to_vec();
        insecure.push("--insecure");
        let args = Args::try_parse_from(insecure).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(args.agent_config().is_ok());
        let args = Args::try_parse_from(base).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(
            args.agent_config().is_err(),
            "plaintext URL without --insecure is refused"
        );
    }
}
