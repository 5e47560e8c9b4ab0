#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The scheduler against a live (devcluster) parent, through kube-rs: one scenario per test.

mod common;

use atoll_crds::apps::Deployer;
use atoll_testkit::{Parent, create_namespace, eventually};
use common::*;
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn replication_reaches_three_clusters() {
    let parent = Parent::start().await;
    let client = &parent.client;
    for name in ["a", "b", "c"] {
        add_cluster(client, name, json!({"env": "prod"}), "8").await;
    }
    apply(client, deployment("default", "web", 3)).await;
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        subscription_yaml(
            "default",
            "web",
            json!({
                "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"}],
            }),
        ),
    )
    .await;

    let replicas = eventually("three Descriptions", WAIT, || async {
        let r = replicas_by_cluster(client, "default", "web").await;
        (r.len() == 3).then_some(r)
    })
    .await;
    assert_eq!(
        replicas,
        vec![
            ("clusternet-a".to_owned(), 3),
            ("clusternet-b".to_owned(), 3),
            ("clusternet-c".to_owned(), 3)
        ]
    );
    let sub = eventually("status", WAIT, || async {
        let sub = subscription(client, "default", "web").await;
        sub.status
            .clone()
            .filter(|s| s.binding_clusters.len() == 3)
            .map(|_| sub)
    })
    .await;
    let status = sub.status.unwrap();
    assert_eq!(
        status.binding_clusters,
        vec!["clusternet-a/a", "clusternet-b/b", "clusternet-c/c"]
    );
    assert!(status.replicas.is_empty(), "Replication sets no replicas");
    assert_eq!(status.desired_releases, Some(3));
    assert!(
        sub.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"apps.clusternet.io/finalizer".to_owned())
    );
    let description = &descriptions_of(client, "default", "web").await[0];
    assert_eq!(description.metadata.name.as_deref(), Some("default.web"));
    let object = &description.spec.raw[0];
    assert!(
        object.pointer("/metadata/uid").is_none(),
        "server fields stripped"
    );
    assert!(object.get("status").is_none());
}

fn web_sub(spec_extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"}],
    });
    for (k, v) in spec_extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    subscription_yaml("default", "web", spec)
}

async fn wait_replicas(client: &kube::Client, expected: Vec<(&str, i64)>) -> Vec<(String, i64)> {
    let expected: Vec<(String, i64)> = expected
        .into_iter()
        .map(|(n, r)| (n.to_owned(), r))
        .collect();
    eventually("the replicas per cluster", WAIT, || async {
        let last = replicas_by_cluster(client, "default", "web").await;
        if last == expected {
            Ok(last)
        } else {
            Err(format!("expected {expected:?}, saw {last:?}"))
        }
    })
    .await
}

#[tokio::test]
async fn static_dividing_splits_by_weight() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod", "tier": "small"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod", "tier": "large"}), "8").await;
    apply(client, deployment("default", "web", 6)).await;
    let _scheduler = start_scheduler(client).await;
    let dividing = json!({
        "schedulingStrategy": "Dividing",
        "dividingScheduling": {"type": "Static"},
        "subscribers": [
            {"clusterAffinity": {"matchLabels": {"tier": "small"}}, "weight": 1},
            {"clusterAffinity": {"matchLabels": {"tier": "large"}}, "weight": 2},
        ],
    });
    apply(client, web_sub(dividing)).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 4)]).await;

    // 12 replicas at 1:2 — an edit of the feed propagates and re-divides.
    apply(client, deployment("default", "web", 12)).await;
    wait_replicas(client, vec![("clusternet-a", 4), ("clusternet-b", 8)]).await;
    let status = subscription(client, "default", "web").await.status.unwrap();
    assert_eq!(
        status.replicas.get("apps/v1/Deployment/default/web"),
        Some(&vec![4, 8])
    );
}

#[tokio::test]
async fn dynamic_dividing_follows_capacity() {
    let parent = Parent::start().await;
    let client = &parent.client;
    // 500m per replica: 2 cpu fit 4 replicas, 6 cpu fit 12.
    add_cluster(client, "a", json!({"env": "prod"}), "2").await;
    add_cluster(client, "b", json!({"env": "prod"}), "6").await;
    apply(client, deployment("default", "web", 8)).await;
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        web_sub(json!({
            "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Dynamic", "dynamicDividing": {"strategy": "Spread"}},
        })),
    )
    .await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 6)]).await;
}

