//! The agent against a real hub: the atoll-agent library, connected over gRPC to the hub library
//! serving a parent devcluster, applying into a child devcluster. Registration, apply, report
//! and delete; a hub restart with a Description over its limit; a prune that waits for
//! confirmation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::{Description, DescriptionPhase};
use atoll_crds::clusters::ManagedCluster;
use atoll_crds::{conditions, known};
use atoll_hub::run::{self, HubConfig, RunningHub};
use atoll_runtime::admin::Readiness;
use atoll_testkit::{BOOTSTRAP_TOKEN, Parent, eventually, put_description};
use devcluster::DevCluster;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::json;
use std::time::Duration;

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(15);

/// A hub serving `client`'s cluster with the test settings (edited), once it is ready.
async fn hub(client: &Client, edit: impl FnOnce(&mut HubConfig)) -> RunningHub {
    let mut config = HubConfig::for_tests();
    edit(&mut config);
    let hub = run::start(
        client.clone(),
        config,
        &mut Registry::default(),
        Readiness::default(),
    )
    .await
    .unwrap();
    hub.wait_ready().await;
    hub
}

fn ready(mc: &ManagedCluster) -> Option<&str> {
    mc.status
        .as_ref()
        .and_then(|s| conditions::status(&s.conditions, "Ready"))
}

/// A real agent (the atoll-agent library) of cluster `name` in `child`, connected to `hub`.
struct RealAgent {
    state: tokio::sync::watch::Receiver<atoll_agent::hub::ConnectionState>,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), atoll_agent::Error>>,
}

impl RealAgent {
    fn start(
        hub: std::net::SocketAddr,
        child: &Client,
        name: &str,
        edit: impl FnOnce(&mut atoll_agent::AgentConfig),
    ) -> RealAgent {
        use atoll_agent::hub::Backoff;
        use atoll_agent::{Agent, AgentConfig};
        use atoll_applier::Applier;
        let mut config = AgentConfig::new(&format!("http://{hub}"), BOOTSTRAP_TOKEN, name);
        config.backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
        };
        config.default_heartbeat = Duration::from_secs(1);
        edit(&mut config);
        let applier = std::sync::Arc::new(Applier::new(child.clone(), "atoll-agent"));
        let agent = Agent::new(child.clone(), config, applier);
        let state = agent.subscribe();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));
        RealAgent {
            state,
            stop,
            running,
        }
    }

    /// Waits for a snapshot after the `after`-th one; returns the dedicated namespace.
    async fn snapshot_after(&self, after: u64) -> String {
        eventually("the agent's snapshot", WAIT, || async {
            let s = self.state.borrow().clone();
            if let Some(e) = &s.last_error {
                eprintln!("agent: {e}");
            }
            (s.connected && s.snapshots > after).then_some(s.namespace)
        })
        .await
    }

    fn snapshots(&self) -> u64 {
        self.state.borrow().snapshots
    }

    /// Stops the agent, its drift watchers included (as when its process ends).
    async fn stop(mut self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(Duration::from_secs(5), &mut self.running)
            .await
            .is_err()
        {
            self.running.abort();
            let _ = self.running.await;
        }
    }
}

