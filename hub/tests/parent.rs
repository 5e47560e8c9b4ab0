//! The hub against a parent devcluster: registration (automatic, manual, denied, bad tokens),
//! snapshot and deltas from the shared watch, status write-back, report authorisation,
//! disconnection marks, the Description finalizer and a hub restart. Agents are raw gRPC
//! clients speaking the protocol.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::{Description, DescriptionPhase, DescriptionSpec};
use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ManagedCluster, ReRegistration,
    ReRegistrationReplaces,
};
use atoll_crds::{conditions, known};
use atoll_hub::run::{self, HubConfig, RunningHub};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_client::HubClient;
use atoll_proto::v1::hub_message::Message as Out;
use atoll_runtime::admin::Readiness;
use atoll_testkit::{
    BOOTSTRAP_TOKEN, Parent, bootstrap_secret, create_namespace, eventually, put_description,
};
use devcluster::DevCluster;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

const ID_A: &str = "aaaaaaaa-0000-4000-8000-00000000000a";
const ID_B: &str = "bbbbbbbb-0000-4000-8000-00000000000b";

/// How long a test waits for a condition.
const WAIT: Duration = Duration::from_secs(15);

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

struct Agent {
    tx: mpsc::Sender<v1::AgentMessage>,
    rx: Streaming<v1::HubMessage>,
    welcome: v1::Welcome,
}

fn hello(id: &str, name: &str, token: &str) -> v1::AgentMessage {
    v1::AgentMessage {
        seq: 0,
        message: Some(In::Hello(v1::Hello {
            protocol_version: v1::ProtocolVersion::V1 as i32,
            cluster_id: id.into(),
            cluster_name: name.into(),
            cluster_labels: [("env".to_string(), "test".to_string())].into(),
            token: token.into(),
            agent_version: "v0.1.0-test".into(),
            cluster_type: String::new(),
        })),
    }
}

async fn connect(
    hub: &RunningHub,
    id: &str,
    name: &str,
    token: &str,
) -> Result<Agent, tonic::Status> {
    let (tx, rx) = mpsc::channel(64);
    tx.send(hello(id, name, token)).await.unwrap();
    let mut client = HubClient::connect(format!("http://{}", hub.addr))
        .await
        .unwrap();
    let mut stream = client.sync(ReceiverStream::new(rx)).await?.into_inner();
    match stream.message().await? {
        Some(v1::HubMessage {
            message: Some(Out::Welcome(welcome)),
        }) => Ok(Agent {
            tx,
            rx: stream,
            welcome,
        }),
        other => panic!("expected Welcome, got {other:?}"),
    }
}

impl Agent {
    /// The next message, acknowledged; a Progress (the answer to a heartbeat sent while a
    /// message was on its way) is passed over.
    async fn recv(&mut self) -> Out {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
                .await
                .expect("timed out waiting for the hub")
                .expect("stream error")
                .expect("stream ended")
                .message
                .expect("empty message");
            let Some(seq) = m.seq() else {
                if matches!(m, Out::Progress(_)) {
                    continue;
                }
                return m;
            };
            self.send(In::Ack(v1::Ack { seq })).await;
            return m;
        }
    }
    async fn recv_until(&mut self, pred: impl Fn(&Out) -> bool) -> Out {
        loop {
            let m = self.recv().await;
            if pred(&m) {
                return m;
            }
        }
    }
    async fn send(&self, m: In) {
        let _ = self.tx.send(v1::AgentMessage::from(m)).await;
    }
    async fn heartbeat(&self, healthy: bool) {
        self.send(In::Heartbeat(v1::Heartbeat {
            k8s_version: "v1.33.1".into(),
            platform: "linux/amd64".into(),
            agent_version: "v0.1.0-test".into(),
            node_statistics: Some(v1::NodeStatistics {
                ready_nodes: 2,
                not_ready_nodes: 0,
                unknown_nodes: 0,
            }),
            capacity: [
                ("cpu".to_string(), "8".to_string()),
                ("memory".to_string(), "32Gi".to_string()),
            ]
            .into(),
            allocatable: [("cpu".to_string(), "7".to_string())].into(),
            healthz: healthy,
            livez: true,
            readyz: true,
            heartbeat_seconds: 1,
            prune_hold: None,
        }))
        .await;
    }
}

async fn description(client: &Client, ns: &str, name: &str, data: &str) {
    let raw = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": data}}),
    ];
    put_description(client, ns, name, raw).await;
}

/// A Push cluster `pushed` in namespace `ns`: the namespace, the deployer Secret holding
/// `kubeconfig`, and the ManagedCluster (no registration: see [`register_push_cluster`]).
async fn push_cluster(client: &Client, ns: &str, cluster_id: &str, kubeconfig: String) {
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("child-cluster-deployer".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "kubeconfig".to_string(),
                k8s_openapi::ByteString(kubeconfig.into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let mc: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1",
        "kind": "ManagedCluster",
        "metadata": {"name": "pushed", "namespace": ns},
        "spec": {"clusterId": cluster_id, "syncMode": "Push"}
    }))
    .unwrap();
    Api::<ManagedCluster>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &mc)
        .await
        .unwrap();
}

/// What an administrator does to add a Push cluster: a registration for its id, approved with
/// the namespace they created for it.
async fn register_push_cluster(client: &Client, cluster_id: &str, ns: &str, name: &str) {
    let crrs: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let crr_name = known::cluster_registration_request_name(cluster_id);
    let crr: ClusterRegistrationRequest = serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1",
        "kind": "ClusterRegistrationRequest",
        "metadata": {"name": crr_name},
        "spec": {"clusterId": cluster_id, "syncMode": "Push"},
    }))
    .unwrap();
    crrs.create(&PostParams::default(), &crr).await.unwrap();
    crrs.patch_status(
        &crr_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "result": "Approved", "dedicatedNamespace": ns, "managedClusterName": name,
        }})),
    )
    .await
    .unwrap();
}

fn ready(mc: &ManagedCluster) -> Option<String> {
    mc.status
        .as_ref()
        .and_then(|s| conditions::status(&s.conditions, "Ready"))
        .map(str::to_string)
}

/// A stream that has sent its Hello and waits for the hub's answer.
type Pending<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Agent, tonic::Status>> + 'a>>;

/// A Hello with the bootstrap token for registered cluster `ID_A`, as a hostile client sends
/// it (the real agent holds its cluster token).
fn hostile_hello(h: &RunningHub) -> Pending<'_> {
    Box::pin(connect(h, ID_A, "edge-a", BOOTSTRAP_TOKEN))
}

/// Checks that `pending` is held (no answer within two seconds) and that its request is
/// recorded apart, as replacing `replaces`, with who asked and from where; returns it.
async fn assert_held(
    pending: &mut Pending<'_>,
    crrs: &Api<ClusterRegistrationRequest>,
    name: &str,
    replaces: ReRegistrationReplaces,
) -> ReRegistration {
    assert!(
        tokio::time::timeout(Duration::from_secs(2), pending)
            .await
            .is_err(),
        "a bootstrap token registered an approved cluster again without an administrator"
    );
    let request = crrs
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .re_registration
        .expect("the request is recorded");
    assert_eq!(request.replaces, replaces);
    assert_eq!(
        Some(request.bootstrap_token_id.as_str()),
        BOOTSTRAP_TOKEN.split('.').next()
    );
    assert!(
        request
            .peer
            .as_deref()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{request:?}"
    );
    assert_eq!(request.cluster_name.as_deref(), Some("edge-a"));
    assert!(request.requested_at.is_some() && request.result.is_none());
    request
}

/// The refusal a held Hello ends with.
async fn refusal(pending: Pending<'_>) -> tonic::Status {
    match tokio::time::timeout(WAIT, pending).await.unwrap() {
        Ok(_) => panic!("the held Hello was welcomed"),
        Err(e) => e,
    }
}

/// Waits until the hub records that the agent holds the token in `secrets`' cluster-token
/// (its first heartbeat), after which a bootstrap token no longer registers it unapproved.
async fn token_reached_agent(secrets: &Api<Secret>) {
    eventually("the token reached its agent", WAIT, || async {
        let s = secrets.get("cluster-token").await.unwrap();
        atoll_hub::backend::record_of_secret(&s)
            .holds_registration()
            .then_some(())
    })
    .await;
}

/// An administrator's decision on the pending re-registration of request `name`.
async fn decide_re_registration(
    crrs: &Api<ClusterRegistrationRequest>,
    name: &str,
    decision: serde_json::Value,
) {
    decide(crrs, name, json!({"reRegistration": decision})).await;
}

