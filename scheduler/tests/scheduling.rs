#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The scheduler against a live (devcluster) parent, through kube-rs: one scenario per test.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn replication_reaches_three_clusters() {
    let parent = parent().await;
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
