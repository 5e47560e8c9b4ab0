#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! devcluster driven through kube-rs: CRUD, lists, watches, patches, status, errors.

use std::time::Duration;

use devcluster::DevCluster;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

async fn cluster() -> (DevCluster, Client) {
    let c = DevCluster::start_default().await.unwrap();
    let client = c.client().await.unwrap();
    (c, client)
}

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":data}),
    )
    .unwrap()
}

#[tokio::test]
async fn fresh_cluster_has_default_objects() {
    let (_c, client) = cluster().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&n.to_string()), "{names:?}");
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-public");
    sas.get("default").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.get("kube-root-ca.crt").await.unwrap();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "32"));
}

#[tokio::test]
async fn configmap_crud_and_errors() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("c1", json!({"a":"1"})))
        .await
        .unwrap();
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();
    assert!(created.uid().is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(created.metadata.generation.is_none());

    // AlreadyExists
    let err = api
        .create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "AlreadyExists");
        }
        e => panic!("unexpected {e:?}"),
    }

    // Update with the current RV works, a stale RV conflicts.
    let mut upd = created.clone();
    upd.data = Some([("a".to_string(), "2".to_string())].into());
    let updated = api
        .replace("c1", &PostParams::default(), &upd)
        .await
        .unwrap();
    let rv2: u64 = updated.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    let err = api
        .replace("c1", &PostParams::default(), &upd)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );

    // A no-op update keeps the RV.
    let same = api
        .replace("c1", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), updated.resource_version());

    // Merge patch, JSON patch.
    let p = api
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data":{"b":"x","a":null}})),
        )
        .await
        .unwrap();
    let data = p.data.unwrap();
    assert_eq!(data.get("b").map(String::as_str), Some("x"));
    assert!(!data.contains_key("a"));
    let p = api
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op":"test","path":"/metadata/finalizers","value":null},
                    {"op":"add","path":"/data/c","value":"y"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap().get("c").map(String::as_str), Some("y"));

    // Invalid name → 422, nothing stored.
    let err = api
        .create(&PostParams::default(), &cm("Bad_Name", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.reason == "Invalid"),
        "{err:?}"
    );

    // Delete → NotFound afterwards.
    api.delete("c1", &DeleteParams::default()).await.unwrap();
    let err = api.get("c1").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{err:?}"
    );

    // Create in a missing namespace → 404.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = other
        .create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn list_with_selectors_and_pages() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..7 {
        let mut c = cm(&format!("p{i}"), json!({}));
        c.metadata.labels = Some(
            [(
                "parity".to_string(),
                (if i % 2 == 0 { "even" } else { "odd" }).to_string(),
            )]
            .into(),
        );
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let even = api
        .list(&ListParams::default().labels("parity=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 4);
    let set = api
        .list(&ListParams::default().labels("parity in (odd),parity notin (even)"))
        .await
        .unwrap();
    assert_eq!(set.items.len(), 3);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=p3"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert!(by_name.metadata.resource_version.is_some());

    // Pagination walks everything exactly once.
    let mut seen = Vec::new();
    let mut lp = ListParams::default().labels("parity").limit(3);
    loop {
        let page = api.list(&lp).await.unwrap();
        seen.extend(page.items.iter().map(|c| c.name_any()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    seen.sort();
    assert_eq!(seen, (0..7).map(|i| format!("p{i}")).collect::<Vec<_>>());

    // Later pages report the first page's resourceVersion, even when writes happen between
    // pages, so a watch from it misses nothing.
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    api.create(&PostParams::default(), &cm("between", json!({})))
        .await
        .unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );

    // Bad selector → 400.
    let err = api
        .list(&ListParams::default().labels("a in b"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );

    // An empty list has items: [] and a resourceVersion.
    let empty: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-node-lease");
    let l = empty
        .list(&ListParams::default().labels("none=here"))
        .await
        .unwrap();
    assert!(l.items.is_empty());
    assert!(l.metadata.resource_version.is_some());
}

/// `TYPE name` of a watch event; `None` for a bookmark (an error fails the test).
fn described(ev: WatchEvent<ConfigMap>) -> Option<String> {
    match ev {
        WatchEvent::Added(o) => Some(format!("ADDED {}", o.name_any())),
        WatchEvent::Modified(o) => Some(format!("MODIFIED {}", o.name_any())),
        WatchEvent::Deleted(o) => Some(format!("DELETED {}", o.name_any())),
        WatchEvent::Bookmark(_) => None,
        WatchEvent::Error(e) => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn raw_watch_resumes_after_rv_and_reports_transitions() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = api
        .create(&PostParams::default(), &cm("w1", json!({})))
        .await
        .unwrap();
    let rv = a.resource_version().unwrap();
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"v"}})),
    )
    .await
    .unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap();
    futures::pin_mut!(stream);
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut types = Vec::new();
    while let Some(ev) = stream.try_next().await.unwrap() {
        types.extend(described(ev));
        if types.len() == 2 {
            break;
        }
    }
    assert_eq!(types, vec!["MODIFIED w1", "DELETED w1"]);
}

#[tokio::test]
async fn watcher_sees_initial_state_then_changes() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    for cfg in [
        watcher::Config::default(),
        watcher::Config::default().streaming_lists(),
    ] {
        let stream = watcher(api.clone(), cfg).applied_objects();
        futures::pin_mut!(stream);
        let first = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let mut names = vec![first.name_any()];
        let name = format!("after-{}", names.len());
        let api2 = api.clone();
        let n2 = name.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            api2.create(&PostParams::default(), &cm(&n2, json!({})))
                .await
                .unwrap();
        });
        while !names.contains(&name) {
            let o = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            names.push(o.name_any());
        }
        assert!(names.contains(&"before".to_string()), "{names:?}");
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (_c, client) = cluster().await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},
            "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}},
        "status":{"replicas":99}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.status.as_ref().and_then(|s| s.replicas).is_none(),
        "status dropped on create"
    );

    // Status through /status: generation unchanged, spec unchanged.
    let s = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"replicas":5},"status":{"replicas":2,"readyReplicas":2}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(s.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(s.status.as_ref().unwrap().ready_replicas, Some(2));

    // Status through the main endpoint is ignored; a spec change bumps generation.
    let m = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"replicas":3},"status":{"readyReplicas":0}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(m.status.as_ref().unwrap().ready_replicas, Some(2));

    // Metadata-only change: no generation bump.
    let l = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"x":"y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, Some(2));

    // Scale subresource.
    let sc = api.get_scale("web").await.unwrap();
    assert_eq!(sc.spec.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut c = cm("fin", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    let r = api.delete("fin", &DeleteParams::default()).await.unwrap();
    let obj = r.left().expect("object returned while finalizers pending");
    assert!(obj.metadata.deletion_timestamp.is_some());
    // New finalizers are refused now.
    let err = api
        .patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata":{"finalizers":["example.com/hold","example.com/new"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"finalizers":null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("fin").await.unwrap().is_none());
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let (_c, client) = cluster().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":"tmp"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    api.create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap();
    // The default service account was created with the namespace.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "tmp");
    sas.get("default").await.unwrap();
    nss.delete("tmp", &DeleteParams::background())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while nss.get_opt("tmp").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "namespace never went away"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Immortal namespaces.
    let err = nss
        .delete("default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err:?}"
    );
}

#[tokio::test]
async fn owner_references_cascade_in_background() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let mut dep = cm("dep", json!({}));
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.uid().unwrap(),
            ..Default::default()
        },
    ]);
    api.create(&PostParams::default(), &dep).await.unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while api.get_opt("dep").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "dependent never collected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn watch_ends_cleanly_at_timeout_seconds() {
    // A watch stream ends cleanly at timeoutSeconds.
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let start = std::time::Instant::now();
    let stream = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap();
    let n = stream.count().await;
    assert_eq!(n, 0);
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn server_side_apply_creates_conflicts_and_forces() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let applied = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"1","b":"2"}});
    let first = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&applied))
        .await
        .unwrap();
    let mf = first.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("mgr-a"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

    // Same apply again: nothing written.
    let again = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), first.resource_version());

    // Another manager changing an owned field conflicts; force takes it over.
    let other =
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"9"}});
    let err = api
        .patch("ssa", &PatchParams::apply("mgr-b"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap().get("a").map(String::as_str), Some("9"));

    // mgr-a stops applying "b": it is removed.
    let fewer = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{}});
    let pruned = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&fewer))
        .await
        .unwrap();
    let data = pruned.data.unwrap_or_default();
    assert!(!data.contains_key("b"), "{data:?}");
    assert_eq!(data.get("a").map(String::as_str), Some("9"));

    // Apply without a field manager is refused.
    let err = api
        .patch("ssa", &PatchParams::default(), &Patch::Apply(&applied))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
}

