//! The network of real nodes, unique per run so that several runs share the machine: a free
//! index `k` taken by creating `/run/atoll-e2e-net/<k>` (stale ones, whose owner is gone, are
//! taken over), a host bridge `atl<k>` with `10.250.<k>.1/24` (kube-apiserver listens there),
//! and per node `i` a network namespace `atoll-<k>-<i>` joined to the bridge by a veth pair,
//! its node address `10.250.<k>.(1+i)`, its pod range (a /26 of `10.251.<k>.0/24`) routed from
//! the host through the node address. Only these addresses, on this machine, are ever used.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::host::run;
use crate::Error;
use crate::control_plane::NodeNetwork;
use crate::process::proc_stat;

/// Where the network indices of the machine's real-node runs are taken.
pub const LOCK_DIR: &str = "/run/atoll-e2e-net";

/// How many nodes one network holds (its pod range is split in /26s).
pub const MAX_NODES: u8 = 4;

/// The file in [`LOCK_DIR`] with the host's own sysctl values (see
/// [`super::host::host_sysctls_before`]).
pub fn sysctl_record() -> PathBuf {
    Path::new(LOCK_DIR).join("host-sysctls")
}

/// The name of the bridge of network `index`.
pub fn bridge_name(index: u8) -> String {
    format!("atl{index}")
}

/// The host's address on network `index`.
pub fn host_address(index: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, index, 1)
}

/// Node `node`'s address on network `index` (nodes count from 1).
pub fn node_address(index: u8, node: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, index, 1 + node)
}

/// Node `node`'s pod range on network `index`: its base address (the prefix is /26).
pub fn pod_range(index: u8, node: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 251, index, 64 * (node.saturating_sub(1) % MAX_NODES))
}

/// The pod range of node `node` in CIDR notation.
pub fn pod_cidr(index: u8, node: u8) -> String {
    format!("{}/26", pod_range(index, node))
}

/// The pod ranges of every node of network `index`, in CIDR notation.
pub fn network_pod_cidr(index: u8) -> String {
    format!("10.251.{index}.0/24")
}

/// The Node name (also the network namespace's name) of node `node` on network `index`.
pub fn node_name(index: u8, node: u8) -> String {
    format!("atoll-{index}-{node}")
}

/// The host end of node `node`'s veth pair (at most 15 characters, as Linux wants).
pub fn host_veth(index: u8, node: u8) -> String {
    format!("atl{index}n{node}")
}

/// The host bridge of one network index, owned while this value lives: dropping it deletes
/// the bridge and frees the index.
#[derive(Debug)]
pub struct HostBridge {
    index: u8,
    lock: PathBuf,
    detached: bool,
}

impl HostBridge {
    /// Takes a free network index and brings its bridge up with the host address.
    pub fn create() -> Result<HostBridge, Error> {
        let (index, lock) = allocate_index(Path::new(LOCK_DIR))?;
        let bridge = HostBridge {
            index,
            lock,
            detached: false,
        };
        bridge.bring_up()?;
        Ok(bridge)
    }

    fn bring_up(&self) -> Result<(), Error> {
        let name = bridge_name(self.index);
        let address = format!("{}/24", host_address(self.index));
        run("ip", &["link", "add", &name, "type", "bridge"])?;
        run("ip", &["addr", "add", &address, "dev", &name])?;
        run("ip", &["link", "set", &name, "up"])?;
        Ok(())
    }

    /// Leaves the bridge up when this value is dropped, for a fleet that outlives the process
    /// that started it: the index is handed to process `owner` (`pid`, start time), so that it
    /// stays taken while that process runs. [`HostBridge::adopt`] takes it back.
    pub fn detach(mut self, owner: (u32, u64)) -> Result<u8, Error> {
        std::fs::write(self.lock.join(OWNER), format!("{} {}\n", owner.0, owner.1)).map_err(
            |e| Error::AllocateNodeNetwork {
                dir: self.lock.clone(),
                message: e.to_string(),
            },
        )?;
        self.detached = true;
        Ok(self.index)
    }

    /// The bridge of network `index`, which [`HostBridge::detach`] left up: dropping it deletes
    /// the bridge and frees the index.
    pub fn adopt(index: u8) -> HostBridge {
        HostBridge {
            index,
            lock: Path::new(LOCK_DIR).join(index.to_string()),
            detached: false,
        }
    }

    /// The network index.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The bridge's name.
    pub fn name(&self) -> String {
        bridge_name(self.index)
    }

    /// The host's address on it.
    pub fn host_address(&self) -> Ipv4Addr {
        host_address(self.index)
    }

