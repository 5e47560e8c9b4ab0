//! The real `kubectl-atoll` binary against a parent devcluster: tables by column, `-o json` by
//! field, approval and denial as the hub reads them, and one-line errors with exit code 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use atoll_crds::apps::{
    AggregatedStatus, Description, DescriptionSpec, Feed, FeedStatusPerCluster, Manifest,
    ReplicaStatus, SchedulingStrategy, Subscriber, Subscription, SubscriptionSpec,
};
use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestSpec, ManagedCluster,
    ManagedClusterSpec,
};
use atoll_crds::known;
use atoll_testkit::{Parent, create_namespace, eventually};
use k8s_openapi::api::core::v1::Event;
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

/// The rows of the indented table under the line `title` (spaces before it ignored), as
/// `kubectl describe` prints them: the table ends at the first line indented less than its
/// header.
fn indented_table(text: &str, title: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(title));
    lines
        .next()
        .unwrap_or_else(|| panic!("no {title:?} in:\n{text}"));
    let mut lines = lines.peekable();
    let header = lines.peek().copied().unwrap_or_default();
    let indent = &header[..header.len() - header.trim_start().len()];
    let body: Vec<&str> = lines
        .take_while(|l| {
            !indent.is_empty() && l.starts_with(indent) && !l[indent.len()..].starts_with(' ')
        })
        .map(|l| &l[indent.len()..])
        .collect();
    table(&body.join("\n"), "")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_register_a_registered_cluster_again_is_decided_apart_and_replacing_takes_replace()
 {
    let f = Fixture::start().await;
    let client = f.client();
    registrations(&client).await;
    let api: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let edge = known::cluster_registration_request_name(EDGE_ID);
    let ask = |id: &str| {
        json!({"status": {"reRegistration": {
            "id": id, "requestedAt": ago(60), "bootstrapTokenId": "abcdef",
            "peer": "10.9.8.7:40000", "clusterName": "edge", "replaces": "LiveRegistration",
            "result": null, "errorMessage": null,
        }}})
    };
    api.patch_status(&edge, &ss(), &Patch::Merge(&ask("r1")))
        .await
        .unwrap();
    let page = f.run(&["clusters"]).await.ok();
    assert!(
        page.contains("ReRegistration")
            && page.contains("bootstrap token abcdef from 10.9.8.7:40000"),
        "{page}"
    );

    // Approving would hand a live registration over: refused without --replace, nothing written.
    let line = f.run(&["approve", "edge"]).await.failed();
    assert!(
        line.contains("abcdef")
            && line.contains("10.9.8.7:40000")
            && line.contains("kubectl atoll approve clusternet-")
            && line.contains("--replace"),
        "{line}"
    );
    let re = |crr: ClusterRegistrationRequest| {
        let st = crr.status.unwrap_or_default();
        (st.result, st.re_registration.and_then(|r| r.result))
    };
    assert_eq!(
        re(api.get(&edge).await.unwrap()),
        (Some(ApprovedResult::Approved), None)
    );

    // Denying refuses the request alone: the registration stays Approved.
    let out = f.run(&["deny", "edge", "--reason", "not ours"]).await.ok();
    assert!(
        out.ends_with(&format!(
            "/{edge} re-registration denied; the registration is unchanged\n"
        )),
        "{out}"
    );
    let crr = api.get(&edge).await.unwrap();
    let st = crr.status.clone().unwrap_or_default();
    assert_eq!(st.error_message, None);
    assert_eq!(
        st.re_registration.and_then(|r| r.error_message).as_deref(),
        Some("not ours")
    );
    assert_eq!(
        re(crr),
        (Some(ApprovedResult::Approved), Some(ApprovedResult::Denied))
    );

    // A new request, approved with --replace.
    api.patch_status(&edge, &ss(), &Patch::Merge(&ask("r2")))
        .await
        .unwrap();
    let out = f.run(&["approve", "edge", "--replace"]).await.ok();
    assert!(out.ends_with(" re-registration approved\n"), "{out}");
    let crr = api.get(&edge).await.unwrap();
    assert_eq!(
        crr.status
            .as_ref()
            .and_then(|s| s.re_registration.as_ref())
            .map(|r| r.id.as_str()),
        Some("r2")
    );
    assert_eq!(
        re(crr),
        (
            Some(ApprovedResult::Approved),
            Some(ApprovedResult::Approved)
        )
    );
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

/// An Event in `EDGE_NS` about `kind`/`name`, last seen `minutes` ago.
async fn event(client: &kube::Client, name: &str, kind: &str, object: &str, minutes: i64) {
    let api: Api<Event> = Api::namespaced(client.clone(), EDGE_NS);
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": name.to_lowercase(), "namespace": EDGE_NS},
        "involvedObject": {
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": kind,
            "namespace": EDGE_NS, "name": object,
        },
        "type": "Warning", "reason": format!("{name}Reason"),
        "message": format!("{name} says\nhello"),
        "firstTimestamp": ago(minutes), "lastTimestamp": ago(minutes), "count": 1,
        "source": {"component": "atoll-hub"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &event).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_shows_the_cluster_its_descriptions_and_events() {
    let f = Fixture::start().await;
    let client = f.client();
    managed_cluster(&client).await;
    subscription(&client).await;
    // `shop.web` carries two objects; the agent reported the Deployment's status.
    let descs: Api<Description> = Api::namespaced(client.clone(), EDGE_NS);
    let raw = json!({"spec": {"raw": atoll_crds::json_text::encode_all(&[
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 3}}),
    ])}});
    descs
        .patch("shop.web", &ss(), &Patch::Merge(&raw))
        .await
        .unwrap();
    let status = json!({"status": {"manifestStatuses": [{
        "apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web",
        "observedStatus": {"readyReplicas": 2},
    }]}});
    descs
        .patch_status("shop.web", &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
    event(&client, "Older", "ManagedCluster", "edge", 9).await;
    event(&client, "Newer", "ManagedCluster", "edge", 3).await;
    event(&client, "Elsewhere", "ManagedCluster", "someone-else", 1).await;

    let page = f.run(&["describe", "cluster", "edge"]).await.ok();
    for line in [
        "Name:            edge\n".to_owned(),
        format!("Cluster ID:      {EDGE_ID}\n"),
        format!("Namespace:       {EDGE_NS}\n"),
        "Ready:           True (30m)\n".to_owned(),
        "Version:         v1.33.1\n".to_owned(),
        "Nodes:           3/4 ready\n".to_owned(),
        "Taints:          dedicated=gpu:NoSchedule\n".to_owned(),
        "Allocatable:     cpu: 8\n                 memory: 32Gi\n".to_owned(),
        "    Subscription:  shop/web\n".to_owned(),
        "    Objects:       2\n".to_owned(),
    ] {
        assert!(page.contains(&line), "{line:?} in:\n{page}");
    }
    assert!(page.contains("  shop.web:\n    Subscription:  shop/web\n    Deployer:      Generic\n    Phase:         Failure\n    Reason:        apply Deployment shop/web: forbidden\n"), "{page}");

    let conditions = indented_table(&page, "Conditions:");
    assert_eq!(conditions.len(), 1, "{page}");
    assert_eq!(conditions[0]["TYPE"], "Ready");
    assert_eq!(conditions[0]["REASON"], "ManagedClusterReady");

    let objects = indented_table(&page, "Objects:       2");
    let rows: Vec<[&str; 5]> = objects
        .iter()
        .map(|r| {
            [
                r["API VERSION"].as_str(),
                r["KIND"].as_str(),
                r["NAMESPACE"].as_str(),
                r["NAME"].as_str(),
                r["OBSERVED STATUS"].as_str(),
            ]
        })
        .collect();
    assert_eq!(
        rows,
        [
            ["v1", "Namespace", "<none>", "shop", "<none>"],
            [
                "apps/v1",
                "Deployment",
                "shop",
                "web",
                "{\"readyReplicas\":2}"
            ],
        ],
        "{page}"
    );
    // The other Subscription's Description is listed too: the cluster receives it.
    assert!(
        page.contains("  shop.other:\n    Subscription:  shop/other\n"),
        "{page}"
    );

    let events = indented_table(&page, "Events:");
    let rows: Vec<[&str; 4]> = events
        .iter()
        .map(|r| {
            [
                r["TYPE"].as_str(),
                r["REASON"].as_str(),
                r["AGE"].as_str(),
                r["MESSAGE"].as_str(),
            ]
        })
        .collect();
    assert_eq!(
        rows,
        [
            ["Warning", "OlderReason", "9m", "Older says hello"],
            ["Warning", "NewerReason", "3m", "Newer says hello"],
        ],
        "newest last, only the events about edge:\n{page}"
    );

    let by_id = f.run(&["describe", "cluster", EDGE_ID]).await.ok();
    assert!(by_id.starts_with("Name:            edge\n"), "{by_id}");

    let line = f.run(&["describe", "cluster", "ghost"]).await.failed();
    assert_eq!(
        line,
        "error: no ManagedCluster with name or cluster id \"ghost\" (see `kubectl atoll clusters`)"
    );
}