#[tokio::test]
async fn a_real_agent_registers_applies_reports_and_deletes_through_the_hub() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    let agent = RealAgent::start(h.addr, &child_client, "real-1", |_| {});
    let ns = agent.snapshot_after(0).await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    eventually("Ready=True from the agent's heartbeat", WAIT, || async {
        (ready(&mcs.get("real-1").await.unwrap()) == Some("True")).then_some(())
    })
    .await;
    description_of_size(&p.client, &ns, "apps.web", 4).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child_client.clone(), "default");
    eventually("the ConfigMap in the child", WAIT, || async {
        cms.get_opt("web").await.unwrap()
    })
    .await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    eventually("Description Success", WAIT, || async {
        let d = descs.get("apps.web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.phase) == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    deleted_once_released(&descs, "apps.web").await;
    assert!(
        cms.get_opt("web").await.unwrap().is_none(),
        "the child object survived"
    );
    agent.stop().await;
}

/// Waits for the hub's finalizer on Description `name`, deletes it, and waits until it is gone
/// (the finalizer released by the agent's deletion report).
async fn deleted_once_released(descs: &Api<Description>, name: &str) {
    eventually("the finalizer", WAIT, || async {
        let d = descs.get(name).await.unwrap();
        d.finalizers()
            .iter()
            .any(|f| f == known::FINALIZER)
            .then_some(())
    })
    .await;
    descs.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("the Description gone", WAIT, || async {
        descs.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// A Description of `size` bytes of data in one ConfigMap named after it.
async fn description_of_size(client: &Client, ns: &str, name: &str, size: usize) {
    let cm = name.rsplit('.').next().unwrap();
    let raw = vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm, "namespace": "default"}, "data": {"k": "x".repeat(size)}})];
    put_description(client, ns, name, raw).await;
}

fn configmap_data(cm: &k8s_openapi::api::core::v1::ConfigMap) -> usize {
    cm.data
        .as_ref()
        .and_then(|d| d.get("k"))
        .map_or(0, String::len)
}

#[tokio::test]
async fn after_a_hub_restart_a_description_over_the_limit_is_withheld_and_the_agent_keeps_what_runs()
 {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let small_limit = |c: &mut HubConfig| c.controllers.limits.max_description_bytes = 4096;
    let h = hub(&p.client, small_limit).await;
    let addr = h.addr;
    let agent = RealAgent::start(addr, &child_client, "real-1", |_| {});
    let ns = agent.snapshot_after(0).await;
    description_of_size(&p.client, &ns, "apps.web", 100).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child_client.clone(), "default");
    eventually("the ConfigMap in the child", WAIT, || async {
        cms.get_opt("web").await.unwrap()
    })
    .await;
    // The hub goes away; meanwhile the Description grows over the hub's limit.
    h.stop().await.unwrap();
    description_of_size(&p.client, &ns, "apps.web", 10_000).await;
    let before = agent.snapshots();
    let h2 = hub(&p.client, |c| {
        small_limit(c);
        c.server.listen = addr;
    })
    .await;
    agent.snapshot_after(before).await;
    let cm = cms.get_opt("web").await.unwrap();
    assert_eq!(
        cm.as_ref().map(configmap_data),
        Some(100),
        "the agent must keep the version that runs"
    );
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    let status = eventually(
        "the Description says why it is not delivered",
        WAIT,
        || async {
            let d = descs.get("apps.web").await.unwrap();
            d.status
                .filter(|s| s.phase == Some(DescriptionPhase::Failure))
        },
    )
    .await;
    assert!(
        status.reason.unwrap_or_default().contains("limit"),
        "the reason names the limit"
    );
    // Back within the limit, the new version is delivered.
    description_of_size(&p.client, &ns, "apps.web", 200).await;
    eventually("the new version in the child", WAIT, || async {
        let cm = cms.get_opt("web").await.unwrap()?;
        (configmap_data(&cm) == 200).then_some(())
    })
    .await;
    agent.stop().await;
    h2.stop().await.unwrap();
}

#[tokio::test]
async fn a_snapshot_that_would_prune_most_of_a_cluster_waits_for_confirmation_with_a_condition_and_an_event()
 {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    let agent = RealAgent::start(h.addr, &child_client, "real-1", |_| {});
    let ns = agent.snapshot_after(0).await;
    for name in ["apps.web", "apps.db", "apps.cache"] {
        description_of_size(&p.client, &ns, name, 10).await;
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child_client.clone(), "default");
    let present = || async {
        let mut n = 0;
        for cm in ["web", "db", "cache"] {
            n += usize::from(cms.get_opt(cm).await.unwrap().is_some());
        }
        n
    };
    eventually("three ConfigMaps in the child", WAIT, || async {
        (present().await == 3).then_some(())
    })
    .await;
    // While the agent is away, two of the three Descriptions vanish without it (finalizers
    // cleared, as after a restore from an old backup).
    agent.stop().await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    for name in ["apps.web", "apps.db"] {
        descs.delete(name, &DeleteParams::default()).await.unwrap();
        descs
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
    }
    let agent = RealAgent::start(h.addr, &child_client, "real-1", |c| {
        c.max_prune_percent = 50
    });
    agent.snapshot_after(0).await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    let held = eventually("PruneHeld=True on the ManagedCluster", WAIT, || async {
        let mc = mcs.get("real-1").await.unwrap();
        let c = conditions::get(&mc.status?.conditions, known::CONDITION_PRUNE_HELD)?.clone();
        (c.status == "True").then_some(c)
    })
    .await;
    assert!(
        held.message.contains("2 of the 3 objects"),
        "{}",
        held.message
    );
    assert_eq!(
        present().await,
        3,
        "nothing is pruned before the confirmation"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(p.client.clone(), &ns);
    eventually("a PruneHeld Event on the ManagedCluster", WAIT, || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("PruneHeld"))
            .then_some(())
    })
    .await;
    // The id the condition gives, confirmed as the condition says, lets the prune go on.
    let id = held
        .message
        .rsplit_once(&format!("{}=", known::ANNOTATION_CONFIRM_PRUNE))
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    mcs.patch(
        "real-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {known::ANNOTATION_CONFIRM_PRUNE: id}}})),
    )
    .await
    .unwrap();
    eventually("the two orphaned ConfigMaps pruned", WAIT, || async {
        (present().await == 1).then_some(())
    })
    .await;
    assert!(cms.get_opt("cache").await.unwrap().is_some());
    eventually("PruneHeld=False", WAIT, || async {
        let mc = mcs.get("real-1").await.unwrap();
        (conditions::status(&mc.status?.conditions, known::CONDITION_PRUNE_HELD)? == "False")
            .then_some(())
    })
    .await;
    agent.stop().await;
}

