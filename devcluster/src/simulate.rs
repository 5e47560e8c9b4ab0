//! Simulation of what kubelets and workload controllers would do: Ready nodes, workload status
//! as if every pod became ready after a delay, and the ReplicaSet of each Deployment's current
//! pod template.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::server::State;
use crate::server::engine::{Manager, finish_update, mstr, now, store_new};
use crate::store::{EventType, ResKey, Txn};

/// Creates `count` Ready nodes `node-1` … `node-N` (4 CPU, 16 GiB, 110 pods each).
pub fn create_nodes(state: &State, count: u32) -> Result<(), crate::Error> {
    let Some(info) = state.lookup("", "v1", "nodes") else {
        return Err(crate::Error::Seed("nodes are not served".into()));
    };
    let key = ResKey::new("", "nodes");
    let mut txn = state.store.begin();
    for i in 1..=count {
        let name = format!("node-{i}");
        if txn.get(&key, "", &name).is_some() {
            continue;
        }
        let t = now();
        let capacity = json!({"cpu":"4","memory":"16Gi","pods":"110","ephemeral-storage":"100Gi"});
        let node = json!({"apiVersion":"v1","kind":"Node","metadata":{"name": name,
            "labels":{"kubernetes.io/hostname": name,"kubernetes.io/os":"linux","kubernetes.io/arch":"amd64",
                "node.kubernetes.io/instance-type":"devcluster"}},
            "spec":{"podCIDR": format!("10.244.{i}.0/24")},
            "status":{"capacity": capacity,"allocatable": capacity,
                "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady",
                    "message":"kubelet is posting ready status","lastHeartbeatTime": t,"lastTransitionTime": t}],
                "addresses":[{"type":"InternalIP","address": format!("172.18.0.{}", i + 1)},{"type":"Hostname","address": name}],
                "nodeInfo":{"kubeletVersion":"v1.32.0","kubeProxyVersion":"v1.32.0","operatingSystem":"linux",
                    "architecture":"amd64","containerRuntimeVersion":"devcluster://1.0","osImage":"devcluster",
                    "kernelVersion":"6.0.0","machineID":"","systemUUID":"","bootID":""}}});
        store_new(
            state,
            &mut txn,
            &info,
            node,
            Manager::Internal("kubelet"),
            false,
        )
        .map_err(|e| crate::Error::Seed(e.message))?;
    }
    txn.commit()
}

const WORKLOADS: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
];

/// Watches workloads and, `delay` after each spec change, writes a status in which every
/// replica is ready (Jobs: succeeded and Complete).
pub async fn run_workloads(state: Arc<State>, delay: Duration) {
    let mut rx = state.store.subscribe();
    // Existing workloads first.
    rescan(&state, delay);
    loop {
        match rx.recv().await {
            Ok(ev) => {
                if ev.type_ == EventType::Deleted
                    || !WORKLOADS
                        .iter()
                        .any(|(g, r)| ev.key.group == *g && ev.key.resource == *r)
                {
                    continue;
                }
                if needs_status(&ev.object) {
                    schedule(
                        &state,
                        (
                            ev.key.clone(),
                            mstr(&ev.object, "namespace").to_string(),
                            mstr(&ev.object, "name").to_string(),
                        ),
                        delay,
                    );
                }
            }
            // Missed events: look at every workload again.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => rescan(&state, delay),
            Err(_) => return,
        }
    }
}

fn needs_status(obj: &Value) -> bool {
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    obj["status"]["observedGeneration"].as_i64() != Some(generation)
        && mstr(obj, "deletionTimestamp").is_empty()
}

fn rescan(state: &Arc<State>, delay: Duration) {
    let mut pending: Vec<(ResKey, String, String)> = Vec::new();
    for (g, r) in WORKLOADS {
        let key = ResKey::new(g, r);
        let objs = state.store.begin().list(&key, None);
        for o in objs.iter().filter(|o| needs_status(o)) {
            pending.push((
                key.clone(),
                mstr(o, "namespace").to_string(),
                mstr(o, "name").to_string(),
            ));
        }
    }
    for p in pending {
        schedule(state, p, delay);
    }
}

fn schedule(state: &Arc<State>, target: (ResKey, String, String), delay: Duration) {
    let state = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        mark_ready(&state, &target.0, &target.1, &target.2);
    });
}

