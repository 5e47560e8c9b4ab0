//! `fleet up --backend kube`: starts a real control plane per cluster (see [`control_plane`])
//! and installs atoll in it as a user would (see [`install`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::Error;
use crate::control_plane::{self, ClusterFiles, Credential, K8sBinaries, NodeNetwork, Ports};
use crate::install::{self, AgentSettings};
use crate::kubectl::{Kubectl, client_for};
use crate::plan::Layout;
use crate::process::{Launch, free_port, launch, wait_for_process};
use crate::state::{FleetState, Role};

/// One running real cluster.
#[derive(Clone, Debug)]
pub struct RealCluster {
    /// `parent` or `child-<i>`.
    pub name: String,
    /// Its files.
    pub files: ClusterFiles,
    /// Its ports.
    pub ports: Ports,
    /// Its CA certificate (PEM), for the kubeconfigs of atoll's components.
    pub ca_pem: String,
}

impl RealCluster {
    /// `kubectl` as the cluster's admin.
    pub fn admin_kubectl(&self, layout: &Layout) -> Kubectl {
        Kubectl::new(self.files.kubeconfig.clone(), layout.kube_cache())
    }
}

fn ports() -> Result<Ports, Error> {
    Ok(Ports {
        etcd_client: free_port()?,
        etcd_peer: free_port()?,
        apiserver: free_port()?,
        controller_manager: free_port()?,
        scheduler: free_port()?,
    })
}

/// Starts etcd and kube-apiserver of every cluster (`(name, admin kubeconfig, role)`): every
/// etcd at once, then, once each answers healthy, every kube-apiserver at once; waits until each
/// API server is ready, then starts kube-controller-manager, kube-scheduler and kwok with
/// `nodes` fake Nodes. Every process is recorded in `state` as it starts.
///
/// kube-apiserver exits when its etcd does not answer within its start-up deadline, which a
/// slow etcd on a loaded machine can miss; waiting for etcd first turns that into a wait here,
/// and an etcd that dies at start-up into an error naming etcd's own log.
pub async fn start_clusters(
    clusters: &[(String, PathBuf, Role)],
    binaries: &K8sBinaries,
    layout: &Layout,
    state: &mut FleetState,
    nodes: u32,
    timeout: Duration,
) -> Result<Vec<RealCluster>, Error> {
    start_clusters_for(clusters, binaries, layout, state, nodes, timeout, None).await
}

/// [`start_clusters`], with kube-apiserver set up for the real nodes of `network` to join
/// (see [`control_plane::NodeNetwork`] and [`crate::real_node`]); `None` is [`start_clusters`].
pub async fn start_clusters_for(
    clusters: &[(String, PathBuf, Role)],
    binaries: &K8sBinaries,
    layout: &Layout,
    state: &mut FleetState,
    nodes: u32,
    timeout: Duration,
    network: Option<&NodeNetwork>,
) -> Result<Vec<RealCluster>, Error> {
    let mut started = Vec::new();
    for (name, kubeconfig, _) in clusters {
        let files = ClusterFiles::new(&layout.dir, name, kubeconfig.clone());
        // A fresh cluster every time: `fleet up` starts from nothing, as with devcluster.
        let _ = std::fs::remove_dir_all(&files.root);
        let ports = ports()?;
        let pki = control_plane::write_pki(&files, network)?;
        let admin = control_plane::kubeconfig_at(
            name,
            control_plane::apiserver_host(network),
            ports.apiserver,
            &pki.ca_pem,
            &Credential::Certificate {
                cert_pem: &pki.admin_cert_pem,
                key_pem: &pki.admin_key_pem,
            },
        );
        control_plane::write_private(kubeconfig, &admin)?;
        let etcd_name = etcd_name(name);
        launch(
            state,
            layout,
            Launch {
                name: &etcd_name,
                role: Role::Etcd,
                binary: &binaries.etcd,
                args: control_plane::etcd_args(name, &files, ports),
                log: layout.log(&etcd_name),
                admin: None,
            },
        )?;
        started.push(RealCluster {
            name: name.clone(),
            files,
            ports,
            ca_pem: pki.ca_pem,
        });
    }
    for cluster in &started {
        let etcd_name = etcd_name(&cluster.name);
        let port = cluster.ports.etcd_client;
        let what = format!(
            "etcd of {} to be healthy (GET /health on 127.0.0.1:{port})",
            cluster.name
        );
        wait_for_process(state, &etcd_name, &what, timeout, || etcd_healthy(port)).await?;
    }
    for (cluster, (_, _, role)) in started.iter().zip(clusters) {
        launch(
            state,
            layout,
            Launch {
                name: &cluster.name,
                role: *role,
                binary: &binaries.apiserver,
                args: control_plane::apiserver_args(&cluster.files, cluster.ports, network),
                log: layout.log(&cluster.name),
                admin: None,
            },
        )?;
    }
    for cluster in &started {
        let client = wait_ready(state, cluster, timeout).await?;
        start_controllers(state, layout, binaries, cluster)?;
        create_fake_nodes(&client, nodes).await?;
    }
    Ok(started)
}

