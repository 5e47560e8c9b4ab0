#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End-to-end scenarios on one shared fleet of three children (child-1 region=eu tier=large,
//! child-2 region=us tier=small, child-3 region=ap tier=large), driven with the real kubectl.
//! Every test uses its own namespaces, Subscription and Globalization names and label keys, so
//! the tests stay independent while they share the fleet; each removes what it created.
//!
//! Scenarios that stop processes are in `tests/disruption.rs`, each with a fleet of its own.

mod support;

use std::sync::{Mutex, Weak};
use std::time::Duration;

use support::{CONVERGE, Expect, Fleet, POLL, condition, converge, expect, jsonpath, secs};

static FLEET: Mutex<Weak<Fleet>> = Mutex::new(Weak::new());

/// The shared fleet, or `None` (with a NOTICE) when kubectl or the binaries are missing.
async fn fleet(test: &str) -> Option<std::sync::Arc<Fleet>> {
    if !support::prerequisites_or_skip(test).await {
        return None;
    }
    Some(support::shared(&FLEET, 3).await)
}

const CHILDREN: [&str; 3] = ["child-1", "child-2", "child-3"];

#[tokio::test]
async fn every_example_lands_with_its_replicas_localization_and_globalization_per_child() {
    let Some(f) = fleet("examples").await else {
        return;
    };
    let ns1 = f.dedicated_namespace("child-1");
    f.parent
        .apply_kustomization(
            &support::manifests().join("examples/localization"),
            &["-n", &ns1],
        )
        .await
        .unwrap();
    f.parent
        .apply_kustomization(&support::manifests().join("examples"), &[])
        .await
        .unwrap();
    let large = Some("hello from a large atoll cluster");
    let plain = Some("hello from atoll");
    let replicas = "{.spec.replicas}";
    let ready = "{.status.readyReplicas}";
    let greeting = "{.data.greeting}";
    let mut cases: Vec<Expect> = vec![
        // Replication to env=prod: everywhere; the Localization gives child-1 three.
        expect("child-1", "deployment", "demo", "web", replicas, Some("3")),
        expect("child-2", "deployment", "demo", "web", replicas, Some("2")),
        expect("child-3", "deployment", "demo", "web", replicas, Some("2")),
        expect("child-1", "deployment", "demo", "web", ready, Some("3")),
        expect("child-3", "deployment", "demo", "web", ready, Some("2")),
        // Static dividing 1:2 between region=eu and region=us; ap is not subscribed.
        expect(
            "child-1",
            "deployment",
            "demo-divided",
            "api",
            replicas,
            Some("2"),
        ),
        expect(
            "child-2",
            "deployment",
            "demo-divided",
            "api",
            replicas,
            Some("4"),
        ),
        expect(
            "child-3",
            "deployment",
            "demo-divided",
            "api",
            replicas,
            None,
        ),
        expect(
            "child-3",
            "namespace",
            "",
            "demo-divided",
            "{.metadata.name}",
            None,
        ),
        expect(
            "child-2",
            "deployment",
            "demo-divided",
            "api",
            ready,
            Some("4"),
        ),
        // The Globalization for tier=large.
        expect(
            "child-1",
            "configmap",
            "demo",
            "web-config",
            greeting,
            large,
        ),
        expect(
            "child-2",
            "configmap",
            "demo",
            "web-config",
            greeting,
            plain,
        ),
        expect(
            "child-3",
            "configmap",
            "demo",
            "web-config",
            greeting,
            large,
        ),
    ];
    // The Localization touches only its feed: the ConfigMap's other content is the feed's.
    cases.push(expect(
        "child-1",
        "deployment",
        "demo",
        "web",
        "{.spec.template.spec.containers[0].image}",
        Some("nginx:1.27-alpine"),
    ));
    let took = converge(&f, "the examples in every child", &cases).await;
    eprintln!(
        "FIGURE examples applied -> landed in 3 children: {}",
        secs(took)
    );

    // What the parent says about it: bindings, divided replicas, aggregated readiness.
    let binding = |ns: &'static str, name: &'static str| {
        let f = f.clone();
        async move {
            jsonpath(
                &f.parent,
                "subscription",
                Some(ns),
                name,
                "{.status.bindingClusters}",
            )
            .await
            .map(|v| v.unwrap_or_default())
        }
    };
    let everywhere = binding("demo", "web-everywhere").await.unwrap();
    for c in CHILDREN {
        assert!(everywhere.contains(&format!("/{c}\"")), "{everywhere}");
    }
    let divided = binding("demo-divided", "api-divided").await.unwrap();
    assert!(!divided.contains("child-3"), "{divided}");
    let replicas_by_cluster = jsonpath(
        &f.parent,
        "subscription",
        Some("demo-divided"),
        "api-divided",
        "{.status.replicas}",
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        replicas_by_cluster.contains("\"apps/v1/Deployment/demo-divided/api\":[")
            && replicas_by_cluster.contains('2')
            && replicas_by_cluster.contains('4'),
        "{replicas_by_cluster}"
    );
    // The rendered objects are readable in the Description: each one's JSON text (not base64).
    let desc = f
        .parent
        .run(&[
            "get",
            "desc",
            "demo.web-everywhere",
            "-n",
            &ns1,
            "-o",
            "yaml",
        ])
        .await
        .unwrap();
    assert!(desc.contains(r#""kind":"Deployment""#), "{desc}");
    assert!(
        desc.contains(r#""replicas":3"#),
        "Localization not rendered: {desc}"
    );
    // Printer columns answer the first question.
    let ((), _) = POLL
        .eventually_timed(
            "kubectl get subs shows 3 clusters ready",
            CONVERGE,
            || async {
                let table = f
                    .parent
                    .run(&["get", "subs", "-n", "demo"])
                    .await
                    .map_err(|e| e.to_string())?;
                let row: Vec<String> = table
                    .lines()
                    .find(|l| l.starts_with("web-everywhere"))
                    .map(|l| l.split_whitespace().map(String::from).collect())
                    .unwrap_or_default();
                if table.contains("STRATEGY")
                    && row.get(1..4) == Some(&["Replication".into(), "3".into(), "3".into()][..])
                {
                    Ok(())
                } else {
                    Err(table)
                }
            },
        )
        .await;

    plugin_sees_the_examples(&f).await;

    for dir in ["examples/localization"] {
        f.parent
            .run(&[
                "delete",
                "-k",
                support::manifests().join(dir).to_str().unwrap(),
                "-n",
                &ns1,
                "--ignore-not-found",
            ])
            .await
            .unwrap();
    }
    f.parent
        .run(&[
            "delete",
            "-k",
            support::manifests().join("examples").to_str().unwrap(),
            "--ignore-not-found",
            "--timeout=60s",
        ])
        .await
        .unwrap();
}

/// `kubectl atoll` (the real binary) on the fleet, once the examples landed: `clusters` lists the
/// three clusters Ready, `status` the Replication Subscription bound to all three with a
/// `Success` Description in each.
async fn plugin_sees_the_examples(f: &Fleet) {
    let plugin = support::bin_dir().join("kubectl-atoll");
    if !plugin.is_file() {
        eprintln!(
            "NOTICE: kubectl atoll not checked: {} is not built",
            plugin.display()
        );
        return;
    }
    let kubeconfig = f.dir.join("parent.kubeconfig");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&plugin)
            .args(args)
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "kubectl atoll {args:?}: {out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let clusters = run(&["clusters", "-o", "json"]);
    let mut ready: Vec<String> = clusters["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "ManagedCluster")
        .filter(|o| {
            o["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    ready.sort();
    assert_eq!(ready, CHILDREN, "{clusters}");
    let status = run(&["status", "web-everywhere", "-n", "demo", "-o", "json"]);
    let items = status["items"].as_array().unwrap();
    let sub = items.iter().find(|o| o["kind"] == "Subscription").unwrap();
    assert_eq!(
        sub["status"]["bindingClusters"].as_array().map(Vec::len),
        Some(3),
        "{sub}"
    );
    let phases: Vec<&str> = items
        .iter()
        .filter(|o| o["kind"] == "Description")
        .map(|o| o["status"]["phase"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(phases, ["Success"; 3], "{status}");
}

const EDIT: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-edit}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: e2e-edit}
data: {color: blue}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: e2e-edit, labels: {app: edit}}
spec:
  replicas: 1
  selector: {matchLabels: {app: edit}}
  template:
    metadata: {labels: {app: edit}}
    spec:
      containers: [{name: app, image: "registry.k8s.io/pause:3.9"}]
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: edited, namespace: e2e-edit}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {env: prod}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-edit}
    - {apiVersion: v1, kind: ConfigMap, name: settings, namespace: e2e-edit}
    - {apiVersion: apps/v1, kind: Deployment, name: app, namespace: e2e-edit}
"#;

fn edit_expects(color: &str, image: &str) -> Vec<Expect> {
    CHILDREN
        .into_iter()
        .flat_map(|c| {
            [
                expect(
                    c,
                    "configmap",
                    "e2e-edit",
                    "settings",
                    "{.data.color}",
                    Some(color),
                ),
                expect(
                    c,
                    "deployment",
                    "e2e-edit",
                    "app",
                    "{.spec.template.spec.containers[0].image}",
                    Some(image),
                ),
            ]
        })
        .collect()
}

#[tokio::test]
async fn an_edited_configmap_value_and_image_reach_every_child() {
    let Some(f) = fleet("edit").await else {
        return;
    };
    f.apply("edit", EDIT).await.unwrap();
    converge(
        &f,
        "first version",
        &edit_expects("blue", "registry.k8s.io/pause:3.9"),
    )
    .await;

    f.parent
        .run(&[
            "patch",
            "configmap",
            "settings",
            "-n",
            "e2e-edit",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"color":"green"}}"#,
        ])
        .await
        .unwrap();
    f.parent
        .run(&[
            "set",
            "image",
            "deployment/app",
            "-n",
            "e2e-edit",
            "app=registry.k8s.io/pause:3.10",
        ])
        .await
        .unwrap();
    let took = converge(
        &f,
        "the edit",
        &edit_expects("green", "registry.k8s.io/pause:3.10"),
    )
    .await;
    eprintln!(
        "FIGURE feed edit (ConfigMap value + image) -> in 3 children: {}",
        secs(took)
    );
    f.delete("edit").await;
}

const DELETE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-delete}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: doomed, namespace: e2e-delete}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: doomed, namespace: e2e-delete, labels: {app: doomed}}
spec:
  replicas: 2
  selector: {matchLabels: {app: doomed}}
  template:
    metadata: {labels: {app: doomed}}
    spec:
      containers: [{name: app, image: "registry.k8s.io/pause:3.10"}]
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: doomed, namespace: e2e-delete}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {env: prod}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-delete}
    - {apiVersion: v1, kind: ConfigMap, name: doomed, namespace: e2e-delete}
    - {apiVersion: apps/v1, kind: Deployment, name: doomed, namespace: e2e-delete}