#[tokio::test]
async fn localization_changes_one_cluster_and_globalization_follows_affinity() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod", "region": "eu"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod", "region": "us"}), "8").await;
    apply(client, deployment("default", "web", 2)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 2)]).await;

    // A Localization in a's dedicated namespace: only a changes.
    apply(
        client,
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Localization",
            "metadata": {"name": "more", "namespace": "clusternet-a"},
            "spec": {
                "overridePolicy": "ApplyNow",
                "priority": 300,
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                "overrides": [{"name": "replicas", "type": "JSONPatch",
                    "value": "[{\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": 5}]"}],
            },
        }),
    )
    .await;
    wait_replicas(client, vec![("clusternet-a", 5), ("clusternet-b", 2)]).await;

    // A Globalization selecting region=us by clusterAffinity: only b gets the label.
    apply(
        client,
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Globalization",
            "metadata": {"name": "us-label"},
            "spec": {
                "overridePolicy": "ApplyNow",
                "clusterAffinity": {"matchLabels": {"region": "us"}},
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                "overrides": [{"name": "label", "type": "MergePatch",
                    "value": "metadata:\n  labels:\n    region: us\n"}],
            },
        }),
    )
    .await;
    let labelled = eventually("the us label on b only", WAIT, || async {
        let descs = descriptions_of(client, "default", "web").await;
        let label = |ns: &str| {
            descs
                .iter()
                .find(|d| d.metadata.namespace.as_deref() == Some(ns))
                .and_then(|d| d.spec.raw[0].pointer("/metadata/labels/region").cloned())
        };
        let (a, b) = (label("clusternet-a"), label("clusternet-b"));
        (b.is_some()).then_some((a, b))
    })
    .await;
    assert_eq!(labelled, (None, Some(json!("us"))));
}

#[tokio::test]
async fn override_priority_order_decides_the_result() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    let override_with = |name: &str, priority: i32, replicas: i32| {
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Localization",
            "metadata": {"name": name, "namespace": "clusternet-a"},
            "spec": {
                "overridePolicy": "ApplyNow",
                "priority": priority,
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                "overrides": [{"type": "MergePatch", "value": format!("{{\"spec\":{{\"replicas\":{replicas}}}}}")}],
            },
        })
    };
    // Higher priority is applied later and wins, whatever the creation order.
    apply(client, override_with("late", 900, 9)).await;
    apply(client, override_with("early", 100, 4)).await;
    // A Globalization always comes before any Localization, even at priority 1000.
    apply(
        client,
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Globalization",
            "metadata": {"name": "global"},
            "spec": {
                "priority": 1000,
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                "overrides": [{"type": "MergePatch", "value": "{\"spec\":{\"replicas\":7}}"}],
            },
        }),
    )
    .await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 9)]).await;
}

#[tokio::test]
async fn clusters_joining_leaving_and_tainted_move_the_placement() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 2)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 2)]).await;

    // Joining: a new matching cluster is added.
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 2)]).await;

    // Tainted NoSchedule: its Description is removed.
    patch_cluster(
        client,
        "b",
        json!({"spec": {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]}}),
    )
    .await;
    wait_replicas(client, vec![("clusternet-a", 2)]).await;

    // Leaving: a cluster whose labels stop matching loses its Description.
    patch_cluster(client, "b", json!({"spec": {"taints": null}})).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 2)]).await;
    patch_cluster(client, "a", json!({"metadata": {"labels": {"env": "dev"}}})).await;
    wait_replicas(client, vec![("clusternet-b", 2)]).await;
}

#[tokio::test]
async fn failover_moves_divided_replicas_and_recovery_rebalances() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 6)).await;
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        web_sub(json!({
            "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}, "weight": 1}],
        })),
    )
    .await;
    wait_replicas(client, vec![("clusternet-a", 3), ("clusternet-b", 3)]).await;

    // b's replicas fail over to a; b stays bound with 0 replicas, so nothing of it is deleted.
    set_cluster_ready(client, "clusternet-b", "b", false, "8").await;
    wait_replicas(client, vec![("clusternet-a", 6), ("clusternet-b", 0)]).await;

    set_cluster_ready(client, "clusternet-b", "b", true, "8").await;
    wait_replicas(client, vec![("clusternet-a", 3), ("clusternet-b", 3)]).await;
}