/// A merge patch of request `name`'s status, as an administrator writes it.
async fn decide(crrs: &Api<ClusterRegistrationRequest>, name: &str, status: serde_json::Value) {
    crrs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn registration_creates_namespace_cluster_and_token_and_reconnects_with_the_cluster_token() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let w = a.welcome.clone();
    assert!(
        w.namespace.starts_with("clusternet-") && w.namespace.len() == 16,
        "{}",
        w.namespace
    );
    assert_eq!(w.managed_cluster_name, "edge-a");
    assert!(!w.cluster_token.is_empty());
    assert_eq!((w.heartbeat_seconds, w.window), (1, 16));

    let crr = Api::<ClusterRegistrationRequest>::all(p.client.clone())
        .get(&format!("clusternet-{ID_A}"))
        .await
        .unwrap();
    let st = crr.status.unwrap();
    assert_eq!(st.result, Some(ApprovedResult::Approved));
    assert_eq!(
        st.dedicated_namespace.as_deref(),
        Some(w.namespace.as_str())
    );
    assert_eq!(st.managed_cluster_name.as_deref(), Some("edge-a"));

    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(p.client.clone(), "default");
    eventually("a Registered Event on the request", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Registered")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                        == Some(format!("clusternet-{ID_A}").as_str())
            })
    })
    .await;
    let ns = Api::<Namespace>::all(p.client.clone())
        .get(&w.namespace)
        .await
        .unwrap();
    assert_eq!(
        ns.labels().get(known::LABEL_CLUSTER_ID).map(String::as_str),
        Some(ID_A)
    );
    assert_eq!(
        ns.labels()
            .get(known::LABEL_CLUSTER_NAME)
            .map(String::as_str),
        Some("edge-a")
    );
    assert_eq!(
        ns.labels().get(known::LABEL_CREATED_BY).map(String::as_str),
        Some(known::CREATED_BY_HUB)
    );

    let mcs = Api::<ManagedCluster>::namespaced(p.client.clone(), &w.namespace);
    let mc = mcs.get("edge-a").await.unwrap();
    assert_eq!(mc.spec.cluster_id, ID_A);
    assert_eq!(mc.spec.sync_mode, atoll_crds::clusters::SyncMode::Pull);
    assert_eq!(mc.labels().get("env").map(String::as_str), Some("test"));
    assert_eq!(
        mc.labels().get(known::LABEL_CLUSTER_ID).map(String::as_str),
        Some(ID_A)
    );

    let secret = Api::<Secret>::namespaced(p.client.clone(), &w.namespace)
        .get("cluster-token")
        .await
        .unwrap();
    let stored = secret.data.unwrap().get("sha256").unwrap().0.clone();
    assert_eq!(
        stored,
        atoll_hub::token::sha256_hex(&w.cluster_token).into_bytes()
    );
    drop(a);

    // Reconnect with the cluster token: same namespace, no new token.
    let again = connect(&h, ID_A, "edge-a", &w.cluster_token).await.unwrap();
    assert_eq!(again.welcome.namespace, w.namespace);
    assert!(again.welcome.cluster_token.is_empty());
    assert!(again.welcome.epoch > w.epoch);
    drop(again);
    // A reconnecting agent that says it is another cluster keeps its registered name: the
    // cluster-name label Subscriptions select on is the hub's, not the Hello's.
    let renamed = connect(&h, ID_A, "edge-b", &w.cluster_token).await.unwrap();
    assert_eq!(renamed.welcome.namespace, w.namespace);
    drop(renamed);
    let mc = mcs.get("edge-a").await.unwrap();
    assert_eq!(
        mc.labels()
            .get(known::LABEL_CLUSTER_NAME)
            .map(String::as_str),
        Some("edge-a")
    );
    assert!(mcs.get_opt("edge-b").await.unwrap().is_none());

    // A bootstrap token cannot take the cluster over, also with automatic approval: its
    // request is recorded apart, the registration stays Approved and the current cluster
    // token keeps working.
    let crrs = Api::<ClusterRegistrationRequest>::all(p.client.clone());
    let name = format!("clusternet-{ID_A}");
    let mut held = hostile_hello(&h);
    let request = assert_held(
        &mut held,
        &crrs,
        &name,
        ReRegistrationReplaces::LiveRegistration,
    )
    .await;
    let st = crrs.get(&name).await.unwrap().status.unwrap();
    assert_eq!(st.result, Some(ApprovedResult::Approved));
    assert_eq!(
        st.dedicated_namespace.as_deref(),
        Some(w.namespace.as_str())
    );
    let still = connect(&h, ID_A, "edge-a", &w.cluster_token).await.unwrap();
    assert!(still.welcome.cluster_token.is_empty());
    drop(still);
    // Denying the request refuses that Hello alone: the registration and its token stay.
    decide_re_registration(
        &crrs,
        &name,
        json!({"result": "Denied", "errorMessage": "not ours"}),
    )
    .await;
    let err = refusal(held).await;
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains("not ours") && err.message().contains("unchanged"),
        "{err:?}"
    );
    let st = crrs.get(&name).await.unwrap().status.unwrap();
    assert_eq!(st.result, Some(ApprovedResult::Approved));
    assert_eq!(
        st.dedicated_namespace.as_deref(),
        Some(w.namespace.as_str())
    );
    assert_eq!(
        st.re_registration.map(|r| (r.id, r.result)),
        Some((request.id, Some(ApprovedResult::Denied)))
    );
    let still = connect(&h, ID_A, "edge-a", &w.cluster_token).await.unwrap();
    assert!(still.welcome.cluster_token.is_empty());
    drop(still);
    // The same requester asking again is refused at once, with the decision.
    let again = tokio::time::timeout(Duration::from_secs(2), hostile_hello(&h))
        .await
        .expect("refused at once")
        .err()
        .unwrap();
    assert_eq!(again.code(), Code::PermissionDenied, "{again:?}");
    assert!(again.message().contains("not ours"), "{again:?}");
    // Once the administrator clears the decision, a new request waits again, and approving it
    // hands the cluster over: same namespace and cluster, a new token; the old one is revoked.
    decide(&crrs, &name, json!({"reRegistration": null})).await;
    let re = {
        let mut pending = hostile_hello(&h);
        assert_held(
            &mut pending,
            &crrs,
            &name,
            ReRegistrationReplaces::LiveRegistration,
        )
        .await;
        decide_re_registration(&crrs, &name, json!({"result": "Approved"})).await;
        pending.await.unwrap()
    };
    assert_eq!(
        crrs.get(&name)
            .await
            .unwrap()
            .status
            .unwrap()
            .re_registration,
        None,
        "the registration it was given answers the request"
    );
    assert_eq!(re.welcome.namespace, w.namespace);
    assert_ne!(re.welcome.cluster_token, w.cluster_token);
    let revoked = connect(&h, ID_A, "edge-a", &w.cluster_token)
        .await
        .err()
        .unwrap();
    assert_eq!(revoked.code(), Code::Unauthenticated, "{revoked:?}");
    assert!(!revoked.message().contains(&w.cluster_token));
    let nss = Api::<Namespace>::all(p.client.clone())
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{}={ID_A}", known::LABEL_CLUSTER_ID)),
        )
        .await
        .unwrap();
    assert_eq!(nss.items.len(), 1);
    h.stop().await.unwrap();
}

#[tokio::test]
async fn bad_tokens_are_unauthenticated() {
    let p = Parent::for_agents().await;
    bootstrap_secret(
        &p.client,
        "old000.0123456789abcdef",
        Some("2020-01-01T00:00:00Z"),
    )
    .await;
    let h = hub(&p.client, |_| {}).await;
    let cases = [
        ("unknown id", "zzzzzz.f395accd246ae52d"),
        ("wrong secret", "07401b.ffffffffffffffff"),
        ("expired", "old000.0123456789abcdef"),
        (
            "unknown cluster token",
            "c29tZS1yYW5kb20tY2x1c3Rlci10b2tlbg",
        ),
    ];
    for (what, token) in cases {
        let err = connect(&h, ID_B, "edge-b", token)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} accepted"));
        assert_eq!(err.code(), Code::Unauthenticated, "{what}: {err:?}");
        assert!(!err.message().contains(token), "{what}: token in message");
    }
    let crr = Api::<ClusterRegistrationRequest>::all(p.client.clone())
        .get_opt(&format!("clusternet-{ID_B}"))
        .await
        .unwrap();
    assert!(crr.is_none(), "a refused agent got a registration request");
}

