#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End to end, a real node (issue 40): a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler of `make k8s`) started for a node network, one real
//! node joined to it (containerd, kubelet and kube-proxy in a network namespace of their own,
//! pods on a CNI bridge), and then: the Node becomes Ready; a Pod of a self-built image runs
//! with a memory limit, which the program reads from its own cgroup and prints, and
//! `kubectl logs` returns that line; everything is torn down again (processes, mounts under the
//! node's directory, cgroups, the namespace, the bridge and routes, the host sysctls kubelet
//! changed).
//!
//! Needs root, containerd, runc, ctr, the CNI plugins in /usr/lib/cni, `ip`, `nsenter`, `cc`,
//! iptables, kubectl and the `make k8s` binaries (kubelet and kube-proxy included); skipped
//! with a notice otherwise.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::POLL;

use atoll_e2e::kubectl::{Kubectl, client_for};
use atoll_e2e::real_node::network::{self, HostBridge};
use atoll_e2e::real_node::{self, JoinSpec, RealNode, host};
use atoll_e2e::state::Role;

/// The test pod's program: prints the memory limit of its own cgroup (v1 or v2) and sleeps
/// until SIGTERM.
const HELLO_SOURCE: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

static void read_limit(char *buf, int size) {
    const char *files[] = {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) continue;
        if (fgets(buf, size, f)) buf[strcspn(buf, "\n")] = 0;
        fclose(f);
        return;
    }
}

int main(void) {
    char limit[64] = "unknown";
    signal(SIGTERM, on_term);
    read_limit(limit, sizeof limit);
    printf("hello from a real node, memory limit %s\n", limit);
    fflush(stdout);
    for (;;) pause();
}
"#;

const HELLO_IMAGE: &str = "localhost/atoll-hello:1";

/// 32Mi, the Pod's memory limit, in bytes.
const MEMORY_LIMIT: &str = "33554432";

/// The `make k8s` binary directory, when everything a real node needs is there; prints a
/// NOTICE otherwise.
async fn prerequisites_or_skip(test: &str) -> Option<PathBuf> {
    let Some(bin_dir) = atoll_e2e::control_plane::bin_dir_from_env() else {
        eprintln!("NOTICE: {test} skipped: no make-k8s cache directory (HOME unset)");
        return None;
    };
    if let Err(e) = atoll_e2e::real_tier::locate_binaries() {
        eprintln!("NOTICE: {test} skipped: {e}");
        return None;
    }
    let missing = real_node::missing_prerequisites(&bin_dir);
    if !missing.is_empty() {
        eprintln!(
            "NOTICE: {test} skipped: a real node needs {}",
            missing.join(", ")
        );
        return None;
    }
    if !Kubectl::available().await {
        eprintln!("NOTICE: {test} skipped: kubectl is not on PATH");
        return None;
    }
    Some(bin_dir)
}

fn hello_pod(node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  tolerations:
  - {{key: atoll.dev/realnode, operator: Exists, effect: NoSchedule}}
  containers:
  - name: hello
    image: {HELLO_IMAGE}
    imagePullPolicy: Never
    resources:
      requests: {{cpu: 10m, memory: 16Mi}}
      limits: {{cpu: 100m, memory: 32Mi}}
"#
    )
}

/// What must be gone once the node, the control plane and the bridge are down.
struct Traces {
    dir: PathBuf,
    netns: String,
    bridge: String,
    lock: PathBuf,
    pod_range: String,
    cgroups: Vec<PathBuf>,
    sysctls: Vec<(String, String)>,
}

impl Traces {
    fn of(node: &RealNode, bridge: &HostBridge) -> Traces {
        Traces {
            dir: node.dir().to_path_buf(),
            netns: node.netns(),
            bridge: bridge.name(),
            lock: Path::new(network::LOCK_DIR).join(bridge.index().to_string()),
            pod_range: network::network_pod_cidr(bridge.index()).replace(".0/24", "."),
            cgroups: node.cgroup_roots().to_vec(),
            sysctls: node.host_sysctls().to_vec(),
        }
    }

