//! `fleet up --backend kube --real-nodes`: atoll as a user installs it (issue 40). Every
//! cluster gets one real node ([`crate::real_node`]) on one network; atoll's images, built from
//! the fleet's binaries without a daemon, are imported into each node's containerd; the parent
//! and each child are installed with `kubectl apply -k` of overlays that follow
//! docs/install.md: the hub exposed by `hub-nodeport`, its certificate in `atoll-hub-tls`, each
//! agent given the hub's address, CA, a bootstrap token and its name, and each registration
//! approved with `kubectl atoll approve`. No atoll process runs outside a pod; agents dial the
//! parent node's NodePort as agents in other clusters would.
//!
//! The overlays also put atoll's pods on the real nodes (a node selector and a toleration of
//! their taint): the kwok nodes beside them take the example workloads, whose images no node
//! here could pull.

use std::path::{Path, PathBuf};
use std::time::Duration;

use atoll_crds::known;
use atoll_images::host::{Built, Inputs, build_images};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, LogParams};
use kube::{Api, Client};

use crate::Error;
use crate::control_plane::{self, HubTls};
use crate::install::{AgentSettings, Run};
use crate::kubectl::client_for;
use crate::plan::{ChildSpec, Layout};
use crate::process::poll_until;
use crate::real_node::network::{self, HostBridge, MAX_NODES};
use crate::real_node::{self, JoinSpec, RealNode};
use crate::real_tier::{self, RealCluster};
use crate::state::{FleetState, RealNodes};

/// The hub's NodePort (`manifests/parent/hub-nodeport`).
pub const HUB_NODE_PORT: u16 = 30443;

/// atoll's Deployments in the parent, each with its replicas from `manifests/parent`.
pub const PARENT_DEPLOYMENTS: [&str; 2] = ["atoll-scheduler", "atoll-hub"];

/// The agent's Deployment in each child.
pub const AGENT_DEPLOYMENT: &str = "atoll-agent";

/// How many lines of a pod's log a failure shows.
const LOG_TAIL: i64 = 20;

/// How many of a pod's events a failure shows.
const EVENTS_SHOWN: usize = 6;

/// What a fleet on real nodes is started from.
#[derive(Clone, Debug)]
pub struct PodsOptions<'a> {
    /// The fleet's binaries, which the images are built from.
    pub bin_dir: &'a Path,
    /// The repository's `manifests/`.
    pub manifests: &'a Path,
    /// kwok nodes per cluster, for the workloads atoll distributes.
    pub fake_nodes: u32,
    /// How long each step may take.
    pub timeout: Duration,
}

/// Starts the parent and `children` as real clusters with one real node each, installs atoll
/// in them as pods and waits until every pod is Ready and every ManagedCluster too. The nodes
/// and their network are recorded in `state.real_nodes` ([`tear_down`] removes them); on
/// failure they are torn down before this returns.
pub async fn start(
    opts: &PodsOptions<'_>,
    layout: &Layout,
    state: &mut FleetState,
    children: &[ChildSpec],
) -> Result<(), Error> {
    let k8s = real_tier::locate_binaries()?;
    let k8s_dir = control_plane::bin_dir_from_env().unwrap_or_default();
    let missing = real_node::missing_prerequisites(&k8s_dir);
    if !missing.is_empty() {
        return Err(Error::RealNodePrerequisites {
            missing: missing.join(", "),
        });
    }
    if children.len() >= usize::from(MAX_NODES) {
        return Err(Error::InvalidArgument {
            what: "--children".into(),
            message: format!(
                "{} with --real-nodes: one network holds {MAX_NODES} nodes, the parent's and \
                 at most {} children's",
                children.len(),
                MAX_NODES - 1
            ),
        });
    }
    let images = fleet_images(opts.bin_dir, &layout.dir.join("images"))?;
    println!(
        "fleet: atoll's images built from {}",
        opts.bin_dir.display()
    );

    let bridge = HostBridge::create()?;
    let node_count = u8::try_from(children.len() + 1).unwrap_or(MAX_NODES);
    let node_network = bridge.node_network(node_count);
    let clusters = real_tier::cluster_list(layout, children);
    let real = real_tier::start_clusters_for(
        &clusters,
        &k8s,
        layout,
        state,
        opts.fake_nodes,
        opts.timeout,
        Some(&node_network),
    )
    .await?;
    let mut nodes = Vec::new();
    for (number, cluster) in (1..).zip(&real) {
        let wanted = if number == 1 {
            &["atoll-scheduler", "atoll-hub"][..]
        } else {
            &["atoll-agent"][..]
        };
        let archives = archives_of(&images, wanted);
        let dir = layout.dir.join("nodes").join(&cluster.name);
        nodes.push(
            RealNode::join(JoinSpec {
                cluster,
                bridge: &bridge,
                node: number,
                dir: &dir,
                bin_dir: &k8s_dir,
                images: &archives,
                timeout: opts.timeout,
            })
            .await?,
        );
    }
    for (node, cluster) in nodes.iter().zip(&real) {
        let client = client_for(&cluster.files.kubeconfig).await?;
        node.wait_ready(&client, opts.timeout).await?;
    }
    println!("fleet: {} real nodes Ready", nodes.len());

    let hub_url = install(opts, layout, &real, children, &bridge).await?;
    state.hub_url = Some(hub_url);
    let owner = nodes
        .first()
        .and_then(|n| n.process("containerd"))
        .map(|p| (p.pid, p.start_time.unwrap_or_default()))
        .unwrap_or_default();
    state.real_nodes = Some(RealNodes {
        network: bridge.detach(owner)?,
        nodes: nodes.into_iter().map(RealNode::detach).collect(),
    });
    state.save(&layout.state())
}

