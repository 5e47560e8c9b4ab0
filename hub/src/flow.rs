//! Per-stream flow control and stream ordering, as plain data: the latest-only pending queue,
//! the window of unacknowledged messages, stream epochs and the authorisation of reports.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A queue of pending changes keyed by name that keeps only the latest change of each name, in
/// the order names were first queued. A slow agent therefore costs memory proportional to the
/// number of distinct Descriptions, never to the number of changes it missed.
#[derive(Debug)]
pub struct PendingQueue<V> {
    order: VecDeque<Arc<str>>,
    items: HashMap<Arc<str>, V>,
}

impl<V> Default for PendingQueue<V> {
    fn default() -> Self {
        PendingQueue {
            order: VecDeque::new(),
            items: HashMap::new(),
        }
    }
}

impl<V> PendingQueue<V> {
    /// Queues `value` for `name`, replacing a queued value of the same name in place; returns
    /// whether it replaced one.
    pub fn push(&mut self, name: Arc<str>, value: V) -> bool {
        match self.items.get_mut(&name) {
            Some(slot) => {
                *slot = value;
                true
            }
            None => {
                self.order.push_back(name.clone());
                self.items.insert(name, value);
                false
            }
        }
    }

    /// Queues `value` for `name` unless a value of that name is queued already (a newer one,
    /// when `value` is one taken earlier to be retried); returns whether it queued it.
    pub fn push_if_absent(&mut self, name: Arc<str>, value: V) -> bool {
        if self.items.contains_key(&name) {
            return false;
        }
        self.order.push_back(name.clone());
        self.items.insert(name, value);
        true
    }

    /// Takes the oldest queued name with its latest value.
    pub fn pop(&mut self) -> Option<(Arc<str>, V)> {
        while let Some(name) = self.order.pop_front() {
            if let Some(v) = self.items.remove(&name) {
                return Some((name, v));
            }
        }
        None
    }

    /// Number of queued names.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        self.order.clear();
        self.items.clear();
    }
}

/// The wait before another try after `failures` failed tries in a row: `first`, doubled per
/// failure, at most `max`.
pub fn doubling_backoff(first: Duration, failures: u32, max: Duration) -> Duration {
    first.saturating_mul(1u32 << failures.min(16)).min(max)
}

/// The window of unacknowledged Description messages of one stream. Acks are cumulative: an
/// `Ack{seq}` acknowledges every message up to and including `seq`.
#[derive(Debug)]
pub struct Window {
    size: usize,
    in_flight: VecDeque<u64>,
    /// The highest number acknowledged (of any message, windowed or not).
    acked: u64,
}

impl Window {
    /// A window allowing `size` (at least 1) unacknowledged messages.
    pub fn new(size: u32) -> Window {
        let size = usize::try_from(size.max(1)).unwrap_or(usize::MAX);
        Window {
            size,
            in_flight: VecDeque::with_capacity(size.min(64)),
            acked: 0,
        }
    }

    /// Whether one more message may be sent now.
    pub fn can_send(&self) -> bool {
        self.in_flight.len() < self.size
    }

    /// Records that the message `seq` was sent.
    pub fn sent(&mut self, seq: u64) {
        self.in_flight.push_back(seq);
    }

    /// Applies a cumulative ack; returns how many messages it released.
    pub fn ack(&mut self, seq: u64) -> usize {
        self.acked = self.acked.max(seq);
        let before = self.in_flight.len();
        while self.in_flight.front().is_some_and(|s| *s <= seq) {
            self.in_flight.pop_front();
        }
        before - self.in_flight.len()
    }

