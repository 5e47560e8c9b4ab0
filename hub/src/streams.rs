//! The agent streams open on this hub replica, so that a revocation reaches a stream that is
//! already open instead of waiting for its next handshake: a newer stream of the same cluster,
//! a revoked or rotated cluster token, a deleted ManagedCluster and a denied registration each
//! close the streams they concern, with a status that tells the agent what happened.
//!
//! The rules (which event closes which stream, with which status) are pure functions here; the
//! watches that feed them are in [`crate::controllers`].

use crate::domain::{Credentials, Session};
use crate::token::{ANNOTATION_ROTATE_TOKEN, TokenRecord};
use atoll_crds::clusters::{ApprovedResult, ClusterRegistrationRequest, ManagedCluster};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Notify, oneshot};
use tonic::Status;

/// What is known of one open stream.
struct OpenStream {
    epoch: u64,
    namespace: String,
    credentials: Credentials,
    close: oneshot::Sender<Status>,
    /// The ManagedCluster's prune confirmation as this stream last sent it, and the signal that
    /// makes the stream send a fresh snapshot (carrying the new value) when it changes.
    prune: Option<(String, Arc<Notify>)>,
}

/// The open streams of this replica, by cluster id.
#[derive(Default)]
pub struct OpenStreams {
    by_cluster: Mutex<HashMap<String, Vec<OpenStream>>>,
}

/// Resolves when the hub closes the stream, with the status to end it with.
pub type CloseSignal = oneshot::Receiver<Status>;

/// Annotation on a ManagedCluster: the epoch of the cluster's newest agent stream, on whichever
/// hub replica it is. Replicas ignore reports and heartbeats of older streams.
pub const ANNOTATION_STREAM_EPOCH: &str = "hub.atoll.io/stream-epoch";

/// Annotation on a ManagedCluster, written with [`ANNOTATION_STREAM_EPOCH`]: a random mark of
/// the claim that wrote the epoch, so that a replica whose write landed but was answered with a
/// conflict (its answer lost and the request sent again) knows the epoch is its own.
pub const ANNOTATION_STREAM_EPOCH_CLAIM: &str = "hub.atoll.io/stream-epoch-claim";

/// Whether `mc` records `epoch` as claimed by `claim` ([`ANNOTATION_STREAM_EPOCH_CLAIM`]).
pub fn epoch_claimed_by(mc: &ManagedCluster, epoch: u64, claim: &str) -> bool {
    recorded_epoch(mc) == Some(epoch)
        && mc
            .annotations()
            .get(ANNOTATION_STREAM_EPOCH_CLAIM)
            .is_some_and(|c| c == claim)
}

/// The newest stream epoch recorded on `mc` ([`ANNOTATION_STREAM_EPOCH`]), if readable.
pub fn recorded_epoch(mc: &ManagedCluster) -> Option<u64> {
    mc.annotations()
        .get(ANNOTATION_STREAM_EPOCH)
        .and_then(|v| v.trim().parse().ok())
}

/// Whether `mc` records a stream of its cluster newer than `epoch` (on any replica).
pub fn newer_stream_recorded(mc: &ManagedCluster, epoch: u64) -> bool {
    recorded_epoch(mc).is_some_and(|newest| newest > epoch)
}

/// The prune confirmation on a ManagedCluster (`hub.atoll.io/confirm-prune`), empty when absent.
pub fn prune_confirmation(mc: &ManagedCluster) -> String {
    mc.annotations()
        .get(atoll_crds::known::ANNOTATION_CONFIRM_PRUNE)
        .cloned()
        .unwrap_or_default()
}

/// The status a stream replaced by a newer one of its cluster ends with.
pub fn superseded_status(where_: &str) -> Status {
    Status::aborted(format!(
        "a newer stream of this cluster started {where_}; this one is closed"
    ))
}

impl OpenStreams {
    /// Records a stream that finished its handshake, and closes the older streams of its
    /// cluster on this replica: only the newest stream of a cluster stays open.
    pub fn open(&self, session: &Session, credentials: Credentials) -> CloseSignal {
        let (tx, rx) = oneshot::channel();
        let mut map = self.by_cluster.lock();
        let streams = map.entry(session.cluster_id.clone()).or_default();
        for older in std::mem::take(streams) {
            if older.epoch < session.epoch {
                let _ = older.close.send(superseded_status("on this hub"));
            } else {
                streams.push(older);
            }
        }
        streams.push(OpenStream {
            epoch: session.epoch,
            namespace: session.namespace.clone(),
            credentials,
            close: tx,
            prune: None,
        });
        rx
    }