/// Builds atoll's images from the binaries in `bin_dir` (and the `make k8s` helm) into `out`.
fn fleet_images(bin_dir: &Path, out: &Path) -> Result<Vec<Built>, Error> {
    let err = |message: String| Error::BuildImages {
        bin_dir: bin_dir.to_path_buf(),
        message,
    };
    let helm = control_plane::helm_from_env()
        .ok_or_else(|| err("no helm in the make-k8s cache (run `make k8s`)".into()))?;
    let inputs = Inputs {
        bin_dir: bin_dir.to_path_buf(),
        helm,
        ca_bundle: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
        repository: "localhost".into(),
        tag: env!("CARGO_PKG_VERSION").into(),
    };
    build_images(&inputs, out).map_err(|e| err(e.to_string()))
}

/// The archives of the images named `localhost/<name>:<tag>` for each of `names`.
fn archives_of(images: &[Built], names: &[&str]) -> Vec<PathBuf> {
    images
        .iter()
        .filter(|b| names.iter().any(|n| image_name(&b.reference) == *n))
        .map(|b| b.archive.clone())
        .collect()
}

/// `atoll-hub` of `localhost/atoll-hub:0.1.0`.
fn image_name(reference: &str) -> &str {
    let path = reference.rsplit('/').next().unwrap_or(reference);
    path.split(':').next().unwrap_or(path)
}

/// Installs atoll as docs/install.md steps 3 to 5 do, approves each registration and waits for
/// every pod and ManagedCluster; the URL the agents dial.
async fn install(
    opts: &PodsOptions<'_>,
    layout: &Layout,
    real: &[RealCluster],
    children: &[ChildSpec],
    bridge: &HostBridge,
) -> Result<String, Error> {
    let (parent, real_children) = real.split_first().ok_or_else(|| Error::InvalidArgument {
        what: "--children".into(),
        message: "no clusters were started".into(),
    })?;
    let hub_host = network::node_address(bridge.index(), 1).to_string();
    let hub_url = format!("https://{hub_host}:{HUB_NODE_PORT}");
    let tls = control_plane::hub_tls(vec![
        hub_host,
        format!("atoll-hub.{}.svc", known::NAMESPACE_SYSTEM),
    ])?;
    write_hub_tls(layout, &tls)?;
    real_tier::apply_parent_overlay(parent, layout, opts.manifests, Run::Pods).await?;
    let admin = parent.admin_kubectl(layout);
    let (cert, key) = hub_tls_files(layout);
    admin
        .run(&[
            "-n",
            known::NAMESPACE_SYSTEM,
            "create",
            "secret",
            "tls",
            "atoll-hub-tls",
            &format!("--cert={}", cert.display()),
            &format!("--key={}", key.display()),
        ])
        .await?;
    let parent_client = client_for(&parent.files.kubeconfig).await?;
    let (id, secret) = crate::plan::new_bootstrap_token(&mut rand::rng());
    crate::install::apply_bootstrap_token(&parent_client, &id, &secret).await?;
    let token = format!("{id}.{secret}");
    control_plane::write_private(&layout.bootstrap_token(), &token)?;
    println!("fleet: atoll installed in the parent (kubectl apply -k), hub at {hub_url}");

    for (child, cluster) in children.iter().zip(real_children) {
        let settings = AgentSettings {
            hub_url: &hub_url,
            bootstrap_token: &token,
            cluster_name: &child.name,
            labels: &child.labels,
        };
        real_tier::apply_agent_overlay(
            cluster,
            layout,
            opts.manifests,
            &settings,
            Some(&tls.ca_pem),
        )
        .await?;
    }
    println!("fleet: the agent installed in each child (kubectl apply -k)");
    wait_deployments(
        &parent_client,
        "the parent",
        &PARENT_DEPLOYMENTS,
        opts.timeout,
    )
    .await?;
    // An agent is Ready once registered, so each registration is approved first.
    for child in children {
        approve(
            opts.bin_dir,
            &layout.parent_kubeconfig(),
            &child.name,
            opts.timeout,
        )
        .await?;
    }
    for cluster in real_children {
        let client = client_for(&cluster.files.kubeconfig).await?;
        wait_deployments(&client, &cluster.name, &[AGENT_DEPLOYMENT], opts.timeout).await?;
    }
    println!("fleet: every atoll pod Ready, every registration approved");
    Ok(hub_url)
}

