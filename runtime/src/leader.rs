//! Leader election through a `coordination.k8s.io/v1` Lease, as client-go does it: one replica
//! holds the Lease and renews it; the others watch it and take over once it has not been renewed
//! for a lease duration. Expiry is judged by when *this* process last saw the Lease change, not by
//! the timestamps written in it, so clock skew between replicas does not matter.

use crate::Error;
use crate::admin::Readiness;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

/// Contends for one Lease.
#[derive(Clone)]
pub struct LeaderElection {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    lease_duration: Duration,
    observed: Arc<Mutex<Option<Observed>>>,
}

/// The Lease record as last seen, and when it was seen to change.
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    at: Instant,
}

impl LeaderElection {
    /// A contender for Lease `namespace/name` under `identity`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration,
            observed: Arc::new(Mutex::new(None)),
        }
    }

    /// The identity this contender writes into the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn lease_error(&self, source: kube::Error) -> Error {
        Error::LeaderLease {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    async fn read_lease(&self) -> Result<Option<Lease>, Error> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.lease_error(e))
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// One round: creates the Lease, renews it if held, or takes it over if it expired.
    /// Returns whether this contender holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, Error> {
        // At the precision the API server keeps (microseconds), so that the Lease read back can
        // show this very write.
        let now = Timestamp::now();
        let now = MicroTime(Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now));
        let Some(mut lease) = self.read_lease().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now.clone()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => self.landed(&now).await,
                Err(e) => Err(self.lease_error(e)),
            };
        };

        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let held_by_me = holder.as_deref() == Some(self.identity.as_str());
        if !held_by_me && !self.expired(holder.clone(), spec.renew_time.clone()).await {
            return Ok(false);
        }
        if !held_by_me {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(self.lease_seconds());
        spec.renew_time = Some(now.clone());
        // The replace carries the resourceVersion we read: a racing contender gets a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => self.landed(&now).await,
            Err(e) => Err(self.lease_error(e)),
        }
    }

    /// After a conflict: whether the Lease shows this contender's own write of `renew_time`
    /// anyway (the write landed, and the conflict answered the same request sent again after
    /// its answer was lost), so that the Lease is held rather than taken as lost.
    async fn landed(&self, renew_time: &MicroTime) -> Result<bool, Error> {
        let Some(lease) = self.read_lease().await? else {
            return Ok(false);
        };
        let spec = lease.spec.unwrap_or_default();
        Ok(
            spec.holder_identity.as_deref() == Some(self.identity.as_str())
                && spec.renew_time.as_ref() == Some(renew_time),
        )
    }

    /// Whether another holder's Lease has gone unrenewed for a whole lease duration, as observed
    /// by this process.
    async fn expired(&self, holder: Option<String>, renew_time: Option<MicroTime>) -> bool {
        if holder.is_none() {
            return true;
        }
        let mut observed = self.observed.lock().await;
        match observed.as_ref() {
            Some(o) if o.holder == holder && o.renew_time == renew_time => {
                o.at.elapsed() >= self.lease_duration
            }
            _ => {
                *observed = Some(Observed {
                    holder,
                    renew_time,
                    at: Instant::now(),
                });
                false
            }
        }
    }

    /// Waits until this contender holds the Lease, then keeps renewing it in the background.
    /// Errors while waiting are logged and retried.
    pub async fn acquire(self) -> Leadership {
        self.acquire_standing_by(&Readiness::default()).await
    }

    /// [`LeaderElection::acquire`], with `standing_by` set while this contender stands by: its
    /// last round reached the API server and another replica holds the Lease. A standby is
    /// Ready (readiness means serving or standing by), so that a Deployment of two replicas
    /// shows 2/2 and a rolling update goes on; a round that fails clears it. It is left as it
    /// is once the Lease is held: the caller says when it serves.
    pub async fn acquire_standing_by(self, standing_by: &Readiness) -> Leadership {
        let retry = self.lease_duration / 5;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => standing_by.set(true),
                Err(e) => {
                    standing_by.set(false);
                    tracing::warn!(error = %e, "leader election round failed");
                }
            }
            tokio::time::sleep(retry).await;
        }
        tracing::info!(identity = %self.identity, lease = %self.name, "became leader");
        let (lost_tx, lost_rx) = watch::channel(false);
        let elector = self.clone();
        let task = tokio::spawn(async move { elector.renew_until_lost(lost_tx).await });
        Leadership {
            elector: self,
            lost: lost_rx,
            task,
        }
    }

    async fn renew_until_lost(self, lost: watch::Sender<bool>) {
        let period = self.lease_duration / 3;
        // Give up before another contender may take over: two thirds of the lease duration.
        let deadline = self.lease_duration * 2 / 3;
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, "another replica took the lease");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the lease failed");
                    if last_renewed.elapsed() >= deadline {
                        tracing::error!(lease = %self.name, "could not renew the lease in time");
                        break;
                    }
                }
            }
        }
        let _ = lost.send(true);
    }

    /// Gives the Lease up so that another replica can take over at once (best effort).
    pub async fn release(&self) -> Result<(), Error> {
        let Some(mut lease) = self.read_lease().await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
            .map_err(|e| self.lease_error(e))
    }
}

/// Held leadership. Renewal runs until [`Leadership::lost`] fires or the value is dropped.
pub struct Leadership {
    elector: LeaderElection,
    lost: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Resolves when leadership is lost; the process should stop its work (and usually exit so
    /// that it restarts as a contender).
    pub async fn lost(&mut self) {
        while !*self.lost.borrow() {
            if self.lost.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops renewing and gives the Lease up for a fast hand-over.
    pub async fn release(self) -> Result<(), Error> {
        self.task.abort();
        self.elector.release().await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A default identity: the host name plus a random suffix, so two replicas on one host differ.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .or_else(|_| std::env::var("POD_NAME"))
        .unwrap_or_else(|_| "atoll".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:08x}", nanos ^ std::process::id())
}
