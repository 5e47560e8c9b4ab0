//! A devcluster set up as an atoll parent.

use devcluster::DevCluster;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};
use serde_json::json;
use std::time::Duration;

/// How long [`install_crds`] waits for each CRD to be Established.
const ESTABLISHED: Duration = Duration::from_secs(10);

/// A parent cluster as the install leaves it: a devcluster in this process with atoll's CRDs
/// created and Established, and the namespaces `clusternet-system` and `clusternet-reserved`.
/// Dropping it stops the devcluster.
pub struct Parent {
    /// The devcluster.
    pub cluster: DevCluster,
    /// A client of it.
    pub client: Client,
}

impl Parent {
    /// Starts a default devcluster and sets it up.
    pub async fn start() -> Parent {
        let cluster = DevCluster::start_default().await.unwrap();
        let client = cluster.client().await.unwrap();
        install_crds(&client).await;
        for ns in ["clusternet-system", "clusternet-reserved"] {
            create_namespace(&client, ns).await;
        }
        Parent { cluster, client }
    }

    /// A parent agents can register with: [`Parent::start`], the test bootstrap token
    /// ([`crate::BOOTSTRAP_TOKEN`]) installed, and tracing to the test's output.
    pub async fn for_agents() -> Parent {
        init_tracing();
        let parent = Parent::start().await;
        crate::bootstrap_secret(&parent.client, crate::BOOTSTRAP_TOKEN, None).await;
        parent
    }
}

/// Creates every CRD of `atoll_crds::crdgen::crds()` and waits until each is Established.
pub async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in atoll_crds::crdgen::crds() {
        let created = api.create(&PostParams::default(), &crd).await.unwrap();
        let name = created.metadata.name.unwrap();
        tokio::time::timeout(
            ESTABLISHED,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established after {ESTABLISHED:?}"))
        .unwrap();
    }
}

/// Creates the namespace `name`; one that exists already is left as it is.
pub async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// Sends `tracing` output to the test's captured output, filtered by `RUST_LOG`; does nothing
/// if a subscriber is set already (another test of the same binary called it).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