    fn assert_gone(&self) {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mounts = host::mounts_under(&mountinfo, &self.dir);
        assert!(mounts.is_empty(), "still mounted: {mounts:?}");
        let netns = host::run("ip", &["netns", "list"]).unwrap();
        assert!(!netns.contains(&self.netns), "netns left: {netns}");
        let links = host::run("ip", &["-o", "link", "show"]).unwrap();
        assert!(
            !links.contains(&format!(": {}:", self.bridge)),
            "bridge left: {links}"
        );
        let routes = host::run("ip", &["-o", "-4", "route", "show", "table", "all"]).unwrap();
        assert!(!routes.contains(&self.pod_range), "route left: {routes}");
        for cgroup in &self.cgroups {
            assert!(!cgroup.exists(), "cgroup left: {}", cgroup.display());
        }
        assert!(!self.lock.exists(), "lock left: {}", self.lock.display());
        let names: Vec<&str> = self.sysctls.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            host::read_sysctls(&names).unwrap(),
            self.sysctls,
            "host sysctls"
        );
        let links = std::fs::read_dir("/var/log/containers")
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&self.dir))
                    })
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(links, 0, "kubelet's links in /var/log/containers left");
        let shims = host::pids_with_command_line(&self.dir.display().to_string());
        assert!(shims.is_empty(), "processes of the node left: {shims:?}");
    }
}

#[tokio::test]
async fn a_real_node_becomes_ready_runs_a_pod_with_a_memory_limit_and_is_torn_down() {
    let test = "real node";
    let Some(bin_dir) = prerequisites_or_skip(test).await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bridge = HostBridge::create().unwrap();
    let (control_plane, _, cluster) = support::start_real_for(
        tmp.path(),
        "real-node",
        Role::Parent,
        0,
        Some(&bridge.node_network(1)),
    )
    .await;
    let hello = real_node::build_program_image(
        HELLO_SOURCE,
        "hello",
        HELLO_IMAGE,
        &tmp.path().join("images"),
    )
    .unwrap();
    let started = Instant::now();
    let mut node = RealNode::join(JoinSpec {
        cluster: &cluster,
        bridge: &bridge,
        node: 1,
        dir: &tmp.path().join("node-1"),
        bin_dir: &bin_dir,
        images: std::slice::from_ref(&hello),
        timeout: Duration::from_secs(60),
    })
    .await
    .unwrap();
    let traces = Traces::of(&node, &bridge);
    let client = client_for(&cluster.files.kubeconfig).await.unwrap();
    let ready = node
        .wait_ready(&client, Duration::from_secs(120))
        .await
        .unwrap();
    eprintln!(
        "FIGURE node {} Ready {:.1}s after containerd started ({:.1}s after the wait began)",
        node.name(),
        started.elapsed().as_secs_f64(),
        ready.as_secs_f64()
    );
    let names: Vec<&str> = traces.sysctls.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        host::read_sysctls(&names).unwrap(),
        traces.sysctls,
        "the host sysctls are restored once the node is Ready"
    );

    let kubectl = Kubectl::new(cluster.files.kubeconfig.clone(), tmp.path().join("cache"));
    POLL.eventually(
        "ServiceAccount default/default",
        Duration::from_secs(60),
        || async {
            kubectl
                .run(&["get", "serviceaccount", "default"])
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let pod = tmp.path().join("hello.yaml");
    std::fs::write(&pod, hello_pod(node.name())).unwrap();
    kubectl
        .run(&["apply", "-f", pod.to_str().unwrap()])
        .await
        .unwrap();
    let pod_started = Instant::now();
    kubectl
        .run(&[
            "wait",
            "--for=condition=Ready",
            "pod/hello",
            "--timeout=120s",
        ])
        .await
        .unwrap_or_else(|e| {
            panic!(
                "pod hello not Ready: {e}; node logs in {}",
                node.dir().display()
            )
        });
    eprintln!(
        "FIGURE pod hello Ready {:.1}s after it was created",
        pod_started.elapsed().as_secs_f64()
    );
    let logs = POLL
        .eventually("kubectl logs hello", Duration::from_secs(30), || async {
            let logs = kubectl
                .run(&["logs", "hello"])
                .await
                .map_err(|e| e.to_string())?;
            if logs.contains("hello from a real node") {
                Ok(logs)
            } else {
                Err(logs)
            }
        })
        .await;
    assert!(
        logs.contains(&format!("memory limit {MEMORY_LIMIT}")),
        "the pod's cgroup carries its 32Mi limit: {logs}"
    );
    for (process, rss) in node.rss_kib() {
        eprintln!("FIGURE RSS {process}: {} KiB", rss.unwrap_or(0));
    }

    let problems = node.tear_down();
    assert!(problems.is_empty(), "tearing the node down: {problems:?}");
    drop(node);
    drop(control_plane);
    drop(bridge);
    traces.assert_gone();
}
