//! Scheduler at scale against an in-process devcluster (or, with `BENCH_PARENT=kube`, a real
//! kube-apiserver built by `make k8s`), printed as a table:
//! - 1,000 Subscriptions x 100 clusters (100,000 Descriptions) from a cold start: time to
//!   converge, and Descriptions written per second against raw creates per second measured in
//!   the same run, once into the empty store and once into the full one (their mean is the
//!   baseline: the scheduler's writes span every store size in between);
//! - one feed edit reaching all 100 Descriptions of its Subscription: p50/p99 latency;
//! - the scheduler's resident memory at 100,000 Descriptions (it runs as its own process).
//!
//! Run with `make bench` (which builds `atoll-scheduler` in release mode first), or
//! `cargo build --release -p atoll-scheduler && cargo run --release -p atoll-scheduler --example bench_scale`.
//! Sizes can be lowered with `BENCH_SUBSCRIPTIONS` and `BENCH_CLUSTERS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_bench::{cpu_seconds, percentile, rss_kib};
use atoll_crds::apps::Description;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

const CONCURRENCY: usize = 32;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn create_all(
    client: &Client,
    objects: Vec<(Option<String>, Value)>,
    resource: &kube::api::ApiResource,
) {
    stream::iter(objects)
        .map(|(ns, object)| {
            let client = client.clone();
            let resource = resource.clone();
            async move {
                let api: Api<kube::api::DynamicObject> = match &ns {
                    Some(ns) => Api::namespaced_with(client, ns, &resource),
                    None => Api::all_with(client, &resource),
                };
                let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
                api.create(&PostParams::default(), &object).await.unwrap();
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(group, version, kind),
        plural,
    )
}

#[tokio::main]
async fn main() {
    let subscriptions = env_usize("BENCH_SUBSCRIPTIONS", 1000);
    let clusters = env_usize("BENCH_CLUSTERS", 100);
    let edits = env_usize("BENCH_EDITS", 20);
    let bin_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .to_path_buf();
    let scheduler_bin = bin_dir.join("atoll-scheduler");
    assert!(
        scheduler_bin.exists(),
        "{} missing: run `cargo build --release -p atoll-scheduler` first",
        scheduler_bin.display()
    );

    // The parent: devcluster in this process, or with BENCH_PARENT=kube a real control plane
    // (etcd + kube-apiserver, from `make k8s`) in processes of its own.
    let real_parent = std::env::var("BENCH_PARENT").as_deref() == Ok("kube");
    let dir = tempfile::tempdir().unwrap();
    let (_dev, _real, client, kubeconfig, parent_name) = if real_parent {
        let real = atoll_bench::RealParent::start().await;
        let client = real.client().await;
        let kubeconfig = real.kubeconfig.clone();
        (None, Some(real), client, kubeconfig, "kube-apiserver")
    } else {
        let dev = devcluster::DevCluster::start_default().await.unwrap();
        let client = dev.client().await.unwrap();
        let kubeconfig = dir.path().join("parent.kubeconfig");
        dev.write_kubeconfig(&kubeconfig).unwrap();
        (Some(dev), None, client, kubeconfig, "devcluster")
    };

    // Every CRD, served once Established (devcluster at once, a real server soon after).
    atoll_testkit::install_crds(&client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let namespaces: Vec<(Option<String>, Value)> = ["clusternet-system", "clusternet-reserved", "apps", "raw"]
        .iter()
        .map(|n| (None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})))
        .chain((0..clusters).map(|i| {
            (None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("clusternet-c{i:03}")}}))
        }))
        .collect();
    create_all(
        &client,
        namespaces,
        &resource("", "v1", "Namespace", "namespaces"),
    )
    .await;
    let _ = Api::<Namespace>::all(client.clone());

    // Raw creates of Description-sized objects, for comparison in the same run.
    let raw_count = subscriptions * clusters / 10;
    let raw_objects: Vec<(Option<String>, Value)> = (0..raw_count)
        .map(|i| {
            (Some("raw".to_owned()), json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"name": format!("raw-{i}"), "namespace": "raw"},
                "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&[deployment_json("apps", &format!("app-{i}"), 3)])},
            }))
        })
        .collect();
    let description_resource = resource(
        "apps.clusternet.io",
        "v1alpha1",
        "Description",
        "descriptions",
    );
    let started = Instant::now();
    create_all(&client, raw_objects, &description_resource).await;
    let raw_elapsed = started.elapsed();
    let raw_rate = raw_count as f64 / raw_elapsed.as_secs_f64();
    // The same objects written with server-side apply, as the scheduler writes them.
    let apply_objects: Vec<Value> = (0..raw_count)
        .map(|i| json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": format!("ssa-{i}"), "namespace": "raw"},
            "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&[deployment_json("apps", &format!("app-{i}"), 3)])},
        }))
        .collect();
    let started = Instant::now();
    stream::iter(apply_objects)
        .map(|object| {
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client.clone(), "raw", &description_resource);
            async move {
                let name = object["metadata"]["name"].as_str().unwrap().to_owned();
                api.patch(
                    &name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(&object),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    let apply_rate = raw_count as f64 / started.elapsed().as_secs_f64();

    // Clusters, feeds and Subscriptions, all before the scheduler starts (cold start).
    let cluster_objects: Vec<(Option<String>, Value)> = (0..clusters)
        .map(|i| {
            (Some(format!("clusternet-c{i:03}")), json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": format!("c{i:03}"), "namespace": format!("clusternet-c{i:03}"), "labels": {"env": "prod"}},
                "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull"},
            }))
        })
        .collect();
    create_all(
        &client,
        cluster_objects,
        &resource(
            "clusters.clusternet.io",
            "v1beta1",
            "ManagedCluster",
            "managedclusters",
        ),
    )
    .await;
    // The approved registrations the hub would leave: the scheduler trusts only those clusters.
    let registrations: Vec<(Option<String>, Value)> = (0..clusters)
        .map(|i| {
            let id = format!("00000000-0000-4000-8000-{i:012}");
            (None, json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ClusterRegistrationRequest",
                "metadata": {"name": atoll_crds::known::cluster_registration_request_name(&id)},
                "spec": {"clusterId": id},
            }))
        })
        .collect();
    create_all(
        &client,
        registrations,
        &resource(
            "clusters.clusternet.io",
            "v1beta1",
            "ClusterRegistrationRequest",
            "clusterregistrationrequests",
        ),
    )
    .await;
    for i in 0..clusters {
        let id = format!("00000000-0000-4000-8000-{i:012}");
        let api: Api<atoll_crds::clusters::ClusterRegistrationRequest> = Api::all(client.clone());
        api.patch_status(
            &atoll_crds::known::cluster_registration_request_name(&id),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "result": "Approved",
                "dedicatedNamespace": format!("clusternet-c{i:03}"),
                "managedClusterName": format!("c{i:03}"),
            }})),
        )
        .await
        .unwrap();
    }
    for i in 0..clusters {
        let api: Api<atoll_crds::clusters::ManagedCluster> =
            Api::namespaced(client.clone(), &format!("clusternet-c{i:03}"));
        api.patch_status(&format!("c{i:03}"), &PatchParams::default(), &Patch::Merge(json!({"status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "ManagedClusterReady", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }}))).await.unwrap();
    }
    let feeds: Vec<(Option<String>, Value)> = (0..subscriptions)
        .map(|i| {
            (
                Some("apps".to_owned()),
                deployment_json("apps", &format!("app-{i}"), 3),
            )
        })
        .collect();
    create_all(
        &client,
        feeds,
        &resource("apps", "v1", "Deployment", "deployments"),
    )
    .await;
    let subs: Vec<(Option<String>, Value)> = (0..subscriptions)
        .map(|i| {
            (Some("apps".to_owned()), json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                "metadata": {"name": format!("app-{i}"), "namespace": "apps"},
                "spec": {
                    "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
                    "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "apps", "name": format!("app-{i}")}],
                },
            }))
        })
        .collect();
    create_all(
        &client,
        subs,
        &resource(
            "apps.clusternet.io",
            "v1alpha1",
            "Subscription",
            "subscriptions",
        ),
    )
    .await;

    // Watch the scheduler's Descriptions, metadata only (so the observer costs little): count
    // them, and note when each one's rendered content (its render-hash annotation) changes.
    let expected = subscriptions * clusters;
    type Seen = HashMap<String, (String, String)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (changed_tx, mut changed_rx) =
        tokio::sync::mpsc::unbounded_channel::<(String, String, String, Instant)>();
    {
        let seen = seen.clone();
        let api: Api<PartialObjectMeta<Description>> = Api::all(client.clone());
        tokio::spawn(async move {
            let stream = watcher(
                api,
                watcher::Config::default().labels("apps.clusternet.io/subs.uid"),
            )
            .applied_objects();
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(d)) = stream.try_next().await {
                let key = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
                let hash = d
                    .annotations()
                    .get("apps.clusternet.io/render-hash")
                    .cloned()
                    .unwrap_or_default();
                let sub = d
                    .labels()
                    .get("apps.clusternet.io/subs.name")
                    .cloned()
                    .unwrap_or_default();
                seen.lock()
                    .await
                    .insert(key.clone(), (sub.clone(), hash.clone()));
                let _ = changed_tx.send((sub, key, hash, Instant::now()));
            }
        });
    }

    let started = Instant::now();
    let own_cpu_before = cpu_seconds(std::process::id());
    let apiserver_pid = _real.as_ref().map(|r| r.apiserver_pid());
    let apiserver_cpu_before = apiserver_pid.map(cpu_seconds);
    let mut scheduler = tokio::process::Command::new(&scheduler_bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--admin-listen")
        .arg(std::env::var("BENCH_ADMIN").unwrap_or_else(|_| "127.0.0.1:0".to_owned()))
        .arg("--leader-elect=false")
        .env("ATOLL_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    loop {
        let count = seen.lock().await.len();
        if count >= expected {
            break;
        }
        if started.elapsed() > Duration::from_secs(900) {
            panic!("did not converge: {count}/{expected} Descriptions after 900 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converge = started.elapsed();
    let own_cpu = cpu_seconds(std::process::id()) - own_cpu_before;
    let apiserver_cpu_after = apiserver_pid.map(cpu_seconds);
    let rate = expected as f64 / converge.as_secs_f64();
    // Let the status writes settle before reading memory.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = scheduler.id().map(rss_kib).unwrap_or(0);
    let cpu = scheduler.id().map(cpu_seconds).unwrap_or(0.0);

    // Feed edits: time until all of the Subscription's Descriptions carry the edit.
    while changed_rx.try_recv().is_ok() {}
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "apps");
    let mut latencies = Vec::with_capacity(edits);
    for edit in 0..edits {
        let name = format!("app-{}", edit % subscriptions);
        let marker = format!("edit-{edit}");
        let before: HashMap<String, String> = seen
            .lock()
            .await
            .iter()
            .filter(|(_, (sub, _))| *sub == name)
            .map(|(key, (_, hash))| (key.clone(), hash.clone()))
            .collect();
        let sent = Instant::now();
        deployments
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"bench-edit": marker}}})),
            )
            .await
            .unwrap();
        let mut reached = std::collections::HashSet::new();
        let mut last = sent;
        while reached.len() < clusters {
            match tokio::time::timeout(Duration::from_secs(30), changed_rx.recv()).await {
                Ok(Some((sub, key, hash, at))) if sub == name => {
                    if before.get(&key) != Some(&hash) && reached.insert(key) {
                        last = at;
                    }
                }
                Ok(Some(_)) => {}
                _ => panic!(
                    "edit {edit} reached only {}/{clusters} Descriptions",
                    reached.len()
                ),
            }
        }
        latencies.push(last - sent);
    }
    latencies.sort();
    let _ = scheduler.kill().await;

    // Raw creates again, now into the full store: an API server's cost per write grows with
    // what it holds (a real kube-apiserver's markedly), and the scheduler's writes spanned every
    // size from empty to full, so its baseline is the mean of the rates at both ends.
    let late_objects: Vec<(Option<String>, Value)> = (0..raw_count)
        .map(|i| {
            (Some("raw".to_owned()), json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"name": format!("raw-late-{i}"), "namespace": "raw"},
                "spec": {"deployer": "Generic", "raw": atoll_crds::json_text::encode_all(&[deployment_json("apps", &format!("app-{i}"), 3)])},
            }))
        })
        .collect();
    let started = Instant::now();
    create_all(&client, late_objects, &description_resource).await;
    let late_raw_rate = raw_count as f64 / started.elapsed().as_secs_f64();
    let baseline_rate = (raw_rate + late_raw_rate) / 2.0;

    println!();
    let rows = [
        (
            "Subscriptions x clusters".to_owned(),
            format!("{subscriptions} x {clusters} = {expected} Descriptions"),
            "1,000 x 100",
        ),
        (
            format!(
                "raw {parent_name} creates into the empty store ({raw_count} Descriptions, {CONCURRENCY} in flight)"
            ),
            format!("{raw_rate:.0}/s"),
            "",
        ),
        (
            format!("raw {parent_name} creates into the full store (after the cold start)"),
            format!("{late_raw_rate:.0}/s"),
            "",
        ),
        (
            format!("raw {parent_name} server-side applies (same objects)"),
            format!("{apply_rate:.0}/s"),
            "",
        ),
        (
            "cold start to all Descriptions written".to_owned(),
            format!("{:.1} s", converge.as_secs_f64()),
            "",
        ),
        (
            "Descriptions written per second".to_owned(),
            format!(
                "{rate:.0}/s ({:.0}% of the mean raw create rate; {:.0}% of raw creates into the empty store, {:.0}% of raw applies)",
                100.0 * rate / baseline_rate,
                100.0 * rate / raw_rate,
                100.0 * rate / apply_rate
            ),
            ">= 50% of raw",
        ),
        (
            "scheduler CPU time for the cold start".to_owned(),
            format!("{cpu:.1} s"),
            "",
        ),
        (
            if real_parent {
                "watcher (bench process) CPU time for the cold start".to_owned()
            } else {
                "devcluster + watcher (bench process) CPU time for the cold start".to_owned()
            },
            format!("{own_cpu:.1} s"),
            "",
        ),
        (
            "kube-apiserver CPU time for the cold start / RSS at the end".to_owned(),
            match (apiserver_pid, apiserver_cpu_before, apiserver_cpu_after) {
                (Some(pid), Some(before), Some(after)) => format!(
                    "{:.1} s / {:.0} MiB",
                    after - before,
                    rss_kib(pid) as f64 / 1024.0
                ),
                _ => "- (devcluster parent)".to_owned(),
            },
            "",
        ),
        (
            format!("feed edit reaching all {clusters} Descriptions, p50"),
            format!(
                "{:.1} ms",
                percentile(&latencies, 0.5).as_secs_f64() * 1000.0
            ),
            "",
        ),
        (
            format!("feed edit reaching all {clusters} Descriptions, p99"),
            format!(
                "{:.1} ms",
                percentile(&latencies, 0.99).as_secs_f64() * 1000.0
            ),
            "< 100 ms",
        ),
        (
            format!("scheduler RSS at {expected} Descriptions"),
            format!("{:.1} MiB", rss as f64 / 1024.0),
            "< 200 MiB",
        ),
    ];
    println!("| measurement | value | target |");
    println!("|---|---|---|");
    for (what, value, target) in rows {
        println!("| {what} | {value} | {target} |");
    }
}

fn deployment_json(namespace: &str, name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}},
    })
}
