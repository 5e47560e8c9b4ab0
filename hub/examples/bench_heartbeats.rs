//! Heartbeat cost with real API writes: the hub (in this process) writes ManagedCluster status
//! to a devcluster running as a separate process. N agents (also in this process, over loopback
//! TCP) register, then each sends `rounds` heartbeats; the process CPU per heartbeat gives the
//! share of one core for N agents beating every 10 s (agent side included: an upper bound).
//!
//! ```text
//! target/debug/devcluster --kubeconfig /tmp/kc.yaml &
//! cargo run --release -p atoll-hub --example bench_heartbeats -- /tmp/kc.yaml 200 3
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_hub::run::{self, HubConfig};
use atoll_proto::v1;
use atoll_proto::v1::agent_message::Message as In;
use atoll_proto::v1::hub_client::HubClient;
use atoll_runtime::admin::Readiness;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use prometheus_client::registry::Registry;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kubeconfig = args
        .get(1)
        .expect("usage: bench_heartbeats KUBECONFIG [agents] [rounds]");
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let client = atoll_runtime::client::client(&atoll_runtime::args::ClientArgs {
        kubeconfig: Some(kubeconfig.into()),
        context: None,
    })
    .await
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in atoll_crds::crdgen::crds() {
        let _ = crds.create(&PostParams::default(), &crd).await;
    }
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "clusternet-system"}}))
            .unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bootstrap-token-07401b", "namespace": "clusternet-system"},
        "type": "bootstrap.kubernetes.io/token",
        "data": {"token-id": "MDc0MDFi", "token-secret": "ZjM5NWFjY2QyNDZhZTUyZA==", "usage-bootstrap-authentication": "dHJ1ZQ=="}
    }))
    .unwrap();
    let _ = Api::<Secret>::namespaced(client.clone(), "clusternet-system")
        .create(&PostParams::default(), &secret)
        .await;

    let readiness = Readiness::default();
    let mut config = HubConfig::for_tests();
    config.stream.heartbeat_seconds = 10;
    config.controllers.heartbeat_grace = Duration::from_secs(3600);
    let hub = run::start(client, config, &mut Registry::default(), readiness.clone())
        .await
        .unwrap();
    while !readiness.is_ready() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = Instant::now();
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = mpsc::channel(8);
        tx.send(v1::AgentMessage {
            seq: 0,
            message: Some(In::Hello(v1::Hello {
                protocol_version: 1,
                cluster_id: format!("00000000-0000-4000-8000-{i:012}"),
                cluster_name: format!("c{i}"),
                token: "07401b.f395accd246ae52d".into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let mut c = HubClient::connect(format!("http://{}", hub.addr))
            .await
            .unwrap();
        let mut s = c.sync(ReceiverStream::new(rx)).await.unwrap().into_inner();
        let ack = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = s.message().await {
                if let Some(v1::hub_message::Message::SnapshotComplete(m)) = m.message {
                    let _ = ack
                        .send(v1::AgentMessage {
                            seq: 0,
                            message: Some(In::Ack(v1::Ack { seq: m.seq })),
                        })
                        .await;
                }
            }
        });
        agents.push(tx);
    }
    println!("registered {n} clusters in {:?}", t.elapsed());
    let hb = || v1::AgentMessage {
        seq: 0,
        message: Some(In::Heartbeat(v1::Heartbeat {
            k8s_version: "v1.33.1".into(),
            platform: "linux/amd64".into(),
            agent_version: "bench".into(),
            node_statistics: Some(v1::NodeStatistics {
                ready_nodes: 3,
                ..Default::default()
            }),
            capacity: [
                ("cpu".to_string(), "8".to_string()),
                ("memory".to_string(), "32Gi".to_string()),
            ]
            .into(),
            allocatable: [("cpu".to_string(), "7".to_string())].into(),
            healthz: true,
            livez: true,
            readyz: true,
            heartbeat_seconds: 10,
            prune_hold: None,
        })),
    };
    // Warm-up round: first heartbeats flip Ready and read each cluster once.
    for a in &agents {
        a.send(hb()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu0 = atoll_bench::cpu_seconds(std::process::id());
    let t0 = Instant::now();
    for _ in 0..rounds {
        for a in &agents {
            a.send(hb()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let cpu = atoll_bench::cpu_seconds(std::process::id()) - cpu0;
    let total = (rounds * n) as f64;
    let per = cpu / total;
    println!(
        "{total} heartbeats with API writes: {:.0} µs CPU each in the hub process; 1000 agents every 10 s = {:.1}% of one core",
        per * 1e6,
        per * 1000.0 / 10.0 * 100.0
    );
    println!(
        "(measured over {:?}, includes the agents' side and idle wake-ups)",
        t0.elapsed()
    );
}
