//! What the gRPC service needs from the parent cluster, as a trait: [`crate::backend`]
//! implements it against the parent's API server, the service's tests with a fake.

use crate::Error;
use crate::domain::{Admission, AgentHello, ClusterHeartbeat, PullCredentials, Session};
use crate::index::DescEntry;
use atoll_applier::model::Report;
use std::future::Future;
use std::sync::Arc;

/// What the service needs from the parent cluster.
pub trait Backend: Send + Sync + 'static {
    /// Authenticates a Hello and registers (or finds) its cluster. May wait for a manual
    /// approval.
    fn admit(&self, hello: &AgentHello) -> impl Future<Output = Result<Admission, Error>> + Send;
    /// The epoch of a new stream of the admitted cluster: one more than the newest recorded
    /// for it, recorded through the API server (so that every replica orders the cluster's
    /// streams the same way, whatever their clocks say).
    fn claim_epoch(
        &self,
        cluster_id: &str,
        admission: &Admission,
    ) -> impl Future<Output = Result<u64, Error>> + Send;
    /// A stream of the cluster became its newest: clear any disconnection marks.
    fn connected(&self, session: &Session) -> impl Future<Output = ()> + Send;
    /// Writes a heartbeat to the ManagedCluster status.
    fn heartbeat(
        &self,
        session: &Session,
        heartbeat: ClusterHeartbeat,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// Writes an authorised report on `entry` (a Description of the session's namespace).
    fn report(
        &self,
        session: &Session,
        entry: Arc<DescEntry>,
        report: Report,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// The cluster's newest stream ended.
    fn disconnected(&self, session: &Session) -> impl Future<Output = ()> + Send;
    /// The prune confirmation on the cluster's ManagedCluster (`hub.atoll.io/confirm-prune`),
    /// empty when absent; sent with each snapshot marker.
    fn confirmed_prune(&self, session: &Session) -> String {
        let _ = session;
        String::new()
    }
    /// The username and password in Secret `name` of `namespace` (a HelmChart's
    /// `chartPullSecret`), or why they cannot be read, in words for the chart's owner.
    fn pull_credentials(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<PullCredentials, String>> + Send {
        let reason = format!("this hub reads no Secrets, so not {namespace}/{name}");
        async move { Err(reason) }
    }
}