/// Found by the chaos run (seed 4, the check of the parent while faults are active): the
/// Descriptions of a Dividing Subscription were written all at once, so when replicas moved
/// from one cluster to another the parent briefly (or, when the write that lowered failed, until
/// the retry) held more replicas than the feed, e.g. 4 + 7 + 1 of 7. A cluster's share must be
/// lowered before another's is raised.
#[tokio::test]
async fn moving_divided_replicas_never_places_more_than_the_feed_has() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let parent = Parent::start().await;
    let client = &parent.client;
    for name in ["a", "b", "c"] {
        add_cluster(client, name, json!({"env": "prod"}), "8").await;
    }
    apply(client, deployment("default", "web", 6)).await;
    // Every state of the Descriptions the parent goes through, in order.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let watch = {
        let seen = seen.clone();
        let api = kube::Api::<atoll_crds::apps::Description>::all(client.clone());
        tokio::spawn(async move {
            let mut current = std::collections::BTreeMap::new();
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
                        let replicas = d
                            .spec
                            .raw
                            .first()
                            .and_then(|o| o.pointer("/spec/replicas"))
                            .and_then(serde_json::Value::as_i64)
                            .unwrap_or(0);
                        current.insert(d.namespace().unwrap_or_default(), replicas);
                    }
                    watcher::Event::Delete(d) => {
                        current.remove(&d.namespace().unwrap_or_default());
                    }
                    _ => continue,
                }
                seen.lock().unwrap().push(current.values().sum());
            }
        })
    };
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        web_sub(json!({
            "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}, "weight": 1}],
        })),
    )
    .await;
    let even = vec![
        ("clusternet-a", 2),
        ("clusternet-b", 2),
        ("clusternet-c", 2),
    ];
    wait_replicas(client, even.clone()).await;
    // Each cluster in turn fails over and comes back: its share moves away and back.
    for name in ["a", "b", "c", "a", "b", "c"] {
        let ns = format!("clusternet-{name}");
        set_cluster_ready(client, &ns, name, false, "8").await;
        let moved: Vec<(&str, i64)> = even
            .iter()
            .map(|(n, _)| (*n, if *n == ns { 0 } else { 3 }))
            .collect();
        wait_replicas(client, moved).await;
        set_cluster_ready(client, &ns, name, true, "8").await;
        wait_replicas(client, even.clone()).await;
    }
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 12, "the watch saw too little: {seen:?}");
    assert!(
        seen.iter().all(|sum| *sum <= 6),
        "the Descriptions placed more than the feed's 6 replicas at some point: {seen:?}"
    );
}

