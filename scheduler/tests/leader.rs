#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Two scheduler replicas: one works, the other waits and takes over when the first dies.

mod common;

use atoll_scheduler::app::{Args, run};
use atoll_testkit::{Parent, eventually};
use clap::Parser;
use common::*;
use serde_json::json;
use std::time::Duration;

fn args(kubeconfig: &std::path::Path, identity: &str) -> Args {
    Args::parse_from([
        "atoll-scheduler",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--admin-listen",
        "127.0.0.1:0",
        "--leader-elect-lease-seconds",
        "2",
        "--leader-elect-identity",
        identity,
    ])
}

#[tokio::test]
async fn a_second_replica_takes_over_when_the_leader_dies() {
    let parent = Parent::start().await;
    let client = &parent.client;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("parent.kubeconfig");
    parent.cluster.write_kubeconfig(&kubeconfig).unwrap();
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    apply(client, deployment("default", "web", 1)).await;
    apply(client, deployment("default", "api", 1)).await;

    let first = tokio::spawn(run(args(&kubeconfig, "first")));
    let holder = eventually("a leader", Duration::from_secs(10), || async {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(client.clone(), "clusternet-system");
        leases
            .get_opt("atoll-scheduler")
            .await
            .unwrap()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
    })
    .await;
    assert_eq!(holder, "first");
    let second = tokio::spawn(run(args(&kubeconfig, "second")));

    let sub = |name: &str| {
        subscription_yaml(
            "default",
            name,
            json!({
                "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": name}],
            }),
        )
    };
    apply(client, sub("web")).await;
    eventually(
        "web scheduled by the first replica",
        Duration::from_secs(20),
        || async { (descriptions_of(client, "default", "web").await.len() == 1).then_some(()) },
    )
    .await;

    // The leader dies without giving the Lease up; the standby takes over once it expires.
    first.abort();
    apply(client, sub("api")).await;
    eventually(
        "api scheduled by the second replica",
        Duration::from_secs(30),
        || async { (descriptions_of(client, "default", "api").await.len() == 1).then_some(()) },
    )
    .await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "clusternet-system");
    let spec = leases.get("atoll-scheduler").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("second"));
    assert_eq!(spec.lease_transitions, Some(1));
    second.abort();
}