/// Migration from Clusternet: a bootstrap token kept where kubeadm and Clusternet keep it
/// (kube-system) registers a cluster only when the hub is told to look there.
#[tokio::test]
async fn a_kube_system_bootstrap_token_is_accepted_only_when_enabled() {
    let p = Parent::for_agents().await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bootstrap-token-k8s000", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "k8s000", "token-secret": "0123456789abcdef",
                       "usage-bootstrap-authentication": "true"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(p.client.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let token = "k8s000.0123456789abcdef";
    let h = hub(&p.client, |_| {}).await;
    let err = connect(&h, ID_B, "edge-b", token)
        .await
        .err()
        .unwrap_or_else(|| panic!("a kube-system token accepted without the flag"));
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    drop(h);

    let h = hub(&p.client, |c| c.backend.kube_system_bootstrap_tokens = true).await;
    let registered = connect(&h, ID_B, "edge-b", token).await;
    assert!(registered.is_ok(), "{:?}", registered.err());
}

#[tokio::test]
async fn manual_approval_waits_for_the_user_and_denial_reaches_the_agent() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |c| c.backend.manual_approval = true).await;
    let crrs: Api<ClusterRegistrationRequest> = Api::all(p.client.clone());
    let pending = tokio::spawn({
        let addr = h.addr;
        async move {
            let (tx, rx) = mpsc::channel(4);
            tx.send(hello(ID_A, "edge-a", BOOTSTRAP_TOKEN))
                .await
                .unwrap();
            let mut client = HubClient::connect(format!("http://{addr}")).await.unwrap();
            let mut s = client
                .sync(ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner();
            let m = s.message().await.unwrap().unwrap().message.unwrap();
            drop(tx);
            m
        }
    });
    let name = format!("clusternet-{ID_A}");
    eventually("a pending ClusterRegistrationRequest", WAIT, || async {
        crrs.get_opt(&name)
            .await
            .unwrap()
            .filter(|c| c.status.as_ref().and_then(|s| s.result).is_none())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "admitted before approval");
    crrs.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"result": "Approved"}})),
    )
    .await
    .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .unwrap()
        .unwrap()
    {
        Out::Welcome(w) => assert!(!w.cluster_token.is_empty()),
        other => panic!("expected Welcome, got {other:?}"),
    }

    // A denied request: PERMISSION_DENIED with the reason.
    let denied = format!("clusternet-{ID_B}");
    let attempt = tokio::spawn({
        let addr = h.addr;
        async move {
            let (tx, rx) = mpsc::channel(4);
            tx.send(hello(ID_B, "edge-b", BOOTSTRAP_TOKEN))
                .await
                .unwrap();
            let mut client = HubClient::connect(format!("http://{addr}")).await.unwrap();
            let r = client.sync(ReceiverStream::new(rx)).await.map(|_| ());
            drop(tx);
            r
        }
    });
    eventually("the second request", WAIT, || async {
        crrs.get_opt(&denied).await.unwrap()
    })
    .await;
    crrs.patch_status(
        &denied,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"result": "Denied", "errorMessage": "unknown datacenter"}}),
        ),
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .unwrap()
        .unwrap()
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("unknown datacenter"), "{err:?}");
}

#[tokio::test]
async fn a_revoked_cluster_token_needs_a_new_approval_before_a_bootstrap_token_registers_again() {
    for manual_approval in [true, false] {
        let p = Parent::for_agents().await;
        let h = hub(&p.client, |c| c.backend.manual_approval = manual_approval).await;
        let crrs: Api<ClusterRegistrationRequest> = Api::all(p.client.clone());
        let name = format!("clusternet-{ID_A}");
        let mut first = Box::pin(connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN));
        if manual_approval {
            assert!(
                tokio::time::timeout(Duration::from_millis(500), &mut first)
                    .await
                    .is_err()
            );
            decide(&crrs, &name, json!({"result": "Approved"})).await;
        }
        let a = first.await.unwrap();
        let w = a.welcome.clone();
        // The agent shows it holds its token, then an administrator revokes it.
        a.heartbeat(true).await;
        let secrets = Api::<Secret>::namespaced(p.client.clone(), &w.namespace);
        token_reached_agent(&secrets).await;
        drop(a);
        secrets
            .delete("cluster-token", &DeleteParams::default())
            .await
            .unwrap();
        let revoked = connect(&h, ID_A, "edge-a", &w.cluster_token)
            .await
            .err()
            .unwrap();
        assert_eq!(revoked.code(), Code::Unauthenticated, "{revoked:?}");
        // The bootstrap token does not undo the revocation, with or without automatic approval.
        let mut again = hostile_hello(&h);
        assert_held(
            &mut again,
            &crrs,
            &name,
            ReRegistrationReplaces::RevokedToken,
        )
        .await;
        assert_eq!(
            crrs.get(&name).await.unwrap().status.unwrap().result,
            Some(ApprovedResult::Approved)
        );
        decide_re_registration(&crrs, &name, json!({"result": "Approved"})).await;
        let re = tokio::time::timeout(WAIT, again).await.unwrap().unwrap();
        assert_eq!(
            re.welcome.namespace, w.namespace,
            "manual={manual_approval}"
        );
        assert!(!re.welcome.cluster_token.is_empty());
        assert_ne!(re.welcome.cluster_token, w.cluster_token);
        h.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_registration_waits_for_approval_within_bounds_and_a_retry_finds_its_decision() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |c| {
        c.backend.manual_approval = true;
        c.backend.approval_wait = Duration::from_secs(3);
        c.backend.max_waiting_registrations = 1;
    })
    .await;
    let crrs: Api<ClusterRegistrationRequest> = Api::all(p.client.clone());
    let name = format!("clusternet-{ID_A}");
    // Held at most approval_wait, then told to retry; the request stays pending.
    let mut waiting = Box::pin(connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err()
    );
    // The only waiting slot is taken: another cluster's Hello is refused at once.
    let full = tokio::time::timeout(
        Duration::from_secs(2),
        connect(&h, ID_B, "edge-b", BOOTSTRAP_TOKEN),
    )
    .await
    .expect("refused at once, not held")
    .err()
    .unwrap();
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    let retry = refusal(waiting).await;
    assert_eq!(retry.code(), Code::Unavailable, "{retry:?}");
    assert!(
        retry.message().contains("kubectl atoll approve"),
        "{retry:?}"
    );
    assert_eq!(
        crrs.get(&name).await.unwrap().status.and_then(|s| s.result),
        None
    );
    // Approved between two attempts: the next one is welcomed at once.
    decide(&crrs, &name, json!({"result": "Approved"})).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    a.heartbeat(true).await;
    token_reached_agent(&Api::<Secret>::namespaced(
        p.client.clone(),
        &a.welcome.namespace,
    ))
    .await;
    drop(a);

    // A request to register it again outlives the held Hello: the retry is the same request,
    // and an approval given between two attempts applies to it.
    let mut held = hostile_hello(&h);
    let request = assert_held(
        &mut held,
        &crrs,
        &name,
        ReRegistrationReplaces::LiveRegistration,
    )
    .await;
    assert_eq!(refusal(held).await.code(), Code::Unavailable);
    decide_re_registration(&crrs, &name, json!({"result": "Approved"})).await;
    let again = tokio::time::timeout(Duration::from_millis(900), hostile_hello(&h))
        .await
        .expect("welcomed at once: the decision was there")
        .unwrap();
    assert!(!again.welcome.cluster_token.is_empty());
    let st = crrs.get(&name).await.unwrap().status.unwrap();
    assert_eq!(st.re_registration, None, "answered: {:?}", request.id);
    h.stop().await.unwrap();
}

#[tokio::test]
async fn snapshot_deltas_status_write_back_and_finalizer_lifecycle() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let mut a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    assert!(matches!(a.recv().await, Out::SnapshotComplete(_)));

    description(&p.client, &ns, "apps.web", "v1").await;
    let up = match a.recv_until(|m| matches!(m, Out::Upsert(_))).await {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    assert_eq!(up.name, "apps.web");
    let obj: serde_json::Value = serde_json::from_slice(&up.objects[0]).unwrap();
    assert_eq!(obj["data"]["k"], json!("v1"));
    assert!(!up.deleting);

    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    eventually("the hub's finalizer", WAIT, || async {
        descs
            .get("apps.web")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == known::FINALIZER)
            .then_some(())
    })
    .await;

    // Heartbeat → ManagedCluster status, Ready=True.
    a.heartbeat(true).await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    let mc = eventually("Ready=True", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        (ready(&mc).as_deref() == Some("True")).then_some(mc)
    })
    .await;
    let st = mc.status.unwrap();
    assert_eq!(st.k8s_version.as_deref(), Some("v1.33.1"));
    assert_eq!(st.node_statistics.and_then(|n| n.ready_nodes), Some(2));
    assert_eq!(st.heartbeat_frequency_seconds, Some(1));
    assert!(st.healthz && st.livez && st.readyz);
    a.heartbeat(false).await;
    eventually("Ready=False", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        let c = mc
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, "Ready"))
            .cloned()?;
        (c.status == "False" && c.reason == known::REASON_MANAGED_CLUSTER_NOT_READY).then_some(())
    })
    .await;

    // Report → Description status.
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        uid: up.uid.clone(),
        observed_generation: up.generation,
        phase: "Success".into(),
        objects: vec![v1::ObjectStatus {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "default".into(),
            name: "cm".into(),
            ..Default::default()
        }],
        ..Default::default()
    }))
    .await;
    let d = eventually("Description status", WAIT, || async {
        let d = descs.get("apps.web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.phase) == Some(DescriptionPhase::Success)).then_some(d)
    })
    .await;
    let ds = d.status.unwrap();
    assert_eq!(ds.observed_generation, Some(up.generation));
    assert_eq!(ds.manifest_statuses.len(), 1);
    let managers: Vec<(Option<String>, Option<String>)> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .map(|m| (m.manager.clone(), m.subresource.clone()))
        .collect();
    assert!(
        managers.iter().any(|m| m.0.as_deref() == Some("atoll-hub")),
        "{managers:?}"
    );

    // A change is a delta.
    description(&p.client, &ns, "apps.web", "v2").await;
    let up2 = match a
        .recv_until(|m| matches!(m, Out::Upsert(u) if u.generation > up.generation))
        .await
    {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    let obj: serde_json::Value = serde_json::from_slice(&up2.objects[0]).unwrap();
    assert_eq!(obj["data"]["k"], json!("v2"));

    // Deleting: the Description waits for the agent's `deleted`.
    descs
        .delete("apps.web", &DeleteParams::default())
        .await
        .unwrap();
    let del = match a
        .recv_until(|m| matches!(m, Out::Upsert(u) if u.deleting))
        .await
    {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        descs.get_opt("apps.web").await.unwrap().is_some(),
        "deleted before the agent confirmed"
    );
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.web".into(),
        uid: del.uid,
        deleted: true,
        ..Default::default()
    }))
    .await;
    eventually("the Description gone", WAIT, || async {
        descs
            .get_opt("apps.web")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(matches!(
        a.recv_until(|m| matches!(m, Out::Removed(_))).await,
        Out::Removed(_)
    ));
}

#[tokio::test]
async fn a_report_on_another_clusters_description_is_denied_and_nothing_is_written() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let mut a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let b = connect(&h, ID_B, "edge-b", BOOTSTRAP_TOKEN).await.unwrap();
    description(&p.client, &b.welcome.namespace, "apps.secret", "b").await;
    a.send(In::Report(v1::DescriptionReport {
        name: "apps.secret".into(),
        phase: "Failure".into(),
        reason: "pwned".into(),
        ..Default::default()
    }))
    .await;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), a.rx.message())
            .await
            .unwrap()
        {
            Err(s) => break s,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("stream ended without a status"),
        }
    };
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let d = Api::<Description>::namespaced(p.client.clone(), &b.welcome.namespace)
        .get("apps.secret")
        .await
        .unwrap();
    assert!(d.status.is_none(), "{:?}", d.status);
}

