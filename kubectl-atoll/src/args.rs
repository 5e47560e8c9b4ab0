//! The command line: `kubectl atoll <subcommand>`. kubectl runs this binary with every argument
//! after `atoll`, so each subcommand takes the client flags (`--kubeconfig`, `--context`) itself.

use std::path::PathBuf;

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
        kubectl atoll status web -n shop\n  \
        kubectl atoll describe cluster edge-1\n  \
        kubectl atoll apply -f web.yaml\n  \
        kubectl atoll get manifests\n  \
        kubectl atoll plan -f web-subscription.yaml\n  \
        kubectl atoll completion bash"
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
        A cluster that is registered already and asked to register again with a bootstrap \
        token (`kubectl atoll clusters` lists it as ReRegistration) is decided apart: \
        approving sets status.reRegistration.result instead, and when the cluster's agent \
        still holds a valid token it takes --replace, because the requester then gets the \
        cluster and the current agent is locked out.\n\n\
        Examples:\n  \
        kubectl atoll approve edge-1\n  \
        kubectl atoll approve clusternet-3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10\n  \
        kubectl atoll approve edge-1 --replace")]
    Approve(ApproveArgs),
    /// Deny a cluster's registration; its agent is refused with the reason given.
    #[command(
        after_help = "CLUSTER is found as for `approve`. This sets the request's \
        status.result to Denied and status.errorMessage to the reason; a cluster that was \
        registered already loses its connection to the hub. When a request to register the \
        cluster again waits, only that request is denied and the registration stays.\n\n\
        Examples:\n  \
        kubectl atoll deny edge-2 --reason \"not one of our sites\""
    )]
    Deny(DenyArgs),
    /// Show where a Subscription runs: its conditions, its clusters with their Description's
    /// phase, and the replicas of each feed in each cluster.
    #[command(after_help = "Examples:\n  \
        kubectl atoll status web\n  \
        kubectl atoll status web -n shop -o yaml\n  \
        kubectl atoll status web -n shop --watch")]
    Status(StatusArgs),
    /// Show one object in detail, as `kubectl describe` does.
    #[command(subcommand)]
    Describe(Describe),
    /// Store objects as Manifests in `clusternet-reserved`, as Clusternet's shadow API does, so
    /// that Subscriptions can distribute them.
    #[command(after_help = "Each object becomes the Manifest \
        <resource-plural>.<namespace>.<name> (<resource-plural>.<name> when cluster-scoped) \
        with the labels apps.clusternet.io/config.{group,version,kind,name,namespace}; it is \
        server-side applied with field manager kubectl-atoll. Every input is read and every \
        kind looked up before anything is written.\n\n\
        Examples:\n  \
        kubectl atoll apply -f web.yaml\n  \
        kubectl atoll apply -f manifests/\n  \
        helm template web ./chart | kubectl atoll apply -f -\n  \
        kubectl atoll apply -k overlays/prod")]
    Apply(ApplyArgs),
    /// Delete the Manifests of the objects in files.
    #[command(after_help = "Examples:\n  \
        kubectl atoll delete -f web.yaml")]
    Delete(DeleteArgs),
    /// List atoll objects.
    #[command(subcommand)]
    Get(Get),
    /// Show what the scheduler would do with a Subscription before it is applied: the clusters
    /// it would bind, the replicas of each (Dividing), each cluster's rendered objects, and the
    /// conditions it would set. Nothing is written.
    #[command(
        after_help = "The plan is the scheduler's own (atoll_scheduler's pure planner), \
        computed from what the parent holds now: the registered ManagedClusters (approved by \
        the hub, not being deleted), the Globalizations and Localizations, the FeedGrants, and \
        each feed (its Manifest in clusternet-reserved, else the live object). When the \
        Subscription exists already, its current binding is taken into account as the \
        scheduler does.\n\n\
        Examples:\n  \
        kubectl atoll plan -f web-subscription.yaml\n  \
        kubectl atoll plan -f web-subscription.yaml --show-objects\n  \
        kubectl atoll plan -f web-subscription.yaml -o yaml"
    )]
    Plan(PlanArgs),
    /// Print a shell completion script for kubectl-atoll.
    #[command(
        after_help = "The scripts complete the kubectl-atoll command. kubectl (1.26 and \
        later) completes `kubectl atoll ...` only through an executable named \
        kubectl_complete-atoll on PATH: the README shows how to make one from the bash \
        script.\n\n\
        Examples:\n  \
        source <(kubectl atoll completion bash)\n  \
        kubectl atoll completion zsh > \"${fpath[1]}/_kubectl-atoll\"\n  \
        kubectl atoll completion fish > ~/.config/fish/completions/kubectl-atoll.fish"
    )]
    Completion(CompletionArgs),
}

