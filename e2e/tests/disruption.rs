#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End-to-end scenarios that crash processes: each test has a fleet of two children of its own
//! (child-1 region=eu tier=large, child-2 region=us tier=small), so a crash in one test never
//! touches another. Processes are killed with SIGKILL to their process group, as a crash would,
//! and started again with the same command line and environment (`atoll_e2e::scenario`).
//!
//! The hub runs with its shipped defaults (10 s heartbeats, a 3 s grace after a stream ends):
//! a dropped agent stream turns its cluster `Ready=Unknown` within 5 s.

mod support;

use std::time::{Duration, Instant};

use atoll_e2e::plan::Backend;
use atoll_e2e::scenario;
use support::{CONVERGE, Expect, Fleet, POLL, clusters_ready, converge, expect, secs};

const HUB_ENV: [(&str, &str); 0] = [];

/// With the hub's defaults, how soon a cluster whose agent died is `Ready=Unknown`.
const LOSS_DETECTED_WITHIN: Duration = Duration::from_secs(5);

const RESTART: Duration = Duration::from_secs(60);

async fn fleet(test: &str, extra: &[&str]) -> Option<Fleet> {
    if !support::prerequisites_or_skip(test).await {
        return None;
    }
    Some(Fleet::up(2, extra, &HUB_ENV).await)
}

async fn apply_example(f: &Fleet, example: &str) {
    f.parent
        .apply_kustomization(&support::manifests().join("examples").join(example), &[])
        .await
        .unwrap();
}

fn api(child1: Option<&str>, child2: Option<&str>) -> Vec<Expect> {
    vec![
        expect(
            "child-1",
            "deployment",
            "demo-divided",
            "api",
            "{.spec.replicas}",
            child1,
        ),
        expect(
            "child-2",
            "deployment",
            "demo-divided",
            "api",
            "{.spec.replicas}",
            child2,
        ),
    ]
}

async fn wait_clusters(f: &Fleet, want: &str, what: &str) -> Duration {
    let ((), took) = POLL
        .eventually_timed(what, CONVERGE, || async {
            let got = clusters_ready(f).await?;
            if got == want { Ok(()) } else { Err(got) }
        })
        .await;
    took
}

#[tokio::test]
async fn a_killed_agent_turns_its_cluster_unknown_and_dividing_fails_over_until_it_returns() {
    let Some(f) = fleet("agent crash", &[]).await else {
        return;
    };
    apply_example(&f, "dividing").await;
    converge(&f, "the 1:2 division", &api(Some("2"), Some("4"))).await;

    let killed_at = Instant::now();
    let agent = scenario::kill(&f.dir, "agent-child-1").await.unwrap();
    let unknown = wait_clusters(
        &f,
        "child-1=Unknown,child-2=True",
        "child-1 Ready=Unknown after its agent was killed",
    )
    .await;
    eprintln!(
        "FIGURE agent SIGKILL -> kubectl get mcls shows Ready=Unknown: {}",
        secs(unknown)
    );
    assert!(
        killed_at.elapsed() <= LOSS_DETECTED_WITHIN + Duration::from_secs(1),
        "Ready=Unknown {} after the kill with the hub's default flags; want within {}s \
         (plus 1 s for the kubectl polls)",
        secs(killed_at.elapsed()),
        LOSS_DETECTED_WITHIN.as_secs()
    );
    // The printer column says so too.
    let table = f.parent.run(&["get", "mcls", "-A"]).await.unwrap();
    let row = table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("child-1"))
        .unwrap_or_else(|| panic!("no child-1 row in\n{table}"));
    assert!(row.split_whitespace().any(|c| c == "Unknown"), "{table}");
    // Every replica goes to the cluster that is left (child-1 keeps what it ran: no agent).
    converge(
        &f,
        "fail-over of all 6 replicas to child-2",
        &api(Some("2"), Some("6")),
    )
    .await;
    eprintln!(
        "FIGURE agent SIGKILL -> Dividing replicas failed over (6 in child-2): {}",
        secs(killed_at.elapsed())
    );
    // The parent agrees: child-2 has all 6; child-1 either is unbound or keeps its binding
    // (so that nothing is deleted from it on reconnection) with 0 replicas.
    let shares = divided_shares(&f).await;
    assert_eq!(shares.get("child-2"), Some(&6), "{shares:?}");
    assert!(
        matches!(shares.get("child-1"), None | Some(0)),
        "{shares:?}"
    );

    let restarted_at = Instant::now();
    scenario::start_again(&f.dir, &agent, RESTART)
        .await
        .unwrap();
    wait_clusters(&f, "child-1=True,child-2=True", "child-1 Ready again").await;
    converge(&f, "the 1:2 division again", &api(Some("2"), Some("4"))).await;
    eprintln!(
        "FIGURE agent restarted -> Ready and divided 1:2 again: {}",
        secs(restarted_at.elapsed())
    );
}