/// The clusters of a fleet for [`start_clusters`]: the parent, then each child, with their
/// kubeconfigs and roles.
pub fn cluster_list(
    layout: &Layout,
    children: &[crate::plan::ChildSpec],
) -> Vec<(String, PathBuf, Role)> {
    std::iter::once((
        "parent".to_string(),
        layout.parent_kubeconfig(),
        Role::Parent,
    ))
    .chain(children.iter().map(|c| {
        (
            c.name.clone(),
            layout.child_kubeconfig(c.index),
            Role::Child,
        )
    }))
    .collect()
}

/// The process name of cluster `name`'s etcd.
fn etcd_name(name: &str) -> String {
    format!("{name}-etcd")
}

/// Whether the etcd serving plain HTTP on loopback `port` answers `GET /health` with
/// `"health":"true"` (it has a leader and serves reads).
async fn etcd_healthy(port: u16) -> bool {
    etcd_health_says_healthy(
        crate::process::http_get(SocketAddr::from(([127, 0, 0, 1], port)), "/health").await,
    )
}

/// Whether etcd's answer to `/health` (status code and body; `None` when it did not answer)
/// says healthy.
fn etcd_health_says_healthy(answer: Option<(u16, String)>) -> bool {
    answer.is_some_and(|(code, body)| {
        let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        code == 200 && compact.contains("\"health\":\"true\"")
    })
}

/// Waits until `GET /readyz` of the cluster's kube-apiserver answers 200 (post-start hooks such
/// as the RBAC bootstrap policy done); returns the admin client it polled with.
pub async fn wait_ready(
    state: &FleetState,
    cluster: &RealCluster,
    timeout: Duration,
) -> Result<Client, Error> {
    let client = client_for(&cluster.files.kubeconfig).await?;
    let what = format!(
        "kube-apiserver of {} to be ready (GET /readyz on 127.0.0.1:{})",
        cluster.name, cluster.ports.apiserver
    );
    wait_for_process(state, &cluster.name, &what, timeout, || readyz(&client)).await?;
    Ok(client)
}

/// Whether `GET /readyz` answers 200. kube-apiserver listens on its port well before it serves,
/// so a TCP connection says nothing.
pub async fn readyz(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    client.request_text(request).await.is_ok()
}

fn start_controllers(
    state: &mut FleetState,
    layout: &Layout,
    binaries: &K8sBinaries,
    cluster: &RealCluster,
) -> Result<(), Error> {
    let processes = [
        (
            "kube-controller-manager",
            &binaries.controller_manager,
            control_plane::controller_manager_args(&cluster.files, cluster.ports),
        ),
        (
            "kube-scheduler",
            &binaries.scheduler,
            control_plane::scheduler_args(&cluster.files, cluster.ports),
        ),
        (
            "kwok",
            &binaries.kwok,
            control_plane::kwok_args(&cluster.files, &binaries.kwok_stages),
        ),
    ];
    for (component, binary, args) in processes {
        let name = format!("{}-{component}", cluster.name);
        launch(
            state,
            layout,
            Launch {
                name: &name,
                role: Role::ControlPlane,
                binary,
                args,
                log: layout.log(&name),
                admin: None,
            },
        )?;
    }
    Ok(())
}