/// Arguments of `kubectl atoll plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// The Subscription (YAML or JSON, one object), or `-` for stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE|-")]
    pub filename: String,
    /// The Subscription's namespace when it names none; defaults to the kubeconfig context's
    /// namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// After the tables, print each cluster's rendered objects as YAML documents.
    #[arg(long)]
    pub show_objects: bool,
    /// Print the Subscription with its planned status and the Description of each cluster as
    /// a `List` in this format instead of tables.
    #[arg(short = 'o', long, value_enum, conflicts_with = "show_objects")]
    pub output: Option<Output>,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll completion`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells `completion` writes scripts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// Bash.
    Bash,
    /// Zsh.
    Zsh,
    /// Fish.
    Fish,
}

impl Shell {
    /// The generator of `clap_complete` for this shell.
    pub fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// What `kubectl atoll get` lists.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Get {
    /// The Manifests in `clusternet-reserved`, with the kind, namespace and name of the object
    /// each holds.
    #[command(
        visible_alias = "manifest",
        after_help = "Examples:\n  \
        kubectl atoll get manifests\n  \
        kubectl atoll get manifests -o yaml"
    )]
    Manifests(GetManifestsArgs),
}

/// Where the objects of `apply` and `delete` come from.
#[derive(Clone, Debug, clap::Args)]
pub struct InputArgs {
    /// A file (YAML or JSON, one or more documents), a directory (its .yaml, .yml and .json
    /// files) or `-` for stdin; may be given several times.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required_unless_present = "kustomize"
    )]
    pub filename: Vec<String>,
    /// A kustomization directory: the objects `kubectl kustomize DIR` prints.
    #[arg(short = 'k', long, value_name = "DIR", conflicts_with = "filename")]
    pub kustomize: Option<PathBuf>,
    /// The namespace of namespaced objects that name none; defaults to the kubeconfig
    /// context's namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// Arguments of `kubectl atoll apply`.
#[derive(Clone, Debug, clap::Args)]
pub struct ApplyArgs {
    /// The objects to store.
    #[command(flatten)]
    pub input: InputArgs,
    /// The field manager the Manifests are applied as. Default: `kubectl-atoll:` and your user
    /// name as the parent's API server knows it (SelfSubjectReview), or `kubectl-atoll` where
    /// the API server does not say, so that two users never take each other's fields unawares.
    #[arg(long)]
    pub field_manager: Option<String>,
    /// Take over the fields another field manager (another user) set in a Manifest, as
    /// `kubectl apply --server-side --force-conflicts` does; without it, such an apply fails
    /// and names that manager.
    #[arg(long)]
    pub force_conflicts: bool,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll delete`.
#[derive(Clone, Debug, clap::Args)]
pub struct DeleteArgs {
    /// The objects whose Manifests to delete.
    #[command(flatten)]
    pub input: InputArgs,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `kubectl atoll get manifests`.
#[derive(Clone, Debug, clap::Args)]
pub struct GetManifestsArgs {
    /// Print the Manifests as a `List` in this format instead of a table.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// What `kubectl atoll describe` shows.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Describe {
    /// A ManagedCluster: its id, namespace, conditions, version, nodes, allocatable, labels,
    /// taints and last heartbeat, the Descriptions it receives with their objects, and the
    /// Events about it.
    #[command(
        visible_aliases = ["clusters", "managedcluster", "mcls"],
        after_help = "CLUSTER is the ManagedCluster's name or its cluster id.\n\n\
        Examples:\n  \
        kubectl atoll describe cluster edge-1\n  \
        kubectl atoll describe cluster 3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10"
    )]
    Cluster(DescribeClusterArgs),
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
    /// Approve a request to register the cluster again even though its agent holds a valid
    /// token: the requester gets the cluster and the current agent is locked out.
    #[arg(long)]
    pub replace: bool,
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
    /// After the first page, print it again (after a blank line) whenever the Subscription or
    /// one of its Descriptions changes, until interrupted (Ctrl-C).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How to reach the parent cluster.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `kubectl atoll describe cluster`.
