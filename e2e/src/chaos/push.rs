//! Push-mode children of a chaos run: clusters without an agent, whose Descriptions the hub
//! applies itself with the credentials of Secret `child-cluster-deployer` in the cluster's
//! dedicated namespace (`hub/src/push.rs`). The run starts their API servers next to the
//! fleet's (`fleet up` gives every child an agent), registers each as an administrator would
//! (hub/README.md, "Push mode": namespace, Secret, ManagedCluster, an approved
//! ClusterRegistrationRequest) and has the Secret's kubeconfig name a fault proxy in front of
//! the child, so that the hub's applier meets the faults mid-apply.

use std::path::Path;
use std::time::Duration;

use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster};
use atoll_crds::known;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::apply_typed;
use crate::Error;
use crate::fleet::{self, client_for};
use crate::plan::{Backend, ChildSpec, Layout};
use crate::process::{Launch, launch, wait_for_process};
use crate::state::{ChildRecord, FleetState, Role};

/// The environment variable giving how many Push children a run has (`0` leaves them out).
pub const CHILDREN_ENV: &str = "CHAOS_PUSH";

/// Push children when [`CHILDREN_ENV`] is not set.
pub const DEFAULT_CHILDREN: usize = 1;

/// The label the run puts on its Push ManagedClusters, to tell them in a listing.
pub const LABEL: &str = "chaos.atoll.dev/push";

/// How many Push children a run has: [`CHILDREN_ENV`], or [`DEFAULT_CHILDREN`].
pub fn children_from_env() -> usize {
    std::env::var(CHILDREN_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_CHILDREN)
}

/// The Push children after `pull` agents' children: `child-<pull+1>` on, labelled as the
/// fleet labels its children (so that the Subscriptions select them alike) plus [`LABEL`].
pub fn specs(pull: usize, push: usize) -> Vec<ChildSpec> {
    crate::plan::child_specs(pull + push)
        .into_iter()
        .skip(pull)
        .map(|mut spec| {
            spec.labels.insert(LABEL.to_string(), "yes".to_string());
            spec
        })
        .collect()
}

/// A fixed cluster id per child index (an agent draws its own; an administrator picks one).
pub fn cluster_id(index: usize) -> String {
    format!("c4a05000-0000-4000-8000-{index:012}")
}

/// The dedicated namespace the administrator creates for Push child `name`.
pub fn dedicated_namespace(name: &str) -> String {
    format!("clusternet-{name}")
}

/// Starts the API servers of `specs` as the fleet starts its children's (a devcluster keeping
/// its objects in `<dir>/<name>-data`, or a real control plane), records them in the fleet
/// state as children and processes (so that the plan can kill them and `fleet down` stops
/// them), and waits until each answers.
pub async fn start_clusters(
    layout: &Layout,
    bin_dir: &Path,
    backend: Backend,
    specs: &[ChildSpec],
    timeout: Duration,
) -> Result<(), Error> {
    let mut state = FleetState::load(&layout.state())?;
    for spec in specs {
        state.children.push(ChildRecord {
            name: spec.name.clone(),
            kubeconfig: layout.child_kubeconfig(spec.index),
            labels: spec.labels.clone(),
        });
    }
    state.save(&layout.state())?;
    match backend {
        Backend::Devcluster => {
            let binaries = crate::plan::Binaries::locate(bin_dir)?;
            for spec in specs {
                let kubeconfig = layout.child_kubeconfig(spec.index);
                let _ = std::fs::remove_file(&kubeconfig);
                let data = layout.dir.join(format!("{}-data", spec.name));
                launch(
                    &mut state,
                    layout,
                    Launch {
                        name: &spec.name,
                        role: Role::Child,
                        binary: &binaries.devcluster,
                        args: crate::fleet::child_devcluster_args(
                            &kubeconfig,
                            super::NODES,
                            super::WORKLOAD_DELAY_MS,
                            Some(&data),
                        ),
                        log: layout.log(&spec.name),
                        admin: None,
                    },
                )?;
            }
            for spec in specs {
                let kubeconfig = layout.child_kubeconfig(spec.index);
                let what = format!("{} to write {}", spec.name, kubeconfig.display());
                wait_for_process(&state, &spec.name, &what, timeout, || async {
                    kubeconfig.metadata().is_ok_and(|m| m.len() > 0)
                })
                .await?;
            }
        }
        Backend::Kube => {
            let k8s = crate::real_tier::locate_binaries()?;
            let clusters: Vec<_> = specs
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        layout.child_kubeconfig(s.index),
                        Role::Child,
                    )
                })
                .collect();
            // Every process is recorded (and saved) as it starts, also when a later one fails.
            crate::real_tier::start_clusters(
                &clusters,
                &k8s,
                layout,
                &mut state,
                super::NODES,
                timeout,
            )
            .await?;
        }
    }
    state.save(&layout.state())
}