    /// Follows the ManagedCluster's prune confirmation (`hub.atoll.io/confirm-prune`, now
    /// `current`) for an open stream: the returned signal fires when it changes, so that the
    /// stream sends a fresh snapshot whose marker carries the new value.
    pub fn follow_prune_confirmation(&self, session: &Session, current: String) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        let mut map = self.by_cluster.lock();
        if let Some(s) = map
            .get_mut(&session.cluster_id)
            .and_then(|v| v.iter_mut().find(|s| s.epoch == session.epoch))
        {
            s.prune = Some((current, notify.clone()));
        }
        notify
    }

    /// Forgets a stream that ended.
    pub fn end(&self, session: &Session) {
        let mut map = self.by_cluster.lock();
        if let Some(streams) = map.get_mut(&session.cluster_id) {
            streams.retain(|s| s.epoch != session.epoch);
            if streams.is_empty() {
                map.remove(&session.cluster_id);
            }
        }
    }

    /// Streams open on this replica.
    pub fn len(&self) -> usize {
        self.by_cluster.lock().values().map(Vec::len).sum()
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the streams `rule` returns a status for; returns how many were closed.
    fn close_where(
        &self,
        cluster_id: Option<&str>,
        rule: impl Fn(u64, &str, &Credentials) -> Option<Status>,
    ) -> usize {
        let mut map = self.by_cluster.lock();
        let mut closed = 0;
        for (id, streams) in map.iter_mut() {
            if cluster_id.is_some_and(|c| c != id) {
                continue;
            }
            for s in std::mem::take(streams) {
                match rule(s.epoch, &s.namespace, &s.credentials) {
                    Some(status) => {
                        tracing::info!(cluster_id = %id, epoch = s.epoch, reason = %status.message(), "closing an agent stream");
                        let _ = s.close.send(status);
                        closed += 1;
                    }
                    None => streams.push(s),
                }
            }
        }
        map.retain(|_, v| !v.is_empty());
        closed
    }

    /// Closes every open stream with `status()`; returns how many.
    pub fn close_all(&self, status: impl Fn() -> Status) -> usize {
        self.close_where(None, |_, _, _| Some(status()))
    }

    /// A ManagedCluster changed or was deleted (`deleted`): closes the streams of its cluster
    /// that [`cluster_close_reason`] says must end.
    pub fn cluster_changed(&self, mc: &ManagedCluster, deleted: bool) -> usize {
        let ns = mc.namespace().unwrap_or_default();
        if !deleted {
            let confirmed = prune_confirmation(mc);
            let mut map = self.by_cluster.lock();
            for s in map.get_mut(&mc.spec.cluster_id).into_iter().flatten() {
                if s.namespace == ns
                    && let Some((seen, resync)) = &mut s.prune
                    && *seen != confirmed
                {
                    seen.clone_from(&confirmed);
                    resync.notify_one();
                }
            }
        }
        self.close_where(Some(&mc.spec.cluster_id), |epoch, namespace, creds| {
            (namespace == ns)
                .then(|| cluster_close_reason(mc, deleted, epoch, creds))
                .flatten()
        })
    }

    /// The cluster-token record of dedicated namespace `ns` changed (`None`: the Secret is
    /// gone): closes the streams of that namespace whose token it no longer accepts.
    pub fn token_changed(&self, ns: &str, record: Option<&TokenRecord>, now: Timestamp) -> usize {
        self.close_where(None, |_, namespace, creds| {
            (namespace == ns)
                .then(|| token_close_reason(record, creds, now))
                .flatten()
        })
    }

    /// A ClusterRegistrationRequest changed: a denied registration closes its cluster's
    /// streams.
    pub fn registration_changed(&self, crr: &ClusterRegistrationRequest) -> usize {
        match registration_close_reason(crr) {
            Some(status) => {
                self.close_where(Some(&crr.spec.cluster_id), |_, _, _| Some(status.clone()))
            }
            None => 0,
        }
    }
}

/// Why a stream of `mc`'s cluster with `epoch`, opened with `creds`, must end, if it must.
pub fn cluster_close_reason(
    mc: &ManagedCluster,
    deleted: bool,
    epoch: u64,
    creds: &Credentials,
) -> Option<Status> {
    if deleted {
        return Some(Status::unauthenticated(
            "the cluster's ManagedCluster was deleted; its cluster token is revoked (register \
             again with a bootstrap token)",
        ));
    }
    if newer_stream_recorded(mc, epoch) {
        return Some(superseded_status("on another hub replica"));
    }
    let requested = mc.annotations().get(ANNOTATION_ROTATE_TOKEN);
    if requested.is_some_and(|r| creds.rotation.as_ref() != Some(r)) {
        return Some(Status::unavailable(
            "an administrator asked for a new cluster token; reconnect to get it",
        ));
    }
    None
}

