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
//!
//! A second fleet (a parent and one child) takes the disruptions, one after another: the
//! agent's pod deleted, the child node's containerd killed and started again, the scheduler's
//! leader pod deleted (the standby takes the Lease), a hub frozen (SIGSTOP) until its liveness
//! probe has it restarted, a rolling image upgrade of every component, and an image no node
//! has (the fleet's wait names the pod, its waiting reason and events); after each, a change to
//! the feed reaches the child.
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

/// One fleet of real nodes at a time: two would share 2 cores with five control planes.
static ONE_FLEET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// `kubectl delete pod -l app.kubernetes.io/name=<app> --wait=false` in clusternet-system.
async fn delete_pods(k: &atoll_e2e::kubectl::Kubectl, app: &str) {
    let selector = format!("app.kubernetes.io/name={app}");
    k.run(&[
        "delete",
        "pod",
        "-n",
        NAMESPACE,
        "-l",
        &selector,
        "--wait=false",
    ])
    .await
    .unwrap();
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

/// Waits until the feed's ConfigMap says `greeting` in child-1 and child-2; how long it took.
async fn both_children_say(f: &Fleet, greeting: &str, what: &str) -> Duration {
    let path = "{.data.greeting}";
    let expects: Vec<_> = ["child-1", "child-2"]
        .into_iter()
        .map(|child| {
            expect(
                child,
                "configmap",
                "pods-e2e",
                "hello",
                path,
                Some(greeting),
            )
        })
        .collect();
    converge(f, what, &expects).await
}

#[tokio::test]
async fn atoll_runs_as_pods_on_real_nodes_and_survives_losing_its_hub_pods() {
    let test = "atoll on pods";
    if !can_run(test).await {
        return;
    }
    let _one = ONE_FLEET.lock().await;
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
    let took = both_children_say(&f, "hello from a pod", "the ConfigMap in both children").await;
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
    delete_pods(&f.parent, "atoll-hub").await;
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
    both_children_say(
        &f,
        "hello after the hub pods went",
        "the changed ConfigMap in both children after both hub pods were replaced",
    )
    .await;
    eprintln!(
        "FIGURE both hub pods deleted: the change reached both children {} later",
        secs(lost.elapsed())
    );
    f.delete("hello").await;
}

/// The ConfigMap of the feed in child-1 says `greeting`: applies the Subscription with it and
/// waits; how long it took.
async fn lands(f: &Fleet, greeting: &str, after: &str) -> Duration {
    f.apply("hello", &subscription(greeting)).await.unwrap();
    converge(
        f,
        &format!("the feed's change after {after}"),
        &[expect(
            "child-1",
            "configmap",
            "pods-e2e",
            "hello",
            "{.data.greeting}",
            Some(greeting),
        )],
    )
    .await
}

/// `kubectl get <what> -n clusternet-system -o jsonpath=<path>`.
async fn get(k: &atoll_e2e::kubectl::Kubectl, what: &[&str], path: &str) -> String {
    let jsonpath = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend(["-n", NAMESPACE, "-o", &jsonpath]);
    k.run(&args).await.unwrap()
}

async fn rollout(k: &atoll_e2e::kubectl::Kubectl, deployment: &str) -> Duration {
    let started = Instant::now();
    k.run(&[
        "rollout",
        "status",
        "-n",
        NAMESPACE,
        deployment,
        "--timeout=180s",
    ])
    .await
    .unwrap_or_else(|e| panic!("kubectl rollout status {deployment}: {e}"));
    started.elapsed()
}

#[tokio::test]
async fn atoll_on_pods_rides_out_deleted_pods_a_restarted_containerd_a_lost_leader_a_hung_hub_and_an_upgrade()
 {
    let test = "disruptions on pods";
    if !can_run(test).await {
        return;
    }
    let _one = ONE_FLEET.lock().await;
    let f = Fleet::up(1, &["--real-nodes"], &[]).await;
    let state = FleetState::load(&f.dir.join("fleet.json")).unwrap();
    let nodes = state.real_nodes.clone().expect("real nodes in fleet.json");
    let (parent_node, child_node) = (&nodes.nodes[0], &nodes.nodes[1]);
    let child = f.child("child-1");
    lands(&f, "first", "the start").await;

    // 1. The agent's pod deleted: the Deployment brings another, which registers again.
    delete_pods(child, "atoll-agent").await;
    rollout(child, "deployment/atoll-agent").await;
    let took = lands(&f, "after the agent pod", "deleting the agent's pod").await;
    eprintln!(
        "FIGURE agent pod deleted: the next change landed {}",
        secs(took)
    );

    // 2. The child node's containerd killed and started again: the agent's container keeps
    // running (its shim outlives containerd), the node stays Ready, and changes keep landing.
    let agent_before = get(
        child,
        &["pods", "-l", "app.kubernetes.io/name=atoll-agent"],
        "{.items[0].status.containerStatuses[0].containerID}",
    )
    .await;
    let containerd = format!("{}-containerd", child_node.name);
    let out = support::fleet_cmd(
        &["restart", "--dir", f.dir_str(), "--process", &containerd],
        &[],
    );
    assert!(out.status.success(), "fleet restart {containerd}: {out:?}");
    let took = lands(&f, "after containerd", "containerd's restart").await;
    let agent_after = get(
        child,
        &["pods", "-l", "app.kubernetes.io/name=atoll-agent"],
        "{.items[0].status.containerStatuses[0].containerID}",
    )
    .await;
    assert_eq!(
        agent_before, agent_after,
        "the agent's container outlived containerd"
    );
    eprintln!(
        "FIGURE containerd restarted: the next change landed {}",
        secs(took)
    );

    // 3. The scheduler's leader pod deleted: the standby takes the Lease and schedules.
    let leader = get(
        &f.parent,
        &["lease", "atoll-scheduler"],
        "{.spec.holderIdentity}",
    )
    .await;
    let lost = Instant::now();
    f.parent
        .run(&["delete", "pod", "-n", NAMESPACE, &leader, "--wait=false"])
        .await
        .unwrap();
    let next = POLL
        .eventually(
            "another scheduler pod holding the Lease",
            Duration::from_secs(90),
            || async {
                let holder = get(
                    &f.parent,
                    &["lease", "atoll-scheduler"],
                    "{.spec.holderIdentity}",
                )
                .await;
                if !holder.is_empty() && holder != leader {
                    Ok(holder)
                } else {
                    Err(holder)
                }
            },
        )
        .await;
    lands(&f, "after the leader", "losing the scheduler's leader").await;
    eprintln!(
        "FIGURE scheduler leader {leader} deleted: {next} leads and the change landed {} later",
        secs(lost.elapsed())
    );
    rollout(&f.parent, "deployment/atoll-scheduler").await;

    // 4. A hub frozen (SIGSTOP): its liveness probe fails and the kubelet restarts it.
    let hub = get(
        &f.parent,
        &["pods", "-l", "app.kubernetes.io/name=atoll-hub"],
        "{.items[0].metadata.name}",
    )
    .await;
    let container = get(
        &f.parent,
        &["pod", &hub],
        "{.status.containerStatuses[0].containerID}",
    )
    .await;
    let container = container.trim_start_matches("containerd://").to_string();
    let tasks = parent_node.ctr(&["tasks", "ls"]).unwrap();
    let pid = tasks
        .lines()
        .find_map(|l| {
            let mut fields = l.split_whitespace();
            (fields.next() == Some(container.as_str())).then(|| fields.next())?
        })
        .unwrap_or_else(|| panic!("task {container} in {tasks}"));
    let frozen = Instant::now();
    real_node::host::run("kill", &["-STOP", pid]).unwrap();
    POLL.eventually(
        &format!("pod {hub} restarted by its liveness probe"),
        Duration::from_secs(120),
        || async {
            let restarts = get(
                &f.parent,
                &["pod", &hub],
                "{.status.containerStatuses[0].restartCount}",
            )
            .await;
            if restarts != "0" && !restarts.is_empty() {
                Ok(())
            } else {
                Err(format!("restartCount {restarts}"))
            }
        },
    )
    .await;
    let events = f
        .parent
        .run(&[
            "get",
            "events",
            "-n",
            NAMESPACE,
            "--field-selector",
            &format!("involvedObject.name={hub}"),
        ])
        .await
        .unwrap();
    assert!(
        events.contains("Liveness probe failed"),
        "the kubelet names the liveness probe: {events}"
    );
    eprintln!(
        "FIGURE a frozen hub restarted by its liveness probe after {}",
        secs(frozen.elapsed())
    );
    rollout(&f.parent, "deployment/atoll-hub").await;
    lands(&f, "after the hung hub", "the hub's restart").await;

    // 5. A rolling image upgrade of every component: the same images under a new tag, as a
    // release would bring; every rollout completes (the scheduler's standby is Ready too).
    let tag = "0.1.0-upgrade";
    for (node, image) in [
        (parent_node, "atoll-scheduler"),
        (parent_node, "atoll-hub"),
        (child_node, "atoll-agent"),
    ] {
        let from = format!("localhost/{image}:{}", env!("CARGO_PKG_VERSION"));
        let to = format!("localhost/{image}:{tag}");
        node.ctr(&["images", "tag", &from, &to]).unwrap();
    }
    for (k, deployment, container) in [
        (&f.parent, "atoll-scheduler", "scheduler"),
        (&f.parent, "atoll-hub", "hub"),
        (child, "atoll-agent", "agent"),
    ] {
        let image = format!("{container}=localhost/{deployment}:{tag}");
        k.run(&[
            "set",
            "image",
            "-n",
            NAMESPACE,
            &format!("deployment/{deployment}"),
            &image,
        ])
        .await
        .unwrap();
        let took = rollout(k, &format!("deployment/{deployment}")).await;
        eprintln!("FIGURE rolling upgrade of {deployment}: {}", secs(took));
        // The replaced pods are gone once they stopped (the rollout is complete before that).
        let selector = format!("app.kubernetes.io/name={deployment}");
        POLL.eventually(
            &format!("only {deployment} pods of the new image"),
            Duration::from_secs(60),
            || async {
                let images = get(
                    k,
                    &["pods", "-l", &selector],
                    "{.items[*].spec.containers[0].image}",
                )
                .await;
                if images.split_whitespace().all(|i| i.ends_with(tag)) {
                    Ok(())
                } else {
                    Err(images)
                }
            },
        )
        .await;
    }
    lands(&f, "after the upgrade", "the upgrade").await;

    // 6. An image no node has: the wait the fleet uses fails naming the pod, why its container
    // waits, its events and its log; undoing the rollout brings the agent back.
    child
        .run(&[
            "set",
            "image",
            "-n",
            NAMESPACE,
            "deployment/atoll-agent",
            "agent=localhost/atoll-agent:no-such-tag",
        ])
        .await
        .unwrap();
    let client = atoll_e2e::kubectl::client_for(&child.kubeconfig)
        .await
        .unwrap();
    let err = atoll_e2e::pods::wait_deployments(
        &client,
        "child-1",
        &["atoll-agent"],
        Duration::from_secs(30),
    )
    .await
    .expect_err("an agent without its image is not rolled out");
    let report = err.to_string();
    eprintln!("{report}");
    assert!(
        report.contains("pod atoll-agent-"),
        "names the pod: {report}"
    );
    assert!(
        ["ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff"]
            .iter()
            .any(|r| report.contains(r)),
        "says why the container waits: {report}"
    );
    assert!(report.contains("    event "), "shows its events: {report}");
    child
        .run(&["rollout", "undo", "-n", NAMESPACE, "deployment/atoll-agent"])
        .await
        .unwrap();
    rollout(child, "deployment/atoll-agent").await;
    lands(&f, "after the undo", "undoing the broken rollout").await;
    f.delete("hello").await;
}
