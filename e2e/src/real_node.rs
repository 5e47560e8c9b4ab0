//! One real Kubernetes node for a real-tier cluster (issue 40): containerd, kubelet and
//! kube-proxy in a network namespace of their own, pods on a CNI bridge inside it, images
//! without a registry (static programs packed into one-file OCI archives and imported with
//! `ctr`). The settings are the ones worked out by hand in docs/runs/2026-12-07-real-node.md.
//!
//! - [`network`]: the per-run network (host bridge, the node's namespace, addresses, routes).
//! - [`configs`]: containerd's, the CNI's, kubelet's and kube-proxy's files.
//! - [`host`]: commands, host sysctls, cgroups, mounts and processes to put back.
//!
//! The control plane has to be started for the node's network
//! ([`crate::real_tier::start_clusters_for`] with [`network::HostBridge::node_network`]).
//! Dropping a [`RealNode`] tears everything of it down (processes, pods, mounts under its
//! directory, cgroups, its namespace and route, the host sysctls kubelet changed), also when a
//! test panics.

pub mod configs;
pub mod host;
pub mod network;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atoll_images::oci;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use crate::Error;
use crate::process::{Launch, exited_error, is_running, poll_until, spawn};
use crate::real_tier::RealCluster;
use crate::state::{ProcessRecord, Role};
use configs::{KubeletSettings, NodeDirs, PAUSE_IMAGE};
use host::run;
use network::{HostBridge, NodeNetns};

/// The source of the pause program every pod sandbox runs.
pub const PAUSE_SOURCE: &str = include_str!("real_node/pause.c");

/// The containerd namespace of the CRI plugin.
const CRI_NAMESPACE: &str = "k8s.io";

/// Where kubelet links every container's log, whatever its `podLogsDir` (hard-coded upstream).
const CONTAINER_LOG_LINKS: &str = "/var/log/containers";

/// What a real node needs on this machine that is missing (empty when nothing is): root, the
/// tools on `PATH`, the CNI plugins, and kubelet and kube-proxy in `bin_dir` (`make k8s`).
pub fn missing_prerequisites(bin_dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    if !host::is_root() {
        missing.push("root".to_string());
    }
    for tool in [
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
        "ip",
        "nsenter",
        "cc",
        "iptables",
        "umount",
    ] {
        if !host::on_path(tool) {
            missing.push(tool.to_string());
        }
    }
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        let path = Path::new("/usr/lib/cni").join(plugin);
        if !path.is_file() {
            missing.push(path.display().to_string());
        }
    }
    for binary in ["kubelet", "kube-proxy"] {
        let path = bin_dir.join(binary);
        if !path.is_file() {
            missing.push(path.display().to_string());
        }
    }
    missing
}