    /// The highest number acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Number of unacknowledged messages.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// The epoch of a cluster's next stream, from the one recorded on its ManagedCluster (none, or
/// unreadable: 0). Epochs are claimed through the API server with the ManagedCluster's
/// resourceVersion as a precondition, so every replica sees one order, not its clock's.
pub fn next_epoch(recorded: Option<u64>) -> u64 {
    recorded.unwrap_or(0).saturating_add(1)
}

/// The epoch rule: a stream's messages count only while no newer stream of the same cluster
/// exists.
pub fn epoch_is_current(stream_epoch: u64, newest_epoch: u64) -> bool {
    stream_epoch >= newest_epoch
}

/// The newest stream epoch of each cluster seen by this hub.
#[derive(Debug, Default)]
pub struct EpochTable {
    newest: Mutex<HashMap<String, u64>>,
}

impl EpochTable {
    /// Records a new stream of `cluster_id`; returns whether it is now the newest.
    pub fn begin(&self, cluster_id: &str, epoch: u64) -> bool {
        let mut map = self.newest.lock();
        let slot = map.entry(cluster_id.to_string()).or_insert(0);
        if epoch >= *slot {
            *slot = epoch;
            true
        } else {
            false
        }
    }

    /// Whether the stream `epoch` of `cluster_id` is the cluster's newest.
    pub fn is_current(&self, cluster_id: &str, epoch: u64) -> bool {
        let newest = self.newest.lock().get(cluster_id).copied().unwrap_or(0);
        epoch_is_current(epoch, newest)
    }
}

/// What to do with a Description report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportDecision {
    /// Write it.
    Write,
    /// The stream is older than the cluster's newest stream: ignore it.
    IgnoreOlderStream,
    /// It is about another incarnation (uid) of the Description, or one already gone that this
    /// stream was sent: ignore it.
    IgnoreStale,
    /// It names a Description that is not in the stream's cluster namespace and was never sent
    /// on this stream: refuse with PERMISSION_DENIED and write nothing.
    Deny,
}