#[tokio::test]
async fn deleting_a_subscription_removes_its_descriptions_then_releases_it() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 1), ("clusternet-b", 1)]).await;

    let subs: kube::Api<atoll_crds::apps::Subscription> =
        kube::Api::namespaced(client.clone(), "default");
    subs.delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("the Subscription gone", WAIT, || async {
        subs.get_opt("web").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(descriptions_of(client, "default", "web").await.is_empty());
}

#[tokio::test]
async fn the_orphan_deletion_policy_is_labelled_on_every_description_and_removed_with_it() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    let _scheduler = start_scheduler(client).await;
    let policy_labels = || async {
        descriptions_of(client, "default", "web")
            .await
            .iter()
            .map(|d| {
                d.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(atoll_crds::known::LABEL_DELETION_POLICY).cloned())
            })
            .collect::<Vec<_>>()
    };
    apply(client, web_sub(json!({"deletionPolicy": "Orphan"}))).await;
    eventually("both Descriptions labelled Orphan", WAIT, || async {
        (policy_labels().await == vec![Some("Orphan".to_owned()); 2]).then_some(())
    })
    .await;
    apply(client, web_sub(json!({"deletionPolicy": "Delete"}))).await;
    eventually("the label gone with the policy", WAIT, || async {
        (policy_labels().await == vec![None; 2]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_feed_change_rendering_does_not_see_starts_no_pass() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    let metrics = atoll_scheduler::controller::Metrics::default();
    let _scheduler = start_scheduler_with_metrics(client, metrics.clone()).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 1)]).await;
    // Settled: no pass for a second.
    let settled = eventually("the scheduler idle", WAIT, || async {
        let before = metrics.reconciles.get();
        tokio::time::sleep(Duration::from_secs(1)).await;
        (metrics.reconciles.get() == before).then_some(before)
    })
    .await;

    // What the parent's Deployment controller writes: status, and its revision annotation.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "default");
    let merge = |patch| kube::api::Patch::Merge(patch);
    let params = kube::api::PatchParams::default();
    for n in 1..=3 {
        deployments
            .patch_status(
                "web",
                &params,
                &merge(json!({"status": {"observedGeneration": n, "replicas": n}})),
            )
            .await
            .unwrap();
    }
    deployments
        .patch(
            "web",
            &params,
            &merge(
                json!({"metadata": {"annotations": {"deployment.kubernetes.io/revision": "1"}}}),
            ),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        metrics.reconciles.get(),
        settled,
        "a pass for status or a revision"
    );

    // A change the children see makes a pass.
    deployments
        .patch(
            "web",
            &params,
            &merge(json!({"metadata": {"labels": {"tier": "web"}}})),
        )
        .await
        .unwrap();
    eventually("a pass for a new label", WAIT, || async {
        (metrics.reconciles.get() > settled).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_watch_of_a_feed_kind_is_released_when_no_subscription_names_it() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    let metrics = atoll_scheduler::controller::Metrics::default();
    let _scheduler = start_scheduler_with_metrics(client, metrics.clone()).await;
    assert_eq!(
        metrics.feed_watches.get(),
        0,
        "no Subscription, no feed watch"
    );
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 1)]).await;
    assert_eq!(metrics.feed_watches.get(), 1, "one watch for Deployments");

    let subs: kube::Api<atoll_crds::apps::Subscription> =
        kube::Api::namespaced(client.clone(), "default");
    subs.delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("the Deployment watch released", WAIT, || async {
        (metrics.feed_watches.get() == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_manifest_is_judged_by_the_namespace_it_copies_and_a_feed_grant_there_allows_it() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    for ns in ["team", "shared"] {
        create_namespace(client, ns).await;
    }
    // Only a Manifest in clusternet-reserved, copied from shared/web: no live object.
    apply(
        client,
        manifest_labelled(
            "deployments.shared.web",
            ("apps", "v1", "Deployment"),
            "shared",
            "web",
            deployment("shared", "web", 2),
        ),
    )
    .await;
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        subscription_yaml(
            "team",
            "web",
            json!({
                "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shared", "name": "web"}],
            }),
        ),
    )
    .await;
    let condition = feeds_unresolved(client, "team", "web").await;
    assert_eq!(condition.reason, "FeedNotGranted", "{}", condition.message);
    assert!(
        condition.message.contains("create in namespace shared"),
        "{}",
        condition.message
    );
    assert!(descriptions_of(client, "team", "web").await.is_empty());

    apply(
        client,
        json!({
            "apiVersion": "apps.atoll.dev/v1alpha1",
            "kind": "FeedGrant",
            "metadata": {"name": "team-may-use-web", "namespace": "shared"},
            "spec": {"from": [{"namespace": "team"}],
                "to": [{"group": "apps", "kind": "Deployment", "name": "web"}]},
        }),
    )
    .await;
    let replicas = eventually("the granted Manifest's Description", WAIT, || async {
        let r = replicas_by_cluster(client, "team", "web").await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(replicas, vec![("clusternet-a".to_owned(), 2)]);
}

/// A Manifest labelled as a feed in `namespace`.
fn manifest_labelled(
    name: &str,
    (group, version, kind): (&str, &str, &str),
    namespace: &str,
    object_name: &str,
    template: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Manifest",
        "metadata": {"name": name, "namespace": "clusternet-reserved",
            "labels": {
                "apps.clusternet.io/config.group": group,
                "apps.clusternet.io/config.version": version,
                "apps.clusternet.io/config.kind": kind,
                "apps.clusternet.io/config.namespace": namespace,
                "apps.clusternet.io/config.name": object_name}},
        "template": template,
    })
}

/// The Subscription's `FeedsResolved=False` condition, once it has one.
async fn feeds_unresolved(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    eventually("FeedsResolved=False", WAIT, || async {
        let sub = subscription(client, namespace, name).await;
        sub.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "FeedsResolved" && c.status == "False")
        })
    })
    .await
}

