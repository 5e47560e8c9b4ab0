//! The command line: `kubectl atoll <subcommand>`. kubectl runs this binary with every argument
//! after `atoll`, so each subcommand takes the client flags (`--kubeconfig`, `--context`) itself.

use atoll_runtime::args::ClientArgs;

/// `kubectl atoll`: atoll's fleet from the parent cluster.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "kubectl-atoll",
    bin_name = "kubectl atoll",
    version,
    about = "Inspect and manage an atoll (Clusternet-compatible) fleet from its parent cluster",
    after_help = "Examples:\n  \
        kubectl atoll clusters\n  \
        kubectl atoll approve edge-1\n  \
        kubectl atoll deny edge-2 --reason \"not one of ours\"\n  \
        kubectl atoll status web -n shop"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// List the registered clusters (ManagedClusters) and the registrations that wait for approval.
    #[command(
        after_help = "Columns: READY is the Ready condition and how long it has held; \
        NODES is ready/all nodes; CPU and MEMORY are allocatable; LABELS leaves out the \
        cluster-id and cluster-name labels (they repeat ID and NAME); LAST HEARTBEAT is the age \
        of the agent's last status report. Registrations neither Approved nor Denied are listed \
        below the clusters.\n\n\
        Examples:\n  \
        kubectl atoll clusters\n  \
        kubectl atoll clusters -o json | jq '.items[] | select(.kind == \"ManagedCluster\") | .metadata.name'"
    )]
    Clusters(ClustersArgs),
    /// Approve a cluster's registration, so that the hub registers it.
    #[command(after_help = "CLUSTER is the ClusterRegistrationRequest's name \
        (clusternet-<cluster-id>), the cluster id, or the cluster's name. This sets the \
        request's status.result to Approved, as \
        `kubectl patch clsrr NAME --subresource=status --type=merge -p '{\"status\":{\"result\":\"Approved\"}}'` does.\n\n\
        Examples:\n  \
        kubectl atoll approve edge-1\n  \
        kubectl atoll approve clusternet-3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10")]
    Approve(ApproveArgs),
    /// Deny a cluster's registration; its agent is refused with the reason given.
    #[command(
        after_help = "CLUSTER is found as for `approve`. This sets the request's \
        status.result to Denied and status.errorMessage to the reason; a cluster that was \
        registered already loses its connection to the hub.\n\n\
        Examples:\n  \
        kubectl atoll deny edge-2 --reason \"not one of our sites\""
    )]
    Deny(DenyArgs),
    /// Show where a Subscription runs: its conditions, its clusters with their Description's
    /// phase, and the replicas of each feed in each cluster.
    #[command(after_help = "Examples:\n  \
        kubectl atoll status web\n  \
        kubectl atoll status web -n shop -o yaml")]
    Status(StatusArgs),
}

/// Output format of the listing subcommands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The objects as a `v1` `List`, in JSON.
    Json,
    /// The objects as a `v1` `List`, in YAML.
    Yaml,
}

/// Flags of `kubectl atoll clusters`.
#[derive(Clone, Debug, clap::Args)]
pub struct ClustersArgs {
    /// Print the ManagedClusters and pending ClusterRegistrationRequests as a `List` in this
    /// format instead of tables.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll approve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ApproveArgs {
    /// The cluster: its registration request's name, its id, or its name.
    pub cluster: String,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll deny`.
#[derive(Clone, Debug, clap::Args)]
pub struct DenyArgs {
    /// The cluster: its registration request's name, its id, or its name.
    pub cluster: String,
    /// Why the cluster is refused; its agent is told.
    #[arg(long)]
    pub reason: String,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll status`.
#[derive(Clone, Debug, clap::Args)]
pub struct StatusArgs {
    /// The Subscription's name.
    pub subscription: String,
    /// The Subscription's namespace; defaults to the kubeconfig context's namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Print the Subscription and its Descriptions as a `List` in this format instead of tables.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_follow_the_subcommand_as_kubectl_passes_them() {
        let cli = Cli::try_parse_from([
            "kubectl-atoll",
            "status",
            "web",
            "-n",
            "shop",
            "-o",
            "yaml",
            "--kubeconfig",
            "/tmp/k",
        ])
        .unwrap();
        let Command::Status(s) = cli.command else {
            panic!("not status: {cli:?}");
        };
        assert_eq!(s.subscription, "web");
        assert_eq!(s.namespace.as_deref(), Some("shop"));
        assert_eq!(s.output, Some(Output::Yaml));
        assert_eq!(s.client.kubeconfig.as_deref(), Some("/tmp/k".as_ref()));
    }

    #[test]
    fn deny_needs_a_reason() {
        assert!(Cli::try_parse_from(["kubectl-atoll", "deny", "edge"]).is_err());
        let cli = Cli::try_parse_from(["kubectl-atoll", "deny", "edge", "--reason", "no"]).unwrap();
        assert!(matches!(cli.command, Command::Deny(d) if d.reason == "no" && d.cluster == "edge"));
    }
}