    /// What a control plane needs for nodes `1..=nodes` of this network to join it.
    pub fn node_network(&self, nodes: u8) -> NodeNetwork {
        NodeNetwork {
            host_address: self.host_address(),
            nodes: (1..=nodes.min(MAX_NODES))
                .map(|i| node_name(self.index, i))
                .collect(),
        }
    }
}

impl Drop for HostBridge {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        if let Err(e) = run("ip", &["link", "del", &self.name()]) {
            eprintln!("deleting bridge {}: {e}", self.name());
        }
        let _ = std::fs::remove_dir_all(&self.lock);
        forget_sysctl_record_when_last(Path::new(LOCK_DIR));
    }
}

/// Removes the shared sysctl record once no network index is taken any more.
fn forget_sysctl_record_when_last(dir: &Path) {
    let taken = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().parse::<u8>().is_ok())
    });
    if !taken {
        let _ = std::fs::remove_file(sysctl_record());
    }
}

/// The owner file of a taken index: `<pid> <start time>`.
const OWNER: &str = "owner";

/// Takes the first index whose lock directory can be created in `dir` and whose bridge and
/// addresses nothing on the host uses; stale locks (owner gone) are taken over.
fn allocate_index(dir: &Path) -> Result<(u8, PathBuf), Error> {
    let err = |message: String| Error::AllocateNodeNetwork {
        dir: dir.to_path_buf(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let links = run("ip", &["-o", "link", "show"])?;
    let routes = run("ip", &["-o", "-4", "route", "show", "table", "all"])?;
    for index in 0..=u8::MAX {
        let lock = dir.join(index.to_string());
        if !take_lock(&lock).map_err(|e| err(e.to_string()))? {
            continue;
        }
        if index_in_use(index, &links, &routes) {
            let _ = std::fs::remove_dir_all(&lock);
            continue;
        }
        return Ok((index, lock));
    }
    Err(err("every index 0-255 is taken".into()))
}

/// Whether the host already has network `index`'s bridge or one of its ranges.
fn index_in_use(index: u8, links: &str, routes: &str) -> bool {
    let bridge = format!(": {}:", bridge_name(index));
    let ranges = [format!("10.250.{index}."), format!("10.251.{index}.")];
    links.contains(&bridge) || ranges.iter().any(|r| routes.contains(r.as_str()))
}

/// Creates the lock directory `lock` with this process as its owner; false when a live owner
/// holds it.
fn take_lock(lock: &Path) -> std::io::Result<bool> {
    for _ in 0..2 {
        match std::fs::create_dir(lock) {
            Ok(()) => {
                write_owner(lock)?;
                return Ok(true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !lock_is_stale(lock) {
                    return Ok(false);
                }
                let _ = std::fs::remove_dir_all(lock);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

fn write_owner(lock: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    let start = proc_stat(pid).map_or(0, |s| s.start_time);
    std::fs::write(lock.join(OWNER), format!("{pid} {start}\n"))
}

/// Whether the owner of `lock` is gone (its pid runs no more, or is another process now). A
/// lock without owner file yet is being taken, unless it is older than a minute.
fn lock_is_stale(lock: &Path) -> bool {
    match std::fs::read_to_string(lock.join(OWNER)) {
        Ok(text) => owner_is_gone(&text),
        Err(_) => std::fs::metadata(lock)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 60)),
    }
}

fn owner_is_gone(owner: &str) -> bool {
    let mut fields = owner.split_whitespace().map(|f| f.parse::<u64>().ok());
    let (Some(Some(pid)), Some(Some(start))) = (fields.next(), fields.next()) else {
        return true;
    };
    let Ok(pid) = u32::try_from(pid) else {
        return true;
    };
    proc_stat(pid).is_none_or(|s| s.start_time != start)
}

/// The network namespace of one node and its links and route; dropping it removes them.
#[derive(Debug)]
pub struct NodeNetns {
    index: u8,
    node: u8,
    created: bool,
    routed: bool,
}

impl NodeNetns {
    /// Node `node` of network `index` (nothing is created yet: see [`NodeNetns::create`]).
    pub fn new(index: u8, node: u8) -> NodeNetns {
        NodeNetns {
            index,
            node,
            created: false,
            routed: false,
        }
    }

    /// The namespace of node `node` of network `index` as [`NodeNetns::create`] left it (for
    /// tearing down a node another process started).
    pub fn existing(index: u8, node: u8) -> NodeNetns {
        NodeNetns {
            index,
            node,
            created: true,
            routed: true,
        }
    }

    /// Leaves the namespace, its links and route in place when this value is dropped.
    pub fn forget(&mut self) {
        self.created = false;
        self.routed = false;
    }

    /// Its network's index.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The node's number on its network.
    pub fn node(&self) -> u8 {
        self.node
    }

    /// The namespace's name.
    pub fn name(&self) -> String {
        node_name(self.index, self.node)
    }

    /// Its path, for `nsenter --net=`.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(self.name())
    }

    /// The node's address.
    pub fn address(&self) -> Ipv4Addr {
        node_address(self.index, self.node)
    }

    /// The namespace with `eth0` on the host bridge, the default route through the host, the
    /// host's route to the pod range, and forwarding plus bridge netfilter switched on inside.
    pub fn create(&mut self) -> Result<(), Error> {
        let ns = self.name();
        let veth = host_veth(self.index, self.node);
        let address = format!("{}/24", self.address());
        let host = host_address(self.index).to_string();
        run("ip", &["netns", "add", &ns])?;
        self.created = true;
        run(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        run(
            "ip",
            &[
                "link",
                "set",
                &veth,
                "master",
                &bridge_name(self.index),
                "up",
            ],
        )?;
        run("ip", &["-n", &ns, "addr", "add", &address, "dev", "eth0"])?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        run("ip", &["-n", &ns, "route", "add", "default", "via", &host])?;
        // Pods of other nodes of the network straight over the bridge, so that the host, which
        // does not forward, is never a hop between nodes.
        for other in (1..=MAX_NODES).filter(|&n| n != self.node) {
            let gateway = node_address(self.index, other).to_string();
            let range = pod_cidr(self.index, other);
            run("ip", &["-n", &ns, "route", "add", &range, "via", &gateway])?;
        }
        let pods = pod_cidr(self.index, self.node);
        run(
            "ip",
            &["route", "add", &pods, "via", &self.address().to_string()],
        )?;
        self.routed = true;
        let net = format!("--net={}", self.path().display());
        run(
            "nsenter",
            &[
                &net,
                "sysctl",
                "-w",
                "net.ipv4.ip_forward=1",
                "net.bridge.bridge-nf-call-iptables=1",
            ],
        )?;
        Ok(())
    }

    /// Removes the host route and the namespace (its end of the veth pair goes with it, and the
    /// host end with that).
    pub fn remove(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.routed {
            let pods = pod_cidr(self.index, self.node);
            if let Err(e) = run("ip", &["route", "del", &pods]) {
                problems.push(e.to_string());
            }
            self.routed = false;
        }
        if self.created {
            if let Err(e) = run("ip", &["netns", "del", &self.name()]) {
                problems.push(e.to_string());
            }
            let _ = run("ip", &["link", "del", &host_veth(self.index, self.node)]);
            self.created = false;
        }
        problems
    }
}

impl Drop for NodeNetns {
    fn drop(&mut self) {
        for problem in self.remove() {
            eprintln!("removing the network of {}: {problem}", self.name());
        }
    }
}

impl crate::state::FleetState {
    /// The address the fleet's components reach a server on this machine by (a chart
    /// repository of a test): loopback, or with atoll on pods the host's address on the real
    /// nodes' network.
    pub fn serving_host(&self) -> std::net::IpAddr {
        match &self.real_nodes {
            Some(real) => host_address(real.network).into(),
            None => std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_are_unique_per_index_and_node() {
        assert_eq!(bridge_name(255), "atl255");
        assert!(host_veth(255, 4).len() <= 15);
        assert_eq!(host_address(7), Ipv4Addr::new(10, 250, 7, 1));
        assert_eq!(node_address(7, 1), Ipv4Addr::new(10, 250, 7, 2));
        assert_eq!(pod_cidr(7, 1), "10.251.7.0/26");
        assert_eq!(pod_cidr(7, 2), "10.251.7.64/26");
        assert_eq!(node_name(7, 1), "atoll-7-1");
    }

    #[test]
    fn an_index_is_in_use_when_its_bridge_or_ranges_exist() {
        let links = "1: lo: <LOOPBACK>\n5: atl3: <BROADCAST>\n";
        let routes = "10.251.4.0/26 via 10.250.4.2 dev atl4\n";
        assert!(index_in_use(3, links, routes));
        assert!(index_in_use(4, links, routes));
        assert!(!index_in_use(1, links, routes));
        assert!(!index_in_use(30, links, routes), "atl3 is not atl30");
    }

    #[test]
    fn a_lock_whose_owner_is_gone_is_stale() {
        let own = std::process::id();
        let start = proc_stat(own).map(|s| s.start_time).unwrap_or_default();
        assert!(!owner_is_gone(&format!("{own} {start}")));
        assert!(owner_is_gone(&format!("{own} {}", start + 1)));
        assert!(owner_is_gone("garbage"));
    }
}
