//! The configuration files of a real node, as worked out by hand on the development machine
//! (docs/runs/2026-12-07-real-node.md): containerd's, the CNI bridge's, kubelet's, kube-proxy's
//! and the kubeconfigs of kubelet and kube-proxy. Pure: paths and addresses in, text out.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The reference of the pause image every pod sandbox runs.
pub const PAUSE_IMAGE: &str = "localhost/atoll-pause:1";

/// The label every real node carries (`=true`), and the key of its `NoSchedule` taint: only
/// pods that tolerate it (atoll's own, placed there by the fleet's overlays) run on it.
pub const REAL_NODE_LABEL: &str = "atoll.dev/realnode";

/// Where one node keeps its files: everything under `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDirs {
    /// The node's directory.
    pub root: PathBuf,
}

impl NodeDirs {
    /// containerd's root, state and sockets.
    pub fn containerd(&self) -> PathBuf {
        self.root.join("containerd")
    }
    /// containerd's gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.containerd().join("containerd.sock")
    }
    /// The CNI configuration directory (the node's own, not `/etc/cni/net.d`).
    pub fn cni_conf(&self) -> PathBuf {
        self.root.join("cni/net.d")
    }
    /// kubelet's `--root-dir`.
    pub fn kubelet_root(&self) -> PathBuf {
        self.root.join("kubelet")
    }
    /// kubelet's `podLogsDir`.
    pub fn pod_logs(&self) -> PathBuf {
        self.root.join("pod-logs")
    }
    /// The logs of the node's daemons.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// The image archives and the programs in them.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }
    /// A file directly in the node's directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// containerd's config: root, state, sockets and `opt` under the node's directory, the CRI
/// plugin with the pause image, runc with cgroupfs, the node's CNI configuration and what this
/// host needs (no CAP_SYS_RESOURCE for oom_score_adj, no AppArmor, no hugetlb controller).
pub fn containerd_config(dirs: &NodeDirs) -> String {
    let c = dirs.containerd();
    let c = c.display();
    let socket = dirs.socket();
    let socket = socket.display();
    let cni = dirs.cni_conf();
    let cni = cni.display();
    format!(
        r#"version = 2
root = "{c}/root"
state = "{c}/state"
oom_score = 0

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
"#
    )
}

/// The CNI configuration: a bridge `cni0` inside the node's namespace, gateway on the first
/// address of `pod_base`/26, no masquerading (the host routes the pod range back), portmap and
/// loopback.
pub fn cni_conflist(dirs: &NodeDirs, pod_base: Ipv4Addr) -> String {
    let [a, b, c, d] = pod_base.octets();
    let gateway = Ipv4Addr::new(a, b, c, d.saturating_add(1));
    let ipam = dirs.root.join("cni/ipam");
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "atoll-bridge",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": format!("{pod_base}/26"), "gateway": gateway.to_string()}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam.display().to_string(),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "loopback"},
        ],
    })
    .to_string()
}

/// What kubelet's config depends on.
#[derive(Clone, Debug)]
pub struct KubeletSettings<'a> {
    /// The node's files.
    pub dirs: &'a NodeDirs,
    /// The node's address (kubelet serves on it).
    pub address: Ipv4Addr,
    /// The cgroup root of the node (`/<name>`, pre-created).
    pub cgroup_root: &'a str,
    /// The cluster CA, which kubelet trusts client certificates of.
    pub client_ca: &'a Path,
    /// The node's pod range, `10.251.<k>.0/26`.
    pub pod_cidr: &'a str,
}

/// kubelet's config: cgroupfs under the node's own cgroup root, swap tolerated, containerd of
/// the node, pod logs under the node's directory, serving on the node address with a
/// self-signed certificate, client certificates of the cluster CA and Webhook authn/authz.
pub fn kubelet_config(s: &KubeletSettings<'_>) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
podLogsDir: {pod_logs}
address: {address}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {client_ca}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
protectKernelDefaults: false
makeIPTablesUtilChains: true
registerNode: true
podCIDR: {pod_cidr}
podPidsLimit: 1024
maxPods: 30
imageGCHighThresholdPercent: 95
imageGCLowThresholdPercent: 90
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "5%"
  imagefs.available: "5%"
"#,
        cgroup_root = s.cgroup_root,
        socket = s.dirs.socket().display(),
        pod_logs = s.dirs.pod_logs().display(),
        address = s.address,
        client_ca = s.client_ca.display(),
        pod_cidr = s.pod_cidr,
    )
}

