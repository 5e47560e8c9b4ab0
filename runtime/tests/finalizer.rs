//! Finalizer edits against devcluster: from a cache's view of the object (no read when it is
//! current, a read and a retry when it is stale).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_runtime::finalizer::{Seen, add_seen, remove_seen};
use devcluster::DevCluster;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

const F: &str = "example.com/keep";

#[tokio::test]
async fn an_edit_from_a_stale_view_reads_the_object_and_keeps_other_finalizers() {
    let dev = DevCluster::start(devcluster::Config::default())
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(dev.client().await.unwrap(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("cm".into());
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let stale_version = created.resource_version().unwrap();

    // Someone else adds a finalizer after our cache saw the object.
    let mut other = created.clone();
    other.metadata.finalizers = Some(vec!["other.example.com/x".into()]);
    api.replace("cm", &PostParams::default(), &other)
        .await
        .unwrap();

    let stale = Seen {
        resource_version: &stale_version,
        finalizers: &[],
        deleting: false,
    };
    assert!(add_seen(&api, "cm", F, stale).await.unwrap());
    let now = api.get("cm").await.unwrap();
    assert_eq!(now.finalizers(), ["other.example.com/x", F]);

    // A current view edits without a conflict; a view that shows nothing to do changes nothing.
    let current_version = now.resource_version().unwrap();
    let current = Seen {
        resource_version: &current_version,
        finalizers: now.finalizers(),
        deleting: false,
    };
    assert!(remove_seen(&api, "cm", F, current).await.unwrap());
    let after = api.get("cm").await.unwrap();
    assert_eq!(after.finalizers(), ["other.example.com/x"]);
    let after_version = after.resource_version().unwrap();
    let nothing = Seen {
        resource_version: &after_version,
        finalizers: after.finalizers(),
        deleting: false,
    };
    assert!(!remove_seen(&api, "cm", F, nothing).await.unwrap());
    assert_eq!(
        api.get("cm").await.unwrap().resource_version(),
        Some(after_version)
    );
}
