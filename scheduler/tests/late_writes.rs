#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A write of the scheduler's own that lands late, after a newer one: the chaos request proxy
//! (`atoll_e2e::chaos::requests`) sends each write once and again seconds later, as a request
//! held up in the network would arrive.

mod common;

use atoll_e2e::chaos::requests::{RequestFault, RequestProxy, RequestSchedule};
use atoll_testkit::{Parent, eventually};
use common::*;
use serde_json::json;
use std::time::Duration;

/// The held-up copy of the Description written for the feed's second value lands after the
/// write for its third and takes the Description back; the scheduler writes the third again
/// at once, not at its next resync (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_description_taken_back_by_a_late_copy_of_an_older_write_is_written_again() {
    let parent = Parent::start().await;
    let client = &parent.client;
    let mut proxy = RequestProxy::start(parent.cluster.addr(), None)
        .await
        .unwrap();
    let through_proxy = kube::Client::try_from(kube::Config::new(
        format!("http://{}", proxy.addr()).parse().unwrap(),
    ))
    .unwrap();
    add_cluster(client, "a", json!({"env": "prod"}), "8").await;
    let feed = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "default"}, "data": {"value": value}})
    };
    apply(client, feed("1")).await;
    apply(
        client,
        subscription_yaml(
            "default",
            "app",
            json!({
                "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "cfg"}],
            }),
        ),
    )
    .await;
    let _scheduler = start_scheduler(&through_proxy).await;
    let rendered = || async {
        let descriptions = descriptions_of(client, "default", "app").await;
        descriptions
            .first()
            .and_then(|d| d.spec.raw.first())
            .and_then(|raw| raw["data"]["value"].as_str().map(str::to_owned))
    };
    let rendered_is = |want: &'static str| {
        let rendered = &rendered;
        async move { rendered().await.as_deref() == Some(want) }
    };
    eventually("the first rendering", Duration::from_secs(10), || {
        rendered_is("1")
    })
    .await;

    // The write for "2" is answered and held; the one for "3" goes through at once.
    let held = Duration::from_secs(3);
    proxy.play(RequestSchedule::from_now(
        RequestFault::ReplayLate { after: held },
        Duration::from_secs(600),
    ));
    apply(client, feed("2")).await;
    eventually("the rendering of 2", Duration::from_secs(5), || {
        rendered_is("2")
    })
    .await;
    proxy.heal();
    apply(client, feed("3")).await;
    eventually("the rendering of 3", Duration::from_secs(5), || {
        rendered_is("3")
    })
    .await;
    let taken = || {
        proxy
            .counters()
            .replayed_late_taken
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    eventually("the held copies to land", held * 3, || async {
        taken() > 0
    })
    .await;
    // The copy took the Description back to "2" (or was answered for a write that did nothing):
    // either way the rendering must be, and stay, "3".
    eventually("the rendering of 3 again", Duration::from_secs(10), || {
        rendered_is("3")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rendered().await.as_deref(), Some("3"));
}
