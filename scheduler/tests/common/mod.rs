//! Shared fixtures of the scheduler's integration tests: ManagedClusters and a scheduler running
//! in the test process (the parent devcluster and polling come from `atoll_testkit`).
#![allow(dead_code)]

use atoll_crds::apps::{Description, Subscription};
use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster};
use atoll_scheduler::controller::{self, Metrics};
use atoll_testkit::create_namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::time::Duration;

/// Starts the scheduler's control loop in this process; it stops when the test ends.
pub async fn start_scheduler(client: &Client) -> tokio::task::JoinHandle<()> {
    start_scheduler_with_metrics(client, Metrics::default()).await
}

/// Like [`start_scheduler`], reporting into `metrics` (clones share their values).
pub async fn start_scheduler_with_metrics(
    client: &Client,
    metrics: Metrics,
) -> tokio::task::JoinHandle<()> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let client = client.clone();
    let config = controller::Config {
        resync: Duration::from_secs(30),
        feed_ready_timeout: Duration::from_secs(5),
        retry: Duration::from_millis(200),
        ..controller::Config::default()
    };
    let handle = tokio::spawn(async move {
        let reporter = Reporter {
            controller: "atoll-scheduler".into(),
            instance: None,
        };
        let result = controller::run(client, config, metrics, reporter, move || {
            let _ = ready_tx.send(());
        })
        .await;
        if let Err(e) = result {
            eprintln!("scheduler stopped: {e}");
        }
    });
    tokio::time::timeout(Duration::from_secs(20), ready_rx)
        .await
        .expect("scheduler caches synced")
        .expect("scheduler ready");
    handle
}

/// A child cluster as the hub would register it: dedicated namespace + ManagedCluster with a
/// Ready status and allocatable capacity.
pub async fn add_cluster(client: &Client, name: &str, labels: Value, cpu: &str) -> String {
    add_cluster_with_readiness(client, name, labels, cpu, true).await
}

/// Like [`add_cluster`], but the cluster is never Ready.
pub async fn add_unready_cluster(client: &Client, name: &str, labels: Value, cpu: &str) -> String {
    add_cluster_with_readiness(client, name, labels, cpu, false).await
}

async fn add_cluster_with_readiness(
    client: &Client,
    name: &str,
    labels: Value,
    cpu: &str,
    ready: bool,
) -> String {
    let namespace = format!("clusternet-{name}");
    create_namespace(client, &namespace).await;
    let mut all_labels = labels.as_object().cloned().unwrap_or_default();
    all_labels.insert(
        "clusters.clusternet.io/cluster-name".into(),
        Value::from(name),
    );
    let id = format!(
        "00000000-0000-4000-8000-{:012x}",
        name.len() as u64 * 7919 + name.bytes().map(u64::from).sum::<u64>()
    );
    let mc: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1",
        "kind": "ManagedCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels},
        "spec": {"clusterId": id, "syncMode": "Pull"},
    }))
    .unwrap();
    let api: Api<ManagedCluster> = Api::namespaced(client.clone(), &namespace);
    api.create(&PostParams::default(), &mc).await.unwrap();
    register(client, &id, &namespace, name).await;
    set_cluster_ready(client, &namespace, name, ready, cpu).await;
    namespace
}

/// The approved ClusterRegistrationRequest the hub leaves for a cluster it registered: without
/// it the scheduler does not trust the ManagedCluster.
pub async fn register(client: &Client, cluster_id: &str, namespace: &str, name: &str) {
    let crr_name = atoll_crds::known::cluster_registration_request_name(cluster_id);
    let api: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let crr: ClusterRegistrationRequest = serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1",
        "kind": "ClusterRegistrationRequest",
        "metadata": {"name": crr_name},
        "spec": {"clusterId": cluster_id},
    }))
    .unwrap();
    api.create(&PostParams::default(), &crr).await.unwrap();
    let status = json!({"status": {
        "result": "Approved", "dedicatedNamespace": namespace, "managedClusterName": name,
    }});
    api.patch_status(&crr_name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

pub async fn set_cluster_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    ready: bool,
    cpu: &str,
) {
    let api: Api<ManagedCluster> = Api::namespaced(client.clone(), namespace);
    let status = json!({"status": {
        "k8sVersion": "v1.32.0",
        "healthz": ready, "livez": ready, "readyz": ready,
        "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
        "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": if ready { "ManagedClusterReady" } else { "ManagedClusterNotReady" },
            "message": "set by the test",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Merge-patches the ManagedCluster `name` (its namespace is `clusternet-<name>`).
pub async fn patch_cluster(client: &Client, name: &str, patch: Value) {
    Api::<ManagedCluster>::namespaced(client.clone(), &format!("clusternet-{name}"))
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

pub async fn apply(client: &Client, object: Value) {
    let api_version = object["apiVersion"].as_str().unwrap().to_owned();
    let kind = object["kind"].as_str().unwrap().to_owned();
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap();
}

/// Every Description (all namespaces) of the Subscription `namespace/name`.
pub async fn descriptions_of(client: &Client, namespace: &str, name: &str) -> Vec<Description> {
    Api::<Description>::all(client.clone())
        .list(&ListParams::default().labels(&format!(
            "apps.clusternet.io/subs.namespace={namespace},apps.clusternet.io/subs.name={name}"
        )))
        .await
        .unwrap()
        .items
}

/// Replica count per cluster namespace of the first object of each Description.
pub async fn replicas_by_cluster(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = descriptions_of(client, namespace, name)
        .await
        .iter()
        .map(|d| {
            let replicas = d
                .spec
                .raw
                .first()
                .and_then(|o| o.pointer("/spec/replicas"))
                .and_then(Value::as_i64)
                .unwrap_or(-1);
            (d.namespace().unwrap_or_default(), replicas)
        })
        .collect();
    out.sort();
    out
}

pub async fn subscription(client: &Client, namespace: &str, name: &str) -> Subscription {
    Api::<Subscription>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap()
}

pub fn deployment(namespace: &str, name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "500m"}}}]},
            },
        },
    })
}

pub fn subscription_yaml(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}
