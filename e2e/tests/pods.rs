#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End to end, atoll as it is installed (issue 40): `fleet up --backend kube --real-nodes`
//! starts a parent and two children, each a real control plane with one real node, builds
//! atoll's images, imports them into each node's containerd and installs atoll with
//! `kubectl apply -k` as docs/install.md does. Then, through the real kubectl only:
//! - the scheduler (2 replicas, one holding the Lease) and the hub (2 replicas) run as pods
//!   on the parent's real node, the agent as a pod on each child's, and no atoll process runs
//!   outside a pod;
//! - a Subscription reaches both children, and `kubectl logs` shows each component's log;
//! - with both hub pods deleted, the Deployment brings new ones, the agents reconnect through
//!   the NodePort, and a change to the feed reaches both children again.
//!
//! Runs with `FLEET_BACKEND=kube` on a machine that can run real nodes (root, containerd, runc,
//! the CNI plugins, the `make k8s` binaries with kubelet, kube-proxy and helm); skipped with a
//! notice otherwise.

mod support;

use std::time::{Duration, Instant};

use atoll_e2e::plan::Backend;
use atoll_e2e::real_node;
use atoll_e2e::state::{FleetState, Role};
use support::{Fleet, POLL, converge, expect, secs};

const NAMESPACE: &str = "clusternet-system";

/// Whether this run can start real nodes; prints a NOTICE when not.
async fn can_run(test: &str) -> bool {
    if support::backend() != Backend::Kube {
        eprintln!("NOTICE: {test} skipped: it runs on the real tier (FLEET_BACKEND=kube)");
        return false;
    }
    if !support::prerequisites_or_skip(test).await {
        return false;
    }
    let bin_dir = atoll_e2e::control_plane::bin_dir_from_env().unwrap_or_default();
    let missing = real_node::missing_prerequisites(&bin_dir);
    if !missing.is_empty() {
        eprintln!(
            "NOTICE: {test} skipped: real nodes need {}",
            missing.join(", ")
        );
        return false;
    }
    if atoll_e2e::control_plane::helm_from_env().is_none() {
        eprintln!("NOTICE: {test} skipped: the agent's image needs helm (`make k8s`)");
        return false;
    }
    true
}

/// `name node phase ready` of each pod in `clusternet-system` matching `selector`.
async fn pods(k: &atoll_e2e::kubectl::Kubectl, selector: &str) -> Vec<Vec<String>> {
    let out = k
        .run(&[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            selector,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} \
             {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ])
        .await
        .unwrap();
    out.lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// Waits until `count` pods match `selector`, each Running and Ready on a real node; their
/// names.
async fn running_on_real_nodes(
    k: &atoll_e2e::kubectl::Kubectl,
    selector: &str,
    count: usize,
) -> Vec<String> {
    POLL.eventually(
        &format!("{count} Ready pods {selector} on real nodes"),
        Duration::from_secs(120),
        || async {
            let rows = pods(k, selector).await;
            let ok = rows.len() == count
                && rows.iter().all(|r| {
                    r.len() == 4
                        && r[1].starts_with("atoll-")
                        && r[2] == "Running"
                        && r[3] == "True"
                });
            if ok {
                Ok(rows.into_iter().map(|r| r[0].clone()).collect())
            } else {
                Err(format!("{rows:?}"))
            }
        },
    )
    .await
}

fn subscription(greeting: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: pods-e2e
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: hello
  namespace: pods-e2e
data:
  greeting: "{greeting}"
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: hello
  namespace: pods-e2e
spec:
  schedulingStrategy: Replication
  subscribers:
    - clusterAffinity:
        matchLabels:
          env: prod
  feeds:
    - apiVersion: v1
      kind: Namespace
      name: pods-e2e
    - apiVersion: v1
      kind: ConfigMap
      name: hello
      namespace: pods-e2e
"#
    )
}

