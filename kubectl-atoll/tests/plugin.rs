//! The real `kubectl-atoll` binary against a parent devcluster: tables by column, `-o json` by
//! field, approval and denial as the hub reads them, and one-line errors with exit code 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use atoll_crds::apps::{
    AggregatedStatus, Description, DescriptionSpec, Feed, FeedStatusPerCluster, ReplicaStatus,
    SchedulingStrategy, Subscriber, Subscription, SubscriptionSpec,
};
use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestSpec, ManagedCluster,
    ManagedClusterSpec,
};
use atoll_crds::known;
use atoll_testkit::{Parent, create_namespace};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const EDGE_ID: &str = "3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10";
const NEW_ID: &str = "a7c2d4e6-1b3f-4a5c-8d7e-9f0a1b2c3d4e";
const DENIED_ID: &str = "0b1c2d3e-4f5a-4b6c-8d7e-8f9a0b1c2d3e";
const EDGE_NS: &str = "clusternet-edge";

/// A parent devcluster and a kubeconfig file for it.
struct Fixture {
    parent: Parent,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn start() -> Fixture {
        let parent = Parent::start().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        parent.cluster.write_kubeconfig(&kubeconfig).unwrap();
        Fixture {
            parent,
            kubeconfig,
            _dir: dir,
        }
    }

    fn client(&self) -> kube::Client {
        self.parent.client.clone()
    }

    /// Runs the plugin with `args` and `--kubeconfig`.
    async fn run(&self, args: &[&str]) -> Run {
        run(&self.kubeconfig, args).await
    }
}

/// What one run of the plugin left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self) -> String {
        assert_eq!(self.code, Some(0), "{self:?}");
        self.stdout
    }

    fn json(self) -> Value {
        serde_json::from_str(&self.ok()).unwrap()
    }

    /// Asserts a failure with exit code 1, nothing on stdout and exactly one line on stderr,
    /// and returns that line.
    fn failed(self) -> String {
        assert_eq!(self.code, Some(1), "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {self:?}");
        lines[0].to_owned()
    }
}