/// The api-divided Subscription's replicas of `demo-divided/api` per bound cluster name, from
/// `status.bindingClusters` and `status.replicas` (same order).
async fn divided_shares(f: &Fleet) -> std::collections::BTreeMap<String, i64> {
    let json = f
        .parent
        .run(&[
            "get",
            "sub",
            "api-divided",
            "-n",
            "demo-divided",
            "-o",
            "json",
        ])
        .await
        .unwrap();
    let sub: serde_json::Value = serde_json::from_str(&json).unwrap();
    let clusters = sub["status"]["bindingClusters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let replicas = sub["status"]["replicas"]["apps/v1/Deployment/demo-divided/api"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(clusters.len(), replicas.len(), "{json}");
    clusters
        .iter()
        .zip(&replicas)
        .map(|(c, r)| {
            let name = c.as_str().unwrap().rsplit('/').next().unwrap().to_string();
            (name, r.as_i64().unwrap())
        })
        .collect()
}

fn greeting(text: &str) -> Vec<Expect> {
    ["child-1", "child-2"]
        .into_iter()
        .map(|c| {
            expect(
                c,
                "configmap",
                "demo",
                "web-config",
                "{.data.greeting}",
                Some(text),
            )
        })
        .collect()
}

async fn set_greeting(f: &Fleet, text: &str) {
    let patch = serde_json::json!({"data": {"greeting": text}}).to_string();
    f.parent
        .run(&[
            "patch",
            "configmap",
            "web-config",
            "-n",
            "demo",
            "--type",
            "merge",
            "-p",
            &patch,
        ])
        .await
        .unwrap();
}

#[tokio::test]
async fn edits_made_while_the_hub_and_then_the_scheduler_are_down_land_after_their_restart() {
    let Some(f) = fleet("hub and scheduler crash", &[]).await else {
        return;
    };
    apply_example(&f, "replication").await;
    converge(&f, "the replication example", &greeting("hello from atoll")).await;

    for process in ["hub", "scheduler"] {
        let snap = scenario::kill(&f.dir, process).await.unwrap();
        let text = format!("written while the {process} was down");
        set_greeting(&f, &text).await;
        // While it is down the edit cannot reach the children: what they run stays as it was.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = if process == "hub" {
            "hello from atoll".to_string()
        } else {
            "written while the hub was down".to_string()
        };
        converge(
            &f,
            &format!("no change while the {process} is down"),
            &greeting(&before),
        )
        .await;
        let restarted_at = Instant::now();
        scenario::start_again(&f.dir, &snap, RESTART).await.unwrap();
        let took = converge(
            &f,
            &format!("the edit made while the {process} was down"),
            &greeting(&text),
        )
        .await;
        eprintln!(
            "FIGURE {process} restarted -> edit made while it was down in both children: {} ({process} answered /healthz {} after its start)",
            secs(took),
            secs(restarted_at.elapsed() - took)
        );
        wait_clusters(&f, "child-1=True,child-2=True", "both clusters Ready").await;
    }
    // And the restarted pair keeps serving new edits.
    set_greeting(&f, "after both restarts").await;
    converge(
        &f,
        "an edit after both restarts",
        &greeting("after both restarts"),
    )
    .await;
}