/// Authorises a report on Description `name` from a stream. `indexed_uid` is the uid of the
/// Description of that name in the stream's own namespace (`None` when there is none);
/// `sent_on_stream` says whether this stream was ever sent that name.
pub fn authorise_report(
    epoch_current: bool,
    indexed_uid: Option<&str>,
    sent_on_stream: bool,
    report_uid: &str,
) -> ReportDecision {
    match indexed_uid {
        None if sent_on_stream => ReportDecision::IgnoreStale,
        None => ReportDecision::Deny,
        Some(_) if !epoch_current => ReportDecision::IgnoreOlderStream,
        Some(uid) if !report_uid.is_empty() && report_uid != uid => ReportDecision::IgnoreStale,
        Some(_) => ReportDecision::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut PendingQueue<u32>) -> Vec<(String, u32)> {
        std::iter::from_fn(|| q.pop())
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn pending_queue_keeps_only_latest_value_per_name_in_first_queued_order() {
        let cases: Vec<(Vec<(&str, u32)>, Vec<(&str, u32)>)> = vec![
            (vec![], vec![]),
            (vec![("a", 1)], vec![("a", 1)]),
            (vec![("a", 1), ("a", 2), ("a", 3)], vec![("a", 3)]),
            (vec![("a", 1), ("b", 1), ("a", 2)], vec![("a", 2), ("b", 1)]),
            (
                vec![("b", 1), ("a", 1), ("c", 1), ("b", 9)],
                vec![("b", 9), ("a", 1), ("c", 1)],
            ),
        ];
        for (pushes, want) in cases {
            let mut q = PendingQueue::default();
            for (k, v) in &pushes {
                q.push(Arc::from(*k), *v);
            }
            let distinct: std::collections::HashSet<_> = pushes.iter().map(|p| p.0).collect();
            assert_eq!(q.len(), distinct.len());
            let want: Vec<(String, u32)> =
                want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(drain(&mut q), want, "pushes {pushes:?}");
            assert!(q.is_empty());
        }
    }

    #[test]
    fn pending_queue_memory_is_bounded_by_distinct_names() {
        let mut q = PendingQueue::default();
        for i in 0..10_000u32 {
            q.push(Arc::from(format!("d{}", i % 7).as_str()), i);
        }
        assert_eq!(q.len(), 7);
        let got = drain(&mut q);
        assert!(got.iter().all(|(_, v)| *v >= 10_000 - 7), "{got:?}");
    }

    #[test]
    fn pending_queue_requeue_after_pop_goes_to_the_back() {
        let mut q = PendingQueue::default();
        q.push(Arc::from("a"), 1);
        q.push(Arc::from("b"), 1);
        assert_eq!(q.pop().map(|(k, _)| k.to_string()), Some("a".into()));
        q.push(Arc::from("a"), 2);
        assert_eq!(drain(&mut q), vec![("b".into(), 1), ("a".into(), 2)]);
    }

    #[test]
    fn a_value_put_back_for_a_retry_never_replaces_a_newer_one() {
        let mut q = PendingQueue::default();
        q.push(Arc::from("a"), 1);
        let (name, old) = q.pop().unwrap();
        q.push(Arc::from("a"), 2);
        assert!(!q.push_if_absent(name.clone(), old));
        assert_eq!(drain(&mut q), vec![("a".into(), 2)]);
        assert!(q.push_if_absent(name, old));
        assert_eq!(drain(&mut q), vec![("a".into(), 1)]);
    }

    #[test]
    fn window_limits_unacknowledged_messages_and_acks_are_cumulative() {
        // (window size, sends, ack, expected in flight after ack, can send after ack)
        let cases = [
            (1u32, 1u64, 0u64, 1usize, false),
            (1, 1, 1, 0, true),
            (3, 3, 2, 1, true),
            (3, 3, 0, 3, false),
            (3, 3, 99, 0, true),
            (0, 1, 0, 1, false),
        ];
        for (size, sends, ack, in_flight, can_send) in cases {
            let mut w = Window::new(size);
            for seq in 1..=sends {
                assert!(w.can_send(), "size {size} seq {seq}");
                w.sent(seq);
            }
            w.ack(ack);
            assert_eq!(w.in_flight(), in_flight, "size {size} ack {ack}");
            assert_eq!(w.can_send(), can_send, "size {size} ack {ack}");
        }
    }

    #[test]
    fn a_new_stream_epoch_is_one_more_than_the_recorded_one() {
        for (recorded, next) in [
            (None, 1),
            (Some("0"), 1),
            (Some("41"), 42),
            (Some(" 7 "), 8),
            (Some("garbage"), 1),
            (Some("18446744073709551615"), u64::MAX),
        ] {
            let mut mc = atoll_crds::clusters::ManagedCluster::new("c", Default::default());
            if let Some(v) = recorded {
                mc.metadata.annotations = Some(
                    [(
                        crate::streams::ANNOTATION_STREAM_EPOCH.to_string(),
                        v.to_string(),
                    )]
                    .into(),
                );
            }
            let got = next_epoch(crate::streams::recorded_epoch(&mc));
            assert_eq!(got, next, "{recorded:?}");
        }
    }

    #[test]
    fn epoch_rule_ignores_older_streams_of_the_same_cluster_only() {
        let t = EpochTable::default();
        assert!(t.begin("c1", 10));
        assert!(t.is_current("c1", 10));
        assert!(t.begin("c1", 20));
        assert!(!t.is_current("c1", 10));
        assert!(t.is_current("c1", 20));
        assert!(!t.begin("c1", 15));
        assert!(t.is_current("c1", 20));
        assert!(t.begin("c2", 5));
        assert!(t.is_current("c2", 5));
        for (stream, newest, ok) in [(1, 1, true), (2, 1, true), (1, 2, false)] {
            assert_eq!(epoch_is_current(stream, newest), ok);
        }
    }

    #[test]
    fn report_authorisation_table() {
        use ReportDecision::*;
        let cases = [
            (true, Some("u1"), true, "u1", Write),
            (true, Some("u1"), false, "", Write),
            (true, Some("u1"), true, "u2", IgnoreStale),
            (false, Some("u1"), true, "u1", IgnoreOlderStream),
            (true, None, true, "u1", IgnoreStale),
            (true, None, false, "u1", Deny),
            (false, None, false, "u1", Deny),
        ];
        for (current, idx, sent, uid, want) in cases {
            assert_eq!(
                authorise_report(current, idx, sent, uid),
                want,
                "{current} {idx:?} {sent} {uid}"
            );
        }
    }
}