#[tokio::test]
async fn stream_end_marks_ready_unknown_and_taints_then_reconnection_clears_both() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    let token = a.welcome.cluster_token.clone();
    a.heartbeat(true).await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    eventually("Ready=True", WAIT, || async {
        (ready(&mcs.get("edge-a").await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;
    // Let the last heartbeat age beyond the grace.
    tokio::time::sleep(Duration::from_millis(600)).await;
    drop(a);
    let mc = eventually("Ready=Unknown + taint", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        let tainted = mc
            .spec
            .taints
            .iter()
            .any(|t| t.key == known::TAINT_UNSCHEDULABLE && t.effect == "NoSchedule");
        (ready(&mc).as_deref() == Some("Unknown") && tainted).then_some(mc)
    })
    .await;
    let taint = mc
        .spec
        .taints
        .iter()
        .find(|t| t.key == known::TAINT_UNSCHEDULABLE)
        .unwrap();
    assert_eq!(
        taint.value.as_deref(),
        Some(known::REASON_CLUSTER_STATUS_UNKNOWN)
    );

    let a = connect(&h, ID_A, "edge-a", &token).await.unwrap();
    a.heartbeat(true).await;
    eventually("Ready=True and no taint", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        (ready(&mc).as_deref() == Some("True") && mc.spec.taints.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_deleted_cluster_releases_its_deleting_descriptions() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    description(&p.client, &ns, "apps.web", "v1").await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    eventually("the finalizer", WAIT, || async {
        descs
            .get("apps.web")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == known::FINALIZER)
            .then_some(())
    })
    .await;
    drop(a);
    Api::<ManagedCluster>::namespaced(p.client.clone(), &ns)
        .delete("edge-a", &DeleteParams::default())
        .await
        .unwrap();
    descs
        .delete("apps.web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Description released", WAIT, || async {
        descs
            .get_opt("apps.web")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn after_a_hub_restart_agents_reconnect_and_get_a_fresh_snapshot() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let mut a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    let token = a.welcome.cluster_token.clone();
    description(&p.client, &ns, "apps.web", "v1").await;
    a.recv_until(|m| matches!(m, Out::Upsert(_))).await;
    h.stop().await.unwrap();
    drop(a);
    description(&p.client, &ns, "apps.db", "v1").await;
    let h2 = hub(&p.client, |_| {}).await;
    let mut a = connect(&h2, ID_A, "edge-a", &token).await.unwrap();
    assert_eq!(a.welcome.namespace, ns);
    let mut names = vec![];
    loop {
        match a.recv().await {
            Out::Upsert(u) => names.push(u.name),
            Out::SnapshotComplete(_) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    names.sort();
    assert_eq!(names, vec!["apps.db", "apps.web"]);
}

/// The agent's report of `up`, every object applied.
async fn report_success(a: &Agent, up: &v1::DescriptionUpsert) {
    a.send(In::Report(v1::DescriptionReport {
        name: up.name.clone(),
        uid: up.uid.clone(),
        observed_generation: up.generation,
        phase: "Success".into(),
        ..Default::default()
    }))
    .await;
}

/// The phase of `name`'s status and the epoch of the stream whose report wrote it.
async fn phase_and_epoch(descs: &Api<Description>, name: &str) -> (Option<DescriptionPhase>, i64) {
    let status = descs.get(name).await.unwrap().status.unwrap_or_default();
    let epoch = status.report_order.map_or(0, |o| o.epoch);
    (status.phase, epoch)
}

/// Seed 5 of `make chaos` left Descriptions at `Failure` for good: an earlier stream's status
/// reached the hub after the agent's new stream had reported `Success`, which the hub had skipped
/// because its index still showed `Success`. Now the new stream gets the Description again, and
/// its report replaces the earlier stream's status.
#[tokio::test]
async fn an_earlier_streams_status_seen_late_is_replaced_by_the_current_streams_report() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let mut first = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let (ns, token, first_epoch) = (
        first.welcome.namespace.clone(),
        first.welcome.cluster_token.clone(),
        i64::try_from(first.welcome.epoch).unwrap(),
    );
    description(&p.client, &ns, "apps.web", "v1").await;
    let up = match first.recv_until(|m| matches!(m, Out::Upsert(_))).await {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    report_success(&first, &up).await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    eventually("the first stream's Success", WAIT, || async {
        let got = phase_and_epoch(&descs, "apps.web").await;
        (got == (Some(DescriptionPhase::Success), first_epoch)).then_some(())
    })
    .await;

    // A new stream: its snapshot applies, the same status is reported and not written again.
    drop(first);
    let mut second = connect(&h, ID_A, "edge-a", &token).await.unwrap();
    let second_epoch = i64::try_from(second.welcome.epoch).unwrap();
    assert!(second_epoch > first_epoch);
    let up = match second.recv_until(|m| matches!(m, Out::Upsert(_))).await {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    assert!(matches!(second.recv().await, Out::SnapshotComplete(_)));
    report_success(&second, &up).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        phase_and_epoch(&descs, "apps.web").await,
        (Some(DescriptionPhase::Success), first_epoch),
        "a report the parent already shows is not written"
    );

    // The first stream's Failure, written by another replica and seen only now.
    descs
        .patch_status(
            "apps.web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Failure",
                "reason": "ConfigMap default/cm: connection refused",
                "reportOrder": {"epoch": first_epoch, "sequence": i64::MAX},
            }})),
        )
        .await
        .unwrap();
    let again = match second.recv_until(|m| matches!(m, Out::Upsert(_))).await {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    assert_eq!(
        (again.name.as_str(), again.generation),
        ("apps.web", up.generation)
    );
    report_success(&second, &again).await;
    eventually("the current stream's Success", WAIT, || async {
        let got = phase_and_epoch(&descs, "apps.web").await;
        (got == (Some(DescriptionPhase::Success), second_epoch)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn subscription_aggregated_status_follows_description_reports_without_touching_scheduler_fields()
 {
    use atoll_crds::apps::Subscription;
    let p = Parent::for_agents().await;
    let apps: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap();
    Api::<Namespace>::all(p.client.clone())
        .create(&PostParams::default(), &apps)
        .await
        .unwrap();
    let h = hub(&p.client, |_| {}).await;
    let mut a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();

    let subs: Api<Subscription> = Api::namespaced(p.client.clone(), "apps");
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {
            "subscribers": [{"clusterAffinity": {}}],
            "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "apps", "name": "web"}]
        }
    }))
    .unwrap();
    subs.create(&PostParams::default(), &sub).await.unwrap();
    // The scheduler's part of the status, under its own field manager.
    let sched = json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "status": {"bindingClusters": [format!("{ns}/edge-a")], "desiredReleases": 1}
    });
    subs.patch_status(
        "web",
        &PatchParams::apply("atoll-scheduler").force(),
        &Patch::Apply(&sched),
    )
    .await
    .unwrap();

    let mut d = Description::new("apps.web", DescriptionSpec::default());
    d.metadata.namespace = Some(ns.clone());
    d.metadata.labels = Some(
        [
            (known::LABEL_SUBS_NAME.to_string(), "web".to_string()),
            (known::LABEL_SUBS_NAMESPACE.to_string(), "apps".to_string()),
        ]
        .into(),
    );
    d.spec.raw = vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "apps"}}),
    ];
    Api::<Description>::namespaced(p.client.clone(), &ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let up = match a.recv_until(|m| matches!(m, Out::Upsert(_))).await {
        Out::Upsert(u) => u,
        _ => unreachable!(),
    };
    a.send(In::Report(v1::DescriptionReport {
        name: up.name.clone(),
        uid: up.uid.clone(),
        observed_generation: up.generation,
        phase: "Success".into(),
        objects: vec![v1::ObjectStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "apps".into(),
            name: "web".into(),
            status: serde_json::to_vec(
                &json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3}),
            )
            .unwrap(),
            error: String::new(),
        }],
        ..Default::default()
    }))
    .await;
    let st = eventually("aggregated status", WAIT, || async {
        let s = subs.get("web").await.unwrap().status?;
        (s.completed_releases == Some(1) && !s.aggregated_statuses.is_empty()).then_some(s)
    })
    .await;
    let agg = &st.aggregated_statuses[0];
    assert!(agg.feed_status_summary.available);
    assert_eq!(
        agg.feed_status_summary.replica_status.ready_replicas,
        Some(3)
    );
    assert_eq!(agg.feed_status_details[0].cluster_id, ID_A);
    assert_eq!(agg.feed_status_details[0].cluster_name, "edge-a");
    // The scheduler's fields are still there.
    assert_eq!(st.binding_clusters, vec![format!("{ns}/edge-a")]);
    assert_eq!(st.desired_releases, Some(1));
}