/// Creates `count` fake Nodes `kwok-node-<i>` (an existing one is kept).
pub async fn create_fake_nodes(client: &Client, count: u32) -> Result<(), Error> {
    let api = Api::<Node>::all(client.clone());
    for i in 1..=count {
        let name = format!("kwok-node-{i}");
        let node: Node = serde_json::from_value(control_plane::fake_node(&name)).map_err(|e| {
            Error::InvalidArgument {
                what: "fake node".into(),
                message: e.to_string(),
            }
        })?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => {
                return Err(Error::Api {
                    action: format!("creating fake Node {name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The install directory of the overlays: `D/install/<what>`.
fn install_dir(layout: &Layout, what: &str) -> PathBuf {
    layout.dir.join("install").join(what)
}

/// `kubectl apply -k` of the parent overlay for `run` (see [`install::parent_overlay`]).
pub async fn apply_parent_overlay(
    parent: &RealCluster,
    layout: &Layout,
    manifests: &Path,
    run: install::Run,
) -> Result<(), Error> {
    let dir = install_dir(layout, "parent");
    let base = install::relative_path(&dir, &manifests.join("parent"));
    let kubectl = parent.admin_kubectl(layout);
    install::apply_overlay(&kubectl, &dir, &install::parent_overlay(&base, run)).await
}

/// `kubectl apply -k` of the parent overlay (CRDs, namespaces, RBAC, the scheduler and hub
/// Deployments scaled to zero), then a kubeconfig with a ServiceAccount token for the scheduler
/// and one for the hub: `(scheduler, hub)`.
pub async fn install_parent(
    parent: &RealCluster,
    layout: &Layout,
    manifests: &Path,
) -> Result<(PathBuf, PathBuf), Error> {
    apply_parent_overlay(parent, layout, manifests, install::Run::LocalProcesses).await?;
    let kubectl = parent.admin_kubectl(layout);
    let scheduler = layout.dir.join("scheduler.kubeconfig");
    let hub = layout.dir.join("hub.kubeconfig");
    for (account, out) in [
        (install::SCHEDULER_ACCOUNT, &scheduler),
        (install::HUB_ACCOUNT, &hub),
    ] {
        install::service_account_kubeconfig(
            &kubectl,
            account,
            parent.ports.apiserver,
            &parent.ca_pem,
            out,
        )
        .await?;
    }
    Ok((scheduler, hub))
}

/// `kubectl apply -k` of the agent overlay in `child`, then a kubeconfig with the agent's
/// ServiceAccount token: `D/agent-<child>.kubeconfig`.
pub async fn install_agent(
    child: &RealCluster,
    layout: &Layout,
    manifests: &Path,
    hub_url: &str,
    bootstrap_token: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PathBuf, Error> {
    let settings = AgentSettings {
        hub_url,
        bootstrap_token,
        cluster_name: &child.name,
        labels,
    };
    apply_agent_overlay(child, layout, manifests, &settings, None).await?;
    let kubectl = child.admin_kubectl(layout);
    let out = layout.dir.join(format!("agent-{}.kubeconfig", child.name));
    install::service_account_kubeconfig(
        &kubectl,
        install::AGENT_ACCOUNT,
        child.ports.apiserver,
        &child.ca_pem,
        &out,
    )
    .await?;
    Ok(out)
}

/// `kubectl apply -k` of the agent overlay in `child`: for local processes without `hub_ca`,
/// for the agent's pod with it (the hub CA's PEM, written beside the overlay).
pub async fn apply_agent_overlay(
    child: &RealCluster,
    layout: &Layout,
    manifests: &Path,
    settings: &AgentSettings<'_>,
    hub_ca: Option<&str>,
) -> Result<(), Error> {
    let dir = install_dir(layout, &child.name);
    let base = install::relative_path(&dir, &manifests.join("agent"));
    let run = match hub_ca {
        None => install::Run::LocalProcesses,
        Some(pem) => {
            control_plane::write_private(&dir.join(install::HUB_CA_FILE), pem)?;
            install::Run::Pods
        }
    };
    let overlay = install::agent_overlay(&base, settings, run);
    install::apply_overlay(&child.admin_kubectl(layout), &dir, &overlay).await
}

/// The real tier's binaries, from `ATOLL_K8S_BIN_DIR` or the `make k8s` cache.
pub fn locate_binaries() -> Result<K8sBinaries, Error> {
    let dir = control_plane::bin_dir_from_env().ok_or_else(|| Error::LocateK8sBinaries {
        missing: "the cache directory (neither ATOLL_K8S_BIN_DIR nor HOME is set)".into(),
        dir: PathBuf::new(),
    })?;
    K8sBinaries::locate(&dir)
}

#[cfg(test)]
mod tests {
    use super::etcd_health_says_healthy;

    #[test]
    fn etcd_health_is_read_from_the_http_answer() {
        let healthy = (200, "{\"health\":\"true\",\"reason\":\"\"}".to_string());
        assert!(etcd_health_says_healthy(Some(healthy)));
        let no_leader = (
            503,
            "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}".to_string(),
        );
        assert!(!etcd_health_says_healthy(Some(no_leader)));
        assert!(!etcd_health_says_healthy(None));
        assert!(!etcd_health_says_healthy(Some((200, "{}".to_string()))));
    }
}