#[tokio::test]
async fn atoll_runs_as_pods_on_real_nodes_and_survives_losing_its_hub_pods() {
    let test = "atoll on pods";
    if !can_run(test).await {
        return;
    }
    let started = Instant::now();
    let f = Fleet::up(2, &["--real-nodes"], &[]).await;
    eprintln!(
        "FIGURE fleet up --real-nodes (parent + 2 children, every pod Ready): {}",
        secs(started.elapsed())
    );

    let state = FleetState::load(&f.dir.join("fleet.json")).unwrap();
    let outside: Vec<&str> = state
        .processes
        .iter()
        .filter(|p| matches!(p.role, Role::Scheduler | Role::Hub | Role::Agent))
        .map(|p| p.name.as_str())
        .collect();
    assert!(
        outside.is_empty(),
        "atoll processes outside pods: {outside:?}"
    );
    let nodes = state.real_nodes.as_ref().expect("real nodes in fleet.json");
    assert_eq!(nodes.nodes.len(), 3, "a node per cluster");

    let schedulers =
        running_on_real_nodes(&f.parent, "app.kubernetes.io/name=atoll-scheduler", 2).await;
    running_on_real_nodes(&f.parent, "app.kubernetes.io/name=atoll-hub", 2).await;
    for (_, child) in &f.children {
        running_on_real_nodes(child, "app.kubernetes.io/name=atoll-agent", 1).await;
    }
    let holder = POLL
        .eventually(
            "the scheduler Lease held by a scheduler pod",
            Duration::from_secs(60),
            || async {
                let holder = f
                    .parent
                    .run(&[
                        "get",
                        "lease",
                        "atoll-scheduler",
                        "-n",
                        NAMESPACE,
                        "-o",
                        "jsonpath={.spec.holderIdentity}",
                    ])
                    .await
                    .map_err(|e| e.to_string())?;
                if schedulers.contains(&holder) {
                    Ok(holder)
                } else {
                    Err(format!("holder {holder:?}, pods {schedulers:?}"))
                }
            },
        )
        .await;
    eprintln!("the scheduler Lease is held by pod {holder}");

    f.apply("hello", &subscription("hello from a pod"))
        .await
        .unwrap();
    let greeting = "{.data.greeting}";
    let took = converge(
        &f,
        "the ConfigMap in both children",
        &[
            expect(
                "child-1",
                "configmap",
                "pods-e2e",
                "hello",
                greeting,
                Some("hello from a pod"),
            ),
            expect(
                "child-2",
                "configmap",
                "pods-e2e",
                "hello",
                greeting,
                Some("hello from a pod"),
            ),
        ],
    )
    .await;
    eprintln!(
        "FIGURE a Subscription reached both children in {}",
        secs(took)
    );

    for (k, deployment) in [
        (&f.parent, "deploy/atoll-scheduler"),
        (&f.parent, "deploy/atoll-hub"),
        (f.child("child-1"), "deploy/atoll-agent"),
    ] {
        let log = k
            .run(&["logs", "-n", NAMESPACE, deployment, "--tail=5"])
            .await
            .unwrap();
        assert!(
            log.lines().any(|l| l.trim_start().starts_with('{')),
            "kubectl logs {deployment} shows its JSON log: {log:?}"
        );
    }

    let lost = Instant::now();
    f.parent
        .run(&[
            "delete",
            "pod",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/name=atoll-hub",
            "--wait=false",
        ])
        .await
        .unwrap();
    f.parent
        .run(&[
            "rollout",
            "status",
            "-n",
            NAMESPACE,
            "deployment/atoll-hub",
            "--timeout=120s",
        ])
        .await
        .unwrap();
    f.apply("hello", &subscription("hello after the hub pods went"))
        .await
        .unwrap();
    let after = "hello after the hub pods went";
    converge(
        &f,
        "the changed ConfigMap in both children after both hub pods were replaced",
        &[
            expect(
                "child-1",
                "configmap",
                "pods-e2e",
                "hello",
                greeting,
                Some(after),
            ),
            expect(
                "child-2",
                "configmap",
                "pods-e2e",
                "hello",
                greeting,
                Some(after),
            ),
        ],
    )
    .await;
    eprintln!(
        "FIGURE both hub pods deleted: the change reached both children {} later",
        secs(lost.elapsed())
    );
    f.delete("hello").await;
}