#[tokio::test]
async fn a_manifest_is_judged_as_the_object_it_holds_not_by_its_labels() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    for ns in ["team", "shop"] {
        create_namespace(client, ns).await;
    }
    // Labelled as team/web, holding shop's Deployment: it would replace shop's in the children.
    apply(
        client,
        manifest_labelled(
            "deployments.team.web",
            ("apps", "v1", "Deployment"),
            "team",
            "web",
            deployment("shop", "web", 2),
        ),
    )
    .await;
    // Labelled as a namespaced feed of team, holding a ClusterRoleBinding (cluster-scoped).
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "everyone-admin", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]});
    apply(
        client,
        manifest_labelled(
            "clusterrolebindings.team.everyone-admin",
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
            "team",
            "everyone-admin",
            binding,
        ),
    )
    .await;
    let _scheduler = start_scheduler(client).await;
    let subscribe = |name: &str, feed: serde_json::Value| {
        subscription_yaml(
            "team",
            name,
            json!({
                "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
                "feeds": [feed],
            }),
        )
    };
    apply(
        client,
        subscribe(
            "web",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team", "name": "web"}),
        ),
    )
    .await;
    apply(
        client,
        subscribe(
            "binding",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "namespace": "team", "name": "everyone-admin"}),
        ),
    )
    .await;

    let condition = feeds_unresolved(client, "team", "web").await;
    assert_eq!(
        condition.reason, "ManifestNotItsFeed",
        "{}",
        condition.message
    );
    assert!(
        condition
            .message
            .contains(r#"namespace "shop" where its labels say "team""#),
        "{}",
        condition.message
    );
    let condition = feeds_unresolved(client, "team", "binding").await;
    assert_eq!(condition.reason, "FeedNotGranted", "{}", condition.message);
    assert!(
        condition.message.contains("clusternet-system"),
        "{}",
        condition.message
    );
    assert!(descriptions_of(client, "team", "web").await.is_empty());
    assert!(descriptions_of(client, "team", "binding").await.is_empty());

    // Once the Manifest holds the object its labels name, it is team's own feed.
    apply(
        client,
        manifest_labelled(
            "deployments.team.web",
            ("apps", "v1", "Deployment"),
            "team",
            "web",
            deployment("team", "web", 2),
        ),
    )
    .await;
    let replicas = eventually("the Manifest's Description", WAIT, || async {
        let r = replicas_by_cluster(client, "team", "web").await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(replicas, vec![("clusternet-a".to_owned(), 2)]);
}

#[tokio::test]
async fn clusternets_replication_example_lands_after_the_one_documented_feed_grant() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    // Clusternet's examples/replication: a Subscription in `default`, its feeds in `foo`.
    create_namespace(client, "foo").await;
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "my-nginx-svc", "namespace": "foo"},
            "spec": {"selector": {"app": "nginx"}, "ports": [{"port": 80}]}}),
    )
    .await;
    apply(client, deployment("foo", "my-nginx", 2)).await;
    let _scheduler = start_scheduler(client).await;
    apply(
        client,
        subscription_yaml(
            "default",
            "app-demo",
            json!({
                "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}}],
                "feeds": [
                    {"apiVersion": "v1", "kind": "Namespace", "name": "foo"},
                    {"apiVersion": "v1", "kind": "Service", "name": "my-nginx-svc", "namespace": "foo"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "my-nginx", "namespace": "foo"},
                ],
            }),
        ),
    )
    .await;
    let refused = eventually("FeedsResolved=False", WAIT, || async {
        let sub = subscription(client, "default", "app-demo").await;
        sub.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "FeedsResolved" && c.status == "False")
        })
    })
    .await;
    assert_eq!(refused.reason, "FeedNotGranted", "{}", refused.message);

    // The grant of the README's "Feeds from other namespaces".
    apply(
        client,
        json!({
            "apiVersion": "apps.atoll.dev/v1alpha1",
            "kind": "FeedGrant",
            "metadata": {"name": "default-may-use-foo", "namespace": "foo"},
            "spec": {"from": [{"namespace": "default"}],
                "to": [{"group": "", "kind": "Namespace"}, {"group": "", "kind": "Service"},
                    {"group": "apps", "kind": "Deployment", "name": "my-nginx"}]},
        }),
    )
    .await;
    let kinds = eventually("the Description with all three feeds", WAIT, || async {
        let descriptions = descriptions_of(client, "default", "app-demo").await;
        let kinds: Vec<String> = descriptions
            .first()?
            .spec
            .raw
            .iter()
            .filter_map(|o| o["kind"].as_str().map(str::to_owned))
            .collect();
        (kinds.len() == 3).then_some(kinds)
    })
    .await;
    assert_eq!(kinds, ["Namespace", "Service", "Deployment"]);
}