#[tokio::test]
async fn a_cluster_not_ready_beyond_the_lost_timeout_releases_its_deleting_descriptions() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |c| {
        c.controllers.lost_cluster_timeout = Duration::from_secs(1);
        c.controllers.sweep_every = Duration::from_millis(200);
    })
    .await;
    let mut a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    a.heartbeat(true).await;
    description(&p.client, &ns, "apps.web", "v1").await;
    a.recv_until(|m| matches!(m, Out::Upsert(_))).await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), &ns);
    eventually("the finalizer", WAIT, || async {
        descs
            .get("apps.web")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == known::FINALIZER)
            .then_some(())
    })
    .await;
    // While the cluster is Ready, a deleting Description waits for its agent.
    descs
        .delete("apps.web", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        descs.get_opt("apps.web").await.unwrap().is_some(),
        "released while the cluster is Ready"
    );
    // The agent goes away; after the grace the cluster is Unknown, after the timeout lost.
    drop(a);
    eventually("the Description released", WAIT, || async {
        descs
            .get_opt("apps.web")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn push_mode_cluster_is_served_by_the_hub_with_the_deployer_credentials() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push1";
    push_cluster(
        &p.client,
        ns,
        "cccccccc-0000-4000-8000-00000000000c",
        child.kubeconfig_yaml(),
    )
    .await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), ns);
    register_push_cluster(
        &p.client,
        "cccccccc-0000-4000-8000-00000000000c",
        ns,
        "pushed",
    )
    .await;
    description(&p.client, ns, "apps.web", "pushed").await;

    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child_client.clone(), "default");
    let cm = eventually("the ConfigMap in the child", WAIT, || async {
        cms.get_opt("cm").await.unwrap()
    })
    .await;
    assert_eq!(
        cm.data.unwrap().get("k").map(String::as_str),
        Some("pushed")
    );
    let descs: Api<Description> = Api::namespaced(p.client.clone(), ns);
    eventually("Description Success", WAIT, || async {
        let d = descs.get("apps.web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.phase) == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    eventually("Ready=True from the hub's heartbeat", WAIT, || async {
        (ready(&mcs.get("pushed").await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;
    eventually("the finalizer", WAIT, || async {
        descs
            .get("apps.web")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == known::FINALIZER)
            .then_some(())
    })
    .await;
    descs
        .delete("apps.web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Description gone", WAIT, || async {
        descs
            .get_opt("apps.web")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        cms.get_opt("cm").await.unwrap().is_none(),
        "the child object survived"
    );
    drop(h);
}

/// A Deployment `default/web` of 2 replicas.
fn web_deployment() -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    })
}

/// The ready replicas of a Description's first object, as its status reports them.
fn ready_replicas(d: &Description) -> Option<i64> {
    d.status
        .as_ref()
        .and_then(|s| s.manifest_statuses.first())
        .and_then(|m| m.observed_status.as_ref())
        .and_then(|s| s["readyReplicas"].as_i64())
}

/// Found by the chaos run (e2e/src/chaos): the hub wrote a Push cluster's report once, at
/// apply time, and never again, so a Deployment's replicas (which come later) never reached the
/// Description's status nor the Subscription's aggregated status.
#[tokio::test]
async fn a_push_cluster_reports_its_objects_status_as_it_changes_after_the_apply() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start(devcluster::Config {
        simulate_workloads: true,
        workload_delay: Duration::from_millis(500),
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push3";
    let id = "dddddddd-0000-4000-8000-00000000000d";
    push_cluster(&p.client, ns, id, child.kubeconfig_yaml()).await;
    register_push_cluster(&p.client, id, ns, "pushed").await;
    put_description(&p.client, ns, "apps.web", vec![web_deployment()]).await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), ns);
    eventually(
        "the Deployment's ready replicas in the Description's status",
        WAIT,
        || async {
            (ready_replicas(&descs.get("apps.web").await.unwrap()) == Some(2)).then_some(())
        },
    )
    .await;
    drop(h);
}

/// A registered Push cluster `pushed` in `ns` (id `id`, its child at `kubeconfig`) with
/// Description `apps.web`; the Descriptions of `ns`.
async fn pushed_web(client: &Client, ns: &str, id: &str, kubeconfig: String) -> Api<Description> {
    push_cluster(client, ns, id, kubeconfig).await;
    register_push_cluster(client, id, ns, "pushed").await;
    description(client, ns, "apps.web", "pushed").await;
    Api::namespaced(client.clone(), ns)
}

/// The phase in Description `apps.web`'s status.
async fn web_phase(descs: &Api<Description>) -> Option<DescriptionPhase> {
    descs
        .get("apps.web")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
}

/// After a chaos run (e2e/src/chaos) saw a Push child's Description fail on a fault of its
/// proxy: an apply that failed (the child unreachable for a moment) stayed failed until the
/// Description changed. An agent applies a failed Description again; the hub's Push mode did
/// not.
#[tokio::test]
async fn a_push_cluster_applies_a_failed_description_again_once_the_child_answers() {
    let p = Parent::for_agents().await;
    let first = DevCluster::start_default().await.unwrap();
    let port = first.addr().port();
    let kubeconfig = first.kubeconfig_yaml();
    drop(first);
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push4";
    let id = "ffffffff-0000-4000-8000-00000000000f";
    let descs = pushed_web(&p.client, ns, id, kubeconfig).await;
    let phase = || web_phase(&descs);
    eventually("the apply to fail, the child down", WAIT, || async {
        (phase().await == Some(DescriptionPhase::Failure)).then_some(())
    })
    .await;
    let child = DevCluster::start(devcluster::Config {
        port,
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    eventually("Success once the child answers", WAIT, || async {
        (phase().await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child.client().await.unwrap(), "default");
    assert!(cms.get_opt("cm").await.unwrap().is_some());
    drop(h);
}

/// A Push cluster's chart from a private repository, its `chartPullSecret` created after the
/// Description: the release fails saying the Secret is missing, then installs once the Secret
/// exists, with no edit. The hub applied a failed Description again with the credentials it had
/// read the first time, so the chart failed until the Description changed.
#[tokio::test]
async fn a_push_clusters_private_chart_installs_once_its_pull_secret_exists() {
    let tools = match atoll_e2e::chart_repo::HelmTools::locate() {
        Ok(tools) => tools,
        Err(e) => {
            eprintln!("NOTICE: a_push_clusters_private_chart_installs... skipped: {e}");
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let repo = atoll_e2e::chart_repo::ChartRepo::start_private(
        std::net::Ipv4Addr::LOCALHOST.into(),
        atoll_e2e::chart_repo::Helm::new(&tools.helm, tmp.path().join("helm-home")),
        atoll_e2e::chart_repo::HELLO_CHART,
        tmp.path().join("private-repo"),
        &["0.1.0"],
        ("robot", "hunter2"),
    )
    .await
    .unwrap();
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let home = tmp.path().join("hub-helm");
    let push_helm = run::PushHelm {
        binary: tools.helm.clone(),
        home: home.clone(),
    };
    let h = hub(&p.client, move |c| c.push.helm = Some(push_helm)).await;
    let ns = "clusternet-push11";
    let id = "11111111-0000-4000-8000-000000000011";
    push_cluster(&p.client, ns, id, child.kubeconfig_yaml()).await;
    register_push_cluster(&p.client, id, ns, "pushed").await;
    // No chart yet: the cluster's credentials stay off the hub's disk.
    description(&p.client, ns, "apps.web", "pushed").await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), ns);
    eventually("the plain Description applied", WAIT, || async {
        (web_phase(&descs).await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    let kubeconfig_for_helm = home.join(ns).join("kubeconfig");
    assert!(!kubeconfig_for_helm.exists());

    create_namespace(&p.client, "apps").await;
    let chart = json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
        "metadata": {"name": "private", "namespace": "apps"},
        "spec": {"repo": repo.url(), "chart": "hello", "version": "0.1.0",
                 "targetNamespace": "private-demo", "chartPullSecret": {"name": "repo-creds"}}
    });
    let d: Description = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
        "metadata": {"name": "apps.private", "namespace": ns},
        "spec": {"deployer": "Helm", "charts": [{"namespace": "apps", "name": "private"}],
                 "chartRaw": [chart], "chartValues": [{}]}
    }))
    .unwrap();
    descs.create(&PostParams::default(), &d).await.unwrap();
    let status = || async {
        descs
            .get("apps.private")
            .await
            .unwrap()
            .status
            .map(|s| (s.phase, s.reason.unwrap_or_default()))
    };
    let missing = eventually("the chart to fail without its Secret", WAIT, || async {
        match status().await {
            Some((Some(DescriptionPhase::Failure), reason)) if reason.contains("repo-creds") => {
                Some(reason)
            }
            _ => None,
        }
    })
    .await;
    eprintln!("without the Secret: {missing}");
    // Written with the cluster's first chart, for the hub's user only.
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&kubeconfig_for_helm)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode, 0o600);

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "repo-creds", "namespace": "apps"},
        "stringData": {"username": "robot", "password": "hunter2"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(p.client.clone(), "apps")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    eventually(
        "the chart installed once its Secret exists",
        WAIT * 4,
        || async {
            matches!(status().await, Some((Some(DescriptionPhase::Success), _))).then_some(())
        },
    )
    .await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child.client().await.unwrap(), "private-demo");
    let installed = cms.get("private-config").await.unwrap();
    assert_eq!(
        installed
            .data
            .unwrap()
            .get("chartVersion")
            .map(String::as_str),
        Some("0.1.0")
    );
    drop(h);
}