/// The OCI architecture name of this machine.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Compiles the C program `source` statically (`cc -static -O2 -s`) to `/<program>` and packs
/// it as the one-file image `reference` (the program is its entrypoint); the archive's path,
/// in `dir`, for `ctr images import`.
pub fn build_program_image(
    source: &str,
    program: &str,
    reference: &str,
    dir: &Path,
) -> Result<PathBuf, Error> {
    let err = |message: String| Error::BuildNodeImage {
        image: reference.to_string(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let c_file = dir.join(format!("{program}.c"));
    let binary = dir.join(program);
    std::fs::write(&c_file, source).map_err(|e| err(e.to_string()))?;
    run(
        "cc",
        &[
            "-static",
            "-O2",
            "-s",
            "-o",
            &binary.to_string_lossy(),
            &c_file.to_string_lossy(),
        ],
    )
    .map_err(|e| err(e.to_string()))?;
    let bytes = std::fs::read(&binary).map_err(|e| err(e.to_string()))?;
    let image = program_image(program, reference, bytes).map_err(|e| err(e.to_string()))?;
    let archive = oci::archive(&image).map_err(|e| err(e.to_string()))?;
    let path = dir.join(format!("{program}.tar"));
    std::fs::write(&path, archive).map_err(|e| err(e.to_string()))?;
    Ok(path)
}

/// The image `reference` of one layer holding `binary` at `/<program>`, its entrypoint.
fn program_image(
    program: &str,
    reference: &str,
    binary: Vec<u8>,
) -> Result<oci::Image, atoll_images::Error> {
    let layer = oci::layer(vec![oci::file(program, 0o755, (0, 0), binary)])?;
    let config = serde_json::json!({
        "architecture": oci_architecture(),
        "os": "linux",
        "config": {"Entrypoint": [format!("/{program}")], "Env": ["PATH=/"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created_by": format!("atoll-e2e real_node: static {program}")}],
    });
    let config = oci::Blob::of(config.to_string().into_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::MANIFEST,
        "config": config.descriptor(oci::CONFIG),
        "layers": [layer.blob.descriptor(oci::LAYER)],
    });
    Ok(oci::Image {
        reference: reference.to_string(),
        config,
        manifest: oci::Blob::of(manifest.to_string().into_bytes()),
        layers: vec![layer],
    })
}

/// What a node joins and with what.
#[derive(Clone, Copy, Debug)]
pub struct JoinSpec<'a> {
    /// The cluster, started for `bridge`'s network.
    pub cluster: &'a RealCluster,
    /// The network.
    pub bridge: &'a HostBridge,
    /// The node's number on the network, from 1.
    pub node: u8,
    /// The node's directory (created).
    pub dir: &'a Path,
    /// Where kubelet and kube-proxy are (`make k8s`).
    pub bin_dir: &'a Path,
    /// Image archives to import besides the pause image.
    pub images: &'a [PathBuf],
    /// How long containerd may take to answer.
    pub timeout: Duration,
}

pub use crate::state::NodeRecord;

impl NodeRecord {
    /// `ctr <args>` against the node's containerd, in the CRI namespace (`images tag`, `tasks
    /// ls`).
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        ctr(
            &NodeDirs {
                root: self.dir.clone(),
            },
            args,
        )
    }
}

/// `ctr` against the containerd of the node in `dirs`, in the CRI namespace.
fn ctr(dirs: &NodeDirs, args: &[&str]) -> Result<String, Error> {
    let socket = dirs.socket().display().to_string();
    let mut all = vec!["-a", socket.as_str(), "-n", CRI_NAMESPACE];
    all.extend_from_slice(args);
    run("ctr", &all)
}

/// One running real node; dropping it tears it down.
#[derive(Debug)]
pub struct RealNode {
    name: String,
    dirs: NodeDirs,
    netns: NodeNetns,
    cgroups: Vec<PathBuf>,
    processes: Vec<ProcessRecord>,
    host_sysctls: Vec<(String, String)>,
    had_container_log_links: bool,
    torn_down: bool,
}

impl RealNode {
    /// Starts node `spec.node`: its namespace, cgroup root, configuration, containerd (with
    /// the images), kubelet and kube-proxy. Does not wait for the Node to be Ready (see
    /// [`RealNode::wait_ready`]). What was started is torn down again when this fails.
    pub async fn join(spec: JoinSpec<'_>) -> Result<RealNode, Error> {
        let index = spec.bridge.index();
        let name = network::node_name(index, spec.node);
        let mut node = RealNode {
            cgroups: host::cgroup_roots(&name),
            name,
            dirs: NodeDirs {
                root: spec.dir.to_path_buf(),
            },
            netns: NodeNetns::new(index, spec.node),
            processes: Vec::new(),
            host_sysctls: Vec::new(),
            had_container_log_links: Path::new(CONTAINER_LOG_LINKS).exists(),
            torn_down: false,
        };
        node.host_sysctls = host::host_sysctls_before(&network::sysctl_record())?;
        node.netns.create()?;
        host::create_cgroup_roots(&node.cgroups)?;
        node.write_configs(&spec)?;
        node.start_containerd(&spec).await?;
        node.start_kubelet_and_kube_proxy(&spec)?;
        Ok(node)
    }

    /// Leaves the node running when this value is dropped; what [`RealNode::adopt`] needs to
    /// tear it down later, from any process.
    pub fn detach(mut self) -> NodeRecord {
        let record = NodeRecord {
            name: self.name.clone(),
            network: self.netns.index(),
            node: self.netns.node(),
            dir: self.dirs.root.clone(),
            cgroups: self.cgroups.clone(),
            processes: self.processes.clone(),
            host_sysctls: self.host_sysctls.clone(),
            had_container_log_links: self.had_container_log_links,
        };
        self.torn_down = true;
        self.netns.forget();
        record
    }

    /// The node [`RealNode::detach`] left running: dropping it (or
    /// [`RealNode::tear_down`]) tears it down.
    pub fn adopt(record: NodeRecord) -> RealNode {
        RealNode {
            netns: NodeNetns::existing(record.network, record.node),
            name: record.name,
            dirs: NodeDirs { root: record.dir },
            cgroups: record.cgroups,
            processes: record.processes,
            host_sysctls: record.host_sysctls,
            had_container_log_links: record.had_container_log_links,
            torn_down: false,
        }
    }

    /// The Node's name (also its namespace's and cgroup root's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dirs.root
    }

    /// Its network namespace's name.
    pub fn netns(&self) -> String {
        self.netns.name()
    }

    /// Its cgroup root in every hierarchy.
    pub fn cgroup_roots(&self) -> &[PathBuf] {
        &self.cgroups
    }

    /// The host's own values of the sysctls kubelet changes.
    pub fn host_sysctls(&self) -> &[(String, String)] {
        &self.host_sysctls
    }

    /// The resident set size (KiB) of containerd, kubelet and kube-proxy.
    pub fn rss_kib(&self) -> Vec<(String, Option<u64>)> {
        self.processes
            .iter()
            .map(|p| (p.name.clone(), host::rss_kib(p.pid)))
            .collect()
    }

    fn write_configs(&self, spec: &JoinSpec<'_>) -> Result<(), Error> {
        let dirs = &self.dirs;
        let files = &spec.cluster.files;
        let index = spec.bridge.index();
        let host = spec.bridge.host_address();
        let port = spec.cluster.ports.apiserver;
        let ca = files.ca_cert();
        let (kubelet_cert, kubelet_key) = files.kubelet_client(&self.name);
        let (proxy_cert, proxy_key) = files.kube_proxy_client();
        let pod_cidr = network::pod_cidr(index, spec.node);
        let cgroup_root = format!("/{}", self.name);
        let kubelet = configs::kubelet_config(&KubeletSettings {
            dirs,
            address: self.netns.address(),
            cgroup_root: &cgroup_root,
            client_ca: &ca,
            pod_cidr: &pod_cidr,
        });
        let pod_base = network::pod_range(index, spec.node);
        let cluster_cidr = network::network_pod_cidr(index);
        let writes = [
            (
                dirs.file("containerd.toml"),
                configs::containerd_config(dirs),
            ),
            (
                dirs.cni_conf().join("10-atoll.conflist"),
                configs::cni_conflist(dirs, pod_base),
            ),
            (dirs.file("kubelet-config.yaml"), kubelet),
            (
                dirs.file("kubelet.kubeconfig"),
                configs::file_kubeconfig(host, port, &ca, &kubelet_cert, &kubelet_key),
            ),
            (
                dirs.file("kube-proxy-config.yaml"),
                configs::kube_proxy_config(dirs, &self.name, &cluster_cidr),
            ),
            (
                dirs.file("kube-proxy.kubeconfig"),
                configs::file_kubeconfig(host, port, &ca, &proxy_cert, &proxy_key),
            ),
        ];
        for dir in [dirs.containerd(), dirs.pod_logs(), dirs.logs()] {
            create_dir(&dir)?;
        }
        for (path, text) in writes {
            write_text(&path, &text)?;
        }
        Ok(())
    }

    /// Starts `binary args` inside the node's namespace (`nsenter --net`, which execs, so the
    /// recorded pid is the daemon's), its output in `logs/<component>.log`.
    fn start_in_netns(
        &mut self,
        component: &str,
        binary: &Path,
        args: Vec<String>,
    ) -> Result<ProcessRecord, Error> {
        let name = format!("{}-{component}", self.name);
        let mut all = vec![
            format!("--net={}", self.netns.path().display()),
            binary.display().to_string(),
        ];
        all.extend(args);
        let record = spawn(Launch {
            name: &name,
            role: Role::RealNode,
            binary: Path::new("nsenter"),
            args: all,
            log: self.dirs.logs().join(format!("{component}.log")),
            admin: None,
        })?;
        self.processes.push(record.clone());
        Ok(record)
    }

    async fn start_containerd(&mut self, spec: &JoinSpec<'_>) -> Result<(), Error> {
        let config = self.dirs.file("containerd.toml").display().to_string();
        let record = self.start_in_netns(
            "containerd",
            Path::new("containerd"),
            vec!["--config".into(), config],
        )?;
        let socket = self.dirs.socket();
        let what = format!(
            "containerd of {} to answer on {}",
            self.name,
            socket.display()
        );
        let hint = format!("; see {}", record.log.display());
        poll_until(spec.timeout, &what, &hint, || {
            let answers = socket.exists() && self.ctr(&["version"]).is_ok();
            let exited = (!answers && !is_running(&record)).then(|| exited_error(&record));
            async move { exited.map_or(Ok(answers), Err) }
        })
        .await?;
        let pause = build_program_image(PAUSE_SOURCE, "pause", PAUSE_IMAGE, &self.dirs.images())?;
        for archive in std::iter::once(&pause).chain(spec.images) {
            self.ctr(&["images", "import", &archive.to_string_lossy()])?;
        }
        Ok(())
    }

    fn start_kubelet_and_kube_proxy(&mut self, spec: &JoinSpec<'_>) -> Result<(), Error> {
        let kubelet_args = configs::kubelet_args(&self.dirs, &self.name, self.netns.address());
        self.start_in_netns("kubelet", &spec.bin_dir.join("kubelet"), kubelet_args)?;
        let proxy_config = self.dirs.file("kube-proxy-config.yaml");
        self.start_in_netns(
            "kube-proxy",
            &spec.bin_dir.join("kube-proxy"),
            vec![
                format!("--config={}", proxy_config.display()),
                "--v=2".into(),
            ],
        )?;
        Ok(())
    }

    /// `ctr` against the node's containerd, in the CRI namespace.
    fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        ctr(&self.dirs, args)
    }

    /// Waits until the Node reports Ready, then puts the host sysctls kubelet changed at start
    /// back; how long it took from the call. Fails early when kubelet exits.
    pub async fn wait_ready(&self, client: &Client, timeout: Duration) -> Result<Duration, Error> {
        let started = Instant::now();
        let nodes = Api::<Node>::all(client.clone());
        let kubelet = self.process("kubelet");
        let what = format!("Node {} to be Ready", self.name);
        let hint = format!("; see {}", self.dirs.logs().display());
        poll_until(timeout, &what, &hint, || {
            let nodes = nodes.clone();
            let name = self.name.clone();
            let exited = kubelet.filter(|k| !is_running(k)).map(exited_error);
            async move {
                if let Some(e) = exited {
                    return Err(e);
                }
                Ok(nodes
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|n| is_ready(&n)))
            }
        })
        .await?;
        let took = started.elapsed();
        host::restore_sysctls(&self.host_sysctls)?;
        Ok(took)
    }

    /// The process of `component` (`containerd`, `kubelet`, `kube-proxy`).
    pub fn process(&self, component: &str) -> Option<&ProcessRecord> {
        let name = format!("{}-{component}", self.name);
        self.processes.iter().find(|p| p.name == name)
    }

    /// Stops and removes everything of the node; what could not be undone, in words (empty when
    /// all went). Runs once; [`Drop`] calls it.
    pub fn tear_down(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        let mut problems = Vec::new();
        self.stop_component("kube-proxy", &mut problems);
        self.stop_component("kubelet", &mut problems);
        let sandbox_netns = self.remove_containers();
        self.stop_component("containerd", &mut problems);
        self.kill_leftover_processes();
        remove_netns_files(&sandbox_netns, &mut problems);
        for mount in host::unmount_under(&self.dirs.root) {
            problems.push(format!("{} is still mounted", mount.display()));
        }
        self.remove_container_log_links();
        for cgroup in host::remove_cgroups(&self.cgroups) {
            problems.push(format!("cgroup {} is still there", cgroup.display()));
        }
        problems.extend(self.netns.remove());
        if let Err(e) = host::restore_sysctls(&self.host_sysctls) {
            problems.push(e.to_string());
        }
        problems
    }

    fn stop_component(&self, component: &str, problems: &mut Vec<String>) {
        if let Some(record) = self.process(component)
            && !host::stop_blocking(record, Duration::from_secs(5))
        {
            problems.push(format!("{} (pid {}) did not stop", record.name, record.pid));
        }
    }

    /// Kills and deletes every task and container of the CRI namespace while containerd runs;
    /// the network namespaces of the pod sandboxes, which are left to remove.
    fn remove_containers(&self) -> Vec<PathBuf> {
        if !self.process("containerd").is_some_and(is_running) {
            return Vec::new();
        }
        let containers = self.ctr_ids(&["containers", "ls", "-q"]);
        let netns: Vec<PathBuf> = containers
            .iter()
            .filter_map(|id| self.ctr(&["containers", "info", id]).ok())
            .filter_map(|info| sandbox_netns(&info))
            .collect();
        for task in self.ctr_ids(&["tasks", "ls", "-q"]) {
            let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", &task]);
        }
        for task in self.ctr_ids(&["tasks", "ls", "-q"]) {
            let _ = self.ctr(&["tasks", "delete", "-f", &task]);
        }
        for container in containers {
            let _ = self.ctr(&["containers", "delete", &container]);
        }
        netns
    }

    fn ctr_ids(&self, args: &[&str]) -> Vec<String> {
        self.ctr(args)
            .map(|out| {
                out.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kills what is left: shims of the node's containerd (found by its socket on their command
    /// line) and any process in the node's cgroups.
    fn kill_leftover_processes(&self) {
        let socket = self.dirs.socket().display().to_string();
        for pid in host::pids_with_command_line(&socket) {
            host::kill_pid(pid);
        }
        for pid in host::pids_in_cgroups(&self.cgroups) {
            host::kill_pid(pid);
        }
    }

    /// Removes the links kubelet made in `/var/log/containers` to the node's pod logs, and the
    /// directory when kubelet created it and it is empty now.
    fn remove_container_log_links(&self) {
        let Ok(entries) = std::fs::read_dir(CONTAINER_LOG_LINKS) else {
            return;
        };
        for entry in entries.flatten() {
            let ours =
                std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(&self.dirs.root));
            if ours {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        if !self.had_container_log_links {
            let _ = std::fs::remove_dir(CONTAINER_LOG_LINKS);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        for problem in self.tear_down() {
            eprintln!("tearing down real node {}: {problem}", self.name);
        }
    }
}

/// Whether the Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The network namespace file of a pod sandbox, from `ctr containers info` JSON (an app
/// container joins its sandbox's by `/proc/<pid>/ns/net`: nothing to remove).
fn sandbox_netns(info: &str) -> Option<PathBuf> {
    let info: serde_json::Value = serde_json::from_str(info).ok()?;
    info["Spec"]["linux"]["namespaces"]
        .as_array()?
        .iter()
        .find(|ns| ns["type"] == "network")?["path"]
        .as_str()
        .filter(|p| p.starts_with("/var/run/netns/") || p.starts_with("/run/netns/"))
        .map(PathBuf::from)
}

/// Unmounts and removes the pod sandboxes' network namespace files.
fn remove_netns_files(files: &[PathBuf], problems: &mut Vec<String>) {
    for file in files {
        let path = file.to_string_lossy();
        let _ = run("umount", &[&path]);
        if let Err(e) = std::fs::remove_file(file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            problems.push(format!("removing {}: {e}", file.display()));
        }
    }
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateFile {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_text(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        create_dir(parent)?;
    }
    std::fs::write(path, text).map_err(|source| Error::CreateFile {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_netns_is_read_from_the_container_spec() {
        let info = r#"{"ID":"abc","Spec":{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/var/run/netns/cni-1"}]}}}"#;
        assert_eq!(
            sandbox_netns(info),
            Some(PathBuf::from("/var/run/netns/cni-1"))
        );
        let app = r#"{"ID":"def","Spec":{"linux":{"namespaces":[{"type":"network","path":"/proc/7/ns/net"}]}}}"#;
        assert_eq!(sandbox_netns(app), None);
        assert_eq!(sandbox_netns("{}"), None);
    }

    #[test]
    fn a_program_image_runs_its_one_file() {
        let image = program_image("pause", "localhost/p:1", b"ELF".to_vec()).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&image.config.bytes).unwrap();
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/pause"])
        );
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            serde_json::json!(image.layers[0].diff_id)
        );
    }
}