#[tokio::test]
async fn missing_feed_is_reported_then_picked_up_when_it_appears() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    let condition = eventually("FeedsResolved=False", WAIT, || async {
        let sub = subscription(client, "default", "web").await;
        sub.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "FeedsResolved" && c.status == "False")
        })
    })
    .await;
    assert_eq!(condition.reason, "FeedNotFound");
    assert!(
        condition.message.contains("default/web not found"),
        "{}",
        condition.message
    );
    assert!(descriptions_of(client, "default", "web").await.is_empty());

    apply(client, deployment("default", "web", 2)).await;
    wait_replicas(client, vec![("clusternet-a", 2)]).await;
}

#[tokio::test]
async fn helm_chart_feeds_are_rendered_with_their_values_and_dividing_leaves_them_out() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 2)).await;
    // A HelmChart as Clusternet's examples declare it: its CRD is installed with atoll's.
    apply(
        client,
        json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
               "metadata": {"name": "mysql", "namespace": "default"},
               "spec": {"repo": "https://charts.bitnami.com/bitnami", "chart": "mysql",
                        "version": "8.6.2", "targetNamespace": "abc"}}),
    )
    .await;
    let chart = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart", "namespace": "default", "name": "mysql"});
    // Cluster a gets its own values, and a newer chart version.
    apply(
        client,
        json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
               "metadata": {"name": "mysql-values", "namespace": "clusternet-a"},
               "spec": {"overridePolicy": "ApplyNow", "feed": chart,
                        "overrides": [
                            {"type": "Helm", "value": "primary: {persistence: {size: 20Gi}}"},
                            {"type": "Helm", "overrideChart": true, "value": "spec: {version: 8.8.0}"}]}}),
    )
    .await;
    let _scheduler = start_scheduler(client).await;
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"});
    let condition = |type_: &'static str| async move {
        subscription(client, "default", "web")
            .await
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == type_))
    };
    let by_cluster = || async {
        let mut descriptions = descriptions_of(client, "default", "web").await;
        descriptions.sort_by_key(|d| d.namespace());
        descriptions
    };

    // A chart beside a Deployment: one Description per cluster carries both.
    apply(client, web_sub(json!({"feeds": [web, chart]}))).await;
    let descriptions = eventually("Descriptions with the chart", WAIT, || async {
        let descriptions = by_cluster().await;
        (descriptions.len() == 2 && descriptions.iter().all(|d| d.spec.charts.len() == 1))
            .then_some(descriptions)
    })
    .await;
    for d in &descriptions {
        assert_eq!(d.spec.deployer, Deployer::Helm);
        assert_eq!(d.spec.raw.len(), 1, "the Deployment");
        assert_eq!(d.spec.raw[0]["kind"], "Deployment");
        assert_eq!(d.spec.charts[0].namespace, "default");
        assert_eq!(d.spec.charts[0].name, "mysql");
        assert_eq!(d.spec.chart_raw[0]["spec"]["chart"], "mysql");
        assert!(d.spec.chart_raw[0].get("status").is_none());
    }
    let (a, b) = (&descriptions[0], &descriptions[1]);
    assert_eq!(
        a.spec.chart_values,
        [json!({"primary": {"persistence": {"size": "20Gi"}}})]
    );
    assert_eq!(a.spec.chart_raw[0]["spec"]["version"], "8.8.0");
    assert_eq!(b.spec.chart_values, [json!({})]);
    assert_eq!(b.spec.chart_raw[0]["spec"]["version"], "8.6.2");
    assert!(condition("ChartsDistributed").await.is_none());

    // Dividing does not divide a chart: the Deployment is divided, the chart is named.
    apply(
        client,
        web_sub(
            json!({"feeds": [web, chart], "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "prod"}}, "weight": 1}]}),
        ),
    )
    .await;
    let charts = eventually("ChartsDistributed=False", WAIT, || async {
        condition("ChartsDistributed")
            .await
            .filter(|c| c.status == "False")
    })
    .await;
    assert_eq!(charts.reason, "FeedNotSupported");
    assert!(
        charts.message.contains("HelmChart default/mysql") && charts.message.contains("Dividing"),
        "{}",
        charts.message
    );
    wait_replicas(client, vec![("clusternet-a", 1), ("clusternet-b", 1)]).await;
    let descriptions = eventually("Descriptions without the chart", WAIT, || async {
        let descriptions = by_cluster().await;
        descriptions
            .iter()
            .all(|d| d.spec.charts.is_empty() && d.spec.deployer == Deployer::Generic)
            .then_some(descriptions)
    })
    .await;
    assert!(descriptions.iter().all(|d| d.spec.raw.len() == 1));

    // Replication again: the condition goes away.
    apply(client, web_sub(json!({"feeds": [web, chart]}))).await;
    eventually("no ChartsDistributed", WAIT, || async {
        condition("ChartsDistributed").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn invalid_override_is_reported_and_other_clusters_and_subscriptions_go_on() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 2)).await;
    apply(client, deployment("default", "api", 1)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 2)]).await;

    apply(
        client,
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Localization",
            "metadata": {"name": "broken", "namespace": "clusternet-a"},
            "spec": {
                "overridePolicy": "ApplyNow",
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                "overrides": [{"name": "oops", "type": "JSONPatch", "value": "[{\"op\": \"explode\"}"}],
            },
        }),
    )
    .await;
    // An edit of the feed reaches b; a keeps its previous objects.
    apply(client, deployment("default", "web", 3)).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 3)]).await;
    let sub = subscription(client, "default", "web").await;
    let condition = sub
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "OverridesApplied")
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "InvalidOverride")
    );
    assert!(
        condition.message.contains("broken"),
        "{}",
        condition.message
    );

    // Another Subscription is unaffected.
    apply(
        client,
        subscription_yaml(
            "default",
            "api",
            json!({
                "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "api"}],
            }),
        ),
    )
    .await;
    eventually("api on both clusters", WAIT, || async {
        (replicas_by_cluster(client, "default", "api").await.len() == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn invalid_spec_gets_a_condition_and_keeps_descriptions() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 4)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 4)]).await;
    // Dividing with every weight 0 cannot be divided.
    apply(
        client,
        web_sub(json!({
            "schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Static"},
        })),
    )
    .await;
    let condition = eventually("Scheduled=False", WAIT, || async {
        subscription(client, "default", "web")
            .await
            .status
            .and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.type_ == "Scheduled" && c.status == "False")
            })
    })
    .await;
    assert_eq!(condition.reason, "InvalidSpec");
    assert!(
        condition.message.contains("weight"),
        "{}",
        condition.message
    );
    assert_eq!(
        replicas_by_cluster(client, "default", "web").await,
        vec![("clusternet-a".to_owned(), 4)]
    );
}