"#;

#[tokio::test]
async fn deleting_a_subscription_removes_its_objects_from_every_child() {
    let Some(f) = fleet("delete").await else {
        return;
    };
    f.apply("delete", DELETE).await.unwrap();
    let present: Vec<Expect> = CHILDREN
        .into_iter()
        .flat_map(|c| {
            [
                expect(
                    c,
                    "configmap",
                    "e2e-delete",
                    "doomed",
                    "{.data.a}",
                    Some("b"),
                ),
                expect(
                    c,
                    "deployment",
                    "e2e-delete",
                    "doomed",
                    "{.spec.replicas}",
                    Some("2"),
                ),
            ]
        })
        .collect();
    converge(&f, "the objects in every child", &present).await;

    let started = std::time::Instant::now();
    f.parent
        .run(&[
            "delete",
            "subscription",
            "doomed",
            "-n",
            "e2e-delete",
            "--timeout=60s",
        ])
        .await
        .unwrap();
    let returned = started.elapsed();
    let gone: Vec<Expect> = CHILDREN
        .into_iter()
        .flat_map(|c| {
            [
                expect(c, "configmap", "e2e-delete", "doomed", "{.data.a}", None),
                expect(
                    c,
                    "deployment",
                    "e2e-delete",
                    "doomed",
                    "{.spec.replicas}",
                    None,
                ),
                expect(c, "namespace", "", "e2e-delete", "{.metadata.name}", None),
            ]
        })
        .collect();
    let took = converge(&f, "the objects gone from every child", &gone).await;
    eprintln!(
        "FIGURE kubectl delete sub returned after {}; objects gone from 3 children {} later",
        secs(returned),
        secs(took)
    );
    // No Description of it is left in any dedicated namespace.
    let descs = f
        .parent
        .run(&["get", "desc", "-A", "-o", "name"])
        .await
        .unwrap();
    assert!(!descs.contains("e2e-delete.doomed"), "{descs}");
    f.delete("delete").await;
}

/// Waits until no Description `name` is left in the parent (in `namespace`, or in any): one goes
/// only once its agent reported the deletion done.
async fn no_description_left(f: &Fleet, namespace: Option<&str>, name: &str) {
    let mut args = vec!["get", "desc", "-o", "name"];
    match namespace {
        Some(ns) => args.extend(["-n", ns]),
        None => args.push("-A"),
    }
    POLL.eventually_timed(&format!("no Description {name} left"), CONVERGE, || async {
        let descs = f.parent.run(&args).await.map_err(|e| e.to_string())?;
        if descs.contains(name) {
            Err(descs)
        } else {
            Ok(())
        }
    })
    .await;
}

const ORPHAN: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-orphan}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: keeper, namespace: e2e-orphan}
data: {a: b}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: keeper, namespace: e2e-orphan}
spec:
  deletionPolicy: Orphan
  subscribers: [{clusterAffinity: {matchLabels: {env: prod}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-orphan}
    - {apiVersion: v1, kind: ConfigMap, name: keeper, namespace: e2e-orphan}
"#;

#[tokio::test]
async fn with_the_orphan_policy_deleting_a_subscription_leaves_its_objects_in_every_child() {
    let Some(f) = fleet("orphan").await else {
        return;
    };
    let explained = f
        .parent
        .run(&["explain", "subscription.spec.deletionPolicy"])
        .await
        .unwrap();
    assert!(explained.contains("Orphan"), "{explained}");
    f.apply("orphan", ORPHAN).await.unwrap();
    let present: Vec<Expect> = CHILDREN
        .into_iter()
        .map(|c| {
            expect(
                c,
                "configmap",
                "e2e-orphan",
                "keeper",
                "{.data.a}",
                Some("b"),
            )
        })
        .collect();
    converge(&f, "the objects in every child", &present).await;

    f.parent
        .run(&[
            "delete",
            "subscription",
            "keeper",
            "-n",
            "e2e-orphan",
            "--timeout=60s",
        ])
        .await
        .unwrap();
    no_description_left(&f, None, "e2e-orphan.keeper").await;
    for c in CHILDREN {
        let child = f.child(c);
        let value = jsonpath(
            child,
            "configmap",
            Some("e2e-orphan"),
            "keeper",
            "{.data.a}",
        )
        .await;
        assert_eq!(value, Ok(Some("b".to_owned())), "{c} kept the ConfigMap");
        let ns = jsonpath(child, "namespace", None, "e2e-orphan", "{.status.phase}").await;
        assert_eq!(ns, Ok(Some("Active".to_owned())), "{c} kept the namespace");
    }
    f.delete("orphan").await;
    for c in CHILDREN {
        f.child(c)
            .run(&["delete", "namespace", "e2e-orphan", "--wait=false"])
            .await
            .unwrap();
    }
}

const MOVE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-move}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: mover, namespace: e2e-move}
data: {a: b}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: mover, namespace: e2e-move}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {e2e-placement: here}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-move}
    - {apiVersion: v1, kind: ConfigMap, name: mover, namespace: e2e-move}
