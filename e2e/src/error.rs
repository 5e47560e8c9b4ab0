//! The one error type of atoll-e2e.

use std::path::PathBuf;

/// Everything that can go wrong while starting, inspecting or stopping a local fleet. Each
/// message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary the fleet needs was not found.
    #[error(
        "locating binary `{name}`: not found in {dir}; build it with `cargo build -p {package}` \
         (or point ATOLL_BIN_DIR at the directory holding it)"
    )]
    LocateBinary {
        /// The binary's file name.
        name: String,
        /// The Cargo package that builds it.
        package: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// The real-tier binaries (`make k8s`) were not found.
    #[error(
        "locating the real-tier binaries: {missing} not found in {dir}; build them with \
         `make k8s` (or point ATOLL_K8S_BIN_DIR at the directory holding them)"
    )]
    LocateK8sBinaries {
        /// The missing files, comma-separated.
        missing: String,
        /// Where they were looked for.
        dir: PathBuf,
    },
    /// Making a real cluster's certificates or keys failed.
    #[error("making {what} of a real cluster: {message}")]
    Pki {
        /// Which certificate or key.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// The directory of the running executable could not be determined.
    #[error("finding the directory of the fleet executable: {0}; set ATOLL_BIN_DIR instead")]
    LocateSelf(std::io::Error),
    /// `kubectl` is not installed.
    #[error("running kubectl: `kubectl` is not on PATH; install kubectl (1.28 or newer)")]
    KubectlMissing,
    /// A kubectl command failed.
    #[error("kubectl {args} failed ({status}): {stderr}")]
    Kubectl {
        /// The arguments, joined by spaces.
        args: String,
        /// The exit status.
        status: String,
        /// What kubectl printed on stderr.
        stderr: String,
    },
    /// Creating a directory or file failed.
    #[error("creating {path}: {source}; check that the fleet directory is writable")]
    CreateFile {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Starting a process failed.
    #[error("starting {name} ({binary}): {source}")]
    Spawn {
        /// The fleet's name for the process, e.g. `child-1`.
        name: String,
        /// The binary.
        binary: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A process the fleet started exited while the fleet waited for it.
    #[error("{name} exited during start-up ({how}); its log {log} ends with:\n{tail}")]
    ProcessExited {
        /// The fleet's name for the process.
        name: String,
        /// How it ended (exit code or signal), as far as `/proc` still tells.
        how: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// Something did not happen in time.
    #[error("waiting for {what}: still not done after {seconds}s{hint}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the fleet waited.
        seconds: u64,
        /// Where to look next (starts with a separator, or is empty).
        hint: String,
    },
    /// Reading the fleet state file failed.
    #[error(
        "reading the fleet state {path}: {source}; is a fleet running in this directory? \
         (start one with `fleet up --dir ...`)"
    )]
    ReadState {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The fleet state file is not valid.
    #[error(
        "parsing the fleet state {path}: {source}; delete the file and stop leftover processes by hand"
    )]
    ParseState {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// Writing the fleet state file failed.
    #[error("writing the fleet state {path}: {source}")]
    WriteState {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A fleet is already running in the directory.
    #[error(
        "starting the fleet: {dir} already has a running fleet; run `fleet down --dir {dir}` first"
    )]
    AlreadyRunning {
        /// The fleet directory.
        dir: PathBuf,
    },
    /// Signalling a process failed.
    #[error("signalling process group {pid} with {signal}: {message}")]
    Signal {
        /// The process (group) id.
        pid: u32,
        /// The signal name.
        signal: String,
        /// What went wrong.
        message: String,
    },
    /// Loading a kubeconfig failed.
    #[error("loading kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done, e.g. `listing ManagedClusters in the parent`.
        action: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// Reading a running process's command line or environment (to restart it) failed.
    #[error(
        "reading the command line of {name} (pid {pid}): {source}; is it still running? \
         (`fleet status` shows which processes run)"
    )]
    ReadCommandLine {
        /// The fleet's name for the process.
        name: String,
        /// Its pid.
        pid: u32,
        /// The cause.
        source: std::io::Error,
    },
    /// A path could not be made absolute.
    #[error("resolving {path}: {source}")]
    ResolvePath {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `fleet down` could not stop every process (each is named on stderr).
    #[error("some processes could not be stopped; the state file was kept")]
    StopProcesses,
    /// A `helm` command failed.
    #[error("helm {args} failed ({status}): {stderr}")]
    RunHelm {
        /// The arguments, joined by spaces.
        args: String,
        /// The exit status (or `not started`).
        status: String,
        /// What helm printed on stderr.
        stderr: String,
    },
    /// Serving a local chart repository failed.
    #[error("serving the chart repository {dir} on 127.0.0.1: {source}")]
    ServeChartRepo {
        /// The directory to serve.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The local OCI registry did not start.
    #[error("starting the OCI registry (log {log}): {message}")]
    StartRegistry {
        /// Its log file.
        log: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A fault proxy could not listen.
    #[error("starting a fault proxy on {listen}: {source}")]
    StartProxy {
        /// The address it was to listen on.
        listen: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The request proxy could not relay a request (the client's connection is closed).
    #[error("the request proxy, {what}: {message}")]
    RelayRequest {
        /// The step that failed.
        what: &'static str,
        /// The cause.
        message: String,
    },
    /// A chaos run found its invariants broken once the faults stopped.
    #[error(
        "chaos run with seed {seed}: {count} invariant(s) violated after {seconds}s of \
         convergence (replay with CHAOS_SEED={seed}; logs in {logs}):\n{violations}"
    )]
    ChaosInvariants {
        /// The run's seed.
        seed: u64,
        /// How many violations.
        count: usize,
        /// How long the fleet was given to converge.
        seconds: u64,
        /// One violation per line.
        violations: String,
        /// The fleet's logs.
        logs: PathBuf,
    },
    /// Reading a file failed.
    #[error("reading {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a tokio runtime (of a children host) failed.
    #[error("starting a tokio runtime: {0}")]
    StartRuntime(#[source] std::io::Error),
    /// A children host could not start one of its children (devcluster or agent).
    #[error("starting {name} in the children host: {message}")]
    StartChild {
        /// The child, e.g. `child-7`.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// A system command a real node needs (`ip`, `nsenter`, `ctr`, `cc`, ...) failed.
    #[error("running `{command}` failed ({status}): {stderr}")]
    RunCommand {
        /// The command line, joined by spaces.
        command: String,
        /// The exit status (or why it did not start).
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// No free network for real nodes (bridge, addresses) could be taken.
    #[error(
        "allocating a real-node network under {dir}: {message}; stop other real-node runs or \
         remove stale directories there"
    )]
    AllocateNodeNetwork {
        /// The lock directory.
        dir: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Building an image for a real node (compiling its program, packing the archive) failed.
    #[error("building the image {image}: {message}")]
    BuildNodeImage {
        /// The image reference.
        image: String,
        /// What went wrong.
        message: String,
    },
    /// Writing a host sysctl failed.
    #[error("writing sysctl {name}={value}: {source}")]
    WriteSysctl {
        /// The sysctl, `kernel.panic`.
        name: String,
        /// The value.
        value: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The machine lacks what real nodes need (`fleet up --real-nodes`).
    #[error(
        "starting real nodes: this machine lacks {missing}; real nodes need root, containerd, \
         runc and the CNI plugins (`apt-get install containerd runc containernetworking-plugins`) \
         and kubelet and kube-proxy (`make k8s`)"
    )]
    RealNodePrerequisites {
        /// What is missing, comma-separated.
        missing: String,
    },
    /// Building atoll's images for the real nodes failed.
    #[error("building atoll's images from {bin_dir}: {message}")]
    BuildImages {
        /// The binaries' directory.
        bin_dir: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// atoll's pods did not all become Ready: which, and what they say.
    #[error("waiting for {what}: not ready after {seconds}s\n{report}")]
    PodsNotReady {
        /// What was waited for.
        what: String,
        /// How long.
        seconds: u64,
        /// Each unready pod: its phase and container states, its last events, its log's tail.
        report: String,
    },
    /// A command-line value is invalid.
    #[error("invalid {what}: {message}")]
    InvalidArgument {
        /// The argument.
        what: String,
        /// What is wrong and what is accepted.
        message: String,
    },
}

impl Error {
    /// A short, stable label for the kind of failure.
    pub fn label(&self) -> &'static str {
        match self {
            Error::LocateBinary { .. } => "locate_binary",
            Error::LocateK8sBinaries { .. } => "locate_k8s_binaries",
            Error::Pki { .. } => "pki",
            Error::LocateSelf(_) => "locate_self",
            Error::KubectlMissing => "kubectl_missing",
            Error::Kubectl { .. } => "kubectl",
            Error::CreateFile { .. } => "create_file",
            Error::Spawn { .. } => "spawn",
            Error::ProcessExited { .. } => "process_exited",
            Error::Timeout { .. } => "timeout",
            Error::ReadState { .. } => "read_state",
            Error::ParseState { .. } => "parse_state",
            Error::WriteState { .. } => "write_state",
            Error::AlreadyRunning { .. } => "already_running",
            Error::Signal { .. } => "signal",
            Error::ResolvePath { .. } => "resolve_path",
            Error::StopProcesses => "stop_processes",
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::Api { .. } => "api",
            Error::ReadCommandLine { .. } => "read_command_line",
            Error::RunHelm { .. } => "run_helm",
            Error::ServeChartRepo { .. } => "serve_chart_repo",
            Error::StartRegistry { .. } => "start_registry",
            Error::StartProxy { .. } => "start_proxy",
            Error::RelayRequest { .. } => "relay_request",
            Error::ChaosInvariants { .. } => "chaos_invariants",
            Error::ReadFile { .. } => "read_file",
            Error::StartRuntime(_) => "start_runtime",
            Error::StartChild { .. } => "start_child",
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::RunCommand { .. } => "run_command",
            Error::AllocateNodeNetwork { .. } => "allocate_node_network",
            Error::BuildNodeImage { .. } => "build_node_image",
            Error::WriteSysctl { .. } => "write_sysctl",
            Error::RealNodePrerequisites { .. } => "real_node_prerequisites",
            Error::BuildImages { .. } => "build_images",
            Error::PodsNotReady { .. } => "pods_not_ready",
        }
    }
}