const NAMESPACE_AND_DEPLOYMENT: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: qux
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: my-nginx
  namespace: qux
  labels:
    app: nginx
spec:
  replicas: 2
  selector:
    matchLabels: {app: nginx}
  template:
    metadata:
      labels: {app: nginx}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
";

async fn manifests(client: &kube::Client) -> Vec<Manifest> {
    let mut all = Api::<Manifest>::namespaced(client.clone(), known::NAMESPACE_RESERVED)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_get_and_delete_manifests_as_clusternets_shadow_api_names_them() {
    let f = Fixture::start().await;
    let client = f.client();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nginx.yaml");
    std::fs::write(&file, NAMESPACE_AND_DEPLOYMENT).unwrap();
    let file = file.to_str().unwrap();

    let out = f.run(&["apply", "-f", file]).await.ok();
    assert_eq!(
        out,
        "manifest.apps.clusternet.io/namespaces.qux configured\n\
         manifest.apps.clusternet.io/deployments.qux.my-nginx configured\n"
    );
    let all = manifests(&client).await;
    let names: Vec<&str> = all
        .iter()
        .map(|m| m.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["deployments.qux.my-nginx", "namespaces.qux"]);
    let deploy = &all[0];
    let labels = deploy.metadata.labels.clone().unwrap();
    for (key, value) in [
        (known::LABEL_CONFIG_GROUP, "apps"),
        (known::LABEL_CONFIG_VERSION, "v1"),
        (known::LABEL_CONFIG_KIND, "Deployment"),
        (known::LABEL_CONFIG_NAME, "my-nginx"),
        (known::LABEL_CONFIG_NAMESPACE, "qux"),
        (known::LABEL_CREATED_BY, known::CREATED_BY_HUB),
        ("app", "nginx"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "{key}: {labels:?}"
        );
    }
    assert_eq!(deploy.template["kind"], "Deployment");
    assert_eq!(deploy.template["spec"]["replicas"], 2);
    assert_eq!(deploy.template["metadata"]["namespace"], "qux");
    assert_eq!(
        deploy.template["metadata"]["labels"][known::LABEL_CREATED_BY],
        known::CREATED_BY_HUB
    );
    let managers: Vec<&str> = deploy
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert_eq!(managers, ["kubectl-atoll"]);
    let ns = &all[1];
    let labels = ns.metadata.labels.clone().unwrap();
    assert_eq!(labels[known::LABEL_CONFIG_GROUP], "");
    assert_eq!(labels[known::LABEL_CONFIG_VERSION], "v1");
    assert_eq!(labels[known::LABEL_CONFIG_KIND], "Namespace");
    assert_eq!(labels[known::LABEL_CONFIG_NAME], "qux");
    assert_eq!(labels[known::LABEL_CONFIG_NAMESPACE], "");

    // Applying again changes nothing.
    f.run(&["apply", "-f", dir.path().to_str().unwrap()])
        .await
        .ok();
    assert_eq!(manifests(&client).await.len(), 2);

    let page = f.run(&["get", "manifests"]).await.ok();
    let rows = table(&page, "");
    let cells: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| {
            [
                r["NAME"].as_str(),
                r["KIND"].as_str(),
                r["NAMESPACE"].as_str(),
                r["TEMPLATE NAME"].as_str(),
            ]
        })
        .collect();
    assert_eq!(
        cells,
        [
            ["deployments.qux.my-nginx", "Deployment", "qux", "my-nginx"],
            ["namespaces.qux", "Namespace", "<none>", "qux"],
        ],
        "{page}"
    );
    assert!(rows.iter().all(|r| r["AGE"].ends_with('s')), "{page}");
    let list = f.run(&["get", "manifests", "-o", "json"]).await.json();
    assert_eq!(list["items"][0]["kind"], "Manifest");
    assert_eq!(list["items"][0]["template"]["kind"], "Deployment");

    let out = f.run(&["delete", "-f", file]).await.ok();
    assert_eq!(
        out,
        "manifest.apps.clusternet.io/namespaces.qux deleted\n\
         manifest.apps.clusternet.io/deployments.qux.my-nginx deleted\n"
    );
    assert!(manifests(&client).await.is_empty());
    assert_eq!(
        f.run(&["get", "manifests"]).await.ok(),
        "No Manifests in namespace clusternet-reserved.\n"
    );
    let line = f.run(&["delete", "-f", file]).await;
    assert_eq!(line.code, Some(1), "{line:?}");
    assert!(
        line.stderr
            .contains("Manifests not found: namespaces.qux, deployments.qux.my-nginx"),
        "{line:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_never_silently_takes_another_users_manifest() {
    let f = Fixture::start().await;
    let client = f.client();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nginx.yaml");
    let file = file.to_str().unwrap();
    // Writes the objects with `replicas`, then applies them as `manager` (plus `flags`).
    let apply_as = async |replicas: &str, manager: &str, flags: &[&str]| {
        let objects =
            NAMESPACE_AND_DEPLOYMENT.replace("replicas: 2", &format!("replicas: {replicas}"));
        std::fs::write(file, objects).unwrap();
        let mut args = vec!["apply", "-f", file, "--field-manager", manager];
        args.extend_from_slice(flags);
        f.run(&args).await
    };
    apply_as("2", "kubectl-atoll:alice", &[]).await.ok();

    // Bob changes what Alice applied: refused, naming Alice's manager and the field.
    let run = apply_as("5", "kubectl-atoll:bob", &[]).await;
    assert_eq!(run.code, Some(1), "{run:?}");
    // The Namespace's Manifest, which Bob applies unchanged, goes through (shared ownership).
    assert_eq!(
        run.stdout,
        "manifest.apps.clusternet.io/namespaces.qux configured\n"
    );
    let refused = run.stderr;
    for part in [
        "Manifest deployments.qux.my-nginx holds fields another user applied",
        "you apply as kubectl-atoll:bob",
        "conflict with \"kubectl-atoll:alice\"",
        "replicas",
        "--force-conflicts",
    ] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    let replicas = |all: &[Manifest]| {
        all.iter()
            .find(|m| m.template["kind"] == "Deployment")
            .map(|m| m.template["spec"]["replicas"].clone())
    };
    assert_eq!(replicas(&manifests(&client).await), Some(json!(2)));

    // Alice's own change, and Bob's once he forces it.
    apply_as("5", "kubectl-atoll:alice", &[]).await.ok();
    assert_eq!(replicas(&manifests(&client).await), Some(json!(5)));
    apply_as("7", "kubectl-atoll:bob", &["--force-conflicts"])
        .await
        .ok();
    assert_eq!(replicas(&manifests(&client).await), Some(json!(7)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_writes_nothing_when_an_input_is_invalid() {
    let f = Fixture::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-good.yaml"), NAMESPACE_AND_DEPLOYMENT).unwrap();
    let bad = dir.path().join("b-bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\n data: {a: 1}\n",
    )
    .unwrap();
    let line = f
        .run(&["apply", "-f", dir.path().to_str().unwrap()])
        .await
        .failed();
    let want = format!("error: {}:5:", bad.display());
    assert!(line.starts_with(&want), "{line}");
    assert!(line.contains("invalid YAML"), "{line}");
    assert!(manifests(&f.client()).await.is_empty(), "nothing applied");

    let widget = dir.path().join("widget.yaml");
    std::fs::write(
        &widget,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    .unwrap();
    let good = dir.path().join("a-good.yaml");
    let line = f
        .run(&[
            "apply",
            "-f",
            good.to_str().unwrap(),
            "-f",
            widget.to_str().unwrap(),
        ])
        .await
        .failed();
    assert!(
        line.starts_with("error: unknown kind \"Widget\" in \"example.com/v1\""),
        "{line}"
    );
    assert!(manifests(&f.client()).await.is_empty(), "nothing applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_the_page_again_when_the_subscription_changes() {
    let f = Fixture::start().await;
    let client = f.client();
    subscription(&client).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-atoll"))
        .args(["status", "web", "-n", "shop", "--watch", "--kubeconfig"])
        .arg(&f.kubeconfig)
        .env_remove("ATOLL_KUBECONFIG")
        .env_remove("ATOLL_CONTEXT")
        .env_remove("KUBECONFIG")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = seen.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        })
    };
    let output = || seen.lock().unwrap().clone();
    let timeout = std::time::Duration::from_secs(20);
    eventually("the first page", timeout, || async {
        output().contains("Releases:      0/2 clusters completed\n")
    })
    .await;

    let subs: Api<Subscription> = Api::namespaced(client.clone(), "shop");
    let status = json!({"status": {"completedReleases": 2}});
    subs.patch_status("web", &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("the page after the change", timeout, || async {
        output().contains("\n\nSubscription:  shop/web\n")
            && output().contains("Releases:      2/2 clusters completed\n")
    })
    .await;
    // A Description's change is seen too.
    let descs: Api<Description> = Api::namespaced(client.clone(), EDGE_NS);
    let status = json!({"status": {"phase": "Success", "reason": ""}});
    descs
        .patch_status("shop.web", &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually(
        "the page after the Description's change",
        timeout,
        || async {
            let text = output();
            let last = text
                .rsplit("Subscription:  shop/web")
                .next()
                .unwrap_or_default()
                .to_owned();
            last.contains("clusternet-edge/shop.web   Success")
        },
    )
    .await;
    assert!(
        output()
            .lines()
            .next()
            .is_some_and(|l| l == "Subscription:  shop/web"),
        "{}",
        output()
    );
    // Ctrl-C ends the watch with success.
    let pid = child.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let exit = tokio::time::timeout(timeout, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    reader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reads_stdin_and_a_kustomization() {
    let f = Fixture::start().await;
    let client = f.client();

    // `-f -`: JSON on stdin; a namespaced object without namespace goes to `-n`.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-atoll"))
        .args(["apply", "-f", "-", "-n", "shop", "--kubeconfig"])
        .arg(&f.kubeconfig)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf"}});
        stdin.write_all(cm.to_string().as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "manifest.apps.clusternet.io/configmaps.shop.conf configured\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = manifests(&client).await;
    assert_eq!(all[0].template["metadata"]["namespace"], "shop");

    let kubectl_works = tokio::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !kubectl_works {
        eprintln!("kubectl not found: `apply -k` not tested");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nginx.yaml"), NAMESPACE_AND_DEPLOYMENT).unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [nginx.yaml]\nnamePrefix: prod-\n",
    )
    .unwrap();
    let out = f
        .run(&["apply", "-k", dir.path().to_str().unwrap()])
        .await
        .ok();
    assert_eq!(
        out,
        "manifest.apps.clusternet.io/namespaces.qux configured\n\
         manifest.apps.clusternet.io/deployments.qux.prod-my-nginx configured\n"
    );
    let names: Vec<String> = manifests(&client)
        .await
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(
        names,
        [
            "configmaps.shop.conf",
            "deployments.qux.prod-my-nginx",
            "namespaces.qux"
        ],
        "kustomize prefixes the Deployment, not the Namespace"
    );
}

/// A child cluster as the hub registers it: its dedicated namespace `clusternet-<name>`, a
/// Ready ManagedCluster with allocatable capacity and, when `approved`, the approved
/// ClusterRegistrationRequest naming that namespace (without it the scheduler, and so `plan`,
/// leaves the cluster out).
async fn registered_cluster(client: &kube::Client, name: &str, id: &str, approved: bool) {
    let namespace = format!("clusternet-{name}");
    create_namespace(client, &namespace).await;
    let mut mc = ManagedCluster::new(
        name,
        ManagedClusterSpec {
            cluster_id: id.into(),
            ..ManagedClusterSpec::default()
        },
    );
    mc.metadata.labels = Some(BTreeMap::from([
        (known::LABEL_CLUSTER_ID.into(), id.into()),
        (known::LABEL_CLUSTER_NAME.into(), name.into()),
    ]));
    let api: Api<ManagedCluster> = Api::namespaced(client.clone(), &namespace);
    api.create(&PostParams::default(), &mc).await.unwrap();
    let status = json!({"status": {
        "k8sVersion": "v1.33.1",
        "healthz": true, "livez": true, "readyz": true,
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "ManagedClusterReady",
            "message": "cluster is healthy", "lastTransitionTime": ago(30),
        }],
    }});
    api.patch_status(name, &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
    if !approved {
        return;
    }
    let crrs: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let crr_name = known::cluster_registration_request_name(id);
    let crr = ClusterRegistrationRequest::new(
        &crr_name,
        ClusterRegistrationRequestSpec {
            cluster_id: id.into(),
            cluster_name: Some(name.into()),
            ..ClusterRegistrationRequestSpec::default()
        },
    );
    crrs.create(&PostParams::default(), &crr).await.unwrap();
    let status = json!({"status": {
        "result": "Approved", "dedicatedNamespace": namespace, "managedClusterName": name,
    }});
    crrs.patch_status(&crr_name, &ss(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Server-side applies `object` (any kind the parent serves) as the test.
async fn apply_object(client: &kube::Client, object: Value) {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let name = object["metadata"]["name"].as_str().unwrap();
    api.patch(name, &ss_apply(), &Patch::Apply(&object))
        .await
        .unwrap();
}

fn ss_apply() -> PatchParams {
    PatchParams::apply("test").force()
}

/// A Subscription of `shop/web` (the Deployment, or `feed_name`) with `strategy`, as a file.
fn subscription_file(dir: &Path, strategy: &str, feed_name: &str) -> String {
    let dividing = if strategy == "Dividing" {
        "  dividingScheduling: {type: Static}\n"
    } else {
        ""
    };
    let text = format!(
        "apiVersion: apps.clusternet.io/v1alpha1\nkind: Subscription\nmetadata:\n  name: web\n  \
         namespace: shop\nspec:\n  schedulingStrategy: {strategy}\n{dividing}  subscribers:\n  \
         - clusterAffinity: {{}}\n    weight: 1\n  feeds:\n  - apiVersion: apps/v1\n    \
         kind: Deployment\n    namespace: shop\n    name: {feed_name}\n"
    );
    let file = dir.join(format!("{strategy}-{feed_name}.yaml"));
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

/// The image of the first container of the Deployment in `objects`.
/// The image of the first object of a Description's `spec.raw` as written (JSON text).
fn image(objects: &Value) -> String {
    let first: Value = serde_json::from_str(objects[0].as_str().unwrap_or("{}")).unwrap();
    first["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_shows_the_schedulers_decision_and_writes_nothing() {
    let f = Fixture::start().await;
    let client = f.client();
    create_namespace(&client, "shop").await;
    registered_cluster(&client, "alpha", EDGE_ID, true).await;
    registered_cluster(&client, "beta", NEW_ID, true).await;
    // Not registered by the hub: the scheduler leaves it out, and so does the plan.
    registered_cluster(&client, "gamma", DENIED_ID, false).await;
    apply_object(
        &client,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        }),
    )
    .await;
    apply_object(
        &client,
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
            "metadata": {"name": "canary", "namespace": "clusternet-alpha"},
            "spec": {
                "overridePolicy": "ApplyNow",
                "priority": 300,
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "web"},
                "overrides": [{"name": "image", "type": "JSONPatch", "value":
                    "[{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/image\", \"value\": \"nginx:1.28\"}]"}],
            },
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();

    // Replication: both registered clusters, the Localization only in alpha's objects.
    let replication = subscription_file(dir.path(), "Replication", "web");
    let page = f
        .run(&["plan", "-f", &replication, "--show-objects"])
        .await
        .ok();
    assert!(page.starts_with("Subscription:  shop/web\nStrategy:      Replication\n"));
    assert!(
        page.contains("Bound:         2 of 2 registered clusters\n"),
        "{page}"
    );
    let clusters = table(&page, "Clusters:");
    let keys: Vec<&str> = clusters.iter().map(|r| r["CLUSTER"].as_str()).collect();
    assert_eq!(
        keys,
        ["clusternet-alpha/alpha", "clusternet-beta/beta"],
        "{page}"
    );
    assert!(clusters.iter().all(|r| r["OBJECTS"] == "1"), "{page}");
    let conditions = table(&page, "Conditions:");
    let types: Vec<(&str, &str)> = conditions
        .iter()
        .map(|r| (r["TYPE"].as_str(), r["STATUS"].as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("FeedsResolved", "True"),
            ("Scheduled", "True"),
            ("OverridesApplied", "True")
        ],
        "{page}"
    );
    let (_, objects) = page.split_once("\nObjects for ").unwrap();
    let (alpha, beta) = objects.split_once("\nObjects for ").unwrap();
    assert!(
        alpha.starts_with("clusternet-alpha/alpha:\n---\n"),
        "{page}"
    );
    assert!(alpha.contains("image: nginx:1.28\n"), "{page}");
    assert!(beta.starts_with("clusternet-beta/beta:\n---\n"), "{page}");
    assert!(beta.contains("image: nginx:1.27\n"), "{page}");
    assert!(!beta.contains("nginx:1.28"), "{page}");

    let list: Value = serde_yaml::from_str(
        &f.run(&["plan", "-f", &replication, "-o", "yaml"])
            .await
            .ok(),
    )
    .unwrap();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{list}");
    assert_eq!(items[0]["kind"], "Subscription");
    assert_eq!(
        items[0]["status"]["bindingClusters"],
        json!(["clusternet-alpha/alpha", "clusternet-beta/beta"])
    );
    assert_eq!(items[1]["kind"], "Description");
    assert_eq!(items[1]["metadata"]["namespace"], "clusternet-alpha");
    assert_eq!(items[1]["metadata"]["name"], "shop.web");
    assert_eq!(image(&items[1]["spec"]["raw"]), "nginx:1.28");
    assert_eq!(image(&items[2]["spec"]["raw"]), "nginx:1.27");

    // Dividing: the 4 replicas split by the equal weights.
    let dividing = subscription_file(dir.path(), "Dividing", "web");
    let page = f.run(&["plan", "-f", &dividing]).await.ok();
    let replicas = table(&page, "Replicas:");
    let split: Vec<(&str, &str)> = replicas
        .iter()
        .map(|r| (r["CLUSTER"].as_str(), r["REPLICAS"].as_str()))
        .collect();
    assert_eq!(
        split,
        [
            ("clusternet-alpha/alpha", "2"),
            ("clusternet-beta/beta", "2")
        ],
        "{page}"
    );
    assert!(
        replicas
            .iter()
            .all(|r| r["FEED"] == "apps/v1/Deployment/shop/web")
    );
    assert!(
        !page.contains("Objects for"),
        "objects only on demand: {page}"
    );

    // A missing feed: FeedsResolved=False as in `status`, nothing bound.
    let missing = subscription_file(dir.path(), "Replication", "gone");
    let page = f.run(&["plan", "-f", &missing]).await.ok();
    let conditions = table(&page, "Conditions:");
    let feeds = conditions
        .iter()
        .find(|r| r["TYPE"] == "FeedsResolved")
        .unwrap();
    assert_eq!(feeds["STATUS"], "False", "{page}");
    assert_eq!(feeds["REASON"], "FeedNotFound", "{page}");
    assert!(
        feeds["MESSAGE"].contains("Deployment shop/gone not found"),
        "{page}"
    );
    assert!(page.contains("\nClusters:\n<none>\n"), "{page}");

    // Bad inputs: one line, exit 1.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: Subscription\nmetadata: [\n").unwrap();
    let line = f.run(&["plan", "-f", bad.to_str().unwrap()]).await.failed();
    assert!(line.contains("invalid YAML"), "{line}");
    let invalid = dir.path().join("invalid.yaml");
    std::fs::write(
        &invalid,
        std::fs::read_to_string(&replication)
            .unwrap()
            .replace("Replication", "Sometimes"),
    )
    .unwrap();
    let line = f
        .run(&["plan", "-f", invalid.to_str().unwrap()])
        .await
        .failed();
    assert!(line.contains("invalid Subscription"), "{line}");

    // Nothing was written.
    let descriptions = Api::<Description>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(descriptions.items.is_empty(), "no Description written");
    let subscriptions = Api::<Subscription>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(subscriptions.items.is_empty(), "no Subscription written");
}

/// What `kubectl-atoll completion SHELL` prints (it takes no client flags).
async fn completion(shell: &str) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-atoll"))
        .args(["completion", shell])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_scripts_name_every_subcommand() {
    use clap::CommandFactory;
    let dir = tempfile::tempdir().unwrap();
    let bash = completion("bash").await;
    let command = kubectl_atoll::args::Cli::command();
    let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
    assert!(names.contains(&"plan") && names.contains(&"completion"));
    for name in names {
        assert!(bash.contains(&format!(",{name})")), "{name} in:\n{bash}");
    }
    assert!(bash.contains("complete -F _kubectl_atoll"), "{bash}");
    for shell in ["zsh", "fish"] {
        let script = completion(shell).await;
        assert!(script.contains("show-objects"), "{shell}:\n{script}");
    }

    // The bash script completes a subcommand's flags, as kubectl_complete-atoll calls it.
    let script = dir.path().join("kubectl-atoll.bash");
    std::fs::write(&script, &bash).unwrap();
    let shell = format!(
        "source {}; COMP_WORDS=(kubectl-atoll plan --sh); COMP_CWORD=2; \
         _kubectl_atoll kubectl-atoll --sh plan; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    match tokio::process::Command::new("bash")
        .args(["-c", &shell])
        .output()
        .await
    {
        Ok(out) => assert_eq!(String::from_utf8_lossy(&out.stdout), "--show-objects\n"),
        Err(e) => eprintln!("bash not found ({e}): the script is not run"),
    }
}