#[tokio::test]
async fn subscriptions_for_another_scheduler_are_left_alone() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    apply(client, deployment("default", "api", 1)).await;
    let _scheduler = start_scheduler(client).await;
    let mut other = subscription_yaml(
        "default",
        "api",
        json!({
            "schedulerName": "someone-else",
            "subscribers": [{"clusterAffinity": {}}],
            "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "api"}],
        }),
    );
    apply(client, other.clone()).await;
    apply(client, web_sub(json!({"schedulerName": "default"}))).await;
    wait_replicas(client, vec![("clusternet-a", 1)]).await;
    assert!(descriptions_of(client, "default", "api").await.is_empty());
    assert!(
        subscription(client, "default", "api")
            .await
            .status
            .is_none()
    );
    // Handing it to this scheduler schedules it.
    other["spec"]["schedulerName"] = json!("default");
    apply(client, other).await;
    eventually("api scheduled", WAIT, || async {
        (descriptions_of(client, "default", "api").await.len() == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn replication_keeps_an_unreachable_bound_cluster_and_skips_a_new_one() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    add_cluster(client, "b", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 2)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 2), ("clusternet-b", 2)]).await;

    // b's agent is gone: the hub marks it not Ready and taints it. Its workload keeps running
    // there, so its Description stays, and still follows feed edits for when b is back.
    set_cluster_ready(client, "clusternet-b", "b", false, "8").await;
    patch_cluster(
        client,
        "b",
        json!({"spec": {"taints": [{
            "key": "clusters.clusternet.io/unschedulable", "value": "ClusterStatusUnknown",
            "effect": "NoSchedule"}]}}),
    )
    .await;
    apply(client, deployment("default", "web", 3)).await;
    wait_replicas(client, vec![("clusternet-a", 3), ("clusternet-b", 3)]).await;

    // A cluster that joins unreachable is not bound.
    add_unready_cluster(client, "c", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 4)).await;
    wait_replicas(client, vec![("clusternet-a", 4), ("clusternet-b", 4)]).await;
    let status = subscription(client, "default", "web").await.status.unwrap();
    assert_eq!(
        status.binding_clusters,
        vec!["clusternet-a/a", "clusternet-b/b"]
    );
}