/// Registers Push child `spec` in the parent as an administrator would: its dedicated
/// namespace, Secret `child-cluster-deployer` holding `kubeconfig` (the child's, with the
/// proxy's URL), the ManagedCluster with its labels, and an approved
/// ClusterRegistrationRequest naming that namespace.
pub async fn register(parent: &Client, spec: &ChildSpec, kubeconfig: &str) -> Result<(), Error> {
    let ns = dedicated_namespace(&spec.name);
    let id = cluster_id(spec.index);
    apply_typed(
        &Api::<Namespace>::all(parent.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await?;
    apply_typed(
        &Api::<Secret>::namespaced(parent.clone(), &ns),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "child-cluster-deployer", "namespace": ns},
            "type": "Opaque",
            "data": {"kubeconfig": crate::control_plane::b64(kubeconfig)}
        }),
    )
    .await?;
    let crr_name = known::cluster_registration_request_name(&id);
    let crrs = Api::<ClusterRegistrationRequest>::all(parent.clone());
    apply_typed(
        &crrs,
        json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ClusterRegistrationRequest",
            "metadata": {"name": crr_name},
            "spec": {"clusterId": id, "syncMode": "Push"}
        }),
    )
    .await?;
    apply_typed(
        &Api::<ManagedCluster>::namespaced(parent.clone(), &ns),
        json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": spec.name, "namespace": ns, "labels": spec.labels},
            "spec": {"clusterId": id, "syncMode": "Push"}
        }),
    )
    .await?;
    crrs.patch_status(
        &crr_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "result": "Approved", "dedicatedNamespace": ns, "managedClusterName": spec.name,
        }})),
    )
    .await
    .map_err(super::api_error(format!("approving {crr_name}")))?;
    Ok(())
}

/// Starts, registers and waits for the Push children `specs`: `proxy_urls` are the URLs of
/// their proxies, in the same order.
pub async fn add(
    layout: &Layout,
    bin_dir: &Path,
    backend: Backend,
    specs: &[ChildSpec],
    proxy_urls: &[String],
    timeout: Duration,
) -> Result<(), Error> {
    if specs.is_empty() {
        return Ok(());
    }
    start_clusters(layout, bin_dir, backend, specs, timeout).await?;
    let parent = client_for(&layout.parent_kubeconfig()).await?;
    for (spec, url) in specs.iter().zip(proxy_urls) {
        let path = layout.child_kubeconfig(spec.index);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Kubeconfig {
            path: path.clone(),
            message: e.to_string(),
        })?;
        register(&parent, spec, &fleet::with_server(&text, url)).await?;
    }
    let state = FleetState::load(&layout.state())?;
    for spec in specs {
        let clusters =
            Api::<ManagedCluster>::namespaced(parent.clone(), &dedicated_namespace(&spec.name));
        let what = format!(
            "Push cluster {} to be Ready (the hub serving it through its proxy)",
            spec.name
        );
        wait_for_process(&state, "hub", &what, timeout, || async {
            clusters
                .get_opt(&spec.name)
                .await
                .ok()
                .flatten()
                .is_some_and(|mc| fleet::is_ready(&mc))
        })
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_children_follow_the_pull_ones_with_the_fleet_labels_and_their_own() {
        let specs = specs(3, 2);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["child-4", "child-5"]);
        assert_eq!(specs[0].labels["env"], "prod");
        assert_eq!(specs[0].labels["region"], "eu");
        assert_eq!(specs[1].labels["region"], "us");
        assert!(specs.iter().all(|s| s.labels[LABEL] == "yes"));
        assert_ne!(cluster_id(4), cluster_id(5));
        assert_eq!(dedicated_namespace("child-4"), "clusternet-child-4");
    }
}
