//! The hub client against a minimal in-test gRPC Hub and a child devcluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use atoll_agent::hub::Backoff;
use atoll_agent::{Agent, AgentConfig};
use atoll_applier::{Applier, Description};
use atoll_proto::v1::{self, agent_message, hub_message};
use atoll_testkit::{BOOTSTRAP_TOKEN, eventually};
use common::{NS, TestHub, cm, serve, upsert};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(20);

fn start_agent(
    client: kube::Client,
    url: &str,
) -> (
    tokio::sync::watch::Receiver<atoll_agent::hub::ConnectionState>,
    tokio::sync::oneshot::Sender<()>,
) {
    let mut config = AgentConfig::new(url, BOOTSTRAP_TOKEN, "child-1");
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(200),
    };
    config.retry_failed = Duration::from_millis(300);
    let applier = Arc::new(Applier::new(client.clone(), "atoll-agent"));
    let agent = Agent::new(client, config, applier);
    let state = agent.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    (state, stop)
}

async fn stored_token(client: &kube::Client) -> Option<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "clusternet-system");
    let s = secrets.get_opt("parent-cluster").await.unwrap()?;
    Some(String::from_utf8(s.data?.get("token")?.0.clone()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_applies_the_snapshot_prunes_after_the_marker_and_follows_deltas() {
    let child = devcluster::DevCluster::start(devcluster::Config {
        nodes: 2,
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let client = child.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A Description the hub no longer has, applied by an earlier run of the agent.
    let stale = Applier::new(client.clone(), "atoll-agent")
        .apply(&Description {
            charts: Vec::new(),
            namespace: NS.into(),
            name: "default.stale".into(),
            uid: "uid-stale".into(),
            generation: 1,
            orphan: false,
            objects: vec![cm("stale")],
        })
        .await;
    assert_eq!(stale.phase, atoll_applier::Phase::Success);

    let hub = TestHub::with_description("default.web", vec![cm("web")]);
    let url = serve(hub.clone()).await;
    let (_state, _stop) = start_agent(client.clone(), &url);

    // Snapshot (seq 1) and marker (seq 2) are acknowledged; the stale Description is pruned.
    eventually("acks of the snapshot and marker", WAIT, || async {
        hub.acked(1) && hub.acked(2)
    })
    .await;
    assert!(cms.get_opt("web").await.unwrap().is_some());
    eventually("the stale object to be pruned", WAIT, || async {
        cms.get_opt("stale").await.unwrap().is_none()
    })
    .await;
    assert_eq!(stored_token(&client).await.as_deref(), Some("ct-1"));
    let hello = hub.hellos.lock().unwrap()[0].clone();
    assert_eq!(hello.token, BOOTSTRAP_TOKEN);
    assert_eq!(hello.protocol_version, v1::ProtocolVersion::V1 as i32);
    let kube_system = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .unwrap();
    assert_eq!(Some(hello.cluster_id), kube_system.metadata.uid);
    let report = hub.reports("default.web").last().cloned().unwrap();
    assert_eq!(
        (
            report.phase.as_str(),
            report.observed_generation,
            report.deleted
        ),
        ("Success", 1, false)
    );
    assert_eq!(report.objects.len(), 1);

    // Heartbeats carry node counts, sums and health.
    eventually("a heartbeat", WAIT, || async {
        !hub.heartbeats().is_empty()
    })
    .await;
    let hb = hub.heartbeats()[0].clone();
    let nodes = hb.node_statistics.unwrap();
    assert_eq!((nodes.ready_nodes, nodes.not_ready_nodes), (2, 0));
    assert!(hb.capacity.contains_key("cpu") && hb.allocatable.contains_key("memory"));
    assert!(hb.healthz && hb.livez && hb.readyz);
    assert_eq!(hb.heartbeat_seconds, 1);

    // Deltas: a new Description, a deletion, a removal.
    hub.push(upsert(3, "default.api", 1, &[cm("api")], false))
        .await;
    eventually(
        "the new Description to be applied and acked",
        WAIT,
        || async { hub.acked(3) && cms.get_opt("api").await.unwrap().is_some() },
    )
    .await;
    hub.push(upsert(4, "default.web", 2, &[cm("web")], true))
        .await;
    eventually("the deletion to be confirmed", WAIT, || async {
        hub.acked(4) && hub.reports("default.web").iter().any(|r| r.deleted)
    })
    .await;
    assert!(
        cms.get_opt("web").await.unwrap().is_none(),
        "gone before deleted=true"
    );
    hub.push(v1::HubMessage {
        message: Some(hub_message::Message::Removed(v1::DescriptionRemoved {
            seq: 5,
            name: "default.api".into(),
            uid: "uid-default.api".into(),
        })),
    })
    .await;
    eventually(
        "the removed Description's objects to be pruned",
        WAIT,
        || async { hub.acked(5) && cms.get_opt("api").await.unwrap().is_none() },
    )
    .await;

    // A status change is reported without waiting for the next heartbeat.
    hub.push(upsert(6, "default.more", 1, &[cm("more")], false))
        .await;
    eventually("ack 6", WAIT, || async { hub.acked(6) }).await;
    let before = hub.reports("default.more").len();
    let patch = json!({"data": {"k": "drifted"}});
    cms.patch(
        "more",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    eventually("drift repaired", WAIT, || async {
        cms.get("more")
            .await
            .unwrap()
            .data
            .unwrap()
            .get("k")
            .map(String::as_str)
            == Some("v")
    })
    .await;
    eventually("a report after the repair", WAIT, || async {
        hub.reports("default.more").len() > before
    })
    .await;

    // Someone deletes the inventory: the agent rewrites it and asks for a fresh snapshot.
    let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), "clusternet-system");
    let name = atoll_applier::inventory::config_map_name(&format!("{NS}.default.more"));
    inventories
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually("a ResyncRequest", WAIT, || async {
        hub.received
            .lock()
            .unwrap()
            .iter()
            .any(|m| matches!(m, agent_message::Message::Resync(_)))
    })
    .await;
    eventually("the inventory to be rewritten", WAIT, || async {
        inventories.get_opt(&name).await.unwrap().is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_reconnects_with_its_stored_cluster_token_and_falls_back_to_bootstrap_once() {
    let child = devcluster::DevCluster::start_default().await.unwrap();
    let client = child.client().await.unwrap();
    let hub = TestHub::default();
    let url = serve(hub.clone()).await;
    let (mut state, _stop) = start_agent(client.clone(), &url);
    let wait_sessions = |n: u64| {
        let mut state = state.clone();
        async move {
            tokio::time::timeout(
                Duration::from_secs(20),
                state.wait_for(|s| s.connected && s.sessions >= n),
            )
            .await
            .expect("session in time")
            .expect("agent alive");
        }
    };
    wait_sessions(1).await;
    assert_eq!(stored_token(&client).await.as_deref(), Some("ct-1"));

    // The hub drops the stream: the agent comes back with the stored cluster token.
    hub.drop_stream();
    wait_sessions(2).await;
    assert_eq!(hub.hellos.lock().unwrap()[1].token, "ct-1");
    assert_eq!(hub.minted.load(Ordering::SeqCst), 1, "no new registration");

    // The hub revokes the cluster token: the agent falls back to its bootstrap token once.
    hub.tokens.lock().unwrap().clear();
    hub.drop_stream();
    wait_sessions(3).await;
    let tokens: Vec<String> = hub
        .hellos
        .lock()
        .unwrap()
        .iter()
        .map(|h| h.token.clone())
        .collect();
    assert_eq!(
        tokens,
        vec![BOOTSTRAP_TOKEN, "ct-1", "ct-1", BOOTSTRAP_TOKEN]
    );
    assert_eq!(stored_token(&client).await.as_deref(), Some("ct-2"));
    assert!(state.borrow_and_update().epoch >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_description_is_applied_again_until_it_succeeds() {
    let child = devcluster::DevCluster::start_default().await.unwrap();
    let client = child.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut theirs: ConfigMap = serde_json::from_value(cm("taken")).unwrap();
    theirs.data = Some([("k".to_owned(), "theirs".to_owned())].into());
    cms.create(&Default::default(), &theirs).await.unwrap();

    let hub = TestHub::with_description("default.app", vec![cm("taken")]);
    let url = serve(hub.clone()).await;
    let (_state, _stop) = start_agent(client.clone(), &url);
    eventually("a Failure report for the conflict", WAIT, || async {
        hub.reports("default.app")
            .iter()
            .any(|r| r.phase == "Failure")
    })
    .await;
    let value = || async {
        cms.get("taken")
            .await
            .unwrap()
            .data
            .unwrap()
            .get("k")
            .cloned()
    };
    assert_eq!(value().await.as_deref(), Some("theirs"));

    // The user opts in: the next retry takes the object over.
    let adopt = json!({"metadata": {"annotations": {"apps.clusternet.io/adopt": "true"}}});
    cms.patch(
        "taken",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&adopt),
    )
    .await
    .unwrap();
    eventually("a Success report after the retry", WAIT, || async {
        hub.reports("default.app")
            .last()
            .is_some_and(|r| r.phase == "Success")
    })
    .await;
    assert_eq!(value().await.as_deref(), Some("v"));
}

/// A child devcluster, a hub whose snapshot holds `default.web` (ConfigMap `web`), and an
/// agent that has acked that snapshot (the upsert, 1, and its marker, 2); the agent runs until
/// the last value is dropped.
async fn agent_past_its_snapshot() -> (
    devcluster::DevCluster,
    Api<ConfigMap>,
    TestHub,
    (
        tokio::sync::watch::Receiver<atoll_agent::hub::ConnectionState>,
        tokio::sync::oneshot::Sender<()>,
    ),
) {
    let child = devcluster::DevCluster::start_default().await.unwrap();
    let client = child.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let hub = TestHub::with_description("default.web", vec![cm("web")]);
    let url = serve(hub.clone()).await;
    let agent = start_agent(client, &url);
    eventually("the snapshot to be acked", WAIT, || async { hub.acked(2) }).await;
    (child, cms, hub, agent)
}

/// The hub's stream is numbered (`seq` of every message after the Welcome): a repeat is
/// dropped, and at a gap the agent applies nothing more from that stream, reconnects and takes
/// the fresh snapshot, so an overtaken Description never rolls its objects back. The agent
/// numbers its own messages 1, 2, 3, ... on each stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_hub_message_is_dropped_and_a_gap_ends_the_stream_for_a_fresh_snapshot() {
    let (_child, cms, hub, _agent) = agent_past_its_snapshot().await;

    // A repeat of message 1 with other content: dropped, so never applied.
    hub.push(upsert(1, "default.repeat", 1, &[cm("repeat")], false))
        .await;
    hub.push(upsert(3, "default.api", 1, &[cm("api")], false))
        .await;
    eventually("message 3 to be applied and acked", WAIT, || async {
        hub.acked(3) && cms.get_opt("api").await.unwrap().is_some()
    })
    .await;
    assert!(hub.reports("default.repeat").is_empty());
    assert!(cms.get_opt("repeat").await.unwrap().is_none());

    // 5 before 4: the stream ends there and 5 is not applied; the agent comes back and takes a
    // fresh snapshot (which holds `default.web` only: `default.api` is pruned).
    hub.push(upsert(5, "default.overtaker", 1, &[cm("overtaker")], false))
        .await;
    eventually("a second stream's snapshot", WAIT, || async {
        hub.hellos.lock().unwrap().len() == 2 && cms.get_opt("api").await.unwrap().is_none()
    })
    .await;
    assert!(hub.reports("default.overtaker").is_empty());
    assert!(!hub.acked(5));
    assert!(cms.get_opt("overtaker").await.unwrap().is_none());
    assert!(cms.get_opt("web").await.unwrap().is_some());

    let numbers = hub.numbers.lock().unwrap().clone();
    assert_eq!(numbers.len(), 2, "{numbers:?}");
    for (stream, numbers) in numbers.iter().enumerate() {
        let counted: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert_eq!(numbers, &counted, "stream {stream}");
    }
}

/// A message lost at the end of a burst leaves no later number to show the gap: the hub's
/// Progress (how far it has sent) does. The agent ends the stream when Progress names a number
/// it never received, and takes a fresh snapshot; a Progress it is up to date with changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_naming_a_message_never_received_ends_the_stream_for_a_fresh_snapshot() {
    let (_child, cms, hub, _agent) = agent_past_its_snapshot().await;
    let progress = |last_seq| v1::HubMessage {
        message: Some(hub_message::Message::Progress(v1::Progress { last_seq })),
    };

    // Up to date: the stream goes on, and the next message is still 3 (Progress has no number).
    hub.push(progress(2)).await;
    hub.push(upsert(3, "default.api", 1, &[cm("api")], false))
        .await;
    eventually("message 3 to be applied and acked", WAIT, || async {
        hub.acked(3) && cms.get_opt("api").await.unwrap().is_some()
    })
    .await;
    assert_eq!(hub.hellos.lock().unwrap().len(), 1);

    // Message 4 was lost on the way; Progress says the hub sent it.
    hub.push(progress(4)).await;
    eventually("a second stream's snapshot", WAIT, || async {
        hub.hellos.lock().unwrap().len() == 2 && cms.get_opt("api").await.unwrap().is_none()
    })
    .await;
    assert!(cms.get_opt("web").await.unwrap().is_some());
}
