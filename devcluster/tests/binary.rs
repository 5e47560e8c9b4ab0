#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `devcluster` binary: writes its kubeconfig once ready, enforces the bearer token,
//! persists to its data dir, and exits cleanly on SIGTERM.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

async fn start(dir: &std::path::Path, extra: &[&str]) -> (tokio::process::Child, Client, String) {
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !kubeconfig.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "kubeconfig never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
    let server = kc.clusters[0]
        .cluster
        .as_ref()
        .unwrap()
        .server
        .clone()
        .unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    (child, Client::try_from(config).unwrap(), server)
}

async fn terminate(mut child: tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("did not exit on SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn binary_serves_with_token_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap().to_string();
    let (child, client, server) = start(
        dir.path(),
        &["--token", "s3cret", "--nodes", "3", "--data-dir", &data_arg],
    )
    .await;
    let nss: Api<Namespace> = Api::all(client.clone());
    assert!(nss.list(&ListParams::default()).await.unwrap().items.len() >= 4);
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":"kept"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    // Without the token: 401 as a Status.
    let url = format!("{server}/api/v1/namespaces");
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-o", "-", "-w", "%{http_code}", &url])
        .output()
        .await;
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            text.ends_with("401") && text.contains("Unauthorized"),
            "{text}"
        );
    }
    terminate(child).await;

    // Restarted on the same data dir: the object is still there.
    let (child, client, _) =
        start(dir.path(), &["--token", "s3cret", "--data-dir", &data_arg]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.get("kept").await.unwrap();
    terminate(child).await;
}

/// A killed server may have acknowledged writes its database never got; a watcher that saw them
/// must not resume as if nothing was missing (it would skip every new write up to the RV it saw):
/// after the restart, RVs jump ahead and a watch from before the kill gets 410 Expired, as from
/// an etcd restored with `--bump-revision --mark-compacted`.
#[tokio::test]
async fn after_sigkill_a_watch_from_before_the_restart_is_expired_and_new_rvs_are_higher() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::WatchParams;
    use kube::core::WatchEvent;

    let dir = tempfile::tempdir().unwrap();
    let data_arg = dir.path().join("data").to_str().unwrap().to_string();
    let (mut child, client, _) = start(dir.path(), &["--data-dir", &data_arg]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":"before"}})).unwrap();
    let seen = cms.create(&PostParams::default(), &cm).await.unwrap();
    let seen_rv = seen.metadata.resource_version.unwrap();
    child.kill().await.unwrap();

    let (child, client, _) = start(dir.path(), &["--data-dir", &data_arg]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = cms
        .watch(&WatchParams::default().timeout(5), &seen_rv)
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
    let cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":"after"}})).unwrap();
    let after = cms.create(&PostParams::default(), &cm).await.unwrap();
    let after_rv: u64 = after.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        after_rv > seen_rv.parse::<u64>().unwrap() + 1_000_000,
        "{after_rv}"
    );
    terminate(child).await;
}

/// kube-apiserver answers a write once etcd has it, and devcluster once its database has it:
/// every write acknowledged before a SIGKILL is there after the restart. devcluster answered
/// before its writer thread committed, so a kill right after a burst of writes lost the last
/// acknowledged ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_acknowledged_before_a_sigkill_is_kept() {
    use futures::StreamExt;

    let dir = tempfile::tempdir().unwrap();
    let data_arg = dir.path().join("data").to_str().unwrap().to_string();
    let (mut child, client, _) = start(dir.path(), &["--data-dir", &data_arg]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    // Large objects, so that the database's side of each write takes a while (the object is
    // encoded on the writer thread): a writer behind the answers would lose the last ones.
    let payload = "x".repeat(512 * 1024);
    let acknowledged: Vec<String> = futures::stream::iter(0..120)
        .map(|i| {
            let cms = cms.clone();
            let payload = payload.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("burst-{i}")},
                    "data": {"payload": payload},
                }))
                .unwrap();
                cms.create(&PostParams::default(), &cm)
                    .await
                    .unwrap()
                    .metadata
                    .name
                    .unwrap()
            }
        })
        .buffer_unordered(24)
        .collect()
        .await;
    child.kill().await.unwrap();

    let (child, client, _) = start(dir.path(), &["--data-dir", &data_arg]).await;
    let kept: std::collections::HashSet<String> = Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    let lost: Vec<&String> = acknowledged.iter().filter(|n| !kept.contains(*n)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {lost:?}",
        lost.len(),
        acknowledged.len()
    );
    terminate(child).await;
}