async fn run(kubeconfig: &Path, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-atoll"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("ATOLL_KUBECONFIG")
        .env_remove("ATOLL_CONTEXT")
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// The rows of the first table in `text` after the line `title` (or from the start when
/// `title` is empty), as maps from header to cell. Cells are cut at the headers' offsets, so a
/// cell may contain spaces (`True (5m)`).
fn table(text: &str, title: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    if !title.is_empty() {
        lines
            .by_ref()
            .find(|l| l.starts_with(title))
            .unwrap_or_else(|| panic!("no {title:?} in:\n{text}"));
    }
    let header = lines.next().unwrap_or_default();
    let mut starts = Vec::new();
    let mut names = Vec::new();
    let mut i = 0;
    for part in header.split("   ") {
        let name = part.trim();
        if !name.is_empty() {
            starts.push(i + part.find(name).unwrap());
            names.push(name.to_owned());
        }
        i += part.len() + 3;
    }
    lines
        .take_while(|l| !l.is_empty())
        .map(|line| {
            names
                .iter()
                .enumerate()
                .map(|(k, name)| {
                    let from = starts[k].min(line.len());
                    let to = starts.get(k + 1).map_or(line.len(), |&s| s.min(line.len()));
                    (name.clone(), line[from..to].trim().to_owned())
                })
                .collect()
        })
        .collect()
}

fn ago(minutes: i64) -> Value {
    let t = Timestamp::now() - SignedDuration::from_mins(minutes);
    json!(t.to_string())
}

fn ss() -> PatchParams {
    PatchParams::default()
}

/// ManagedCluster `edge` in its dedicated namespace, with the status an agent reports: Ready
/// for 30 minutes, last heartbeat 20 minutes ago.
async fn managed_cluster(client: &kube::Client) {
    create_namespace(client, EDGE_NS).await;
    let api: Api<ManagedCluster> = Api::namespaced(client.clone(), EDGE_NS);
    let mut mc = ManagedCluster::new(
        "edge",
        ManagedClusterSpec {
            cluster_id: EDGE_ID.into(),
            taints: vec![
                serde_json::from_value(
                    json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                )
                .unwrap(),
            ],
            ..ManagedClusterSpec::default()
        },
    );
    mc.metadata.labels = Some(BTreeMap::from([
        (known::LABEL_CLUSTER_ID.into(), EDGE_ID.into()),
        (known::LABEL_CLUSTER_NAME.into(), "edge".into()),
        ("env".into(), "prod".into()),
    ]));
    api.create(&PostParams::default(), &mc).await.unwrap();
    let status = json!({"status": {
        "lastObservedTime": ago(20),
        "k8sVersion": "v1.33.1",
        "healthz": true, "livez": true, "readyz": true,
        "allocatable": {"cpu": "8", "memory": "32Gi"},
        "nodeStatistics": {"readyNodes": 3, "notReadyNodes": 1},
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "ManagedClusterReady",
            "message": "cluster is healthy", "lastTransitionTime": ago(30),
        }],
    }});
    api.patch_status("edge", &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Three registrations: `edge`'s approved one, `newcomer`'s pending one and a denied one.
async fn registrations(client: &kube::Client) {
    let api: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    for (id, name, result) in [
        (EDGE_ID, "edge", Some("Approved")),
        (NEW_ID, "newcomer", None),
        (DENIED_ID, "intruder", Some("Denied")),
    ] {
        let crr_name = known::cluster_registration_request_name(id);
        let crr = ClusterRegistrationRequest::new(
            &crr_name,
            ClusterRegistrationRequestSpec {
                cluster_id: id.into(),
                cluster_name: Some(name.into()),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        api.create(&PostParams::default(), &crr).await.unwrap();
        if let Some(result) = result {
            let status = json!({"status": {
                "result": result,
                "dedicatedNamespace": format!("clusternet-{name}"),
                "managedClusterName": name,
            }});
            api.patch_status(&crr_name, &ss(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
    }
}

async fn crr_status(client: &kube::Client, id: &str) -> (Option<ApprovedResult>, Option<String>) {
    let crr = Api::<ClusterRegistrationRequest>::all(client.clone())
        .get(&known::cluster_registration_request_name(id))
        .await
        .unwrap();
    let status = crr.status.unwrap_or_default();
    (status.result, status.error_message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_lists_every_cluster_and_the_pending_registrations() {
    let f = Fixture::start().await;
    let empty = f.run(&["clusters"]).await.ok();
    assert_eq!(empty, "No clusters registered.\n");

    managed_cluster(&f.client()).await;
    registrations(&f.client()).await;
    let page = f.run(&["clusters"]).await.ok();

    let clusters = table(&page, "");
    assert_eq!(clusters.len(), 1, "{page}");
    let edge = &clusters[0];
    let want = [
        ("NAME", "edge"),
        ("ID", EDGE_ID),
        ("NAMESPACE", EDGE_NS),
        ("READY", "True (30m)"),
        ("VERSION", "v1.33.1"),
        ("NODES", "3/4"),
        ("CPU", "8"),
        ("MEMORY", "32Gi"),
        ("LABELS", "env=prod"),
        ("TAINTS", "dedicated=gpu:NoSchedule"),
        ("LAST HEARTBEAT", "20m"),
    ];
    for (column, value) in want {
        assert_eq!(edge[column], value, "column {column} of:\n{page}");
    }

    let pending = table(&page, "Pending registrations");
    assert_eq!(pending.len(), 1, "only the undecided request:\n{page}");
    let newcomer = &pending[0];
    assert_eq!(
        newcomer["NAME"],
        known::cluster_registration_request_name(NEW_ID)
    );
    assert_eq!(newcomer["CLUSTER"], "newcomer");
    assert_eq!(newcomer["ID"], NEW_ID);
    assert_eq!(newcomer["STATUS"], "Pending");
    assert_eq!(newcomer["SYNC MODE"], "Pull");

    let list = f.run(&["clusters", "-o", "json"]).await.json();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = items
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap(),
                i["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    let newcomer_crr = known::cluster_registration_request_name(NEW_ID);
    assert_eq!(
        kinds,
        [
            ("ManagedCluster", "edge"),
            ("ClusterRegistrationRequest", newcomer_crr.as_str())
        ]
    );
    assert_eq!(items[0]["metadata"]["namespace"], EDGE_NS);
    assert_eq!(items[0]["status"]["k8sVersion"], "v1.33.1");
    assert_eq!(items[0]["status"]["nodeStatistics"]["readyNodes"], 3);
    assert_eq!(items[0]["status"]["allocatable"]["memory"], "32Gi");
    assert_eq!(items[1]["spec"]["clusterName"], "newcomer");

    let yaml = f.run(&["clusters", "-o", "yaml"]).await.ok();
    let parsed: Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(parsed, list, "YAML and JSON carry the same List");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_and_deny_write_the_result_the_hub_reads() {
    let f = Fixture::start().await;
    let client = f.client();
    registrations(&client).await;
    let newcomer = known::cluster_registration_request_name(NEW_ID);

    let out = f.run(&["approve", "newcomer"]).await.ok();
    assert_eq!(
        out,
        format!("clusterregistrationrequest.clusters.clusternet.io/{newcomer} approved\n")
    );
    // The hub's registration loop goes on exactly when status.result is Approved.
    assert_eq!(
        crr_status(&client, NEW_ID).await,
        (Some(ApprovedResult::Approved), None)
    );
    let page = f.run(&["clusters"]).await.ok();
    assert!(!page.contains("Pending registrations"), "{page}");

    let again = f.run(&["approve", &newcomer]).await.ok();
    assert!(again.ends_with(" already approved\n"), "{again}");

    let out = f
        .run(&["deny", NEW_ID, "--reason", "not one of our sites"])
        .await
        .ok();
    assert!(out.ends_with(&format!("/{newcomer} denied\n")), "{out}");
    assert_eq!(
        crr_status(&client, NEW_ID).await,
        (
            Some(ApprovedResult::Denied),
            Some("not one of our sites".into())
        )
    );
    // The other registrations are untouched.
    assert_eq!(
        crr_status(&client, EDGE_ID).await.0,
        Some(ApprovedResult::Approved)
    );

    for args in [
        &["approve", "ghost"][..],
        &["deny", "ghost", "--reason", "x"][..],
    ] {
        let line = f.run(args).await.failed();
        assert_eq!(
            line,
            "error: no cluster registration request for cluster \"ghost\" (give its name, id, or \
             clusternet-<id>; see `kubectl atoll clusters`)",
            "{args:?}"
        );
    }
}

fn feed() -> Feed {
    Feed {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some("shop".into()),
        name: "web".into(),
    }
}

/// Subscription `shop/web`, divided over `edge` (3 replicas, 2 ready) and `lost` (no report),
/// with the Description of `edge` failing, and another Subscription's Description beside it.
async fn subscription(client: &kube::Client) {
    create_namespace(client, "shop").await;
    create_namespace(client, EDGE_NS).await;
    let subs: Api<Subscription> = Api::namespaced(client.clone(), "shop");
    let sub = Subscription::new(
        "web",
        SubscriptionSpec {
            scheduling_strategy: SchedulingStrategy::Dividing,
            subscribers: vec![Subscriber::default()],
            feeds: vec![feed()],
            ..SubscriptionSpec::default()
        },
    );
    subs.create(&PostParams::default(), &sub).await.unwrap();
    let status = json!({"status": {
        "bindingClusters": [format!("{EDGE_NS}/edge"), "clusternet-lost/lost"],
        "replicas": {feed().key(): [3, 1]},
        "desiredReleases": 2,
        "completedReleases": 0,
        "aggregatedStatuses": [serde_json::to_value(AggregatedStatus {
            feed: feed(),
            feed_status_details: vec![FeedStatusPerCluster {
                cluster_id: EDGE_ID.into(),
                cluster_name: "edge".into(),
                available: true,
                replica_status: ReplicaStatus {
                    replicas: Some(3),
                    ready_replicas: Some(2),
                    ..ReplicaStatus::default()
                },
            }],
            ..AggregatedStatus::default()
        }).unwrap()],
        "conditions": [{
            "type": "Scheduled", "status": "True", "reason": "Scheduled",
            "message": "bound to 2 clusters", "lastTransitionTime": ago(30),
        }],
    }});
    subs.patch_status("web", &ss(), &Patch::Merge(&status))
        .await
        .unwrap();

    let descs: Api<Description> = Api::namespaced(client.clone(), EDGE_NS);
    for (sub_name, phase, reason) in [
        ("web", "Failure", "apply Deployment shop/web: forbidden"),
        ("other", "Success", ""),
    ] {
        let mut d = Description::new(
            &known::description_name("shop", sub_name),
            DescriptionSpec::default(),
        );
        d.metadata.labels = Some(BTreeMap::from([
            (known::LABEL_SUBS_NAME.into(), sub_name.into()),
            (known::LABEL_SUBS_NAMESPACE.into(), "shop".into()),
            (known::LABEL_CLUSTER_NAME.into(), "edge".into()),
        ]));
        let name = d.metadata.name.clone().unwrap();
        descs.create(&PostParams::default(), &d).await.unwrap();
        let status = json!({"status": {"phase": phase, "reason": reason}});
        descs
            .patch_status(&name, &ss(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_conditions_clusters_and_replicas_per_feed() {
    let f = Fixture::start().await;
    subscription(&f.client()).await;
    let page = f.run(&["status", "web", "-n", "shop"]).await.ok();
    assert!(page.starts_with("Subscription:  shop/web\n"), "{page}");
    assert!(page.contains("Strategy:      Dividing\n"), "{page}");
    assert!(
        page.contains("Releases:      0/2 clusters completed\n"),
        "{page}"
    );

    let conditions = table(&page, "Conditions:");
    assert_eq!(conditions.len(), 1, "{page}");
    assert_eq!(conditions[0]["TYPE"], "Scheduled");
    assert_eq!(conditions[0]["STATUS"], "True");
    assert_eq!(conditions[0]["AGE"], "30m");
    assert_eq!(conditions[0]["MESSAGE"], "bound to 2 clusters");

    let clusters = table(&page, "Clusters:");
    let rows: Vec<[&str; 4]> = clusters
        .iter()
        .map(|r| {
            [
                r["CLUSTER"].as_str(),
                r["DESCRIPTION"].as_str(),
                r["PHASE"].as_str(),
                r["REASON"].as_str(),
            ]
        })
        .collect();
    assert_eq!(
        rows,
        [
            [
                "clusternet-edge/edge",
                "clusternet-edge/shop.web",
                "Failure",
                "apply Deployment shop/web: forbidden"
            ],
            [
                "clusternet-lost/lost",
                "<none>",
                "<none>",
                "no Description yet"
            ],
        ],
        "the other Subscription's Description is not listed:\n{page}"
    );

    let feeds = table(&page, "Feeds:");
    let rows: Vec<[&str; 4]> = feeds
        .iter()
        .map(|r| {
            [
                r["CLUSTER"].as_str(),
                r["DESIRED"].as_str(),
                r["READY"].as_str(),
                r["AVAILABLE"].as_str(),
            ]
        })
        .collect();
    assert_eq!(
        rows,
        [
            ["clusternet-edge/edge", "3", "2/3", "true"],
            ["clusternet-lost/lost", "1", "<none>", "<none>"],
        ],
        "{page}"
    );
    assert!(feeds.iter().all(|r| r["FEED"] == feed().key()), "{page}");

    let list = f
        .run(&["status", "web", "-n", "shop", "-o", "json"])
        .await
        .json();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    assert_eq!(items[0]["kind"], "Subscription");
    assert_eq!(items[0]["status"]["replicas"][feed().key()], json!([3, 1]));
    assert_eq!(items[1]["kind"], "Description");
    assert_eq!(items[1]["metadata"]["name"], "shop.web");
    assert_eq!(items[1]["status"]["phase"], "Failure");

    let line = f.run(&["status", "ghost", "-n", "shop"]).await.failed();
    assert_eq!(
        line,
        "error: subscription \"ghost\" not found in namespace \"shop\""
    );
    // Without -n, the kubeconfig context's namespace (`default`) is searched.
    let line = f.run(&["status", "web"]).await.failed();
    assert_eq!(
        line,
        "error: subscription \"web\" not found in namespace \"default\""
    );
}
