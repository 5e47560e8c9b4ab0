#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A devcluster with a data directory loses nothing across a restart, continues the
//! resourceVersion sequence, and a kube-rs watcher resumes across it.

use std::time::Duration;

use devcluster::{Config, DevCluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata":{"name":name},"data":{"k":name}})).unwrap()
}

#[tokio::test]
async fn restart_with_data_dir_keeps_objects_and_resumes_watchers() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    };
    let first = DevCluster::start(config.clone()).await.unwrap();
    let port = first.addr().port();
    let client = first.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut last_rv = 0u64;
    for i in 0..20 {
        let c = api
            .create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
        last_rv = c.resource_version().unwrap().parse().unwrap();
    }
    // A watcher that lives across the restart.
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        // Errors while the server is down are expected; the watcher retries with backoff.
        while let Some(item) = stream.next().await {
            if let Ok(o) = item {
                let _ = tx.send(o.name_any());
            }
        }
    });
    // Initial listing reaches the watcher.
    let mut seen = Vec::new();
    while seen.len() < 21 {
        seen.push(
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    drop(first);

    let second = DevCluster::start(Config {
        port,
        ..config.clone()
    })
    .await
    .unwrap();
    let client2 = second.client().await.unwrap();
    let api2: Api<ConfigMap> = Api::namespaced(client2, "default");
    let all = api2.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 21, "20 created + kube-root-ca.crt");
    let c = api2
        .create(&PostParams::default(), &cm("after-restart"))
        .await
        .unwrap();
    let rv: u64 = c.resource_version().unwrap().parse().unwrap();
    assert!(rv > last_rv, "resourceVersion continues: {rv} > {last_rv}");

    // The old watcher reconnects and sees the new object.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let name = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if name == "after-restart" {
            break;
        }
    }
}

#[tokio::test]
async fn watch_from_a_lost_resource_version_gets_expired_event() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    };
    let first = DevCluster::start(config.clone()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(first.client().await.unwrap(), "default");
    let old = api
        .create(&PostParams::default(), &cm("old"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("newer"))
        .await
        .unwrap();
    drop(first);
    // After a restart the event history is gone: a watch from before the last change
    // must be answered with 200 + ERROR 410 Expired (kube-rs then relists).
    let second = DevCluster::start(config).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(second.client().await.unwrap(), "default");
    let stream = api
        .watch(
            &kube::api::WatchParams::default().timeout(5),
            &old.resource_version().unwrap(),
        )
        .await
        .unwrap();
    futures::pin_mut!(stream);
    match stream.next().await {
        Some(Ok(kube::api::WatchEvent::Error(e))) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected an Expired error event, got {other:?}"),
    }
    // Watching from the current RV works.
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(&kube::api::WatchParams::default().timeout(1), &rv)
        .await
        .unwrap();
    futures::pin_mut!(stream);
    assert!(stream.next().await.is_none(), "no events, clean close");
}
