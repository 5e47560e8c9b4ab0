#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A kube-rs Controller reconciling a CRD against devcluster: CRD registration, discovery,
//! status subresource, finalizer helper (JSON patch `test` against null), owned objects.

use std::sync::Arc;
use std::time::Duration;

use devcluster::DevCluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::{Controller, conditions, wait::await_condition, watcher};
use kube::{Api, Client, CustomResource, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
pub struct WidgetSpec {
    pub size: i64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct WidgetStatus {
    pub observed: i64,
}

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"observed": {"type": "integer"}}}}}}}]}
    }))
    .unwrap()
}

struct Ctx {
    client: Client,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = w.namespace().unwrap();
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, "example.com/cleanup", w, |ev| async {
        match ev {
            Event::Apply(w) => {
                let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
                let oref = w.controller_owner_ref(&()).unwrap();
                let cm = json!({"apiVersion":"v1","kind":"ConfigMap",
                    "metadata":{"name": format!("{}-cm", w.name_any()), "ownerReferences":[oref]},
                    "data":{"size": w.spec.size.to_string()}});
                match cms
                    .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => {}
                    Err(e) => return Err(e),
                }
                api.patch_status(
                    &w.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status":{"observed": w.spec.size}})),
                )
                .await?;
                Ok(Action::await_change())
            }
            Event::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))
}

fn error_policy(_w: Arc<Widget>, _e: &Error, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

#[tokio::test]
async fn controller_reconciles_a_crd() {
    let c = DevCluster::start_default().await.unwrap();
    let client = c.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(
            crds.clone(),
            "widgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();

    // Discovery sees the new resource.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.groups().any(|g| g.name() == "example.com"));

    let widgets: Api<Widget> = Api::all(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
    });
    tokio::spawn(
        Controller::new(widgets, watcher::Config::default())
            .owns(
                Api::<ConfigMap>::all(client.clone()),
                watcher::Config::default(),
            )
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {}),
    );

    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    api.create(
        &PostParams::default(),
        &Widget::new("w1", WidgetSpec { size: 3 }),
    )
    .await
    .unwrap();
    let ready = tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(api.clone(), "w1", |w: Option<&Widget>| {
            w.and_then(|w| w.status.as_ref())
                .is_some_and(|s| s.observed == 3)
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    assert!(
        ready
            .finalizers()
            .contains(&"example.com/cleanup".to_string())
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned = cms.get("w1-cm").await.unwrap();
    assert_eq!(
        owned.owner_references()[0].uid,
        ready.meta().uid.clone().unwrap()
    );

    // Deleting runs the cleanup, removes the finalizer, then GC removes the ConfigMap.
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(
            api.clone(),
            "w1",
            conditions::is_deleted(&ready.uid().unwrap()),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cms.get_opt("w1-cm").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Deleting the CRD stops serving it.
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match api.list(&Default::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => break,
            _ => {
                assert!(tokio::time::Instant::now() < deadline, "CRD still served");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