/// An agent that got its cluster token in the Welcome but could not store it (here: its state
/// namespace is terminating, so the Secret cannot be created; in the 3,000-agent benchmark of
/// issue 15, where 5 agents never became Ready, most likely file descriptors running out in the
/// process that hosted the agents and their child API server) reconnects with the bootstrap
/// token. The hub took that for a bootstrap token re-registering a registered cluster and held
/// it for an administrator, forever. A token that never reached its agent holds no
/// registration: the agent registers again and connects.
#[tokio::test]
async fn an_agent_that_could_not_store_its_cluster_token_registers_again_without_an_administrator()
{
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(child_client.clone());
    let held: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "metadata": {"name": known::NAMESPACE_SYSTEM, "finalizers": ["test.atoll.io/hold"]}
    }))
    .unwrap();
    namespaces.create(&Default::default(), &held).await.unwrap();
    namespaces
        .delete(known::NAMESPACE_SYSTEM, &DeleteParams::default())
        .await
        .unwrap();
    let h = hub(&p.client, |_| {}).await;
    let agent = RealAgent::start(h.addr, &child_client, "lost-token", |_| {});

    // The hub registers the cluster and sends its token; the agent cannot keep it.
    let crrs: Api<atoll_crds::clusters::ClusterRegistrationRequest> = Api::all(p.client.clone());
    let registered = eventually(
        "a registration whose token the agent failed to store",
        WAIT,
        || async {
            let failed = agent
                .state
                .borrow()
                .last_error
                .clone()
                .filter(|e| e.contains("being terminated"));
            let crr = crrs.list(&Default::default()).await.unwrap().items.pop()?;
            let namespace = crr.status.as_ref()?.dedicated_namespace.clone()?;
            failed.map(|_| (crr.name_any(), namespace))
        },
    )
    .await;
    assert!(!agent.state.borrow().connected);

    // Its state namespace can be written again: the agent's next try with the bootstrap token
    // registers it again, in the same dedicated namespace, and it connects and beats.
    namespaces
        .patch(
            known::NAMESPACE_SYSTEM,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    let ns = agent.snapshot_after(0).await;
    assert_eq!(ns, registered.1, "a new dedicated namespace");
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    eventually("Ready=True from the agent's heartbeat", WAIT, || async {
        (ready(&mcs.get("lost-token").await.unwrap()) == Some("True")).then_some(())
    })
    .await;
    let crr = crrs.get(&registered.0).await.unwrap();
    assert_eq!(
        crr.status.and_then(|s| s.result),
        Some(atoll_crds::clusters::ApprovedResult::Approved),
        "the registration waits for an administrator"
    );

    // Once the agent has shown that it holds its token, a bootstrap token re-registering the
    // cluster waits for an administrator again.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(p.client.clone(), &ns);
    eventually("the token recorded as held by the agent", WAIT, || async {
        let secret = secrets
            .get(atoll_hub::token::CLUSTER_TOKEN_SECRET)
            .await
            .unwrap();
        let awaiting = secret
            .data
            .unwrap_or_default()
            .contains_key(atoll_hub::token::CLUSTER_TOKEN_AWAITING_AGENT_KEY);
        (!awaiting).then_some(())
    })
    .await;
    agent.stop().await;
}

/// The hub client runs unchanged over a child that does nothing (the benchmarks' light agents):
/// it registers, keeps its cluster Ready, reports each generation it is sent as applied, and its
/// deletion report releases a deleted Description.
#[tokio::test]
async fn an_agent_whose_child_does_nothing_registers_reports_and_releases_deletions() {
    use atoll_agent::child::NoopChild;
    use atoll_agent::hub::Backoff;
    use atoll_agent::{Agent, AgentConfig};
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let mut config = AgentConfig::new(&format!("http://{}", h.addr), BOOTSTRAP_TOKEN, "light-1");
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(500),
    };
    config.default_heartbeat = Duration::from_secs(1);
    let agent = Agent::with_child(
        NoopChild::new("00000000-0000-4000-8000-000000000001"),
        config,
    );
    let state = agent.subscribe();
    let running = tokio::spawn(agent.run(std::future::pending()));
    let ns = eventually("the agent's snapshot", WAIT, || async {
        let s = state.borrow().clone();
        if let Some(e) = &s.last_error {
            eprintln!("agent: {e}");
        }
        (s.connected && s.snapshots > 0).then_some(s.namespace)
    })
    .await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    eventually("Ready=True from the agent's heartbeat", WAIT, || async {
        (ready(&mcs.get("light-1").await.unwrap()) == Some("True")).then_some(())
    })
    .await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    for size in [4, 8] {
        description_of_size(&p.client, &ns, "apps.web", size).await;
        let generation = descs.get("apps.web").await.unwrap().metadata.generation;
        eventually("Description Success at its generation", WAIT, || async {
            let s = descs
                .get("apps.web")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            (s.phase == Some(DescriptionPhase::Success) && s.observed_generation == generation)
                .then_some(())
        })
        .await;
    }
    deleted_once_released(&descs, "apps.web").await;
    running.abort();
}
