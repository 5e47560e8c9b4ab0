//! The fleet state file (`D/fleet.json`): every process the fleet started, so that `fleet down`
//! and `fleet status` find them from another invocation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;

/// What a process is in the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The parent's API server (devcluster, or kube-apiserver on the real tier).
    Parent,
    /// A child's API server.
    Child,
    /// A real cluster's etcd.
    Etcd,
    /// A real cluster's other control-plane processes (kube-controller-manager,
    /// kube-scheduler, kwok).
    ControlPlane,
    /// The scheduler.
    Scheduler,
    /// The hub.
    Hub,
    /// An agent.
    Agent,
    /// A children host (`fleet-children`): the devclusters and agents of many children in one
    /// process.
    #[serde(rename = "children-host")]
    ChildrenHost,
    /// A real node's containerd, kubelet or kube-proxy (see [`crate::real_node`]).
    #[serde(rename = "real-node")]
    RealNode,
}

/// One process the fleet started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// The fleet's name for it: `parent`, `child-1`, `scheduler`, `hub`, `agent-child-1`.
    pub name: String,
    /// What it is.
    pub role: Role,
    /// Process id; also its process-group id (each process leads its own group).
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so that a reused pid
    /// is never signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// Its log file (stdout and stderr).
    pub log: PathBuf,
    /// The admin server address (`/healthz`, `/readyz`, `/metrics`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
    /// The binary and its arguments, so that `fleet restart` can start a crashed process again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

/// A child cluster of the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRecord {
    /// The ManagedCluster name.
    pub name: String,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
    /// The labels its agent registers.
    pub labels: BTreeMap<String, String>,
}

/// The whole state of a fleet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetState {
    /// What the clusters are made of.
    #[serde(default)]
    pub backend: crate::plan::Backend,
    /// The parent's kubeconfig.
    pub parent_kubeconfig: PathBuf,
    /// The children.
    pub children: Vec<ChildRecord>,
    /// The hub's gRPC URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_url: Option<String>,
    /// The bootstrap token's id (the token itself is in `D/bootstrap-token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token_id: Option<String>,
    /// Every process started, in start order.
    pub processes: Vec<ProcessRecord>,
    /// The real nodes, when atoll runs as pods on them (`fleet up --real-nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_nodes: Option<RealNodes>,
}

/// The real nodes of a fleet and the network they share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealNodes {
    /// The network's index (its bridge `atl<index>`).
    pub network: u8,
    /// The parent's node first, then each child's.
    pub nodes: Vec<NodeRecord>,
}

/// What tearing a node down needs, for a fleet whose nodes outlive the process that started
/// them (`fleet up`, then `fleet down`): see `RealNode::detach` and `RealNode::adopt` (`crate::real_node`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The Node's name.
    pub name: String,
    /// Its network's index.
    pub network: u8,
    /// Its number on the network.
    pub node: u8,
    /// Its directory.
    pub dir: PathBuf,
    /// Its cgroup roots.
    pub cgroups: Vec<PathBuf>,
    /// containerd, kubelet and kube-proxy.
    pub processes: Vec<ProcessRecord>,
    /// The host's own values of the sysctls kubelet changes.
    pub host_sysctls: Vec<(String, String)>,
    /// Whether `/var/log/containers` was there before the node.
    pub had_container_log_links: bool,
}

impl FleetState {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<FleetState, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadState {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| Error::ParseState {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes `path` atomically (a temporary file renamed over it).
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let write_err = |source| Error::WriteState {
            path: path.to_path_buf(),
            source,
        };
        let text =
            serde_json::to_string_pretty(self).map_err(|e| write_err(std::io::Error::other(e)))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(write_err)?;
        std::fs::rename(&tmp, path).map_err(write_err)
    }

    /// The process named `name`, also a real node's (`<node>-containerd`, `<node>-kubelet`,
    /// `<node>-kube-proxy`).
    pub fn process(&self, name: &str) -> Option<&ProcessRecord> {
        self.processes
            .iter()
            .chain(self.node_processes())
            .find(|p| p.name == name)
    }

    /// The same, to change it (a process started again).
    pub fn process_mut(&mut self, name: &str) -> Option<&mut ProcessRecord> {
        let nodes = self.real_nodes.iter_mut().flat_map(|r| &mut r.nodes);
        self.processes
            .iter_mut()
            .chain(nodes.flat_map(|n| &mut n.processes))
            .find(|p| p.name == name)
    }

    /// The real nodes' containerd, kubelet and kube-proxy processes.
    pub fn node_processes(&self) -> impl Iterator<Item = &ProcessRecord> {
        self.real_nodes
            .iter()
            .flat_map(|r| &r.nodes)
            .flat_map(|n| &n.processes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FleetState {
        FleetState {
            backend: crate::plan::Backend::Kube,
            parent_kubeconfig: "/f/parent.kubeconfig".into(),
            children: vec![ChildRecord {
                name: "child-1".into(),
                kubeconfig: "/f/child-1.kubeconfig".into(),
                labels: BTreeMap::from([("env".into(), "prod".into())]),
            }],
            hub_url: Some("http://127.0.0.1:4443".into()),
            bootstrap_token_id: Some("abcdef".into()),
            processes: vec![
                ProcessRecord {
                    name: "parent".into(),
                    role: Role::Parent,
                    pid: 42,
                    start_time: Some(1234),
                    log: "/f/logs/parent.log".into(),
                    admin: None,
                    command: vec![],
                },
                ProcessRecord {
                    name: "hub".into(),
                    role: Role::Hub,
                    pid: 43,
                    start_time: None,
                    log: "/f/logs/hub.log".into(),
                    admin: Some("127.0.0.1:9000".into()),
                    command: vec!["/bin/atoll-hub".into(), "--insecure".into()],
                },
            ],
            real_nodes: None,
        }
    }

    #[test]
    fn state_survives_a_save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.json");
        let state = sample();
        state.save(&path).unwrap();
        assert_eq!(FleetState::load(&path).unwrap(), state);
        assert_eq!(state.process("hub").map(|p| p.pid), Some(43));
        assert!(state.process("scheduler").is_none());
    }

    #[test]
    fn loading_reports_a_missing_or_broken_state_file_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json");
        let broken = dir.path().join("broken.json");
        std::fs::write(&broken, "{not json").unwrap();
        let cases = [(missing, "read_state"), (broken, "parse_state")];
        for (path, label) in cases {
            let err = FleetState::load(&path).unwrap_err();
            assert_eq!(err.label(), label, "{err}");
        }
    }

    #[test]
    fn roles_are_written_in_lowercase() {
        let json = serde_json::to_value(Role::Scheduler).unwrap();
        assert_eq!(json, serde_json::json!("scheduler"));
    }
}