#[tokio::test]
async fn dry_run_and_generate_name_and_body_limits() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", json!({})),
        )
        .await
        .unwrap();
    assert!(dry.uid().is_some());
    assert!(api.get_opt("dry").await.unwrap().is_none());

    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let made = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(made.name_any().starts_with("gen-") && made.name_any().len() == 9);

    let big = "x".repeat(3 * 1024 * 1024 + 10);
    let err = api
        .create(&PostParams::default(), &cm("big", json!({"k": big})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 413),
        "{err:?}"
    );
    assert!(api.get_opt("big").await.unwrap().is_none());
}

#[tokio::test]
async fn events_written_with_the_recorder_are_readable_in_both_apis() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = api
        .create(&PostParams::default(), &cm("evt", json!({})))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tester".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello from the recorder".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder
        .publish(&ev, &target.object_ref(&()))
        .await
        .unwrap();
    // The same event again becomes a series (merge patch of the stored event).
    recorder
        .publish(&ev, &target.object_ref(&()))
        .await
        .unwrap();

    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let listed = core
        .list(
            &ListParams::default().fields("involvedObject.name=evt,involvedObject.kind=ConfigMap"),
        )
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].message.as_deref(),
        Some("hello from the recorder")
    );
    assert_eq!(listed.items[0].reason.as_deref(), Some("Tested"));

    let new_api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let listed = new_api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].note.as_deref(),
        Some("hello from the recorder")
    );
    assert!(
        listed.items[0].series.is_some(),
        "second publish made a series"
    );
}