#[derive(Clone, Debug, clap::Args)]
pub struct DescribeClusterArgs {
    /// The ManagedCluster's name or cluster id.
    pub cluster: String,
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
        assert!(!s.watch);
        let cli = Cli::try_parse_from(["kubectl-atoll", "status", "web", "-w"]).unwrap();
        assert!(matches!(cli.command, Command::Status(s) if s.watch));
    }

    #[test]
    fn describe_takes_the_kind_then_the_name() {
        let cli = Cli::try_parse_from([
            "kubectl-atoll",
            "describe",
            "mcls",
            "edge",
            "--context",
            "p",
        ])
        .unwrap();
        let Command::Describe(Describe::Cluster(d)) = cli.command else {
            panic!("not describe cluster: {cli:?}");
        };
        assert_eq!(d.cluster, "edge");
        assert!(Cli::try_parse_from(["kubectl-atoll", "describe", "cluster"]).is_err());
    }

    #[test]
    fn apply_takes_files_or_a_kustomization_but_not_both() {
        let cli =
            Cli::try_parse_from(["kubectl-atoll", "apply", "-f", "a.yaml", "-f", "-"]).unwrap();
        let Command::Apply(a) = cli.command else {
            panic!("not apply: {cli:?}");
        };
        assert_eq!(a.input.filename, ["a.yaml", "-"]);
        let cli = Cli::try_parse_from(["kubectl-atoll", "delete", "-k", "dir"]).unwrap();
        assert!(matches!(cli.command, Command::Delete(d) if d.input.kustomize.is_some()));
        assert!(Cli::try_parse_from(["kubectl-atoll", "apply"]).is_err());
        assert!(Cli::try_parse_from(["kubectl-atoll", "apply", "-f", "a", "-k", "b"]).is_err());
    }

    #[test]
    fn plan_takes_one_file_and_objects_or_an_output_format() {
        let cli = Cli::try_parse_from(["kubectl-atoll", "plan", "-f", "s.yaml", "--show-objects"])
            .unwrap();
        let Command::Plan(p) = cli.command else {
            panic!("not plan: {cli:?}");
        };
        assert_eq!(p.filename, "s.yaml");
        assert!(p.show_objects && p.output.is_none());
        assert!(Cli::try_parse_from(["kubectl-atoll", "plan"]).is_err());
        let both = [
            "kubectl-atoll",
            "plan",
            "-f",
            "s",
            "-o",
            "yaml",
            "--show-objects",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn completion_knows_bash_zsh_and_fish() {
        for (name, shell) in [
            ("bash", Shell::Bash),
            ("zsh", Shell::Zsh),
            ("fish", Shell::Fish),
        ] {
            let cli = Cli::try_parse_from(["kubectl-atoll", "completion", name]).unwrap();
            assert!(matches!(cli.command, Command::Completion(c) if c.shell == shell));
        }
        assert!(Cli::try_parse_from(["kubectl-atoll", "completion", "tcsh"]).is_err());
    }

    #[test]
    fn deny_needs_a_reason() {
        assert!(Cli::try_parse_from(["kubectl-atoll", "deny", "edge"]).is_err());
        let cli = Cli::try_parse_from(["kubectl-atoll", "deny", "edge", "--reason", "no"]).unwrap();
        assert!(matches!(cli.command, Command::Deny(d) if d.reason == "no" && d.cluster == "edge"));
    }
}