"#;

async fn label(f: &Fleet, cluster: &str, label: &str) {
    let ns = f.dedicated_namespace(cluster);
    f.parent
        .run(&["label", "mcls", cluster, "-n", &ns, label, "--overwrite"])
        .await
        .unwrap();
}

fn mover_in(at: &'static str) -> Vec<Expect> {
    CHILDREN
        .into_iter()
        .map(|c| {
            let want = (c == at).then_some("b");
            expect(c, "configmap", "e2e-move", "mover", "{.data.a}", want)
        })
        .collect()
}

#[tokio::test]
async fn relabelling_managed_clusters_moves_the_placement() {
    let Some(f) = fleet("labels").await else {
        return;
    };
    f.apply("move", MOVE).await.unwrap();
    label(&f, "child-1", "e2e-placement=here").await;
    converge(&f, "placement on child-1", &mover_in("child-1")).await;
    let child_1 = f.child("child-1");
    let owner = jsonpath(
        child_1,
        "namespace",
        None,
        "e2e-move",
        "{.metadata.annotations.apps\\.clusternet\\.io/owned-by-description}",
    )
    .await
    .unwrap()
    .unwrap();

    let started = std::time::Instant::now();
    label(&f, "child-1", "e2e-placement-").await;
    label(&f, "child-3", "e2e-placement=here").await;
    converge(&f, "placement moved to child-3", &mover_in("child-3")).await;
    eprintln!(
        "FIGURE kubectl label mcls -> placement moved (new child has it, old one pruned): {}",
        secs(started.elapsed())
    );
    let binding = jsonpath(
        &f.parent,
        "subscription",
        Some("e2e-move"),
        "mover",
        "{.status.bindingClusters}",
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        binding.contains("child-3") && !binding.contains("child-1"),
        "{binding}"
    );

    // A write the agent sent before the deletion and that lands after it (a request its
    // client gave up on) brings the Namespace back in child-1 with the agent's marks; no
    // inventory lists it any more. The agent deletes it again.
    let gone = || async {
        jsonpath(child_1, "namespace", None, "e2e-move", "{.metadata.name}")
            .await
            .map_err(|e| e.to_string())?
            .map_or(Ok(()), |_| Err("still there".to_owned()))
    };
    let dedicated = f.dedicated_namespace("child-1");
    no_description_left(&f, Some(&dedicated), "e2e-move.mover").await;
    POLL.eventually_timed("the Namespace gone from child-1", CONVERGE, gone)
        .await;
    let late = f.tmp.path().join("late-namespace.yaml");
    std::fs::write(
        &late,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e-move\n  labels: \
             {{apps.clusternet.io/managed-by: atoll-agent}}\n  annotations: \
             {{apps.clusternet.io/owned-by-description: {owner}}}\n"
        ),
    )
    .unwrap();
    child_1
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=atoll-agent",
            "--force-conflicts",
            "-f",
            late.to_str().unwrap(),
        ])
        .await
        .unwrap();
    POLL.eventually_timed(
        "the Namespace a late write brought back deleted again",
        CONVERGE,
        gone,
    )
    .await;
    label(&f, "child-3", "e2e-placement-").await;
    f.delete("move").await;
}

/// A healthy Subscription next to a broken one, in the same namespace.
fn healthy(ns: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: healthy, namespace: {ns}}}
data: {{state: fine}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: healthy, namespace: {ns}}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{env: prod}}}}}}]
  feeds:
    - {{apiVersion: v1, kind: Namespace, name: {ns}}}
    - {{apiVersion: v1, kind: ConfigMap, name: healthy, namespace: {ns}}}
"#
    )
}

fn healthy_everywhere(ns: &'static str) -> Vec<Expect> {
    CHILDREN
        .into_iter()
        .map(|c| expect(c, "configmap", ns, "healthy", "{.data.state}", Some("fine")))
        .collect()
}

#[tokio::test]
async fn an_invalid_strategy_or_policy_is_refused_with_422_naming_the_field_and_allowed_values() {
    let Some(f) = fleet("invalid strategy").await else {
        return;
    };
    let ns = "e2e-bad-strategy";
    f.apply("bad-strategy-healthy", &healthy(ns)).await.unwrap();
    // (field, the spec lines, the bad value, the allowed values)
    let cases = [
        (
            "spec.schedulingStrategy",
            "schedulingStrategy: Sometimes",
            "Sometimes",
            &["Replication", "Dividing"][..],
        ),
        (
            "spec.dividingScheduling.type",
            "schedulingStrategy: Dividing\n  dividingScheduling: {type: Sideways}",
            "Sideways",
            &["Static", "Dynamic"][..],
        ),
        (
            "spec.preemptionPolicy",
            "preemptionPolicy: Always",
            "Always",
            &["PreemptLowerPriority", "PreemptNever"][..],
        ),
    ];
    for (i, (field, spec, value, allowed)) in cases.into_iter().enumerate() {
        let name = format!("refused-{i}");
        let bad = format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: {name}, namespace: {ns}}}
spec:
  {spec}
  subscribers: [{{clusterAffinity: {{matchLabels: {{env: prod}}}}}}]
  feeds: [{{apiVersion: v1, kind: ConfigMap, name: healthy, namespace: {ns}}}]
"#
        );
        let path = f.tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&path, bad).unwrap();
        let err = f
            .parent
            .run(&["apply", "-f", path.to_str().unwrap(), "-v=6"])
            .await
            .expect_err(&format!("an invalid {field} must be refused"));
        let text = err.to_string();
        let mut wants = vec!["422".to_string(), field.to_string(), format!("\"{value}\"")];
        wants.extend(allowed.iter().map(|a| format!("\"{a}\"")));
        for want in wants {
            assert!(text.contains(&want), "{field}: {want} not in: {text}");
        }
        let got = jsonpath(
            &f.parent,
            "subscription",
            Some(ns),
            &name,
            "{.metadata.name}",
        )
        .await
        .unwrap();
        assert_eq!(
            got, None,
            "{field}: the refused Subscription must not exist"
        );
    }
    converge(
        &f,
        "the healthy Subscription next to it",
        &healthy_everywhere(ns),
    )
    .await;
    f.delete("bad-strategy-healthy").await;
}

#[tokio::test]
async fn a_malformed_override_is_named_in_a_condition_and_event_and_others_stay_healthy() {
    let Some(f) = fleet("malformed override").await else {
        return;
    };
    let ns = "e2e-bad-override";
    f.apply("bad-override-healthy", &healthy(ns)).await.unwrap();
    let broken = |value: &str| {
        format!(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: patched, namespace: {ns}}}
data: {{size: small}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: patched, namespace: {ns}}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{env: prod}}}}}}]
  feeds: [{{apiVersion: v1, kind: ConfigMap, name: patched, namespace: {ns}}}]
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata: {{name: e2e-override-under-test}}
spec:
  overridePolicy: ApplyNow
  priority: 500
  clusterAffinity: {{matchLabels: {{env: prod}}}}
  feed: {{apiVersion: v1, kind: ConfigMap, name: patched, namespace: {ns}}}
  overrides:
    - name: size-override
      type: JSONPatch
      value: '{value}'