/// Where the hub's certificate and key are written: `D/hub.crt`, `D/hub.key`.
fn hub_tls_files(layout: &Layout) -> (PathBuf, PathBuf) {
    (layout.dir.join("hub.crt"), layout.dir.join("hub.key"))
}

fn write_hub_tls(layout: &Layout, tls: &HubTls) -> Result<(), Error> {
    let (cert, key) = hub_tls_files(layout);
    control_plane::write_private(&layout.dir.join("hub-ca.crt"), &tls.ca_pem)?;
    control_plane::write_private(&cert, &tls.cert_pem)?;
    control_plane::write_private(&key, &tls.key_pem)
}

/// `kubectl atoll approve <cluster>` (the plugin binary in `bin_dir`), retried until the
/// agent's registration request is there.
async fn approve(
    bin_dir: &Path,
    kubeconfig: &Path,
    cluster: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let plugin = bin_dir.join("kubectl-atoll");
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let out = tokio::process::Command::new(&plugin)
            .args(["approve", cluster, "--kubeconfig"])
            .arg(kubeconfig)
            .env_remove("KUBECONFIG")
            .output()
            .await
            .map_err(|e| Error::RunCommand {
                command: plugin.display().to_string(),
                status: "not started".into(),
                stderr: e.to_string(),
            })?;
        if out.status.success() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("kubectl atoll approve {cluster}"),
                seconds: timeout.as_secs(),
                hint: format!("; it said: {}", String::from_utf8_lossy(&out.stderr).trim()),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until each Deployment of `names` in `clusternet-system` has all its replicas updated
/// and available; else fails with a report of each pod that is not Ready.
pub async fn wait_deployments(
    client: &Client,
    cluster: &str,
    names: &[&str],
    timeout: Duration,
) -> Result<(), Error> {
    let api = Api::<Deployment>::namespaced(client.clone(), known::NAMESPACE_SYSTEM);
    let what = format!("{} in {cluster}", names.join(" and "));
    let waited = poll_until(timeout, &what, "", || {
        let api = api.clone();
        async move {
            for name in names {
                let rolled_out = api
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|d| is_rolled_out(&d));
                if !rolled_out {
                    return Ok(false);
                }
            }
            Ok(true)
        }
    })
    .await;
    match waited {
        Err(Error::Timeout { .. }) => Err(Error::PodsNotReady {
            what,
            seconds: timeout.as_secs(),
            report: unready_pods_report(client).await,
        }),
        other => other,
    }
}

/// Whether a Deployment's newest ReplicaSet has all its replicas available.
pub fn is_rolled_out(deployment: &Deployment) -> bool {
    let want = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    let observed = status.observed_generation >= deployment.metadata.generation;
    observed
        && status.updated_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
}

/// Each pod of `clusternet-system` that is not Ready: its phase, node and container states,
/// its last events and the tail of its log.
pub async fn unready_pods_report(client: &Client) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), known::NAMESPACE_SYSTEM);
    let events = Api::<Event>::namespaced(client.clone(), known::NAMESPACE_SYSTEM);
    let listed = match pods.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => return format!("  (listing the pods failed: {e})"),
    };
    if listed.is_empty() {
        return "  no pods in clusternet-system (see `kubectl get events -n clusternet-system`)"
            .into();
    }
    let mut out = String::new();
    for pod in listed.iter().filter(|p| !pod_is_ready(p)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        out.push_str(&describe_pod(pod));
        let selector = format!("involvedObject.name={name}");
        if let Ok(list) = events.list(&ListParams::default().fields(&selector)).await {
            out.push_str(&event_lines(&list.items));
        }
        let params = LogParams {
            tail_lines: Some(LOG_TAIL),
            ..LogParams::default()
        };
        match pods.logs(&name, &params).await {
            Ok(log) if !log.trim().is_empty() => {
                out.push_str("    log:\n");
                for line in log.lines() {
                    out.push_str(&format!("      {line}\n"));
                }
            }
            Ok(_) => out.push_str("    log: (empty)\n"),
            Err(kube::Error::Api(status)) => {
                out.push_str(&format!("    log: (none: {})\n", status.message));
            }
            Err(e) => out.push_str(&format!("    log: (none: {e})\n")),
        }
    }
    out
}