fn ready_status(kind: &str, obj: &Value, nodes: i64) -> Value {
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
    let t = now();
    let replicas = obj["spec"]["replicas"].as_i64().unwrap_or(1);
    let cond = |type_: &str, reason: &str, message: &str| {
        json!({"type": type_, "status":"True", "lastTransitionTime": t, "lastUpdateTime": t,
            "reason": reason, "message": message})
    };
    match kind {
        "Deployment" => {
            json!({"observedGeneration": generation, "replicas": replicas, "readyReplicas": replicas,
            "availableReplicas": replicas, "updatedReplicas": replicas,
            "conditions":[cond("Available","MinimumReplicasAvailable","Deployment has minimum availability."),
                cond("Progressing","NewReplicaSetAvailable","ReplicaSet has successfully progressed.")]})
        }
        "StatefulSet" => {
            json!({"observedGeneration": generation, "replicas": replicas, "readyReplicas": replicas,
            "availableReplicas": replicas, "updatedReplicas": replicas, "currentReplicas": replicas})
        }
        "ReplicaSet" => {
            json!({"observedGeneration": generation, "replicas": replicas, "readyReplicas": replicas,
            "availableReplicas": replicas, "fullyLabeledReplicas": replicas})
        }
        "DaemonSet" => json!({"observedGeneration": generation, "currentNumberScheduled": nodes,
            "desiredNumberScheduled": nodes, "numberAvailable": nodes, "numberMisscheduled": 0,
            "numberReady": nodes, "updatedNumberScheduled": nodes}),
        _ => {
            let completions = obj["spec"]["completions"].as_i64().unwrap_or(1);
            json!({"succeeded": completions, "active": 0, "ready": 0, "startTime": t, "completionTime": t,
                "conditions":[{"type":"Complete","status":"True","lastProbeTime": t,"lastTransitionTime": t}]})
        }
    }
}

fn mark_ready(state: &State, key: &ResKey, ns: &str, name: &str) {
    let Some(info) = state.registry.read().by_key(key) else {
        return;
    };
    let nodes = state
        .store
        .list_page(&ResKey::new("", "nodes"), None, None, 0, &|_| true)
        .items
        .len()
        .max(1) as i64;
    let mut txn = state.store.begin();
    let Some(old) = txn.get(key, ns, name) else {
        return;
    };
    if !mstr(&old, "deletionTimestamp").is_empty() {
        return;
    }
    let mut new = (*old).clone();
    new["status"] = ready_status(&info.kind, &old, nodes);
    if let Some(prev) = old.get("status") {
        // Keep lastTransitionTime of unchanged conditions (no spurious writes).
        if let (Some(pc), Some(nc)) = (
            prev["conditions"].as_array(),
            new["status"]["conditions"].as_array_mut(),
        ) {
            for c in nc.iter_mut() {
                if let Some(p) = pc
                    .iter()
                    .find(|p| p["type"] == c["type"] && p["status"] == c["status"])
                {
                    for f in ["lastTransitionTime", "lastUpdateTime", "lastProbeTime"] {
                        if !p[f].is_null() {
                            c[f] = p[f].clone();
                        }
                    }
                }
            }
        }
        for f in ["startTime", "completionTime"] {
            if !prev[f].is_null() {
                new["status"][f] = prev[f].clone();
            }
        }
    }
    if info.kind == "Deployment" {
        roll_replica_sets(state, &mut txn, &old);
    }
    if let Err(e) = finish_update(
        state,
        &mut txn,
        &info,
        &old,
        new,
        Some("status"),
        Manager::Internal("kube-controller-manager"),
        false,
    ) {
        tracing::warn!(error = %e.message, "simulated status write failed");
    }
}