#[tokio::test]
async fn watch_bookmarks_and_initial_events_end() {
    use kube::api::WatchEvent;
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // sendInitialEvents: ADDED for what exists, then the initial-events-end bookmark.
    let wp = WatchParams::streaming_lists().timeout(4);
    let stream = api.watch(&wp, "0").await.unwrap();
    futures::pin_mut!(stream);
    let mut added = 0;
    loop {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, 1, "kube-root-ca.crt");
    // A bookmark arrives about 2 s before the timeout, then the stream ends cleanly.
    let next = tokio::time::timeout(Duration::from_secs(4), stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(next, Some(WatchEvent::Bookmark(_))), "{next:?}");
    let end = tokio::time::timeout(Duration::from_secs(4), stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_none());
}

#[tokio::test]
async fn custom_resources_are_pruned_defaulted_and_validated() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let (_c, client) = cluster().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"}}}}}}}]}
    }))
    .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let status = created.status.unwrap();
    let established = status
        .conditions
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "Established at once");

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let obj = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion":"example.com/v1","kind":"Gadget",
            "metadata":{"name":name},"spec":spec}))
        .unwrap()
    };
    // Unknown field pruned, default filled.
    let g = api
        .create(
            &PostParams::default(),
            &obj("g1", json!({"size": 2, "bogus": true})),
        )
        .await
        .unwrap();
    assert_eq!(g.data["spec"], json!({"size": 2, "color": "red"}));
    // Schema violations: 422 with causes, nothing stored.
    for (name, spec) in [
        ("g2", json!({"color": "red"})),
        ("g3", json!({"size": "big"})),
        ("g4", json!({"size": 1, "color": "pink"})),
    ] {
        let err = api
            .create(&PostParams::default(), &obj(name, spec))
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.reason == "Invalid"),
            "{name}: {err:?}"
        );
        assert!(api.get_opt(name).await.unwrap().is_none());
    }
    // Strict field validation refuses unknown fields.
    let err = client
        .request::<serde_json::Value>(
            http::Request::post(
                "/apis/example.com/v1/namespaces/default/gadgets?fieldValidation=Strict",
            )
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&obj("g5", json!({"size": 1, "bogus": 1}))).unwrap())
            .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );
    // Strategic merge patch is refused on custom resources.
    let err = api
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec":{"size":3}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 415),
        "{err:?}"
    );
    // A PUT without resourceVersion is refused for custom resources.
    let mut put = g.clone();
    put.metadata.resource_version = None;
    let err = api
        .replace("g1", &PostParams::default(), &put)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    // A kind that does not match the path is a 400.
    let mut wrong = obj("g6", json!({"size": 1}));
    wrong.types.as_mut().unwrap().kind = "Other".into();
    let err = api
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );
}