/// Whether the pod's Ready condition is True.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `pod <name> on <node>: <phase>` and a line per container: waiting (reason: message),
/// terminated (reason, exit code) or running, with its restarts.
pub fn describe_pod(pod: &Pod) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("no node");
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("Unknown");
    let mut out = format!("  pod {name} on {node}: {phase}\n");
    for c in status.container_statuses.unwrap_or_default() {
        let state = c.state.unwrap_or_default();
        let now = if let Some(w) = state.waiting {
            format!(
                "waiting ({}: {})",
                w.reason.unwrap_or_default(),
                w.message.unwrap_or_default()
            )
        } else if let Some(t) = state.terminated {
            format!(
                "terminated ({}, exit code {})",
                t.reason.unwrap_or_default(),
                t.exit_code
            )
        } else {
            "running".to_string()
        };
        out.push_str(&format!(
            "    container {}: {now}, {} restarts\n",
            c.name, c.restart_count
        ));
    }
    out
}

/// The last [`EVENTS_SHOWN`] events, oldest first: `<type> <reason>: <message>`.
fn event_lines(events: &[Event]) -> String {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
    let skip = sorted.len().saturating_sub(EVENTS_SHOWN);
    sorted
        .into_iter()
        .skip(skip)
        .map(|e| {
            format!(
                "    event {} {}: {}\n",
                e.type_.as_deref().unwrap_or(""),
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("").trim()
            )
        })
        .collect()
}

/// Tears down the fleet's real nodes (before their control planes stop); what could not be
/// undone, in words.
pub fn tear_down_nodes(real: &RealNodes) -> Vec<String> {
    real.nodes
        .iter()
        .flat_map(|record| {
            let name = record.name.clone();
            RealNode::adopt(record.clone())
                .tear_down()
                .into_iter()
                .map(move |p| format!("{name}: {p}"))
        })
        .collect()
}

/// Removes the nodes' network (after their control planes stopped).
pub fn remove_network(real: &RealNodes) {
    drop(HostBridge::adopt(real.network));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};

    #[test]
    fn image_names_are_read_off_references() {
        assert_eq!(image_name("localhost/atoll-hub:0.1.0"), "atoll-hub");
        assert_eq!(image_name("atoll-agent"), "atoll-agent");
        let built = |r: &str| Built {
            reference: r.into(),
            digest: String::new(),
            archive: PathBuf::from(format!("/i/{}.tar", image_name(r))),
            size: 0,
        };
        let images = [
            built("localhost/atoll-scheduler:0.1.0"),
            built("localhost/atoll-hub:0.1.0"),
            built("localhost/atoll-agent:0.1.0"),
        ];
        assert_eq!(
            archives_of(&images, &["atoll-agent"]),
            [PathBuf::from("/i/atoll-agent.tar")]
        );
    }

    #[test]
    fn a_deployment_is_rolled_out_when_every_replica_is_new_and_available() {
        let deployment = |available, updated, generation, observed| Deployment {
            metadata: kube::api::ObjectMeta {
                generation: Some(generation),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(2),
                ..Default::default()
            }),
            status: Some(DeploymentStatus {
                replicas: Some(2),
                available_replicas: Some(available),
                updated_replicas: Some(updated),
                observed_generation: Some(observed),
                ..Default::default()
            }),
        };
        assert!(is_rolled_out(&deployment(2, 2, 3, 3)));
        assert!(!is_rolled_out(&deployment(1, 2, 3, 3)), "one unavailable");
        assert!(!is_rolled_out(&deployment(2, 1, 3, 3)), "one old");
        assert!(!is_rolled_out(&deployment(2, 2, 4, 3)), "not observed yet");
    }

    #[test]
    fn an_unready_pod_is_described_with_why_its_container_waits() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "atoll-hub-1"},
            "spec": {"nodeName": "atoll-0-1", "containers": []},
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "hub", "image": "localhost/atoll-hub:0.1.0", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}
            }]}
        }))
        .unwrap();
        assert!(!pod_is_ready(&pod));
        let text = describe_pod(&pod);
        assert!(
            text.contains("pod atoll-hub-1 on atoll-0-1: Pending"),
            "{text}"
        );
        assert!(
            text.contains("container hub: waiting (ErrImageNeverPull: image not present)"),
            "{text}"
        );
    }
}
