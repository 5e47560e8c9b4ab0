//! Simulation of what kubelets and workload controllers would do: Ready nodes, and workload
//! status as if every pod became ready after a delay.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::State;
use crate::server::engine::{Manager, finish_update, mstr, now, store_new};
use crate::store::{EventType, ResKey};

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