#[tokio::test]
async fn the_fleet_converges_after_the_parent_restarts_from_its_data_dir() {
    let Some(f) = fleet("parent restart", &["--persist-parent"]).await else {
        return;
    };
    let data = match support::backend() {
        Backend::Devcluster => "parent-data",
        Backend::Kube => "parent/etcd",
    };
    assert!(
        f.dir.join(data).is_dir(),
        "the parent must persist its objects in {data}"
    );
    apply_example(&f, "replication").await;
    converge(&f, "the replication example", &greeting("hello from atoll")).await;

    // Through the CLI this time: `fleet restart` kills the process group and starts it again.
    // On the real tier the parent's state is in its etcd: both etcd and kube-apiserver restart.
    let (processes, keeps_state): (&[&str], &str) = match support::backend() {
        Backend::Devcluster => (&["parent"], "--data-dir"),
        Backend::Kube => (&["parent-etcd", "parent"], "--etcd-servers"),
    };
    let before = atoll_e2e::state::FleetState::load(&f.dir.join("fleet.json")).unwrap();
    let restarted_at = Instant::now();
    for name in processes {
        let out = support::fleet_cmd(&["restart", "--dir", f.dir_str(), "--process", name], &[]);
        assert!(
            out.status.success(),
            "fleet restart {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "FIGURE fleet restart --process {} (state kept, serving again): {}",
        processes.join(" then "),
        secs(restarted_at.elapsed())
    );
    let after = atoll_e2e::state::FleetState::load(&f.dir.join("fleet.json")).unwrap();
    for name in processes {
        let old = before.process(name).unwrap();
        let new = after.process(name).unwrap();
        assert!(
            !atoll_e2e::process::is_running(old),
            "the old {name} must be gone"
        );
        assert_ne!(new.pid, old.pid);
    }
    let new = after.process("parent").unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", new.pid)).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains(keeps_state), "{cmdline}");
    assert!(
        !cmdline.contains("--port 0"),
        "the parent keeps its port: {cmdline}"
    );
    // The Subscription survived the restart, and every process reconnected: a new edit lands.
    let subs = f
        .parent
        .run(&["get", "subs", "-A", "-o", "name"])
        .await
        .unwrap();
    assert!(subs.contains("web-everywhere"), "{subs}");
    set_greeting(&f, "after the parent restart").await;
    let took = converge(
        &f,
        "an edit after the parent restart",
        &greeting("after the parent restart"),
    )
    .await;
    wait_clusters(&f, "child-1=True,child-2=True", "both clusters Ready").await;
    eprintln!(
        "FIGURE parent restarted -> edit in both children and clusters Ready: {} after the restart ({} for the edit)",
        secs(restarted_at.elapsed()),
        secs(took)
    );
}

#[tokio::test]
async fn a_replicated_workload_keeps_running_in_a_child_whose_agent_was_down() {
    let Some(f) = fleet("agent outage under Replication", &[]).await else {
        return;
    };
    apply_example(&f, "replication").await;
    converge(&f, "the replication example", &greeting("hello from atoll")).await;
    let uid = || async {
        support::jsonpath(
            f.child("child-1"),
            "deployment",
            Some("demo"),
            "web",
            "{.metadata.uid}",
        )
        .await
        .unwrap()
    };
    let before = uid().await.unwrap();

    let agent = scenario::kill(&f.dir, "agent-child-1").await.unwrap();
    wait_clusters(&f, "child-1=Unknown,child-2=True", "child-1 Ready=Unknown").await;
    scenario::start_again(&f.dir, &agent, RESTART)
        .await
        .unwrap();
    wait_clusters(&f, "child-1=True,child-2=True", "child-1 Ready again").await;
    // For a few seconds after the reconnection the workload must stay the same object.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert_eq!(
            uid().await.as_deref(),
            Some(before.as_str()),
            "demo/web in child-1 was deleted or replaced after its agent reconnected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And it still receives feed edits.
    set_greeting(&f, "after the outage").await;
    converge(
        &f,
        "an edit after the outage",
        &greeting("after the outage"),
    )
    .await;
}

/// `data.<key>` of the cluster-token Secret of `cluster`'s dedicated namespace (base64), `None`
/// while the Secret does not exist.
async fn cluster_token_data(f: &Fleet, ns: &str, key: &str) -> Result<Option<String>, String> {
    support::jsonpath(
        &f.parent,
        "secret",
        Some(ns),
        "cluster-token",
        &format!("{{.data.{key}}}"),
    )
    .await
}

/// The cluster token the agent of `child` keeps in its cluster (base64).
async fn agents_token(f: &Fleet, child: &str) -> String {
    support::jsonpath(
        f.child(child),
        "secret",
        Some("clusternet-system"),
        "parent-cluster",
        "{.data.token}",
    )
    .await
    .unwrap()
    .unwrap_or_default()
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The id of `child`: the uid of its kube-system namespace, as its agent sends it.
async fn cluster_id(f: &Fleet, child: &str) -> String {
    support::jsonpath(
        f.child(child),
        "namespace",
        None,
        "kube-system",
        "{.metadata.uid}",
    )
    .await
    .unwrap()
    .unwrap()
}

/// `field` of registration request `request`'s pending or decided re-registration.
async fn re_registration(f: &Fleet, request: &str, field: &str) -> String {
    support::jsonpath(
        &f.parent,
        "clusterregistrationrequest",
        None,
        request,
        &format!("{{.status.reRegistration.{field}}}"),
    )
    .await
    .unwrap()
    .unwrap_or_default()
}

/// An administrator's decision on a re-registration, with kubectl as the hub README gives it.
async fn decide_re_registration(f: &Fleet, request: &str, decision: &str) {
    f.parent
        .run(&[
            "patch",
            "clusterregistrationrequest",
            request,
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"reRegistration":{decision}}}}}"#),
        ])
        .await
        .unwrap();
}

