//! The parent fixture and the token Secret against a devcluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::Description;
use atoll_testkit::{BOOTSTRAP_TOKEN, Parent, bootstrap_secret, create_namespace};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;

#[tokio::test]
async fn a_parent_serves_atolls_kinds_in_its_namespaces_and_holds_the_token() {
    let p = Parent::start().await;
    let namespaces = Api::<Namespace>::all(p.client.clone());
    for ns in ["clusternet-system", "clusternet-reserved"] {
        assert!(namespaces.get_opt(ns).await.unwrap().is_some(), "{ns}");
    }
    // Creating one that exists is no error.
    create_namespace(&p.client, "clusternet-system").await;
    Api::<Description>::all(p.client.clone())
        .list(&Default::default())
        .await
        .unwrap();

    bootstrap_secret(&p.client, BOOTSTRAP_TOKEN, Some("2030-01-01T00:00:00Z")).await;
    let s = Api::<Secret>::namespaced(p.client.clone(), "clusternet-system")
        .get("bootstrap-token-07401b")
        .await
        .unwrap();
    assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    let data = s.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(text("token-id"), "07401b");
    assert_eq!(text("token-secret"), "f395accd246ae52d");
    assert_eq!(text("usage-bootstrap-authentication"), "true");
    assert_eq!(text("expiration"), "2030-01-01T00:00:00Z");
}