/// The deployer Secret of a Push cluster rewritten (credentials rotated, the child moved): the
/// hub serves the cluster with the new kubeconfig from the next heartbeat period on. It kept
/// the credentials it read when the session started, until it restarted.
#[tokio::test]
async fn a_push_cluster_is_served_with_its_deployer_secrets_new_credentials() {
    let p = Parent::for_agents().await;
    let before = DevCluster::start_default().await.unwrap();
    let after = DevCluster::start_default().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push12";
    let descs = pushed_web(
        &p.client,
        ns,
        "12121212-0000-4000-8000-000000000012",
        before.kubeconfig_yaml(),
    )
    .await;
    eventually("applied with the first credentials", WAIT, || async {
        (web_phase(&descs).await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    let cms = |c: Client| Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c, "default");
    assert!(
        cms(before.client().await.unwrap())
            .get_opt("cm")
            .await
            .unwrap()
            .is_some()
    );
    Api::<Secret>::namespaced(p.client.clone(), ns)
        .patch(
            "child-cluster-deployer",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"kubeconfig": after.kubeconfig_yaml()}})),
        )
        .await
        .unwrap();
    let moved = cms(after.client().await.unwrap());
    eventually(
        "the Description applied with the new credentials",
        WAIT,
        || async { moved.get_opt("cm").await.unwrap() },
    )
    .await;
    drop(h);
}

/// A hub contending for the Push clusters' Lease as `identity`, with a short lease.
async fn push_leader_hub(client: &Client, identity: &str) -> RunningHub {
    let identity = identity.to_string();
    hub(client, move |c| {
        c.push.leader = Some(run::PushLeader {
            namespace: "clusternet-system".into(),
            lease_duration: Duration::from_secs(2),
            identity,
        });
    })
    .await
}

/// The holder of the Push clusters' Lease.
async fn push_lease_holder(client: &Client) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "clusternet-system");
    leases
        .get_opt(atoll_hub::push::PUSH_LEASE)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Waits until the child's ConfigMap `default/cm` has `k` = `want`.
async fn child_cm_value(cms: &Api<k8s_openapi::api::core::v1::ConfigMap>, what: &str, want: &str) {
    eventually(what, WAIT, || async {
        cms.get_opt("cm")
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("k").cloned())
            .filter(|v| v == want)
    })
    .await;
}