/// Why a stream opened with `creds` must end now that its namespace's token record is
/// `record`, if it must.
pub fn token_close_reason(
    record: Option<&TokenRecord>,
    creds: &Credentials,
    now: Timestamp,
) -> Option<Status> {
    let rejection = match record {
        None => crate::token::TokenRejection::ClusterTokenMismatch,
        Some(r) => match r.check(&creds.token_sha256, now) {
            Ok(_) => return None,
            Err(e) => e,
        },
    };
    Some(Status::unauthenticated(format!(
        "cluster token revoked while connected: {rejection}"
    )))
}

/// Whether a change of `crr` ends its cluster's streams: a denied (or failed) registration.
pub fn registration_close_reason(crr: &ClusterRegistrationRequest) -> Option<Status> {
    let st = crr.status.as_ref()?;
    match st.result {
        Some(ApprovedResult::Denied) | Some(ApprovedResult::Failed) => {
            Some(Status::permission_denied(format!(
                "the cluster's registration was denied: {}",
                st.error_message
                    .as_deref()
                    .unwrap_or("denied by an administrator")
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{TokenRecord, sha256_hex};
    use atoll_crds::clusters::{ClusterRegistrationRequestSpec, ManagedClusterSpec};
    use tonic::Code;

    fn session(cluster: &str, ns: &str, epoch: u64) -> Session {
        Session {
            cluster_id: cluster.into(),
            namespace: ns.into(),
            managed_cluster_name: "c".into(),
            epoch,
        }
    }

    fn creds(token: &str, rotation: Option<&str>) -> Credentials {
        Credentials {
            token_sha256: sha256_hex(token),
            rotation: rotation.map(str::to_string),
            renew_at: None,
        }
    }

    fn mc(cluster: &str, ns: &str, annotations: &[(&str, &str)]) -> ManagedCluster {
        let mut mc = ManagedCluster::new(
            "c",
            ManagedClusterSpec {
                cluster_id: cluster.into(),
                ..ManagedClusterSpec::default()
            },
        );
        mc.metadata.namespace = Some(ns.into());
        mc.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        mc
    }

    fn closed(rx: &mut CloseSignal) -> Option<Code> {
        rx.try_recv().ok().map(|s| s.code())
    }

    /// Whether `n` was notified (a permit is stored), without waiting.
    fn notified(n: &Notify) -> bool {
        use std::future::Future;
        let fut = std::pin::pin!(n.notified());
        let waker = std::task::Waker::noop();
        fut.poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn a_changed_prune_confirmation_asks_the_stream_for_a_fresh_snapshot_once() {
        let streams = OpenStreams::default();
        let s = session("a", "ns-a", 1);
        let _close = streams.open(&s, creds("t", None));
        let resync = streams.follow_prune_confirmation(&s, String::new());
        let confirm = |id: &str| {
            mc(
                "a",
                "ns-a",
                &[(atoll_crds::known::ANNOTATION_CONFIRM_PRUNE, id)],
            )
        };
        streams.cluster_changed(&mc("a", "ns-a", &[]), false);
        assert!(!notified(&resync), "a status write is no reason to resync");
        streams.cluster_changed(&confirm("abc"), false);
        assert!(notified(&resync));
        streams.cluster_changed(&confirm("abc"), false);
        assert!(!notified(&resync), "the same confirmation again");
        streams.cluster_changed(
            &mc(
                "b",
                "ns-a",
                &[(atoll_crds::known::ANNOTATION_CONFIRM_PRUNE, "x")],
            ),
            false,
        );
        assert!(!notified(&resync), "another cluster's annotation");
        streams.cluster_changed(&confirm("def"), false);
        assert!(notified(&resync));
    }

    #[test]
    fn a_newer_stream_of_a_cluster_closes_the_older_one() {
        let streams = OpenStreams::default();
        let mut first = streams.open(&session("a", "ns-a", 1), creds("t", None));
        let mut other = streams.open(&session("b", "ns-b", 2), creds("t", None));
        let mut second = streams.open(&session("a", "ns-a", 3), creds("t", None));
        assert_eq!(closed(&mut first), Some(Code::Aborted));
        assert_eq!(closed(&mut second), None);
        assert_eq!(closed(&mut other), None);
        assert_eq!(streams.len(), 2);
        streams.end(&session("a", "ns-a", 3));
        streams.end(&session("b", "ns-b", 2));
        assert!(streams.is_empty());
    }

    /// An epoch is the claim's own only when both the epoch and the claim's mark are there: a
    /// conflict answered to a write that landed, not another replica's claim of that epoch.
    #[test]
    fn an_epoch_is_claimed_by_the_write_whose_mark_it_carries() {
        let (epoch, claim) = (ANNOTATION_STREAM_EPOCH, ANNOTATION_STREAM_EPOCH_CLAIM);
        let cases = [
            (mc("a", "ns", &[(epoch, "7"), (claim, "ours")]), true),
            (mc("a", "ns", &[(epoch, "7"), (claim, "theirs")]), false),
            (mc("a", "ns", &[(epoch, "8"), (claim, "ours")]), false),
            (mc("a", "ns", &[(epoch, "7")]), false),
            (mc("a", "ns", &[]), false),
        ];
        for (cluster, want) in cases {
            assert_eq!(
                epoch_claimed_by(&cluster, 7, "ours"),
                want,
                "{:?}",
                cluster.metadata.annotations
            );
        }
    }

    #[test]
    fn cluster_changes_close_deleted_superseded_and_rotated_streams_only() {
        let plain = creds("t", None);
        let answered = creds("t", Some("r1"));
        let epoch = ANNOTATION_STREAM_EPOCH;
        let cases = [
            (mc("a", "ns", &[]), false, 5, &plain, None),
            (
                mc("a", "ns", &[]),
                true,
                5,
                &plain,
                Some(Code::Unauthenticated),
            ),
            (mc("a", "ns", &[(epoch, "5")]), false, 5, &plain, None),
            (mc("a", "ns", &[(epoch, "4")]), false, 5, &plain, None),
            (
                mc("a", "ns", &[(epoch, "6")]),
                false,
                5,
                &plain,
                Some(Code::Aborted),
            ),
            (
                mc("a", "ns", &[(ANNOTATION_ROTATE_TOKEN, "r1")]),
                false,
                5,
                &plain,
                Some(Code::Unavailable),
            ),
            (
                mc("a", "ns", &[(ANNOTATION_ROTATE_TOKEN, "r1")]),
                false,
                5,
                &answered,
                None,
            ),
        ];
        for (i, (mc, deleted, e, c, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                cluster_close_reason(&mc, deleted, e, c).map(|s| s.code()),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn a_revoked_or_replaced_token_closes_the_streams_of_its_namespace_only() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let streams = OpenStreams::default();
        let mut a = streams.open(&session("a", "ns-a", 1), creds("ta", None));
        let mut b = streams.open(&session("b", "ns-b", 2), creds("tb", None));
        // A rotation that keeps the old hash as previous leaves the stream open.
        let mut rotated = TokenRecord::issue("ta2", now, None, None);
        rotated.previous = Some(sha256_hex("ta"));
        assert_eq!(streams.token_changed("ns-a", Some(&rotated), now), 0);
        // Once the previous hash is gone, a stream on the old token is closed.
        let replaced = TokenRecord::issue("ta3", now, None, None);
        assert_eq!(streams.token_changed("ns-a", Some(&replaced), now), 1);
        assert_eq!(closed(&mut a), Some(Code::Unauthenticated));
        assert_eq!(closed(&mut b), None);
        // A deleted Secret revokes too.
        assert_eq!(streams.token_changed("ns-b", None, now), 1);
        assert_eq!(closed(&mut b), Some(Code::Unauthenticated));
        assert!(streams.is_empty());
    }

    #[test]
    fn a_denied_registration_closes_its_clusters_streams() {
        let streams = OpenStreams::default();
        let mut a = streams.open(&session("a", "ns-a", 1), creds("t", None));
        let mut crr = ClusterRegistrationRequest::new(
            "clusternet-a",
            ClusterRegistrationRequestSpec {
                cluster_id: "a".into(),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        crr.status = Some(Default::default());
        assert_eq!(streams.registration_changed(&crr), 0);
        if let Some(st) = crr.status.as_mut() {
            st.result = Some(ApprovedResult::Approved);
        }
        assert_eq!(streams.registration_changed(&crr), 0);
        if let Some(st) = crr.status.as_mut() {
            st.result = Some(ApprovedResult::Denied);
        }
        assert_eq!(streams.registration_changed(&crr), 1);
        assert_eq!(closed(&mut a), Some(Code::PermissionDenied));
    }
}
