//! The gRPC server over TLS (rustls): the health service answers SERVING, the Hub service
//! refuses a bad token with UNAUTHENTICATED, and a plaintext client cannot talk to it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_hub::run::{self, HubConfig};
use atoll_proto::v1;
use atoll_proto::v1::hub_client::HubClient;
use atoll_runtime::admin::Readiness;
use atoll_testkit::BOOTSTRAP_TOKEN;
use prometheus_client::registry::Registry;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// A hub serving TLS with a self-signed certificate for `localhost`, on a devcluster parent.
struct TlsHub {
    hub: run::RunningHub,
    cert_pem: String,
    _dir: tempfile::TempDir,
    _parent: devcluster::DevCluster,
}

impl TlsHub {
    /// Its key file holds `key` instead of the certificate's key when given.
    async fn start(key: Option<&str>) -> TlsHub {
        let parent = devcluster::DevCluster::start_default().await.unwrap();
        let client = parent.client().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert_pem = ck.cert.pem();
        let cert = dir.path().join("tls.crt");
        let key_file = dir.path().join("tls.key");
        std::fs::write(&cert, &cert_pem).unwrap();
        let own_key = ck.signing_key.serialize_pem();
        std::fs::write(&key_file, key.unwrap_or(&own_key)).unwrap();
        let mut config = HubConfig::for_tests();
        config.server.tls = Some((cert, key_file));
        let hub = run::start(
            client,
            config,
            &mut Registry::default(),
            Readiness::default(),
        )
        .await
        .unwrap();
        TlsHub {
            hub,
            cert_pem,
            _dir: dir,
            _parent: parent,
        }
    }
}

#[tokio::test]
async fn tls_server_serves_health_and_hub_and_refuses_plaintext() {
    let served = TlsHub::start(None).await;
    let (hub, cert_pem) = (&served.hub, served.cert_pem.clone());

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let channel: Channel = Endpoint::try_from(format!("https://{}", hub.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut health = HealthClient::new(channel.clone());
    let r = health
        .check(HealthCheckRequest {
            service: "atoll.hub.v1.Hub".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let (tx, rx) = mpsc::channel(4);
    tx.send(v1::AgentMessage {
        seq: 0,
        message: Some(v1::agent_message::Message::Hello(v1::Hello {
            protocol_version: v1::ProtocolVersion::V1 as i32,
            cluster_id: "aaaaaaaa-0000-4000-8000-00000000000a".into(),
            cluster_name: "edge".into(),
            token: BOOTSTRAP_TOKEN.into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let err = HubClient::new(channel)
        .sync(ReceiverStream::new(rx))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    let plaintext = tokio::time::timeout(Duration::from_secs(5), async {
        let ch = Endpoint::try_from(format!("http://{}", hub.addr))
            .unwrap()
            .connect()
            .await?;
        HealthClient::new(ch)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|_| ())
            .map_err(|e| -> Box<dyn std::error::Error> { Box::new(e) })
    })
    .await;
    assert!(
        !matches!(plaintext, Ok(Ok(()))),
        "a plaintext client was served"
    );
}

/// A hub whose certificate cannot be loaded (here its key file holds no key, as with a
/// mistyped `atoll-hub-tls` Secret) must not run on without a gRPC server: `server_ended`
/// completes with the TLS error, and `atoll-hub` exits with it (CrashLoopBackOff with the
/// reason in its log, instead of a pod that is Running and Ready but serves nothing).
#[tokio::test]
async fn a_hub_whose_certificate_cannot_be_loaded_reports_its_server_ended() {
    let mut served = TlsHub::start(Some("not a key\n")).await;
    let hub = &mut served.hub;
    let ended = tokio::time::timeout(Duration::from_secs(10), hub.server_ended())
        .await
        .expect("the server ends at once");
    let text = ended.to_string();
    assert_eq!(ended.label(), "configure_tls", "{text}");
    assert!(text.contains("tls.crt"), "names the certificate: {text}");
}