/// With the Push Lease (the hub's default), one replica serves the Push clusters and repairs
/// drift in them as an agent does: an object someone changed or deleted in the child is
/// applied again. When that replica dies without giving the Lease up, the other takes over
/// once the Lease runs out, and repairs too.
#[tokio::test]
async fn the_push_lease_holder_repairs_drift_and_another_replica_takes_over_when_it_dies() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child.client().await.unwrap(), "default");
    let first = push_leader_hub(&p.client, "hub-1").await;
    let second = push_leader_hub(&p.client, "hub-2").await;
    let ns = "clusternet-push9";
    let descs = pushed_web(
        &p.client,
        ns,
        "99999999-0000-4000-8000-000000000009",
        child.kubeconfig_yaml(),
    )
    .await;
    child_cm_value(&cms, "the ConfigMap in the child", "pushed").await;
    let holder = push_lease_holder(&p.client).await.unwrap();

    // An edit as `kubectl edit` makes it (an update; a field another manager takes by
    // server-side apply is left to it, as by an agent).
    let drifted = json!({"data": {"k": "drifted"}});
    cms.patch("cm", &PatchParams::default(), &Patch::Merge(&drifted))
        .await
        .unwrap();
    child_cm_value(&cms, "the changed ConfigMap repaired", "pushed").await;
    cms.delete("cm", &DeleteParams::default()).await.unwrap();
    child_cm_value(&cms, "the deleted ConfigMap recreated", "pushed").await;

    // The holder dies without giving the Lease up (dropped, not stopped).
    let (dead, survivor) = if holder == "hub-1" {
        (first, second)
    } else {
        (second, first)
    };
    drop(dead);
    let other = if holder == "hub-1" { "hub-2" } else { "hub-1" };
    eventually("the other replica holding the Lease", WAIT, || async {
        (push_lease_holder(&p.client).await.as_deref() == Some(other)).then_some(())
    })
    .await;
    description(&p.client, ns, "apps.web", "second").await;
    child_cm_value(&cms, "the edit applied by the new holder", "second").await;
    cms.patch("cm", &PatchParams::default(), &Patch::Merge(&drifted))
        .await
        .unwrap();
    child_cm_value(&cms, "drift repaired by the new holder", "second").await;
    eventually("Description Success", WAIT, || async {
        (web_phase(&descs).await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    survivor.stop().await.unwrap();
    assert_eq!(
        push_lease_holder(&p.client).await,
        None,
        "a stopped hub gives the Push Lease up"
    );
}

/// A Push cluster's Description status taken back to an older report at its generation (a
/// late copy of an older write, or another hub replica's momentarily stale view: every replica
/// writes a Push cluster's statuses) is written again from the child's state within a
/// heartbeat period, though the child does not change.
#[tokio::test]
async fn a_push_cluster_description_status_taken_back_is_written_again_from_the_child() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push5";
    let id = "eeeeeeee-0000-4000-8000-00000000000e";
    let descs = pushed_web(&p.client, ns, id, child.kubeconfig_yaml()).await;
    let phase = || web_phase(&descs);
    eventually("Success", WAIT, || async {
        (phase().await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    let generation = descs.get("apps.web").await.unwrap().metadata.generation;
    let older = json!({"status": {"observedGeneration": generation, "phase": "Pending"}});
    descs
        .patch_status("apps.web", &PatchParams::default(), &Patch::Merge(&older))
        .await
        .unwrap();
    eventually("Success written again", WAIT, || async {
        (phase().await == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    drop(h);
}

/// A TCP relay to the parent that can be cut: the hub's view of a parent it cannot reach for
/// a while, with the parent itself (and what it stores) untouched.
struct Relay {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (o, c) = (open.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !o.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: the connection closes at once
                }
                c.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay {
            addr,
            open,
            connections,
            accept,
        }
    }

    /// Closes every open connection and refuses new ones until [`Relay::heal`].
    fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn heal(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// A client of the parent through this relay.
    async fn client(&self, parent: &DevCluster) -> Client {
        let yaml = parent
            .kubeconfig_yaml()
            .replace(&parent.url(), &format!("http://{}", self.addr));
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        Client::try_from(config).unwrap()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A Push cluster's report the hub failed to write (the parent unreachable for a moment) was
/// dropped: the Description's status kept the older report until something else changed. An
/// agent's is written again by its stream; the hub's Push mode writes it again too.
#[tokio::test]
async fn a_push_cluster_report_whose_write_failed_is_written_once_the_parent_answers() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start(devcluster::Config {
        simulate_workloads: true,
        workload_delay: Duration::from_secs(3),
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let relay = Relay::start(p.cluster.addr()).await;
    let h = hub(&relay.client(&p.cluster).await, |_| {}).await;
    let ns = "clusternet-push5";
    let id = "abababab-0000-4000-8000-0000000000ab";
    push_cluster(&p.client, ns, id, child.kubeconfig_yaml()).await;
    register_push_cluster(&p.client, id, ns, "pushed").await;
    put_description(&p.client, ns, "apps.web", vec![web_deployment()]).await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), ns);
    let ready_in_status = || async {
        let d = descs.get("apps.web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.phase), ready_replicas(&d))
    };
    eventually("the apply's report (Success)", WAIT, || async {
        (ready_in_status().await.0 == Some(DescriptionPhase::Success)).then_some(())
    })
    .await;
    relay.cut();
    assert_eq!(
        ready_in_status().await.1,
        None,
        "the replicas were reported before the parent was cut off; the test proves nothing"
    );
    // The replicas become ready in the child while the hub cannot reach the parent: the
    // report that says so fails to be written.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(child.client().await.unwrap(), "default");
    eventually("the Deployment ready in the child", WAIT, || async {
        let d = deployments.get("web").await.unwrap();
        (d.status.and_then(|s| s.ready_replicas) == Some(2)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ready_in_status().await.1, None);
    relay.heal();
    eventually(
        "the ready replicas in the Description's status once the parent answers",
        WAIT,
        || async { (ready_in_status().await.1 == Some(2)).then_some(()) },
    )
    .await;
    drop(h);
}

#[tokio::test]
async fn a_push_cluster_the_hub_did_not_register_is_not_served() {
    let p = Parent::for_agents().await;
    let child = DevCluster::start_default().await.unwrap();
    let child_client = child.client().await.unwrap();
    let h = hub(&p.client, |_| {}).await;
    // A tenant's namespace, with working credentials and a Description placed there by hand:
    // no registration names it, so the hub never pushes to it.
    let ns = "tenant";
    push_cluster(
        &p.client,
        ns,
        "eeeeeeee-0000-4000-8000-00000000000e",
        child.kubeconfig_yaml(),
    )
    .await;
    description(&p.client, ns, "apps.web", "pushed").await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(p.client.clone(), ns);
    eventually("an UnregisteredCluster Event", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("UnregisteredCluster"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(child_client.clone(), "default");
    assert!(
        cms.get_opt("cm").await.unwrap().is_none(),
        "the hub pushed to an unregistered cluster"
    );
    drop(h);
}

#[tokio::test]
async fn push_credentials_that_would_run_a_program_are_refused_with_a_condition_and_an_event() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let ns = "clusternet-push2";
    let marker = std::env::temp_dir().join(format!("atoll-push-exec-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: touch\n      args: [{:?}]\n\
         contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        marker.display().to_string()
    );
    push_cluster(
        &p.client,
        ns,
        "dddddddd-0000-4000-8000-00000000000d",
        kubeconfig,
    )
    .await;
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), ns);
    register_push_cluster(
        &p.client,
        "dddddddd-0000-4000-8000-00000000000d",
        ns,
        "pushed",
    )
    .await;
    let message = eventually("Ready=False PushCredentialsRefused", WAIT, || async {
        let mc = mcs.get("pushed").await.unwrap();
        let st = mc.status?;
        let c = st.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.status == "False" && c.reason == "PushCredentialsRefused").then(|| c.message.clone())
    })
    .await;
    assert!(message.contains("exec"), "{message}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(p.client.clone(), ns);
    eventually("a PushCredentialsRefused Event", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("PushCredentialsRefused"))
            .then_some(())
    })
    .await;
    assert!(!marker.exists(), "the hub ran the kubeconfig's exec plugin");
    drop(h);
}

#[tokio::test]
async fn a_cluster_whose_heartbeats_stop_with_its_stream_open_is_marked_unknown() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &a.welcome.namespace);
    a.heartbeat(true).await;
    eventually("Ready=True", WAIT, || async {
        (ready(&mcs.get("edge-a").await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;
    let started = Instant::now();
    eventually("Ready=Unknown while the stream is open", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        let tainted = mc
            .spec
            .taints
            .iter()
            .any(|t| t.key == known::TAINT_UNSCHEDULABLE);
        (ready(&mc).as_deref() == Some("Unknown") && tainted).then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "marked before three periods passed"
    );
    a.heartbeat(true).await;
    eventually("Ready=True again", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        (ready(&mc).as_deref() == Some("True") && mc.spec.taints.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn two_hub_replicas_close_the_older_stream_of_a_cluster() {
    let p = Parent::for_agents().await;
    let h1 = hub(&p.client, |_| {}).await;
    let h2 = hub(&p.client, |_| {}).await;
    let registered = connect(&h1, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = registered.welcome.namespace.clone();
    let token = registered.welcome.cluster_token.clone();
    drop(registered);
    let mut old = connect(&h1, ID_A, "edge-a", &token).await.unwrap();
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    let new = connect(&h2, ID_A, "edge-a", &token).await.unwrap();
    assert!(new.welcome.epoch > old.welcome.epoch);
    // h2 records the newer epoch on the ManagedCluster; h1's watch sees it and ends its stream.
    let status = closed_with(&mut old).await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(
        status.message().contains("another hub replica"),
        "{status:?}"
    );
    new.send(In::Heartbeat(v1::Heartbeat {
        k8s_version: "v1.33.2-new".into(),
        healthz: true,
        livez: true,
        readyz: true,
        heartbeat_seconds: 1,
        ..Default::default()
    }))
    .await;
    eventually("the new stream's heartbeat", WAIT, || async {
        let mc = mcs.get("edge-a").await.unwrap();
        (mc.status?.k8s_version.as_deref() == Some("v1.33.2-new")).then_some(())
    })
    .await;
}

/// The status the hub ends `a`'s stream with, skipping what it sends before; fails if the
/// stream is still open after 10 s.
async fn closed_with(a: &mut Agent) -> tonic::Status {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, a.rx.message()).await {
            Err(_) => panic!("the stream is still open"),
            Ok(Err(status)) => return status,
            Ok(Ok(None)) => panic!("the stream ended without a status"),
            Ok(Ok(Some(_))) => {}
        }
    }
}

/// Registers cluster A and opens a stream with its cluster token; returns the stream and the
/// token.
async fn registered_stream(h: &RunningHub) -> (Agent, String) {
    let first = connect(h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let token = first.welcome.cluster_token.clone();
    assert!(!token.is_empty());
    drop(first);
    let a = connect(h, ID_A, "edge-a", &token).await.unwrap();
    (a, token)
}

#[tokio::test]
async fn stream_epochs_are_ordered_through_the_api_server_across_replicas() {
    let p = Parent::for_agents().await;
    let h1 = hub(&p.client, |_| {}).await;
    let h2 = hub(&p.client, |_| {}).await;
    let first = connect(&h1, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let token = first.welcome.cluster_token.clone();
    let ns = first.welcome.namespace.clone();
    let mut epochs = vec![first.welcome.epoch];
    drop(first);
    // Alternating replicas: each stream's epoch is one more than the one recorded on the
    // ManagedCluster, whichever replica recorded it (no clock involved).
    for h in [&h2, &h1, &h2] {
        let a = connect(h, ID_A, "edge-a", &token).await.unwrap();
        epochs.push(a.welcome.epoch);
    }
    assert_eq!(epochs, vec![1, 2, 3, 4]);
    let mc = Api::<ManagedCluster>::namespaced(p.client.clone(), &ns)
        .get("edge-a")
        .await
        .unwrap();
    assert_eq!(
        mc.annotations()
            .get(atoll_hub::streams::ANNOTATION_STREAM_EPOCH)
            .map(String::as_str),
        Some("4")
    );
}

#[tokio::test]
async fn a_newer_stream_of_a_cluster_closes_the_older_one() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let (mut old, token) = registered_stream(&h).await;
    let new = connect(&h, ID_A, "edge-a", &token).await.unwrap();
    assert!(new.welcome.epoch > old.welcome.epoch);
    let status = closed_with(&mut old).await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
}

#[tokio::test]
async fn deleting_a_clusters_token_secret_closes_its_open_stream() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let (mut a, token) = registered_stream(&h).await;
    let ns = a.welcome.namespace.clone();
    Api::<Secret>::namespaced(p.client.clone(), &ns)
        .delete("cluster-token", &DeleteParams::default())
        .await
        .unwrap();
    let status = closed_with(&mut a).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let again = connect(&h, ID_A, "edge-a", &token).await.err().unwrap();
    assert_eq!(again.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn denying_a_registration_closes_its_clusters_open_stream() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let (mut a, token) = registered_stream(&h).await;
    let crrs: Api<ClusterRegistrationRequest> = Api::all(p.client.clone());
    crrs.patch_status(
        &known::cluster_registration_request_name(ID_A),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"result": "Denied", "errorMessage": "decommissioned"}})),
    )
    .await
    .unwrap();
    let status = closed_with(&mut a).await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("decommissioned"), "{status:?}");
    let again = connect(&h, ID_A, "edge-a", &token).await.err().unwrap();
    assert_eq!(again.code(), Code::PermissionDenied);
}

#[tokio::test]
async fn deleting_a_managed_cluster_closes_its_stream_and_its_token_admits_no_more() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let (mut a, token) = registered_stream(&h).await;
    let ns = a.welcome.namespace.clone();
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    mcs.delete("edge-a", &DeleteParams::default())
        .await
        .unwrap();
    let status = closed_with(&mut a).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let again = connect(&h, ID_A, "edge-a", &token).await.err().unwrap();
    assert_eq!(again.code(), Code::Unauthenticated, "{again:?}");
    assert!(
        mcs.get_opt("edge-a").await.unwrap().is_none(),
        "the cluster token must not bring the ManagedCluster back"
    );
}

#[tokio::test]
async fn a_rotation_asked_for_on_the_managed_cluster_gives_the_agent_a_new_token_and_retires_the_old()
 {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let (mut a, old_token) = registered_stream(&h).await;
    let ns = a.welcome.namespace.clone();
    assert!(a.welcome.cluster_token.is_empty(), "no rotation yet");
    Api::<ManagedCluster>::namespaced(p.client.clone(), &ns)
        .patch(
            "edge-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                atoll_hub::token::ANNOTATION_ROTATE_TOKEN: "2026-12-01"
            }}})),
        )
        .await
        .unwrap();
    let status = closed_with(&mut a).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // The agent reconnects with the token it has and gets a new one.
    let rotated = connect(&h, ID_A, "edge-a", &old_token).await.unwrap();
    let new_token = rotated.welcome.cluster_token.clone();
    assert!(!new_token.is_empty() && new_token != old_token);
    drop(rotated);
    // Using the new token once retires the old one, and the same request is not answered twice.
    let b = connect(&h, ID_A, "edge-a", &new_token).await.unwrap();
    assert!(
        b.welcome.cluster_token.is_empty(),
        "rotated once per request"
    );
    let refused = connect(&h, ID_A, "edge-a", &old_token).await.err().unwrap();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let secret = Api::<Secret>::namespaced(p.client.clone(), &ns)
        .get("cluster-token")
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data["rotation"].0, b"2026-12-01");
    assert!(!data.contains_key("sha256-previous"), "{:?}", data.keys());
}

#[tokio::test]
async fn a_cluster_token_with_a_lifetime_is_renewed_half_way_and_refused_once_expired() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |c| {
        c.backend.cluster_token_lifetime = Some(Duration::from_secs(4));
    })
    .await;
    let (mut a, first) = registered_stream(&h).await;
    // Half-way through its lifetime the stream is closed for renewal.
    let status = closed_with(&mut a).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("renewal"), "{status:?}");
    let renewed = connect(&h, ID_A, "edge-a", &first).await.unwrap();
    let second = renewed.welcome.cluster_token.clone();
    assert!(!second.is_empty() && second != first);
    drop(renewed);
    // The first token's lifetime ends 4 s after it was issued, renewal or not.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused = connect(&h, ID_A, "edge-a", &first).await.err().unwrap();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let ok = connect(&h, ID_A, "edge-a", &second).await.unwrap();
    drop(ok);
}

