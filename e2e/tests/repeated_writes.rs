#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Writes that land twice: through the chaos request proxy, each write goes to devcluster twice
//! and its client gets the second answer, as when an answer is lost and the request sent again.

use std::time::Duration;

use atoll_e2e::chaos::requests::{RequestFault, RequestProxy, RequestSchedule};
use atoll_runtime::leader::LeaderElection;

/// A Lease renewal answered 409 for its own landed write (the repeat's answer) is a renewal,
/// not a Lease lost to another replica: the scheduler exited on it in `make chaos` before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_write_answered_by_its_own_repeat_is_held() {
    let server = devcluster::DevCluster::start_default().await.unwrap();
    let mut proxy = RequestProxy::start(server.addr(), None).await.unwrap();
    let config = kube::Config::new(format!("http://{}", proxy.addr()).parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let election = LeaderElection::new(
        client.clone(),
        "default",
        "repeated",
        "replica-a",
        Duration::from_secs(15),
    );
    proxy.play(RequestSchedule::from_now(
        RequestFault::Repeat,
        Duration::from_secs(600),
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The create lands, its repeat is answered 409 AlreadyExists; then renewals, each landing
    // and answered 409 Conflict.
    for round in 0..3 {
        assert!(
            election.try_acquire_or_renew().await.unwrap(),
            "round {round}: the Lease was taken as lost"
        );
    }
    let repeated = proxy
        .counters()
        .repeated
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(repeated >= 3, "{repeated} writes sent twice");
    // Another replica's write still wins over ours: a contender that finds it holding is
    // refused.
    proxy.heal();
    let other = LeaderElection::new(
        client,
        "default",
        "repeated",
        "replica-b",
        Duration::from_secs(15),
    );
    assert!(!other.try_acquire_or_renew().await.unwrap());
}