/// The label the Deployment controller adds to a ReplicaSet's selector and pod template.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation numbering a Deployment's rollouts on its ReplicaSets.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// What the Deployment controller leaves for clients to find: the ReplicaSet of the current pod
/// template (`<name>-<pod-template-hash>`, controlled by the Deployment, with its replicas), and
/// those of earlier templates scaled to 0. `helm --wait` finds a Deployment's ReplicaSet that way
/// (the one whose template equals the Deployment's but for the hash label) and waits for its
/// ready replicas, which the simulation then reports like any ReplicaSet's.
fn roll_replica_sets(state: &State, txn: &mut Txn<'_>, deployment: &Value) {
    let Some(info) = state.lookup("apps", "v1", "replicasets") else {
        return;
    };
    let key = ResKey::new("apps", "replicasets");
    let (ns, uid) = (mstr(deployment, "namespace"), mstr(deployment, "uid"));
    let desired = desired_replica_set(deployment);
    let owned: Vec<_> = txn
        .list(&key, Some(ns))
        .into_iter()
        .filter(|rs| controller_uid(rs) == Some(uid))
        .collect();
    let revision = owned
        .iter()
        .filter_map(|rs| {
            rs["metadata"]["annotations"][REVISION]
                .as_str()?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    let manager = || Manager::Internal("kube-controller-manager");
    let mut current = None;
    for rs in &owned {
        let mut new = (**rs).clone();
        if mstr(rs, "name") == mstr(&desired, "name") {
            new["spec"]["replicas"] = desired["spec"]["replicas"].clone();
            current = Some(rs);
        } else {
            new["spec"]["replicas"] = json!(0);
        }
        if new != **rs
            && let Err(e) = finish_update(state, txn, &info, rs, new, None, manager(), false)
        {
            tracing::warn!(error = %e.message, "simulated ReplicaSet scaling failed");
        }
    }
    if current.is_none() {
        let mut rs = desired;
        rs["metadata"]["annotations"][REVISION] = json!((revision + 1).to_string());
        if let Err(e) = store_new(state, txn, &info, rs, manager(), false) {
            tracing::warn!(error = %e.message, "simulated ReplicaSet creation failed");
        }
    }
}

/// The uid of an object's controlling owner.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == json!(true))?["uid"]
        .as_str()
}

/// The ReplicaSet the Deployment controller makes for a Deployment's current pod template.
fn desired_replica_set(deployment: &Value) -> Value {
    let spec = &deployment["spec"];
    let mut template = spec["template"].clone();
    let hash = pod_template_hash(&template);
    template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
    let mut selector = spec["selector"].clone();
    selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
    let name = mstr(deployment, "name");
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{name}-{hash}"), "namespace": mstr(deployment, "namespace"),
            "labels": template["metadata"]["labels"].clone(),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                "uid": mstr(deployment, "uid"), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicas": spec["replicas"].as_i64().unwrap_or(1),
            "minReadySeconds": spec["minReadySeconds"].as_i64().unwrap_or(0),
            "selector": selector, "template": template}})
}

/// Ten characters of the alphabet kube-controller-manager's hashes use (no vowels, no 0/1/3),
/// derived from the pod template (serde_json's maps are ordered, so equal templates hash equal).
fn pod_template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjkmnpqrstvwxz2456789";
    let digest = Sha256::digest(serde_json::to_vec(template).unwrap_or_default());
    digest
        .iter()
        .take(10)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "uid": "u1"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    #[test]
    fn a_deployments_replica_set_carries_its_template_hash_and_controller() {
        let rs = desired_replica_set(&deployment("i:1"));
        let hash = rs["metadata"]["labels"][POD_TEMPLATE_HASH]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"app": "web", POD_TEMPLATE_HASH: hash})
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"],
            json!({"app": "web", POD_TEMPLATE_HASH: hash})
        );
        assert_eq!(
            rs["spec"]["template"]["spec"],
            deployment("i:1")["spec"]["template"]["spec"]
        );
        assert_eq!(rs["spec"]["replicas"], 3);
        assert_eq!(controller_uid(&rs), Some("u1"));
    }

    #[test]
    fn the_template_hash_follows_the_template_only() {
        let hash =
            |d: &Value| desired_replica_set(d)["metadata"]["labels"][POD_TEMPLATE_HASH].clone();
        let mut rescaled = deployment("i:1");
        rescaled["spec"]["replicas"] = json!(5);
        assert_eq!(hash(&deployment("i:1")), hash(&rescaled));
        assert_ne!(hash(&deployment("i:1")), hash(&deployment("i:2")));
        let h = pod_template_hash(&json!({}));
        assert!(
            h.len() == 10
                && h.bytes()
                    .all(|b| b"bcdfghjkmnpqrstvwxz2456789".contains(&b)),
            "{h}"
        );
    }
}
