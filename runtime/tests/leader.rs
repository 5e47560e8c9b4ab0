//! Leader election against devcluster: a standby replica is Ready while another holds the
//! Lease, and takes over when it is released.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_runtime::admin::Readiness;
use atoll_runtime::leader::LeaderElection;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_is_ready_while_another_replica_leads_and_takes_over_on_release() {
    let server = devcluster::DevCluster::start_default().await.unwrap();
    let client = server.client().await.unwrap();
    let contender = |identity: &str| {
        LeaderElection::new(
            client.clone(),
            "default",
            "standby",
            identity,
            Duration::from_secs(5),
        )
    };
    let leader = contender("replica-a").acquire().await;
    let readiness = Readiness::default();
    let standby = tokio::spawn({
        let (election, readiness) = (contender("replica-b"), readiness.clone());
        async move { election.acquire_standing_by(&readiness).await }
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while !readiness.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the standby is Ready while another replica leads");
    assert!(
        !standby.is_finished(),
        "the standby took a Lease that is held"
    );
    leader.release().await.unwrap();
    let took_over = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .expect("the standby takes over once the Lease is released")
        .unwrap();
    drop(took_over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_cannot_reach_the_api_server_is_not_ready() {
    // Nothing listens on this port: every round fails.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let readiness = Readiness::default();
    readiness.set(true);
    let election = LeaderElection::new(
        client,
        "default",
        "standby",
        "replica-c",
        Duration::from_secs(5),
    );
    let waiting = tokio::spawn({
        let readiness = readiness.clone();
        async move { election.acquire_standing_by(&readiness).await }
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while readiness.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a failed round clears readiness");
    waiting.abort();
}