#[tokio::test]
async fn a_description_edited_by_someone_else_is_restored() {
    let parent = Parent::start().await;
    let client = &parent.client;
    for name in ["a", "b"] {
        add_cluster(client, name, json!({"env": "prod"}), "8").await;
    }
    apply(client, deployment("default", "web", 3)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    wait_replicas(client, vec![("clusternet-a", 3), ("clusternet-b", 3)]).await;

    // A hand edit of one cluster's Description (as `kubectl edit` would do), well within the
    // test scheduler's 30 s resync: the repair must come from the watch, not the resync.
    let descriptions: kube::Api<atoll_crds::apps::Description> =
        kube::Api::namespaced(client.clone(), "clusternet-a");
    let mut edited = descriptions_of(client, "default", "web").await[0].spec.raw[0].clone();
    edited["spec"]["replicas"] = json!(9);
    let after_edit = descriptions
        .patch(
            "default.web",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(
                json!({"spec": {"raw": atoll_crds::json_text::encode_all(&[edited])}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(after_edit.spec.raw[0]["spec"]["replicas"], json!(9));
    eventually("the edit undone", Duration::from_secs(10), || async {
        let replicas = replicas_by_cluster(client, "default", "web").await;
        (replicas
            == vec![
                ("clusternet-a".to_owned(), 3),
                ("clusternet-b".to_owned(), 3),
            ])
        .then_some(())
    })
    .await;
    // The scheduler owns spec.raw again, so nothing keeps rewriting it.
    let restored = descriptions.get("default.web").await.unwrap();
    let foreign_spec = restored
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("kubectl-edit"))
        .any(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:raw").is_some())
        });
    assert!(!foreign_spec, "{:?}", restored.metadata.managed_fields);
}

#[tokio::test]
async fn a_managed_cluster_the_hub_did_not_register_gets_no_workload_and_an_event() {
    let parent = Parent::start().await;
    let client = &parent.client;
    add_cluster(client, "real", json!({"env": "prod"}), "8").await;
    // A tenant's own ManagedCluster, with the labels the Subscription selects, in a namespace
    // of its own: no registration names it.
    create_namespace(client, "tenant").await;
    apply(
        client,
        json!({
            "apiVersion": "clusters.clusternet.io/v1beta1",
            "kind": "ManagedCluster",
            "metadata": {"name": "fake", "namespace": "tenant", "labels": {"env": "prod"}},
            "spec": {"clusterId": "00000000-0000-4000-8000-0000000fa4e0", "syncMode": "Pull"},
        }),
    )
    .await;
    set_cluster_ready(client, "tenant", "fake", true, "64").await;
    apply(client, deployment("default", "web", 3)).await;
    let _scheduler = start_scheduler(client).await;
    apply(client, web_sub(json!({}))).await;
    let bound = eventually("the registered cluster bound", WAIT, || async {
        let sub = subscription(client, "default", "web").await;
        sub.status
            .filter(|s| !s.binding_clusters.is_empty())
            .map(|s| s.binding_clusters)
    })
    .await;
    assert_eq!(bound, vec!["clusternet-real/real"]);
    let replicas = replicas_by_cluster(client, "default", "web").await;
    assert_eq!(replicas, vec![("clusternet-real".to_owned(), 3)]);
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), "tenant");
    let note = eventually("an UnregisteredCluster Event on the fake", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("UnregisteredCluster"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains("no ClusterRegistrationRequest"), "{note}");
}