#[tokio::test]
async fn an_administrators_relabel_sticks_when_the_agent_reconnects() {
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let w = a.welcome.clone();
    drop(a);
    let clusters = Api::<ManagedCluster>::namespaced(p.client.clone(), &w.namespace);
    let mc = clusters.get("edge-a").await.unwrap();
    assert_eq!(mc.labels().get("env").map(String::as_str), Some("test"));
    // The administrator takes the agent's label away and sets one of their own.
    clusters
        .patch(
            "edge-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": null, "tier": "gold"}}})),
        )
        .await
        .unwrap();
    // The agent reconnects with its cluster token, still asking for env=test.
    let again = connect(&h, ID_A, "edge-a", &w.cluster_token).await.unwrap();
    drop(again);
    let mc = clusters.get("edge-a").await.unwrap();
    assert_eq!(mc.labels().get("env"), None, "{:?}", mc.labels());
    assert_eq!(mc.labels().get("tier").map(String::as_str), Some("gold"));
    assert_eq!(
        mc.labels().get(known::LABEL_CLUSTER_ID).map(String::as_str),
        Some(ID_A),
        "the hub's own labels stay"
    );
    h.stop().await.unwrap();
}

#[tokio::test]
async fn ten_thousand_bad_hellos_do_not_make_a_healthy_cluster_miss_heartbeats() {
    use futures::StreamExt;
    let p = Parent::for_agents().await;
    let h = hub(&p.client, |_| {}).await;
    let a = connect(&h, ID_A, "edge-a", BOOTSTRAP_TOKEN).await.unwrap();
    let ns = a.welcome.namespace.clone();
    let mcs: Api<ManagedCluster> = Api::namespaced(p.client.clone(), &ns);
    // The healthy agent beats every half second for as long as the test runs.
    let beats = {
        let tx = a.tx.clone();
        tokio::spawn(async move {
            loop {
                let beat = v1::AgentMessage {
                    seq: 0,
                    message: Some(In::Heartbeat(v1::Heartbeat {
                        k8s_version: "v1.33.1".into(),
                        healthz: true,
                        livez: true,
                        readyz: true,
                        heartbeat_seconds: 1,
                        ..Default::default()
                    })),
                };
                if tx.send(beat).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    eventually("Ready=True", WAIT, || async {
        (ready(&mcs.get("edge-a").await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;
    // 10,000 Hellos with a well-formed bootstrap token that does not exist, each from a cluster
    // of its own, 256 at a time over one HTTP/2 connection.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // At least 10,000, and for longer than the hub's heartbeat grace (3 s in tests), so that a
    // starved heartbeat would show.
    let flood = tokio::spawn(async move {
        let started = Instant::now();
        let mut codes = Vec::new();
        let mut next = 0u32;
        while codes.len() < 10_000 || started.elapsed() < Duration::from_secs(5) {
            let round = futures::stream::iter(next..next + 1_000)
                .map(|i| {
                    let channel = channel.clone();
                    async move {
                        let id = format!("{i:08x}-0000-4000-8000-000000000000");
                        let (tx, rx) = mpsc::channel(1);
                        tx.send(hello(&id, "intruder", "abcdef.0123456789abcdef"))
                            .await
                            .unwrap();
                        let r = HubClient::new(channel).sync(ReceiverStream::new(rx)).await;
                        drop(tx);
                        r.err().map(|s| s.code())
                    }
                })
                .buffer_unordered(256)
                .collect::<Vec<_>>()
                .await;
            codes.extend(round);
            next += 1_000;
        }
        (codes, started.elapsed())
    });
    // Meanwhile the healthy cluster is watched: Ready stays True all along.
    let mut seen = Vec::new();
    while !flood.is_finished() {
        let mc = mcs.get("edge-a").await.unwrap();
        seen.push(ready(&mc).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (codes, elapsed) = flood.await.unwrap();
    assert!(seen.iter().all(|r| r == "True"), "{seen:?}");
    // And heartbeats were still being written at the end, not just within the grace.
    let last = mcs
        .get("edge-a")
        .await
        .unwrap()
        .status
        .unwrap()
        .last_observed_time
        .unwrap();
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(last.0);
    assert!(
        age.as_secs_f64() < 2.0,
        "last heartbeat written {age:?} ago"
    );
    let admitted = codes.iter().filter(|c| c.is_none()).count();
    let refused = |code: Code| codes.iter().filter(|c| **c == Some(code)).count();
    eprintln!(
        "FIGURE {} bad Hellos in {:.1}s: {} unauthenticated, {} resource-exhausted; the healthy \
         cluster Ready=True in all {} samples",
        codes.len(),
        elapsed.as_secs_f64(),
        refused(Code::Unauthenticated),
        refused(Code::ResourceExhausted),
        seen.len()
    );
    assert_eq!(admitted, 0);
    assert_eq!(
        refused(Code::Unauthenticated) + refused(Code::ResourceExhausted),
        codes.len()
    );
    beats.abort();
}

/// A Description's status taken back to an older generation, or to an earlier report at its
/// generation (a late copy of an older status write landing after the newer one), is written
/// again as it was; a status that moves forward is left as written.
#[tokio::test]
async fn a_description_status_taken_back_to_an_older_generation_is_written_again() {
    let p = Parent::for_agents().await;
    let _h = hub(&p.client, |_| {}).await;
    create_namespace(&p.client, "clusternet-late").await;
    description(&p.client, "clusternet-late", "apps.web", "v1").await;
    let descs: Api<Description> = Api::namespaced(p.client.clone(), "clusternet-late");
    let write = |generation: i64, phase: &str| {
        let descs = descs.clone();
        let patch = json!({"status": {"observedGeneration": generation, "phase": phase}});
        async move {
            descs
                .patch_status("apps.web", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let status_is = |generation: i64, phase: DescriptionPhase| {
        let descs = descs.clone();
        async move {
            let s = descs
                .get("apps.web")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            s.observed_generation == Some(generation) && s.phase == Some(phase)
        }
    };
    write(3, "Success").await;
    eventually("generation 3", WAIT, || {
        status_is(3, DescriptionPhase::Success)
    })
    .await;
    write(2, "Pending").await;
    eventually("generation 3 written again", WAIT, || {
        status_is(3, DescriptionPhase::Success)
    })
    .await;
    // Forward, and at the same generation without report orders: nothing is written back.
    write(4, "Pending").await;
    write(4, "Failure").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(status_is(4, DescriptionPhase::Failure).await);
    // At the same generation, a write of an earlier report (a lower order) is taken back; a
    // later one stays.
    let ordered = |phase: &str, sequence: i64| {
        let descs = descs.clone();
        let patch = json!({"status": {"observedGeneration": 5, "phase": phase,
            "reportOrder": {"epoch": 2, "sequence": sequence}}});
        async move {
            descs
                .patch_status("apps.web", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    ordered("Success", 20).await;
    eventually("report 20", WAIT, || {
        status_is(5, DescriptionPhase::Success)
    })
    .await;
    ordered("Pending", 10).await;
    eventually("report 20 written again", WAIT, || {
        status_is(5, DescriptionPhase::Success)
    })
    .await;
    ordered("Failure", 30).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(status_is(5, DescriptionPhase::Failure).await);
}