"#
        )
    };
    f.apply("bad-override", &broken(r#"[{"op": "replace", "path": "#))
        .await
        .unwrap();
    let ((status, reason, message), took) = POLL
        .eventually_timed("OverridesApplied=False", CONVERGE, || async {
            let c = condition(&f, ns, "patched", "OverridesApplied").await?;
            if c.0 == "False" {
                Ok(c)
            } else {
                Err(format!("{c:?}"))
            }
        })
        .await;
    eprintln!(
        "FIGURE malformed override -> OverridesApplied=False: {}",
        secs(took)
    );
    assert_eq!(status, "False");
    assert!(!reason.is_empty(), "a reason");
    for want in ["e2e-override-under-test", "size-override"] {
        assert!(message.contains(want), "{want} not in {message}");
    }
    let describe = f
        .parent
        .run(&["describe", "sub", "patched", "-n", ns])
        .await
        .unwrap();
    for want in ["OverridesApplied", "size-override", &reason] {
        assert!(
            describe.contains(want),
            "{want} not in describe:\n{describe}"
        );
    }
    let ((), _) = POLL
        .eventually_timed("an Event naming the override", CONVERGE, || async {
            let events = f
                .parent
                .run(&["get", "events", "-n", ns])
                .await
                .map_err(|e| e.to_string())?;
            if events.contains("size-override") && events.contains("subscription/patched") {
                Ok(())
            } else {
                Err(events)
            }
        })
        .await;
    converge(
        &f,
        "the healthy Subscription next to it",
        &healthy_everywhere(ns),
    )
    .await;

    // Fixing the override applies it and clears the condition.
    f.apply(
        "bad-override",
        &broken(r#"[{"op": "replace", "path": "/data/size", "value": "large"}]"#),
    )
    .await
    .unwrap();
    let fixed: Vec<Expect> = CHILDREN
        .into_iter()
        .map(|c| expect(c, "configmap", ns, "patched", "{.data.size}", Some("large")))
        .collect();
    converge(&f, "the fixed override in every child", &fixed).await;
    let (status, _, _) = condition(&f, ns, "patched", "OverridesApplied")
        .await
        .unwrap();
    assert_eq!(status, "True");
    f.delete("bad-override").await;
    f.delete("bad-override-healthy").await;
}

#[tokio::test]
async fn a_missing_feed_is_named_in_feeds_resolved_and_others_stay_healthy() {
    let Some(f) = fleet("missing feed").await else {
        return;
    };
    let ns = "e2e-missing-feed";
    f.apply("missing-healthy", &healthy(ns)).await.unwrap();
    let sub = format!(
        r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: waiting, namespace: {ns}}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{env: prod}}}}}}]
  feeds: [{{apiVersion: v1, kind: ConfigMap, name: not-there-yet, namespace: {ns}}}]
"#
    );
    f.apply("missing", &sub).await.unwrap();
    let ((_, reason, message), took) = POLL
        .eventually_timed("FeedsResolved=False", CONVERGE, || async {
            let c = condition(&f, ns, "waiting", "FeedsResolved").await?;
            if c.0 == "False" {
                Ok(c)
            } else {
                Err(format!("{c:?}"))
            }
        })
        .await;
    eprintln!("FIGURE missing feed -> FeedsResolved=False: {}", secs(took));
    assert!(!reason.is_empty());
    assert!(
        message.contains(&format!("ConfigMap {ns}/not-there-yet")),
        "the message must name the feed: {message}"
    );
    converge(
        &f,
        "the healthy Subscription next to it",
        &healthy_everywhere(ns),
    )
    .await;

    // Creating the feed resolves it.
    let feed = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: not-there-yet, namespace: {ns}}}\ndata: {{now: here}}\n"
    );
    f.apply("missing-feed", &feed).await.unwrap();
    let arrived: Vec<Expect> = CHILDREN
        .into_iter()
        .map(|c| {
            expect(
                c,
                "configmap",
                ns,
                "not-there-yet",
                "{.data.now}",
                Some("here"),
            )
        })
        .collect();
    converge(&f, "the feed, once created, in every child", &arrived).await;
    let (status, _, _) = condition(&f, ns, "waiting", "FeedsResolved").await.unwrap();
    assert_eq!(status, "True");
    f.delete("missing").await;
    f.delete("missing-feed").await;
    f.delete("missing-healthy").await;
}

const HAND_EDIT: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-handedit}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kept, namespace: e2e-handedit}
data: {a: b}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: kept, namespace: e2e-handedit}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {env: prod}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-handedit}
    - {apiVersion: v1, kind: ConfigMap, name: kept, namespace: e2e-handedit}
"#;

#[tokio::test]
async fn a_hand_edit_of_a_description_is_undone_and_the_child_keeps_the_feed() {
    let Some(f) = fleet("hand-edit").await else {
        return;
    };
    f.apply("handedit", HAND_EDIT).await.unwrap();
    let kept = |value: &str| -> Vec<Expect> {
        CHILDREN
            .into_iter()
            .map(|c| {
                expect(
                    c,
                    "configmap",
                    "e2e-handedit",
                    "kept",
                    "{.data.a}",
                    Some(value),
                )
            })
            .collect()
    };
    converge(&f, "the ConfigMap in every child", &kept("b")).await;

    // Edit what goes to child-1, in its dedicated namespace, as a user might: the ConfigMap's
    // JSON text, replaced only if it is still the ConfigMap.
    let ns1 = f.dedicated_namespace("child-1");
    let object_a = |text: Option<String>| -> Option<String> {
        let object: serde_json::Value = serde_json::from_str(text.as_deref()?).ok()?;
        object.pointer("/data/a")?.as_str().map(str::to_owned)
    };
    let stored = jsonpath(
        &f.parent,
        "desc",
        Some(&ns1),
        "e2e-handedit.kept",
        "{.spec.raw[1]}",
    )
    .await
    .unwrap()
    .unwrap_or_default();
    let mut hacked: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(hacked["kind"], "ConfigMap", "{stored}");
    hacked["data"]["a"] = "hacked".into();
    let patch = serde_json::json!([
        {"op": "test", "path": "/spec/raw/1", "value": stored},
        {"op": "replace", "path": "/spec/raw/1", "value": hacked.to_string()},
    ]);
    f.parent
        .run(&[
            "patch",
            "desc",
            "e2e-handedit.kept",
            "-n",
            &ns1,
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .await
        .unwrap();
    // The scheduler's resync is 5 minutes; the repair must come from its watch.
    let (_, restored) = POLL
        .eventually_timed(
            "the Description restored",
            std::time::Duration::from_secs(30),
            || async {
                let got = jsonpath(
                    &f.parent,
                    "desc",
                    Some(&ns1),
                    "e2e-handedit.kept",
                    "{.spec.raw[1]}",
                )
                .await?;
                let got = object_a(got);
                (got.as_deref() == Some("b"))
                    .then_some(())
                    .ok_or(format!("{got:?}"))
            },
        )
        .await;
    let settled = converge(&f, "the ConfigMap still b in every child", &kept("b")).await;
    eprintln!(
        "FIGURE hand edit of a Description undone in the parent after {}; children settled {} later",
        secs(restored),
        secs(settled)
    );
    f.delete("handedit").await;
}

const BORROWER_NS: &str = "e2e-grant-app";
const VAULT_NS: &str = "e2e-grant-vault";

/// A Subscription in one namespace naming a Secret (and the Namespace) of another.
const BORROWER: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-grant-app}
---
apiVersion: v1
kind: Namespace
metadata: {name: e2e-grant-vault}
---
apiVersion: v1
kind: Secret
metadata: {name: db-password, namespace: e2e-grant-vault}
stringData: {password: hunter2}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: borrower, namespace: e2e-grant-app}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {env: prod}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-grant-vault}
    - {apiVersion: v1, kind: Secret, name: db-password, namespace: e2e-grant-vault}
