//! The child cluster as the hub client sees it: where it keeps its identity, what its heartbeat
//! says, and how Descriptions are put into it. [`KubeChild`] is the real one (a kube client and
//! the applier); the hub client depends only on [`ChildCluster`], so that a benchmark of the hub
//! can run many agents whose child does nothing ([`NoopChild`]).

use crate::error::Error;
use crate::identity::{self, Credentials};
use atoll_applier::heartbeat::{self, Heartbeat};
use atoll_applier::model::{Description, Phase, Report};
use atoll_applier::prune::PrunePlan;
use atoll_applier::scope::Scope;
use atoll_applier::{Applier, Notice};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// What the hub client needs of its child cluster.
pub trait ChildCluster: Send + Sync + 'static {
    /// The cluster's id (the uid of its `kube-system` namespace).
    fn cluster_id(&self) -> impl Future<Output = Result<String, Error>> + Send;

    /// The credentials stored by an earlier registration, if any.
    fn load_credentials(&self) -> impl Future<Output = Result<Option<Credentials>, Error>> + Send;

    /// Stores the credentials of this registration.
    fn store_credentials(
        &self,
        creds: &Credentials,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Where the credentials are kept, for the log.
    fn credentials_location(&self) -> String;

    /// The heartbeat: the cluster's version, nodes, capacity and health.
    fn heartbeat(&self) -> impl Future<Output = Result<Heartbeat, Error>> + Send;

    /// The Description namespaces this registration owns (see [`Scope`]).
    fn set_scope(&self, scope: Scope);

    /// Puts a Description into the cluster.
    fn apply(&self, desc: &Description) -> impl Future<Output = Report> + Send;

    /// Removes a Description's objects from the cluster.
    fn delete(&self, namespace: &str, name: &str, uid: &str)
    -> impl Future<Output = Report> + Send;

    /// The current report of the Description `key`, if it is known.
    fn report(&self, key: &str) -> Option<Report>;

    /// What a prune keeping only `keep` would delete.
    fn prune_plan(
        &self,
        keep: &HashSet<String>,
    ) -> impl Future<Output = Result<PrunePlan, Error>> + Send;

    /// Carries out a prune; returns the Descriptions pruned.
    fn prune(&self, plan: &PrunePlan) -> impl Future<Output = Vec<String>> + Send;
}

/// A real child cluster: its API server's client and the applier that writes into it.
pub struct KubeChild {
    client: kube::Client,
    applier: Arc<Applier>,
}

impl KubeChild {
    /// The child behind `client`, written by `applier`, whose notices go to `notices` (the hub
    /// client sends a report when one changes); its drift repair is started.
    pub fn new(
        client: kube::Client,
        applier: Arc<Applier>,
        notices: mpsc::UnboundedSender<Notice>,
    ) -> Self {
        applier.set_notifier(notices);
        atoll_applier::start_drift_repair(&applier);
        Self { client, applier }
    }

    /// The applier.
    pub fn applier(&self) -> &Arc<Applier> {
        &self.applier
    }
}

impl ChildCluster for KubeChild {
    async fn cluster_id(&self) -> Result<String, Error> {
        identity::cluster_id(&self.client).await
    }

    async fn load_credentials(&self) -> Result<Option<Credentials>, Error> {
        identity::load(&self.client, self.applier.state_namespace()).await
    }

    async fn store_credentials(&self, creds: &Credentials) -> Result<(), Error> {
        identity::store(
            &self.client,
            self.applier.state_namespace(),
            creds,
            self.applier.field_manager(),
        )
        .await
    }

    fn credentials_location(&self) -> String {
        format!(
            "{}/{}",
            self.applier.state_namespace(),
            identity::PARENT_SECRET
        )
    }

    async fn heartbeat(&self) -> Result<Heartbeat, Error> {
        Ok(heartbeat::collect(&self.client).await?)
    }

    fn set_scope(&self, scope: Scope) {
        self.applier.set_scope(scope);
    }

    async fn apply(&self, desc: &Description) -> Report {
        self.applier.apply(desc).await
    }

    async fn delete(&self, namespace: &str, name: &str, uid: &str) -> Report {
        self.applier.delete(namespace, name, uid).await
    }

    fn report(&self, key: &str) -> Option<Report> {
        self.applier.report(key)
    }

    async fn prune_plan(&self, keep: &HashSet<String>) -> Result<PrunePlan, Error> {
        Ok(self.applier.prune_plan(keep).await?)
    }

    async fn prune(&self, plan: &PrunePlan) -> Vec<String> {
        self.applier.prune(plan).await
    }
}

/// A child cluster that writes nothing: every Description "applies" at once with a report of
/// success and no objects, credentials live in memory, and the heartbeat says healthy with no
/// nodes. For benchmarks
/// of the hub with more agents than child API servers fit on one machine; never for a real
/// cluster.
#[derive(Debug)]
pub struct NoopChild {
    cluster_id: String,
    credentials: Mutex<Option<Credentials>>,
}

impl NoopChild {
    /// A child of id `cluster_id` (a UUID, as the hub requires), with no credentials stored yet.
    pub fn new(cluster_id: &str) -> Self {
        Self {
            cluster_id: cluster_id.to_owned(),
            credentials: Mutex::new(None),
        }
    }

    fn credentials(&self) -> std::sync::MutexGuard<'_, Option<Credentials>> {
        self.credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ChildCluster for NoopChild {
    async fn cluster_id(&self) -> Result<String, Error> {
        Ok(self.cluster_id.clone())
    }

    async fn load_credentials(&self) -> Result<Option<Credentials>, Error> {
        Ok(self.credentials().clone())
    }

    async fn store_credentials(&self, creds: &Credentials) -> Result<(), Error> {
        *self.credentials() = Some(creds.clone());
        Ok(())
    }

    fn credentials_location(&self) -> String {
        "memory".to_owned()
    }

    async fn heartbeat(&self) -> Result<Heartbeat, Error> {
        // Healthy, so that the hub holds the cluster Ready as it would a real one.
        Ok(Heartbeat {
            healthz: true,
            livez: true,
            readyz: true,
            ..Heartbeat::default()
        })
    }

    fn set_scope(&self, _scope: Scope) {}

    async fn apply(&self, desc: &Description) -> Report {
        Report {
            name: desc.name.clone(),
            uid: desc.uid.clone(),
            observed_generation: desc.generation,
            phase: Phase::Success,
            ..Report::default()
        }
    }

    async fn delete(&self, _namespace: &str, name: &str, uid: &str) -> Report {
        Report {
            name: name.to_owned(),
            uid: uid.to_owned(),
            deleted: true,
            ..Report::default()
        }
    }

    fn report(&self, _key: &str) -> Option<Report> {
        None
    }

    async fn prune_plan(&self, _keep: &HashSet<String>) -> Result<PrunePlan, Error> {
        Ok(PrunePlan::default())
    }

    async fn prune(&self, _plan: &PrunePlan) -> Vec<String> {
        Vec::new()
    }
}