#[tokio::test]
async fn secret_string_data_and_workload_defaults() {
    use k8s_openapi::api::core::v1::Secret;
    let (_c, client) = cluster().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s: Secret =
        serde_json::from_value(json!({"metadata":{"name":"s"},"stringData":{"user":"admin"}}))
            .unwrap();
    let made = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert!(made.string_data.is_none());
    assert_eq!(made.type_.as_deref(), Some("Opaque"));
    assert_eq!(made.data.unwrap()["user"].0, b"admin".to_vec());
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({"metadata":{"name":"d"},"spec":{
        "selector":{"matchLabels":{"a":"b"}},
        "template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}))
    .unwrap();
    let made = deploys.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(made.spec.unwrap().replicas, Some(1));
}

#[tokio::test]
async fn selector_watch_reports_objects_entering_and_leaving() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let c = api
        .create(&PostParams::default(), &cm("sel", json!({})))
        .await
        .unwrap();
    let stream = api
        .watch(
            &WatchParams::default().labels("team=a").timeout(5),
            &c.resource_version().unwrap(),
        )
        .await
        .unwrap();
    futures::pin_mut!(stream);
    let label = |v: serde_json::Value| Patch::Merge(json!({"metadata":{"labels":{"team": v}}}));
    api.patch("sel", &PatchParams::default(), &label(json!("a")))
        .await
        .unwrap();
    api.patch("sel", &PatchParams::default(), &label(json!("b")))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.name_any())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.name_any())),
            _ => {}
        }
    }
    assert_eq!(seen, vec!["ADDED sel", "DELETED sel"]);
}

#[tokio::test]
async fn foreground_and_orphan_propagation() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned_by = |o: &ConfigMap| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: o.name_any(),
            uid: o.uid().unwrap(),
            block_owner_deletion: Some(true),
            ..Default::default()
        }]
    };
    // Foreground: dependents go first, then the owner.
    let owner = api
        .create(&PostParams::default(), &cm("fg-owner", json!({})))
        .await
        .unwrap();
    let mut dep = cm("fg-dep", json!({}));
    dep.metadata.owner_references = Some(owned_by(&owner));
    api.create(&PostParams::default(), &dep).await.unwrap();
    api.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while api.get_opt("fg-owner").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "owner never removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(api.get_opt("fg-dep").await.unwrap().is_none());

    // Orphan: the dependent stays, without the ownerReference.
    let owner = api
        .create(&PostParams::default(), &cm("or-owner", json!({})))
        .await
        .unwrap();
    let mut dep = cm("or-dep", json!({}));
    dep.metadata.owner_references = Some(owned_by(&owner));
    api.create(&PostParams::default(), &dep).await.unwrap();
    api.delete("or-owner", &DeleteParams::orphan())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(api.get_opt("or-owner").await.unwrap().is_none());
    let kept = api.get("or-dep").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn pods_are_stored_and_logs_answer_like_without_a_kubelet() {
    use k8s_openapi::api::core::v1::Pod;
    let (_c, client) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata":{"name":"p"},
        "spec":{"containers":[{"name":"c","image":"busybox"}]}}))
    .unwrap();
    let made = pods.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(made.status.unwrap().phase.as_deref(), Some("Pending"));
    let err = pods.logs("p", &Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("does not have a host assigned")),
        "{err:?}"
    );
    // Unscheduled pods are deleted at once.
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());
}