"#;

/// What the vault namespace grants the app namespace.
const VAULT_GRANT: &str = r#"
apiVersion: apps.atoll.dev/v1alpha1
kind: FeedGrant
metadata: {name: app-may-use-db-password, namespace: e2e-grant-vault}
spec:
  from: [{namespace: e2e-grant-app}]
  to:
    - {group: "", kind: Namespace}
    - {group: "", kind: Secret, name: db-password}
"#;

/// Waits for `FeedsResolved=False` on the borrower; returns its reason and message.
async fn refused(f: &Fleet, what: &str) -> (String, String) {
    let ((_, reason, message), took) = POLL
        .eventually_timed(what, CONVERGE, || async {
            let c = condition(f, BORROWER_NS, "borrower", "FeedsResolved").await?;
            if c.0 == "False" {
                Ok(c)
            } else {
                Err(format!("{c:?}"))
            }
        })
        .await;
    eprintln!("FIGURE {what}: {}", secs(took));
    (reason, message)
}

#[tokio::test]
async fn a_secret_of_another_namespace_is_refused_until_a_feed_grant_allows_it_and_again_after() {
    let Some(f) = fleet("feed grant").await else {
        return;
    };
    let description = format!("{BORROWER_NS}.borrower");
    f.apply("grant-borrower", BORROWER).await.unwrap();

    // Refused: the condition names the feed, the rule and the grant to create.
    let (reason, message) = refused(&f, "cross-namespace Secret -> FeedsResolved=False").await;
    assert_eq!(reason, "FeedNotGranted", "{message}");
    for want in [
        format!("Secret {VAULT_NS}/db-password"),
        format!("belongs to namespace {VAULT_NS}"),
        format!("create in namespace {VAULT_NS}"),
        "kind: FeedGrant".to_owned(),
        format!("from: [{{namespace: {BORROWER_NS}}}]"),
        "kind: Secret, name: db-password".to_owned(),
    ] {
        assert!(message.contains(&want), "{want} not in {message}");
    }
    let ((), _) = POLL
        .eventually_timed("a FeedNotGranted Event", CONVERGE, || async {
            let events = f
                .parent
                .run(&["get", "events", "-n", BORROWER_NS])
                .await
                .map_err(|e| e.to_string())?;
            if events.contains("FeedNotGranted") && events.contains("subscription/borrower") {
                Ok(())
            } else {
                Err(events)
            }
        })
        .await;
    // No Description carries the Secret, and no child has it.
    let descriptions = f
        .parent
        .run(&["get", "desc", "-A", "-o", "json"])
        .await
        .unwrap();
    assert!(
        !descriptions.contains("db-password") && !descriptions.contains(&description),
        "a Description carries the refused Secret:\n{descriptions}"
    );
    let absent: Vec<Expect> = CHILDREN
        .into_iter()
        .map(|c| expect(c, "secret", VAULT_NS, "db-password", "{.data}", None))
        .collect();
    converge(&f, "no child has the refused Secret", &absent).await;

    // Granted by the vault namespace: the Secret reaches every child.
    f.apply("grant-grant", VAULT_GRANT).await.unwrap();
    let granted: Vec<Expect> = CHILDREN
        .into_iter()
        .map(|c| {
            expect(
                c,
                "secret",
                VAULT_NS,
                "db-password",
                "{.data.password}",
                Some("aHVudGVyMg=="),
            )
        })
        .collect();
    let took = converge(&f, "the granted Secret in every child", &granted).await;
    eprintln!(
        "FIGURE FeedGrant applied -> Secret in every child: {}",
        secs(took)
    );
    let (status, _, _) = condition(&f, BORROWER_NS, "borrower", "FeedsResolved")
        .await
        .unwrap();
    assert_eq!(status, "True");

    // Revoked: refused again. What the clusters received stays (the scheduler keeps the last
    // Descriptions for every unresolved feed), and nothing new is sent.
    f.delete("grant-grant").await;
    let (reason, _) = refused(&f, "FeedGrant deleted -> FeedsResolved=False").await;
    assert_eq!(reason, "FeedNotGranted");
    let ns1 = f.dedicated_namespace("child-1");
    let kept = jsonpath(
        &f.parent,
        "desc",
        Some(&ns1),
        &description,
        "{.metadata.name}",
    )
    .await
    .unwrap();
    assert_eq!(kept.as_deref(), Some(description.as_str()));

    f.delete("grant-borrower").await;
}