/// kubelet's command line (after `--config`).
pub fn kubelet_args(dirs: &NodeDirs, node: &str, address: Ipv4Addr) -> Vec<String> {
    let root = dirs.kubelet_root();
    vec![
        format!("--config={}", dirs.file("kubelet-config.yaml").display()),
        format!("--kubeconfig={}", dirs.file("kubelet.kubeconfig").display()),
        format!("--root-dir={}", root.display()),
        format!("--cert-dir={}", root.join("pki").display()),
        format!("--hostname-override={node}"),
        format!("--node-ip={address}"),
        format!("--node-labels={REAL_NODE_LABEL}=true"),
        // Workloads without the toleration go to kwok's fake nodes, whose pods need no image.
        format!("--register-with-taints={REAL_NODE_LABEL}=true:NoSchedule"),
        "--v=2".into(),
    ]
}

/// kube-proxy's config: iptables mode inside the node's namespace, NodePorts on the node
/// address only, and no conntrack sysctl written (those are host-global).
pub fn kube_proxy_config(dirs: &NodeDirs, node: &str, cluster_cidr: &str) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
mode: iptables
hostnameOverride: {node}
clusterCIDR: {cluster_cidr}
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["primary"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  masqueradeAll: false
  syncPeriod: 30s
  minSyncPeriod: 1s
"#,
        kubeconfig = dirs.file("kube-proxy.kubeconfig").display(),
    )
}

/// A kubeconfig for `https://<host>:<port>` with the CA and a client certificate by path.
pub fn file_kubeconfig(host: Ipv4Addr, port: u16, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: real-node\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority: {ca}\nusers:\n- name: real-node\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: real-node\n  context:\n    cluster: real-node\n    user: real-node\ncurrent-context: real-node\n",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs() -> NodeDirs {
        NodeDirs {
            root: PathBuf::from("/n"),
        }
    }

    #[test]
    fn containerd_keeps_everything_under_the_node_directory() {
        let config = containerd_config(&dirs());
        for want in [
            "root = \"/n/containerd/root\"",
            "address = \"/n/containerd/containerd.sock\"",
            "path = \"/n/containerd/opt\"",
            "conf_dir = \"/n/cni/net.d\"",
            "restrict_oom_score_adj = true",
            "SystemdCgroup = false",
            "sandbox_image = \"localhost/atoll-pause:1\"",
        ] {
            assert!(config.contains(want), "{want} missing from\n{config}");
        }
    }

    #[test]
    fn the_cni_bridge_serves_the_node_pod_range_with_its_first_address_as_gateway() {
        let conf: serde_json::Value =
            serde_json::from_str(&cni_conflist(&dirs(), Ipv4Addr::new(10, 251, 3, 64))).unwrap();
        let range = &conf["plugins"][0]["ipam"]["ranges"][0][0];
        assert_eq!(range["subnet"], "10.251.3.64/26");
        assert_eq!(range["gateway"], "10.251.3.65");
        assert_eq!(conf["plugins"][0]["ipMasq"], false);
    }

    #[test]
    fn kubelet_uses_the_node_cgroup_root_socket_and_address() {
        let dirs = dirs();
        let config = kubelet_config(&KubeletSettings {
            dirs: &dirs,
            address: Ipv4Addr::new(10, 250, 3, 2),
            cgroup_root: "/atoll-3-1",
            client_ca: Path::new("/pki/ca.crt"),
            pod_cidr: "10.251.3.0/26",
        });
        let parsed: serde_yaml::Value = serde_yaml::from_str(&config).unwrap();
        assert_eq!(parsed["cgroupRoot"], "/atoll-3-1");
        assert_eq!(parsed["cgroupDriver"], "cgroupfs");
        assert_eq!(parsed["address"], "10.250.3.2");
        assert_eq!(
            parsed["containerRuntimeEndpoint"],
            "unix:///n/containerd/containerd.sock"
        );
        assert_eq!(
            parsed["authentication"]["x509"]["clientCAFile"],
            "/pki/ca.crt"
        );
        let args = kubelet_args(&dirs, "atoll-3-1", Ipv4Addr::new(10, 250, 3, 2)).join(" ");
        assert!(args.contains("--root-dir=/n/kubelet"), "{args}");
        assert!(args.contains("--hostname-override=atoll-3-1"), "{args}");
    }
}