#[tokio::test]
async fn raw_status_codes_of_bad_input_and_apply_create() {
    let (_c, client) = cluster().await;
    let send = |method: &str, path: &str, ct: &str, body: Vec<u8>| {
        let client = client.clone();
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(kube::client::Body::from(body))
            .unwrap();
        async move {
            let resp = client.send(req).await.unwrap();
            let status = resp.status().as_u16();
            let bytes = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or(json!(null));
            (status, v)
        }
    };
    // Apply that creates answers 201, a second apply 200.
    let body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a1"},"data":{"x":"1"}}"#
            .to_vec();
    let path = "/api/v1/namespaces/default/configmaps/a1?fieldManager=m";
    assert_eq!(
        send("PATCH", path, "application/apply-patch+yaml", body.clone())
            .await
            .0,
        201
    );
    assert_eq!(
        send("PATCH", path, "application/apply-patch+yaml", body)
            .await
            .0,
        200
    );
    // YAML nested deeper than 128 flow levels is refused before the YAML parser reads it
    // (160 KB of it held a core for 2.6 s), and so is an alias bomb.
    let deep = format!(
        "apiVersion: v1\nkind: ConfigMap\ndata: {}",
        "{a: ".repeat(32_000)
    );
    let bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bomb}}\nx: &a [{}]\ny: [{}]\n",
        vec!["x"; 10_000].join(", "),
        vec!["*a"; 2_000].join(", ")
    );
    for (body, message) in [
        (deep, "deeper than 128 levels"),
        (bomb, "more than 1000000 values"),
    ] {
        let (code, v) = send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            body.into_bytes(),
        )
        .await;
        assert_eq!(code, 400, "{v}");
        assert!(v["message"].as_str().unwrap_or("").contains(message), "{v}");
    }
    // Malformed JSON → 400 Status, unknown resource → 404 Status, unknown patch type → 415.
    let (code, v) = send(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        b"{nope".to_vec(),
    )
    .await;
    assert_eq!(
        (code, v["kind"].as_str(), v["reason"].as_str()),
        (400, Some("Status"), Some("BadRequest"))
    );
    let (code, v) = send(
        "GET",
        "/apis/example.com/v1/widgets",
        "application/json",
        Vec::new(),
    )
    .await;
    assert_eq!((code, v["reason"].as_str()), (404, Some("NotFound")));
    let (code, _) = send("PATCH", path, "text/plain", b"{}".to_vec()).await;
    assert_eq!(code, 415);
    // Delete a collection by label.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let mut c = cm(&format!("dc{i}"), json!({}));
        c.metadata.labels = Some([("batch".to_string(), "x".to_string())].into());
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("batch=x"),
    )
    .await
    .unwrap();
    assert!(
        api.list(&ListParams::default().labels("batch=x"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(api.get_opt("a1").await.unwrap().is_some());
}

#[tokio::test]
async fn dependents_of_a_missing_owner_are_collected() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut dep = cm("dangling", json!({}));
    dep.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "gone".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..Default::default()
    }]);
    api.create(&PostParams::default(), &dep).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while api.get_opt("dangling").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "never collected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn metadata_and_size_validation() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let is_422 = |r: Result<ConfigMap, kube::Error>| matches!(r, Err(kube::Error::Api(ref s)) if s.code == 422);
    // Data over 1 MiB (but under the 3 MiB body limit).
    let big = "x".repeat(1024 * 1024 + 1);
    assert!(is_422(
        api.create(&PostParams::default(), &cm("big", json!({"k": big})))
            .await
    ));
    // Two controller owner references.
    let owner = |uid: &str| OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "o".into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    };
    let mut two = cm("two", json!({}));
    two.metadata.owner_references = Some(vec![owner("a"), owner("b")]);
    assert!(is_422(api.create(&PostParams::default(), &two).await));
    // A field manager over 128 characters (kube-rs refuses it client-side: send it raw).
    let path = format!(
        "/api/v1/namespaces/default/configmaps?fieldManager={}",
        "m".repeat(129)
    );
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&cm("fm", json!({}))).unwrap())
        .unwrap();
    let err = client.request::<ConfigMap>(req).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    for n in ["big", "two", "fm"] {
        assert!(api.get_opt(n).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn discovery_and_openapi_negotiation() {
    let (_c, client) = cluster().await;
    let get = |path: &str, accept: &str| {
        let client = client.clone();
        let req = http::Request::get(path)
            .header("accept", accept)
            .body(kube::client::Body::empty())
            .unwrap();
        async move {
            let resp = client.send(req).await.unwrap();
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or(json!(null));
            (status, headers, v)
        }
    };
    let aggregated =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let (code, h, v) = get("/apis", aggregated).await;
    assert_eq!(code, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .contains("as=APIGroupDiscoveryList")
    );
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    let (_, h, v) = get("/apis", "application/json").await;
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(v["kind"], "APIGroupList");
    // OpenAPI: the index names each group-version with a hash; a stale hash redirects.
    let (code, _, index) = get("/openapi/v3", "application/json").await;
    assert_eq!(code, 200);
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, h, doc) = get(&url, "application/json").await;
    assert_eq!(code, 200);
    assert!(h["cache-control"].to_str().unwrap().contains("immutable"));
    assert!(doc["paths"].as_object().is_some_and(|p| !p.is_empty()));
    let (code, h, _) = get("/openapi/v3/api/v1?hash=stale", "application/json").await;
    assert_eq!(code, 301);
    assert_eq!(h["location"].to_str().unwrap(), url);
    // Table output for a list.
    let (code, _, table) = get(
        "/api/v1/namespaces",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(table["kind"], "Table");
    assert!(table["rows"].as_array().unwrap().len() >= 4);
}

/// Writes are computed outside the store lock and committed only if the object did not change
/// meanwhile: concurrent writers to one object must neither lose an update nor fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_to_one_object_are_all_kept() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("shared", json!({})))
        .await
        .unwrap();
    let writers = 24;
    let writes = (0..writers).map(|i| {
        let api = api.clone();
        async move {
            let key = format!("k{i}");
            if i % 2 == 0 {
                // One field manager per writer, each owning its own key.
                let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "shared"}, "data": {key: "applied"}});
                api.patch(
                    "shared",
                    &PatchParams::apply(&format!("writer-{i}")),
                    &Patch::Apply(&cfg),
                )
                .await
            } else {
                api.patch(
                    "shared",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {key: "merged"}})),
                )
                .await
            }
        }
    });
    for result in futures::future::join_all(writes).await {
        result.unwrap();
    }
    let stored = api.get("shared").await.unwrap();
    let data = stored.data.unwrap_or_default();
    for i in 0..writers {
        let expected = if i % 2 == 0 { "applied" } else { "merged" };
        assert_eq!(
            data.get(&format!("k{i}")).map(String::as_str),
            Some(expected),
            "{data:?}"
        );
    }
    let appliers = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .count();
    assert_eq!(appliers, writers / 2);
}