/// The HelmChart feed of the Helm scenario (`{repo}` and `{version}` filled in), a plain
/// ConfigMap feed beside it, and their Subscription to child-1 and child-2 (eu and us).
const HELM: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-helm}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plain, namespace: e2e-helm}
data: {a: b}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: hello, namespace: e2e-helm}
spec:
  repo: {repo}
  chart: hello
  version: {version}
  targetNamespace: e2e-helm-demo
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: broken, namespace: e2e-helm}
spec:
  repo: {repo}
  chart: hello
  version: 9.9.9
  targetNamespace: e2e-helm-broken
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: helm, namespace: e2e-helm}
spec:
  subscribers: [{clusterAffinity: {matchExpressions: [{key: region, operator: In, values: [eu, us]}]}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-helm}
    - {apiVersion: v1, kind: ConfigMap, name: plain, namespace: e2e-helm}
{feeds}
"#;

const HELLO_FEED: &str = "    - {apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: hello, namespace: e2e-helm}";
const BROKEN_FEED: &str = "    - {apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: broken, namespace: e2e-helm}";

fn helm_yaml(repo: &str, version: &str, feeds: &[&str]) -> String {
    HELM.replace("{repo}", repo)
        .replace("{version}", version)
        .replace("{feeds}", &feeds.join("\n"))
}

/// `helm status` of a release in a child, as JSON; `None` when Helm does not know it.
async fn helm_status(
    f: &Fleet,
    helm: &atoll_e2e::chart_repo::Helm,
    child: &str,
    release: &str,
    ns: &str,
) -> Option<serde_json::Value> {
    let kubeconfig = f.dir.join(format!("{child}.kubeconfig"));
    let kubeconfig = kubeconfig.to_str().unwrap();
    let args = [
        "status",
        release,
        "-n",
        ns,
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
    ];
    helm.run(&args)
        .await
        .ok()
        .map(|out| serde_json::from_str(&out).unwrap())
}

#[tokio::test]
async fn a_helm_chart_feed_is_installed_localized_upgraded_and_uninstalled_in_each_child() {
    let Some(f) = fleet("helm").await else {
        return;
    };
    let tools = atoll_e2e::chart_repo::HelmTools::locate().expect("make k8s builds helm");
    let helm = atoll_e2e::chart_repo::Helm::new(&tools.helm, f.tmp.path().join("helm-home"));
    let repo = atoll_e2e::chart_repo::ChartRepo::start(
        f.serving_host(),
        helm.clone(),
        atoll_e2e::chart_repo::HELLO_CHART,
        f.tmp.path().join("chart-repo"),
        &["0.1.0"],
    )
    .await
    .unwrap();
    // child-1 gets its own message, through a Localization of type Helm.
    let ns1 = f.dedicated_namespace("child-1");
    f.apply(
        "helm-localization",
        &format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata: {{name: hello-eu, namespace: {ns1}}}
spec:
  overridePolicy: ApplyNow
  feed: {{apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: hello, namespace: e2e-helm}}
  overrides:
    - {{type: Helm, value: "message: hello from eu"}}
"#
        ),
    )
    .await
    .unwrap();
    f.apply("helm", &helm_yaml(repo.url(), "0.1.0", &[HELLO_FEED]))
        .await
        .unwrap();
    let message = "{.data.message}";
    let version = "{.data.chartVersion}";
    let took = converge(
        &f,
        "the chart installed in eu and us, localized in eu",
        &[
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                Some("hello from eu"),
            ),
            expect(
                "child-2",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                Some("hello"),
            ),
            expect(
                "child-3",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                None,
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                version,
                Some("0.1.0"),
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm",
                "plain",
                "{.data.a}",
                Some("b"),
            ),
            expect(
                "child-2",
                "configmap",
                "e2e-helm",
                "plain",
                "{.data.a}",
                Some("b"),
            ),
        ],
    )
    .await;
    eprintln!(
        "FIGURE HelmChart feed -> release in 2 children: {}",
        secs(took)
    );
    for child in ["child-1", "child-2"] {
        let status = helm_status(&f, &helm, child, "hello", "e2e-helm-demo")
            .await
            .unwrap_or_else(|| panic!("helm knows no release hello in {child}"));
        assert_eq!(status["info"]["status"], "deployed", "{child}: {status}");
        assert_eq!(status["version"], 1, "{child}: {status}");
    }
    // The parent shows the release in child-1's dedicated namespace, and the Description is
    // a Success.
    let release_phase = || async {
        jsonpath(
            &f.parent,
            "helmrelease",
            Some(&ns1),
            "e2e-helm.helm-e2e-helm-hello",
            "{.status.phase}|{.status.version}|{.spec.targetNamespace}",
        )
        .await
    };
    POLL.eventually("HelmRelease deployed in the parent", CONVERGE, || async {
        match release_phase().await? {
            Some(s) if s == "deployed|1|e2e-helm-demo" => Ok(()),
            other => Err(format!("HelmRelease: {other:?}")),
        }
    })
    .await;

    // Beyond Clusternet: the release's objects are under drift repair like plain feeds. A
    // deleted Deployment comes back, a hand-edited value is put back, and the Description's
    // status carries the release's objects.
    f.child("child-2")
        .run(&[
            "delete",
            "deployment",
            "hello",
            "-n",
            "e2e-helm-demo",
            "--wait=false",
        ])
        .await
        .unwrap();
    f.child("child-1")
        .run(&[
            "patch",
            "configmap",
            "hello-config",
            "-n",
            "e2e-helm-demo",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"message":"edited by hand"}}"#,
        ])
        .await
        .unwrap();
    let took = converge(
        &f,
        "the release's objects repaired",
        &[
            expect(
                "child-2",
                "deployment",
                "e2e-helm-demo",
                "hello",
                "{.spec.replicas}",
                Some("1"),
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                Some("hello from eu"),
            ),
        ],
    )
    .await;
    eprintln!(
        "FIGURE release object deleted or edited -> repaired: {}",
        secs(took)
    );
    let kinds = jsonpath(
        &f.parent,
        "description",
        Some(&ns1),
        "e2e-helm.helm",
        "{.status.manifestStatuses[*].kind}",
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        kinds.contains("Deployment") && kinds.contains("ConfigMap"),
        "{kinds}"
    );
    // The chart is a feed of the aggregated Subscription status, available in both clusters.
    POLL.eventually(
        "the chart available in the Subscription status",
        CONVERGE,
        || async {
            let got = jsonpath(
            &f.parent,
            "subscription",
            Some("e2e-helm"),
            "helm",
            r#"{.status.aggregatedStatuses[?(@.kind=="HelmChart")].feedStatusSummary.available}"#,
        )
        .await?;
            match got.as_deref() {
                Some("true") => Ok(()),
                other => Err(format!("HelmChart feed available: {other:?}")),
            }
        },
    )
    .await;

    // A version bump upgrades the release in place, and Helm's writes of the release's objects
    // are not taken for drift (they were once "repaired" back to the old release).
    let repairs_before = [
        f.agent_drift_repairs("child-1").await,
        f.agent_drift_repairs("child-2").await,
    ];
    repo.add_version("0.2.0").await.unwrap();
    f.apply("helm", &helm_yaml(repo.url(), "0.2.0", &[HELLO_FEED]))
        .await
        .unwrap();
    converge(
        &f,
        "the upgrade to 0.2.0",
        &[
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                version,
                Some("0.2.0"),
            ),
            expect(
                "child-2",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                version,
                Some("0.2.0"),
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                Some("hello from eu"),
            ),
        ],
    )
    .await;
    let status = helm_status(&f, &helm, "child-2", "hello", "e2e-helm-demo")
        .await
        .unwrap();
    assert_eq!(status["version"], 2, "{status}");
    let repairs_after = [
        f.agent_drift_repairs("child-1").await,
        f.agent_drift_repairs("child-2").await,
    ];
    assert_eq!(
        repairs_after, repairs_before,
        "drift repairs during the upgrade: Helm's own writes were taken for drift"
    );

    // A chart at a version the repository does not have fails on its own: the Description
    // names it, the other release and the plain feed keep running.
    f.apply(
        "helm",
        &helm_yaml(repo.url(), "0.2.0", &[HELLO_FEED, BROKEN_FEED]),
    )
    .await
    .unwrap();
    let reason = POLL
        .eventually(
            "the broken chart named in the Description",
            CONVERGE,
            || async {
                let got = jsonpath(
                    &f.parent,
                    "description",
                    Some(&ns1),
                    "e2e-helm.helm",
                    "{.status.phase}|{.status.reason}",
                )
                .await?;
                match got {
                    Some(s) if s.starts_with("Failure|") && s.contains("broken") => Ok(s),
                    other => Err(format!("Description: {other:?}")),
                }
            },
        )
        .await;
    assert!(reason.contains("9.9.9"), "{reason}");
    // The scheduler looked both charts up in the repository.
    let chart_status = |name: &'static str| {
        let f = &f;
        async move {
            jsonpath(
                &f.parent,
                "helmchart",
                Some("e2e-helm"),
                name,
                "{.status.phase}|{.status.reason}",
            )
            .await
        }
    };
    POLL.eventually("HelmChart status from the repository", CONVERGE, || async {
        let hello = chart_status("hello").await?;
        let broken = chart_status("broken").await?;
        match (hello.as_deref(), broken.as_deref()) {
            (Some("Found|"), Some(b))
                if b.starts_with(
                    "NotFound|chart hello has no version 9.9.9; the repository has ",
                ) =>
            {
                Ok(())
            }
            other => Err(format!("hello, broken: {other:?}")),
        }
    })
    .await;
    assert!(!reason.contains("release e2e-helm-demo/hello"), "{reason}");
    converge(
        &f,
        "the rest keeps running",
        &[
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                version,
                Some("0.2.0"),
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm",
                "plain",
                "{.data.a}",
                Some("b"),
            ),
        ],
    )
    .await;

    // Without the chart feeds the releases are uninstalled; the plain feed stays.
    f.apply("helm", &helm_yaml(repo.url(), "0.2.0", &[]))
        .await
        .unwrap();
    converge(
        &f,
        "the release uninstalled",
        &[
            expect(
                "child-1",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                None,
            ),
            expect(
                "child-2",
                "configmap",
                "e2e-helm-demo",
                "hello-config",
                message,
                None,
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm",
                "plain",
                "{.data.a}",
                Some("b"),
            ),
        ],
    )
    .await;
    assert!(
        helm_status(&f, &helm, "child-1", "hello", "e2e-helm-demo")
            .await
            .is_none()
    );
    POLL.eventually("HelmReleases gone from the parent", CONVERGE, || async {
        match release_phase().await? {
            None => Ok(()),
            other => Err(format!("HelmRelease still there: {other:?}")),
        }
    })
    .await;
    f.delete("helm").await;
    f.delete("helm-localization").await;
}