/// A `Sync` stream to the fleet's hub whose Hello says it is cluster `cluster_id` named
/// `name`, with `token`: what a hostile client holding the fleet's bootstrap token sends (a
/// real agent of a registered cluster presents its cluster token). Resolves to the hub's
/// answer: the Welcome's cluster token, or the refusal.
async fn hello_to_hub(
    f: &Fleet,
    cluster_id: &str,
    name: &str,
    token: &str,
) -> Result<String, tonic::Status> {
    use atoll_proto::v1;
    let state = atoll_e2e::state::FleetState::load(&f.dir.join("fleet.json")).unwrap();
    let url = state.hub_url.expect("the fleet's hub address");
    let hello = v1::AgentMessage {
        seq: 0,
        message: Some(v1::agent_message::Message::Hello(v1::Hello {
            protocol_version: v1::ProtocolVersion::V1 as i32,
            cluster_id: cluster_id.into(),
            cluster_name: name.into(),
            cluster_labels: Default::default(),
            token: token.into(),
            agent_version: "hostile".into(),
            cluster_type: String::new(),
        })),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello).await.unwrap();
    let mut hub = v1::hub_client::HubClient::connect(url).await.unwrap();
    let mut replies = hub
        .sync(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let first = replies.message().await?;
    drop(tx);
    match first.and_then(|m| m.message) {
        Some(v1::hub_message::Message::Welcome(w)) => Ok(w.cluster_token),
        other => panic!("expected a Welcome, got {other:?}"),
    }
}

fn unbase64(s: &str) -> String {
    use base64::Engine;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(s).unwrap()).unwrap()
}