/// With `simulate_workloads`, a Deployment has the ReplicaSet the Deployment controller would
/// make for its pod template (what `helm --wait` looks for): controlled by it, named
/// `<name>-<pod-template-hash>`, its replicas ready; a new template gets a new ReplicaSet and the
/// old one is scaled to 0; deleting the Deployment collects them.
#[tokio::test]
async fn simulated_deployments_roll_out_through_replica_sets() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let c = DevCluster::start(devcluster::Config {
        simulate_workloads: true,
        workload_delay: Duration::from_millis(50),
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let client = c.client().await.unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({"metadata":{"name":"web"},"spec":{
        "replicas": 2, "selector":{"matchLabels":{"app":"web"}},
        "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"i:1"}]}}}}))
    .unwrap();
    let made = deploys.create(&PostParams::default(), &d).await.unwrap();
    /// (name, replicas, ready replicas, image) of a ReplicaSet.
    type Seen = (String, i32, i32, String);
    // Each ReplicaSet the Deployment controls, by image, once `done` holds for them.
    let rollout = |done: fn(&[Seen]) -> bool| {
        let (sets, uid) = (sets.clone(), made.uid().unwrap());
        async move {
            for _ in 0..100 {
                let mut seen: Vec<Seen> = sets
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter(|rs| {
                        rs.owner_references()
                            .iter()
                            .any(|o| o.uid == uid && o.controller == Some(true))
                    })
                    .map(|rs| {
                        let spec = rs.spec.clone().unwrap();
                        let image = spec.template.unwrap().spec.unwrap().containers[0]
                            .image
                            .clone()
                            .unwrap();
                        let ready = rs.status.and_then(|s| s.ready_replicas).unwrap_or(0);
                        (
                            rs.metadata.name.unwrap(),
                            spec.replicas.unwrap(),
                            ready,
                            image,
                        )
                    })
                    .collect();
                seen.sort_by(|a, b| a.3.cmp(&b.3));
                if done(&seen) {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("no such rollout");
        }
    };
    let first = rollout(|s| s.len() == 1 && s[0].1 == 2 && s[0].2 == 2).await;
    let rs = sets.get(&first[0].0).await.unwrap();
    let hash = rs.labels()["pod-template-hash"].clone();
    assert_eq!(first[0].0, format!("web-{hash}"));
    assert_eq!(hash.len(), 10);
    assert_eq!(rs.annotations()["deployment.kubernetes.io/revision"], "1");
    let spec = rs.spec.unwrap();
    assert_eq!(
        spec.selector.match_labels.unwrap()["pod-template-hash"],
        hash
    );
    assert_eq!(
        spec.template.unwrap().metadata.unwrap().labels.unwrap()["app"],
        "web"
    );

    let patch = json!({"spec":{"template":{"spec":{"containers":[{"name":"c","image":"i:2"}]}}}});
    deploys
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let second = rollout(|s| s.len() == 2 && s[0].1 == 0 && s[1].1 == 2 && s[1].2 == 2).await;
    assert_eq!(second[0].0, first[0].0);
    assert_eq!(second[1].3, "i:2");
    let new = sets.get(&second[1].0).await.unwrap();
    assert_eq!(new.annotations()["deployment.kubernetes.io/revision"], "2");

    deploys
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    rollout(|s| s.is_empty()).await;
}

/// kube-apiserver defaults a Job's backoffLimit and a Deployment's rolling-update parameters on
/// every write, a PUT without them included (`helm upgrade --force` replaces objects, and
/// `helm --wait` dereferences both).
#[tokio::test]
async fn job_and_strategy_defaults_hold_on_create_and_replace() {
    use k8s_openapi::api::batch::v1::Job;
    let (_c, client) = cluster().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let j: Job = serde_json::from_value(json!({"metadata":{"name":"j"},"spec":{"template":{
        "spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i"}]}}}}))
    .unwrap();
    let spec = jobs
        .create(&PostParams::default(), &j)
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(
        (spec.backoff_limit, spec.completions, spec.parallelism),
        (Some(6), Some(1), Some(1))
    );
    assert_eq!(spec.completion_mode.as_deref(), Some("NonIndexed"));
    assert_eq!(spec.suspend, Some(false));

    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{
        "strategy":{"type":"RollingUpdate"},
        "selector":{"matchLabels":{"a":"b"}},
        "template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}});
    let made = deploys
        .create(
            &PostParams::default(),
            &serde_json::from_value(d.clone()).unwrap(),
        )
        .await
        .unwrap();
    let rolling = |d: &Deployment| {
        let r = d
            .spec
            .clone()
            .unwrap()
            .strategy
            .unwrap()
            .rolling_update
            .unwrap();
        (r.max_unavailable, r.max_surge)
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let quarter = Some(IntOrString::String("25%".into()));
    assert_eq!(rolling(&made), (quarter.clone(), quarter.clone()));
    // A replace without the strategy keeps the defaults and the generation.
    let mut replaced = d.clone();
    replaced["spec"].as_object_mut().unwrap().remove("strategy");
    replaced["metadata"]["resourceVersion"] = json!(made.resource_version());
    let after = deploys
        .replace(
            "d",
            &PostParams::default(),
            &serde_json::from_value(replaced).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rolling(&after), (quarter.clone(), quarter));
    assert_eq!(after.metadata.generation, made.metadata.generation);
}

/// A Service replaced without its cluster IP keeps the allocated one, as kube-apiserver does.
#[tokio::test]
async fn a_replaced_service_keeps_its_cluster_ip() {
    use k8s_openapi::api::core::v1::Service;
    let (_c, client) = cluster().await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let s = json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},
        "spec":{"selector":{"a":"b"},"ports":[{"port":80}]}});
    let made = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(s.clone()).unwrap(),
        )
        .await
        .unwrap();
    let ip = made.spec.clone().unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let mut replaced = s;
    replaced["metadata"]["resourceVersion"] = json!(made.resource_version());
    let after = services
        .replace(
            "s",
            &PostParams::default(),
            &serde_json::from_value(replaced).unwrap(),
        )
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(after.cluster_ip, Some(ip.clone()));
    assert_eq!(after.cluster_ips, Some(vec![ip]));
    assert_eq!(after.type_.as_deref(), Some("ClusterIP"));
}

/// A Job gets kube-apiserver's generated selector (its uid) and pod template labels; its
/// selector and template are immutable, so replacing it with its manifest is refused (as
/// `helm upgrade --force` finds on kube-apiserver), while re-applying it server-side works.
#[tokio::test]
async fn a_job_gets_a_generated_selector_and_keeps_its_template() {
    use k8s_openapi::api::batch::v1::Job;
    let (_c, client) = cluster().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let manifest = json!({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"},"spec":{"template":{
        "spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i"}]}}}});
    let pp = PatchParams::apply("test");
    let made = jobs
        .patch("j", &pp, &Patch::Apply(&manifest))
        .await
        .unwrap();
    let uid = made.uid().unwrap();
    let spec = made.spec.clone().unwrap();
    assert_eq!(
        spec.selector.unwrap().match_labels.unwrap(),
        [(
            "batch.kubernetes.io/controller-uid".to_string(),
            uid.clone()
        )]
        .into()
    );
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);
    assert_eq!(labels["batch.kubernetes.io/job-name"], "j");
    assert_eq!(labels["controller-uid"], uid);
    assert_eq!(labels["job-name"], "j");

    let mut relabelled = manifest.clone();
    relabelled["metadata"]["labels"] = json!({"x": "y"});
    let reapplied = jobs
        .patch("j", &pp, &Patch::Apply(&relabelled))
        .await
        .unwrap();
    assert_eq!(reapplied.spec, made.spec);

    let mut replaced = manifest;
    replaced["metadata"]["resourceVersion"] = json!(reapplied.resource_version());
    let err = jobs
        .replace(
            "j",
            &PostParams::default(),
            &serde_json::from_value(replaced).unwrap(),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.selector: Invalid value"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("spec.template: Invalid value"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("field is immutable"),
        "{}",
        status.message
    );
}