#[tokio::test]
async fn a_helm_chart_from_an_oci_registry_is_installed_and_removed_with_its_subscription() {
    let Some(f) = fleet("helm-oci").await else {
        return;
    };
    let tools = atoll_e2e::chart_repo::HelmTools::locate().expect("make k8s builds helm");
    let helm = atoll_e2e::chart_repo::Helm::new(&tools.helm, f.tmp.path().join("oci-helm-home"));
    let archive = helm
        .package(
            std::path::Path::new(atoll_e2e::chart_repo::HELLO_CHART),
            "0.3.0",
            &f.tmp.path().join("oci-charts"),
        )
        .await
        .unwrap();
    let registry = atoll_e2e::chart_repo::OciRegistry::start(
        f.serving_host(),
        &tools.registry,
        helm.clone(),
        f.tmp.path().join("registry.log"),
    )
    .await
    .unwrap();
    registry.push(&archive).await.unwrap();
    let yaml = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: e2e-helm-oci}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {{name: hello-oci, namespace: e2e-helm-oci}}
spec:
  repo: {url}
  chart: hello
  version: 0.3.0
  plainHTTP: true
  targetNamespace: e2e-helm-oci-demo
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: oci, namespace: e2e-helm-oci}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{region: ap}}}}}}]
  feeds:
    - {{apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: hello-oci, namespace: e2e-helm-oci}}
"#,
        url = registry.url()
    );
    f.apply("helm-oci", &yaml).await.unwrap();
    let version = "{.data.chartVersion}";
    let took = converge(
        &f,
        "the OCI chart installed in ap only",
        &[
            expect(
                "child-3",
                "configmap",
                "e2e-helm-oci-demo",
                "hello-oci-config",
                version,
                Some("0.3.0"),
            ),
            expect(
                "child-1",
                "configmap",
                "e2e-helm-oci-demo",
                "hello-oci-config",
                version,
                None,
            ),
        ],
    )
    .await;
    eprintln!(
        "FIGURE OCI HelmChart feed -> release in 1 child: {}",
        secs(took)
    );
    // The scheduler found the chart in the registry's tag list.
    POLL.eventually("the OCI HelmChart found", CONVERGE, || async {
        match jsonpath(
            &f.parent,
            "helmchart",
            Some("e2e-helm-oci"),
            "hello-oci",
            "{.status.phase}",
        )
        .await?
        {
            Some(phase) if phase == "Found" => Ok(()),
            other => Err(format!("HelmChart status: {other:?}")),
        }
    })
    .await;
    f.delete("helm-oci").await;
    converge(
        &f,
        "the release uninstalled with its Subscription",
        &[expect(
            "child-3",
            "configmap",
            "e2e-helm-oci-demo",
            "hello-oci-config",
            version,
            None,
        )],
    )
    .await;
}

#[tokio::test]
async fn a_hanging_helm_install_does_not_hold_back_the_clusters_other_descriptions() {
    let Some(f) = fleet("helm-hang").await else {
        return;
    };
    // A chart repository that accepts connections and never answers: helm hangs on it until
    // the agent stops it (the chart's timeoutSeconds plus the agent's grace).
    let listener = tokio::net::TcpListener::bind((f.serving_host(), 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hole = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let stuck = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: e2e-hang}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {{name: stuck, namespace: e2e-hang}}
spec:
  repo: {url}
  chart: hello
  version: 0.1.0
  timeoutSeconds: 5
  targetNamespace: e2e-hang-demo
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: stuck, namespace: e2e-hang}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{region: ap}}}}}}]
  feeds:
    - {{apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: stuck, namespace: e2e-hang}}
"#
    );
    f.apply("helm-hang", &stuck).await.unwrap();
    let ns3 = f.dedicated_namespace("child-3");
    let phase = || async {
        jsonpath(
            &f.parent,
            "description",
            Some(&ns3),
            "e2e-hang.stuck",
            "{.status.phase}|{.status.reason}",
        )
        .await
    };
    POLL.eventually("the stuck Description delivered", CONVERGE, || async {
        match jsonpath(
            &f.parent,
            "description",
            Some(&ns3),
            "e2e-hang.stuck",
            "{.metadata.name}",
        )
        .await?
        {
            Some(_) => Ok(()),
            None => Err("no Description yet".to_owned()),
        }
    })
    .await;
    f.apply(
        "helm-hang-plain",
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: meanwhile, namespace: e2e-hang}
data: {a: b}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: meanwhile, namespace: e2e-hang}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {region: ap}}}]
  feeds:
    - {apiVersion: v1, kind: Namespace, name: e2e-hang}
    - {apiVersion: v1, kind: ConfigMap, name: meanwhile, namespace: e2e-hang}
"#,
    )
    .await
    .unwrap();
    converge(
        &f,
        "the other Subscription lands while helm hangs",
        &[expect(
            "child-3",
            "configmap",
            "e2e-hang",
            "meanwhile",
            "{.data.a}",
            Some("b"),
        )],
    )
    .await;
    let while_hanging = phase().await.unwrap().unwrap_or_default();
    assert!(
        !while_hanging.starts_with("Failure"),
        "helm was still running when the other Description landed: {while_hanging}"
    );
    let failed = POLL
        .eventually(
            "the hanging install fails on its own",
            Duration::from_secs(120),
            || async {
                match phase().await? {
                    Some(s) if s.starts_with("Failure|") => Ok(s),
                    other => Err(format!("Description: {other:?}")),
                }
            },
        )
        .await;
    assert!(failed.contains("e2e-hang-demo/stuck"), "{failed}");
    hole.abort();
    f.delete("helm-hang-plain").await;
    f.delete("helm-hang").await;
}

/// A chart in a private repository (`{repo}`), its Secret in the chart's namespace
/// (`{password}`) and a Subscription to child-3 (ap).
const PRIVATE_CHART: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e-private}
---
apiVersion: v1
kind: Secret
metadata: {name: repo-creds, namespace: e2e-private}
stringData: {username: robot, password: {password}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: private, namespace: e2e-private}
spec:
  repo: {repo}
  chart: hello
  version: 0.1.0
  targetNamespace: e2e-private-demo
  chartPullSecret: {name: repo-creds}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: private, namespace: e2e-private}
spec:
  subscribers: [{clusterAffinity: {matchLabels: {region: ap}}}]
  feeds:
    - {apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: private, namespace: e2e-private}
"#;

/// The grant of the README ("Private chart repositories"): the hub may read that one Secret.
const PRIVATE_CHART_GRANT: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: atoll-hub-chart-pull, namespace: e2e-private}
rules:
  - {apiGroups: [""], resources: [secrets], resourceNames: [repo-creds], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: atoll-hub-chart-pull, namespace: e2e-private}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: atoll-hub-chart-pull}
subjects:
  - {kind: ServiceAccount, name: atoll-hub, namespace: clusternet-system}
"#;