#[tokio::test]
async fn a_bootstrap_token_cannot_unbind_a_registered_cluster_and_a_denial_leaves_it_registered() {
    let Some(f) = fleet("bootstrap token against a registered cluster", &[]).await else {
        return;
    };
    apply_example(&f, "dividing").await;
    converge(&f, "the 1:2 division", &api(Some("2"), Some("4"))).await;
    let ns1 = f.dedicated_namespace("child-1");
    let request = format!("clusternet-{}", cluster_id(&f, "child-1").await);
    let descriptions = f
        .parent
        .run(&["get", "descriptions", "-n", &ns1, "-o", "name"])
        .await
        .unwrap();
    assert!(!descriptions.trim().is_empty());

    // The hostile Hello, held by the hub: its request is recorded apart and nothing changes.
    let bootstrap = std::fs::read_to_string(f.dir.join("bootstrap-token")).unwrap();
    let id = cluster_id(&f, "child-1").await;
    let hostile = {
        let (f, id, token) = (&f, id.clone(), bootstrap.trim().to_string());
        async move { hello_to_hub(f, &id, "child-1", &token).await }
    };
    tokio::pin!(hostile);
    let recorded = tokio::time::timeout(CONVERGE, async {
        loop {
            tokio::select! {
                answer = &mut hostile => panic!("the hostile Hello was answered: {answer:?}"),
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
            if re_registration(&f, &request, "replaces").await == "LiveRegistration" {
                return;
            }
        }
    });
    recorded
        .await
        .expect("the re-registration request is recorded");
    let token_id = bootstrap.split('.').next().unwrap().to_string();
    assert_eq!(
        re_registration(&f, &request, "bootstrapTokenId").await,
        token_id
    );
    assert!(
        re_registration(&f, &request, "peer")
            .await
            .starts_with("127.0.0.1:"),
        "the request names where it came from"
    );
    // Held for long enough for the scheduler and the agent to act on a lost registration.
    let held = tokio::time::timeout(Duration::from_secs(10), &mut hostile).await;
    assert!(held.is_err(), "the hostile Hello was answered: {held:?}");
    let result = support::jsonpath(
        &f.parent,
        "clusterregistrationrequest",
        None,
        &request,
        "{.status.result}",
    )
    .await
    .unwrap();
    assert_eq!(result.as_deref(), Some("Approved"));
    assert_eq!(
        f.parent
            .run(&["get", "descriptions", "-n", &ns1, "-o", "name"])
            .await
            .unwrap(),
        descriptions,
        "the cluster's Descriptions stay"
    );
    converge(&f, "the division, unchanged", &api(Some("2"), Some("4"))).await;

    // Denied: the hostile stream is refused, the registration and the agent's token stay.
    decide_re_registration(
        &f,
        &request,
        r#"{"result":"Denied","errorMessage":"not one of ours"}"#,
    )
    .await;
    let refused = tokio::time::timeout(CONVERGE, &mut hostile)
        .await
        .expect("the hub answers the denied request")
        .expect_err("the denied request is refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("not one of ours"), "{refused:?}");
    let token = unbase64(&agents_token(&f, "child-1").await);
    let welcome = hello_to_hub(&f, &id, "child-1", &token).await;
    assert!(
        welcome.as_deref().is_ok_and(str::is_empty),
        "the cluster token still connects, and is kept: {welcome:?}"
    );
    wait_clusters(&f, "child-1=True,child-2=True", "both clusters Ready after").await;
    converge(&f, "the division, unchanged", &api(Some("2"), Some("4"))).await;
}

#[tokio::test]
async fn revoking_and_rotating_cluster_tokens_reach_the_running_agent() {
    let Some(f) = fleet("token revocation and rotation", &[]).await else {
        return;
    };
    wait_clusters(&f, "child-1=True,child-2=True", "both clusters Ready").await;

    // Rotation on request: the hub closes child-1's stream, the agent reconnects with its token
    // and stores the new one; the cluster stays Ready.
    let ns1 = f.dedicated_namespace("child-1");
    let hash_before = cluster_token_data(&f, &ns1, "sha256").await.unwrap();
    let token_before = agents_token(&f, "child-1").await;
    assert!(hash_before.is_some() && !token_before.is_empty());
    f.parent
        .run(&[
            "annotate",
            "managedcluster",
            "child-1",
            "-n",
            &ns1,
            "hub.atoll.io/rotate-token=e2e-1",
            "--overwrite",
        ])
        .await
        .unwrap();
    let (_, took) = POLL
        .eventually_timed("child-1's token rotated", CONVERGE, || async {
            let rotation = cluster_token_data(&f, &ns1, "rotation").await?;
            let token = agents_token(&f, "child-1").await;
            if rotation.as_deref() == Some(b64("e2e-1").as_str()) && token != token_before {
                Ok(())
            } else {
                Err(format!(
                    "rotation={rotation:?}, agent's token changed={}",
                    token != token_before
                ))
            }
        })
        .await;
    eprintln!(
        "FIGURE rotate-token annotation -> the agent holds a new token: {}",
        secs(took)
    );
    assert_ne!(
        cluster_token_data(&f, &ns1, "sha256").await.unwrap(),
        hash_before
    );

    // Revocation: deleting child-2's token Secret closes its open stream. The agent asks to
    // register again with its bootstrap token, and that waits for an administrator even on
    // this hub, which approves new clusters automatically: a revoked token stays revoked.
    let ns2 = f.dedicated_namespace("child-2");
    let hash2 = cluster_token_data(&f, &ns2, "sha256").await.unwrap();
    let token2 = agents_token(&f, "child-2").await;
    let request2 = format!("clusternet-{}", cluster_id(&f, "child-2").await);
    f.parent
        .run(&["delete", "secret", "cluster-token", "-n", &ns2])
        .await
        .unwrap();
    POLL.eventually("child-2's request to register again", CONVERGE, || async {
        let replaces = re_registration(&f, &request2, "replaces").await;
        if replaces == "RevokedToken" {
            Ok(())
        } else {
            Err(format!("reRegistration.replaces={replaces:?}"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cluster_token_data(&f, &ns2, "sha256").await.unwrap(),
        None,
        "a bootstrap token undid the revocation without an administrator"
    );
    decide_re_registration(&f, &request2, r#"{"result":"Approved"}"#).await;
    let (_, took) = POLL
        .eventually_timed("child-2 registered again", CONVERGE, || async {
            let hash = cluster_token_data(&f, &ns2, "sha256").await?;
            let token = agents_token(&f, "child-2").await;
            if hash.is_some() && hash != hash2 && token != token2 {
                Ok(())
            } else {
                Err(format!("hash={hash:?}"))
            }
        })
        .await;
    eprintln!(
        "FIGURE re-registration approved -> the agent registered again: {}",
        secs(took)
    );
    wait_clusters(&f, "child-1=True,child-2=True", "both clusters Ready after").await;
}

/// `status|reason|message` of condition `type_` on the ManagedCluster `cluster`.
async fn cluster_condition(f: &Fleet, ns: &str, cluster: &str, type_: &str) -> Option<String> {
    let path = format!(
        "{{range .status.conditions[?(@.type==\"{type_}\")]}}{{.status}}|{{.reason}}|{{.message}}{{end}}"
    );
    support::jsonpath(&f.parent, "managedcluster", Some(ns), cluster, &path)
        .await
        .ok()
        .flatten()
        .filter(|s| !s.is_empty())
}

#[tokio::test]
async fn a_snapshot_that_would_prune_everything_waits_for_a_confirmation_on_the_managed_cluster() {
    let Some(f) = fleet("prune safety limit", &[]).await else {
        return;
    };
    apply_example(&f, "replication").await;
    converge(&f, "the replication example", &greeting("hello from atoll")).await;
    let ns1 = f.dedicated_namespace("child-1");

    // While child-1's agent is down, its Descriptions vanish without it: the Subscription is
    // deleted and their finalizers are cleared by hand (as a restore from an old backup would).
    let agent = scenario::kill(&f.dir, "agent-child-1").await.unwrap();
    wait_clusters(&f, "child-1=Unknown,child-2=True", "child-1 Ready=Unknown").await;
    f.parent
        .run(&[
            "delete",
            "subscription",
            "web-everywhere",
            "-n",
            "demo",
            "--wait=false",
        ])
        .await
        .unwrap();
    converge(
        &f,
        "child-2 cleaned up by its agent",
        &[expect(
            "child-2",
            "namespace",
            "",
            "demo",
            "{.metadata.name}",
            None,
        )],
    )
    .await;
    POLL.eventually_timed("child-1's Descriptions gone", CONVERGE, || async {
        let names = f
            .parent
            .run(&["get", "descriptions", "-n", &ns1, "-o", "name"])
            .await
            .map_err(|e| e.to_string())?;
        if names.trim().is_empty() {
            return Ok(());
        }
        for d in names.lines() {
            let _ = f
                .parent
                .run(&[
                    "patch",
                    d,
                    "-n",
                    &ns1,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ])
                .await;
        }
        Err(names)
    })
    .await;

    // Back, the agent finds nothing for what it runs: the prune waits.
    scenario::start_again(&f.dir, &agent, RESTART)
        .await
        .unwrap();
    let (held, _) = POLL
        .eventually_timed("PruneHeld=True on child-1", CONVERGE, || async {
            let c = cluster_condition(&f, &ns1, "child-1", "PruneHeld").await;
            match c {
                Some(c) if c.starts_with("True|") => Ok(c),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    let demo_in_child_1 = || {
        support::jsonpath(
            f.child("child-1"),
            "namespace",
            None,
            "demo",
            "{.metadata.name}",
        )
    };
    assert_eq!(
        demo_in_child_1().await.unwrap().as_deref(),
        Some("demo"),
        "nothing is pruned before the confirmation"
    );
    let reasons = f
        .parent
        .run(&[
            "get",
            "events.events.k8s.io",
            "-n",
            &ns1,
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .await
        .unwrap();
    assert!(reasons.contains("PruneHeld"), "events: {reasons}");

    // The confirmation the condition asks for lets it go on.
    let marker = "hub.atoll.io/confirm-prune=";
    let id = held
        .split_once(marker)
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {marker} in {held}"));
    f.parent
        .run(&[
            "annotate",
            "managedcluster",
            "child-1",
            "-n",
            &ns1,
            &format!("{marker}{id}"),
        ])
        .await
        .unwrap();
    converge(
        &f,
        "child-1 pruned after the confirmation",
        &[expect(
            "child-1",
            "namespace",
            "",
            "demo",
            "{.metadata.name}",
            None,
        )],
    )
    .await;
    POLL.eventually_timed("PruneHeld=False on child-1", CONVERGE, || async {
        let c = cluster_condition(&f, &ns1, "child-1", "PruneHeld").await;
        match c {
            Some(c) if c.starts_with("False|") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// `namespace/name` of every ManagedCluster, space-separated.
async fn managed_clusters(f: &Fleet) -> Result<String, String> {
    f.parent
        .run(&[
            "get",
            "managedclusters",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        ])
        .await
        .map_err(|e| e.to_string())
}

/// `uid` of an object in a child, empty when it is absent.
async fn child_uid(f: &Fleet, kind: &str, ns: Option<&str>, name: &str) -> String {
    support::jsonpath(f.child("child-1"), kind, ns, name, "{.metadata.uid}")
        .await
        .unwrap()
        .unwrap_or_default()
}

#[tokio::test]
async fn re_registering_into_another_dedicated_namespace_keeps_every_workload_running() {
    let Some(f) = fleet("re-registration into another namespace", &[]).await else {
        return;
    };
    apply_example(&f, "replication").await;
    converge(&f, "the replication example", &greeting("hello from atoll")).await;
    let old_ns = f.dedicated_namespace("child-1");
    let uids = [
        child_uid(&f, "namespace", None, "demo").await,
        child_uid(&f, "configmap", Some("demo"), "web-config").await,
        child_uid(&f, "deployment", Some("demo"), "web").await,
    ];
    assert!(uids.iter().all(|u| !u.is_empty()), "{uids:?}");

    // The parent forgets child-1 while its agent is down, as a restore from a backup taken
    // before it registered would: its dedicated namespace goes, Descriptions included, and no
    // agent is told to delete anything.
    let agent = scenario::kill(&f.dir, "agent-child-1").await.unwrap();
    wait_clusters(&f, "child-1=Unknown,child-2=True", "child-1 Ready=Unknown").await;
    f.parent
        .run(&["delete", "namespace", &old_ns, "--wait=false"])
        .await
        .unwrap();
    POLL.eventually_timed("child-1's dedicated namespace gone", CONVERGE, || async {
        if let Ok(names) = f
            .parent
            .run(&["get", "descriptions", "-n", &old_ns, "-o", "name"])
            .await
        {
            for d in names.lines() {
                let _ = f
                    .parent
                    .run(&[
                        "patch",
                        d,
                        "-n",
                        &old_ns,
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ])
                    .await;
            }
        }
        match support::jsonpath(&f.parent, "namespace", None, &old_ns, "{.metadata.name}").await? {
            None => Ok(()),
            Some(_) => Err(format!("{old_ns} still there")),
        }
    })
    .await;

    // Back, the agent's token is unknown: it registers again (this fleet's hub approves
    // automatically) into a new dedicated namespace, and the scheduler delivers the same
    // Subscription there.
    scenario::start_again(&f.dir, &agent, RESTART)
        .await
        .unwrap();
    let (new_ns, _) = POLL
        .eventually_timed(
            "child-1 registered into a new namespace",
            CONVERGE,
            || async {
                let clusters = managed_clusters(&f).await?;
                clusters
                    .split_whitespace()
                    .find_map(|c| c.strip_suffix("/child-1"))
                    .filter(|ns| *ns != old_ns)
                    .map(str::to_owned)
                    .ok_or(clusters)
            },
        )
        .await;
    let owner = format!("{new_ns}.demo.web-everywhere");
    POLL.eventually_timed(
        "the new registration's Description owns the objects",
        CONVERGE,
        || async {
            let got = support::jsonpath(
                f.child("child-1"),
                "configmap",
                Some("demo"),
                "web-config",
                "{.metadata.annotations.apps\\.clusternet\\.io/owned-by-description}",
            )
            .await?;
            if got.as_deref() == Some(owner.as_str()) {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    // The old registration's inventories go once nothing of theirs is left to delete, and no
    // prune is held.
    POLL.eventually_timed(
        "only the new registration's inventory left",
        CONVERGE,
        || async {
            let descriptions = f
                .child("child-1")
                .run(&[
                    "get",
                    "configmaps",
                    "-n",
                    "clusternet-system",
                    "-l",
                    "apps.clusternet.io/inventory=true",
                    "-o",
                    "jsonpath={.items[*].data.description}",
                ])
                .await
                .map_err(|e| e.to_string())?;
            if descriptions.trim() == owner {
                Ok(())
            } else {
                Err(descriptions)
            }
        },
    )
    .await;
    POLL.eventually_timed("no prune held on child-1", CONVERGE, || async {
        match cluster_condition(&f, &new_ns, "child-1", "PruneHeld").await {
            None => Ok(()),
            Some(c) if c.starts_with("False|") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Nothing was deleted and created again on the way.
    let after = [
        child_uid(&f, "namespace", None, "demo").await,
        child_uid(&f, "configmap", Some("demo"), "web-config").await,
        child_uid(&f, "deployment", Some("demo"), "web").await,
    ];
    assert_eq!(after, uids, "the same objects run");
    converge(
        &f,
        "the example still everywhere",
        &greeting("hello from atoll"),
    )
    .await;
}