/// A watch resuming from far back gets its events from the part of the history kept encoded
/// (past the latest `devcluster::store::WHOLE_EVENTS`, their objects since replaced), the
/// selector transitions included: an object that left the selector is DELETED for it, one that
/// entered is ADDED.
#[tokio::test]
async fn a_selector_watch_resuming_from_far_back_sees_the_transitions() {
    let (_c, client) = cluster().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A plain watcher takes every event as it happens (only those are kept encoded).
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watching = {
        let (api, seen) = (api.clone(), seen.clone());
        let stream = api
            .watch(&WatchParams::default().timeout(60), "0")
            .await
            .unwrap();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) = ev {
                    let rv = o.resource_version().unwrap_or_default();
                    seen.fetch_max(rv.parse().unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
                }
            }
        })
    };
    let mut mover = cm("mover", json!({}));
    mover.metadata.labels = Some([("colour".to_string(), "red".to_string())].into());
    let from = api
        .create(&PostParams::default(), &mover)
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    api.patch(
        "mover",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"labels":{"colour":"blue"}}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("filler", json!({})))
        .await
        .unwrap();
    for i in 0..devcluster::store::WHOLE_EVENTS + 50 {
        api.patch(
            "filler",
            &PatchParams::default(),
            &Patch::Merge(json!({"data":{"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    // Written again, the mover's earlier event no longer holds the stored object: encoded.
    let last: u64 = api
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"size":"big"}}})),
        )
        .await
        .unwrap()
        .resource_version()
        .unwrap()
        .parse()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while seen.load(std::sync::atomic::Ordering::SeqCst) < last {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the plain watcher took every event");
    watching.abort();

    for (colour, expected) in [
        ("red", vec!["DELETED mover"]),
        ("blue", vec!["ADDED mover", "MODIFIED mover"]),
    ] {
        let params = WatchParams::default()
            .labels(&format!("colour={colour}"))
            .timeout(1);
        let stream = api.watch(&params, &from).await.unwrap();
        futures::pin_mut!(stream);
        let mut types = Vec::new();
        while let Some(ev) = stream.try_next().await.unwrap() {
            types.extend(described(ev));
        }
        assert_eq!(types, expected, "colour={colour}");
    }
}