#[tokio::test]
async fn a_chart_from_a_private_repository_installs_once_the_hub_may_read_its_pull_secret() {
    let Some(f) = fleet("helm-private").await else {
        return;
    };
    let tools = atoll_e2e::chart_repo::HelmTools::locate().expect("make k8s builds helm");
    let helm = atoll_e2e::chart_repo::Helm::new(&tools.helm, f.tmp.path().join("helm-home"));
    let repo = atoll_e2e::chart_repo::ChartRepo::start_private(
        f.serving_host(),
        helm.clone(),
        atoll_e2e::chart_repo::HELLO_CHART,
        f.tmp.path().join("private-repo"),
        &["0.1.0"],
        ("robot", "hunter2"),
    )
    .await
    .unwrap();
    let ns3 = f.dedicated_namespace("child-3");
    let description = || async {
        jsonpath(
            &f.parent,
            "description",
            Some(&ns3),
            "e2e-private.private",
            "{.status.phase}|{.status.reason}",
        )
        .await
    };
    let failure_naming = |what: &'static str| {
        let description = &description;
        async move {
            POLL.eventually(what, CONVERGE, || async {
                match description().await? {
                    Some(s) if s.starts_with("Failure|") && s.contains(what) => Ok(s),
                    other => Err(format!("Description: {other:?}")),
                }
            })
            .await
        }
    };
    // A wrong password: the repository refuses it, and the release fails saying so.
    let yaml = |password: &str| {
        PRIVATE_CHART
            .replace("{repo}", repo.url())
            .replace("{password}", password)
    };
    f.apply("helm-private", &yaml("wrong")).await.unwrap();
    f.apply("helm-private-grant", PRIVATE_CHART_GRANT)
        .await
        .unwrap();
    let refused = failure_naming("401").await;
    eprintln!("wrong password: {refused}");
    // The right password, and the chart touched so that its Description is sent again now
    // (the hub would read the Secret again by itself within --chart-credentials-recheck, 5 min).
    f.apply("helm-private", &yaml("hunter2")).await.unwrap();
    f.parent
        .run(&[
            "annotate",
            "helmchart",
            "private",
            "-n",
            "e2e-private",
            "e2e.atoll.dev/rotated=1",
        ])
        .await
        .unwrap();
    converge(
        &f,
        "the private chart installed in ap",
        &[expect(
            "child-3",
            "configmap",
            "e2e-private-demo",
            "private-config",
            "{.data.chartVersion}",
            Some("0.1.0"),
        )],
    )
    .await;

    if support::backend() == atoll_e2e::plan::Backend::Kube {
        // Without the grant, kube-apiserver's RBAC keeps the Secret from the hub: a new chart
        // version fails naming the missing grant, and installs once it is given again (the hub
        // tries the Secret again with backoff, no edit needed).
        f.delete("helm-private-grant").await;
        f.apply(
            "helm-private",
            &yaml("hunter2").replace("version: 0.1.0", "version: 0.2.0"),
        )
        .await
        .unwrap();
        repo.add_version("0.2.0").await.unwrap();
        let forbidden = failure_naming("may not read Secret e2e-private/repo-creds").await;
        assert!(forbidden.contains("atoll-hub"), "{forbidden}");
        f.apply("helm-private-grant", PRIVATE_CHART_GRANT)
            .await
            .unwrap();
        converge(
            &f,
            "the private chart upgraded once the hub may read the Secret",
            &[expect(
                "child-3",
                "configmap",
                "e2e-private-demo",
                "private-config",
                "{.data.chartVersion}",
                Some("0.2.0"),
            )],
        )
        .await;
    }
    f.delete("helm-private").await;
    f.delete("helm-private-grant").await;
    converge(
        &f,
        "the private release uninstalled with its Subscription",
        &[expect(
            "child-3",
            "configmap",
            "e2e-private-demo",
            "private-config",
            "{.data.chartVersion}",
            None,
        )],
    )
    .await;
}

#[tokio::test]
async fn a_chart_from_a_private_oci_registry_installs_with_its_pull_secret() {
    let Some(f) = fleet("helm-oci-private").await else {
        return;
    };
    let tools = atoll_e2e::chart_repo::HelmTools::locate().expect("make k8s builds helm");
    let helm = atoll_e2e::chart_repo::Helm::new(&tools.helm, f.tmp.path().join("oci-private-home"));
    let archive = helm
        .package(
            std::path::Path::new(atoll_e2e::chart_repo::HELLO_CHART),
            "0.4.0",
            &f.tmp.path().join("oci-private-charts"),
        )
        .await
        .unwrap();
    let registry = atoll_e2e::chart_repo::OciRegistry::start(
        f.serving_host(),
        &tools.registry,
        helm.clone(),
        f.tmp.path().join("registry-private.log"),
    )
    .await
    .unwrap();
    registry.push(&archive).await.unwrap();
    // The agents reach the registry only through a front that wants robot's password.
    let front = atoll_e2e::chart_repo::AuthProxy::start(
        f.serving_host(),
        &registry.host(),
        ("robot", "hunter2"),
    )
    .await
    .unwrap();
    let yaml = |pull_secret: &str| {
        format!(
            r#"
apiVersion: v1
kind: Namespace
metadata: {{name: e2e-oci-private}}
---
apiVersion: v1
kind: Secret
metadata: {{name: registry-creds, namespace: e2e-oci-private}}
stringData: {{username: robot, password: hunter2}}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {{name: hello-private-oci, namespace: e2e-oci-private}}
spec:
  repo: oci://{host}/charts
  chart: hello
  version: 0.4.0
  plainHTTP: true
  targetNamespace: e2e-oci-private-demo
{pull_secret}
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {{name: oci-private, namespace: e2e-oci-private}}
spec:
  subscribers: [{{clusterAffinity: {{matchLabels: {{region: ap}}}}}}]
  feeds:
    - {{apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, name: hello-private-oci, namespace: e2e-oci-private}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: atoll-hub-chart-pull, namespace: e2e-oci-private}}
rules:
  - {{apiGroups: [""], resources: [secrets], resourceNames: [registry-creds], verbs: [get]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: atoll-hub-chart-pull, namespace: e2e-oci-private}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: atoll-hub-chart-pull}}
subjects:
  - {{kind: ServiceAccount, name: atoll-hub, namespace: clusternet-system}}
"#,
            host = front.host()
        )
    };
    // Without credentials the registry's front refuses the pull, and the release says so.
    f.apply("helm-oci-private", &yaml("")).await.unwrap();
    let ns3 = f.dedicated_namespace("child-3");
    let refused = POLL
        .eventually("the anonymous pull refused", CONVERGE, || async {
            match jsonpath(
                &f.parent,
                "description",
                Some(&ns3),
                "e2e-oci-private.oci-private",
                "{.status.phase}|{.status.reason}",
            )
            .await?
            {
                Some(s) if s.starts_with("Failure|") => Ok(s),
                other => Err(format!("Description: {other:?}")),
            }
        })
        .await;
    assert!(
        refused.contains("basic credential not found") || refused.contains("401"),
        "{refused}"
    );
    f.apply(
        "helm-oci-private",
        &yaml("  chartPullSecret: {name: registry-creds}"),
    )
    .await
    .unwrap();
    converge(
        &f,
        "the private OCI chart installed in ap",
        &[expect(
            "child-3",
            "configmap",
            "e2e-oci-private-demo",
            "hello-private-oci-config",
            "{.data.chartVersion}",
            Some("0.4.0"),
        )],
    )
    .await;
    f.delete("helm-oci-private").await;
    converge(
        &f,
        "the private OCI release uninstalled with its Subscription",
        &[expect(
            "child-3",
            "configmap",
            "e2e-oci-private-demo",
            "hello-private-oci-config",
            "{.data.chartVersion}",
            None,
        )],
    )
    .await;
}
