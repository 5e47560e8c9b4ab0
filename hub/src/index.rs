//! The in-memory index of Descriptions (namespace → name → entry) that one shared watch keeps
//! current, and the fan-out of its changes to the agent streams subscribed to a namespace.
//!
//! Each stream owns a [`StreamQueue`]: a latest-only pending queue plus a wake-up. The index
//! pushes a change into the queues of the namespace's subscribers under its lock and never waits
//! for a stream, so a slow agent cannot block the watch or the other agents.

use crate::flow::PendingQueue;
use crate::watched::WatchedDescription;
use atoll_crds::apps::DescriptionStatus;
use atoll_crds::known;
use atoll_runtime::ready::Ready;
use bytes::Bytes;
use kube::ResourceExt;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::Notify;

/// One Description as the hub needs it: identity, the encoded objects (shared by every stream),
/// deletion state, finalizers and the last status seen.
#[derive(Clone, Debug, PartialEq)]
pub struct DescEntry {
    /// The cluster's dedicated namespace.
    pub namespace: String,
    /// The Description's name (`<sub-namespace>.<sub-name>`).
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.raw`, one JSON document per object.
    pub objects: Vec<Bytes>,
    /// `spec.chartRaw` with `spec.chartValues`, JSON, one pair per chart.
    pub charts: Vec<ChartEntry>,
    /// Whether the Description has a deletionTimestamp.
    pub deleting: bool,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `status`, as last seen.
    pub status: Option<DescriptionStatus>,
    /// Why the hub refuses to deliver this Description (over a limit), if it does.
    pub rejected: Option<String>,
}

/// One chart of a Description, encoded once for every stream, and read once for the status
/// writes every report of it makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartEntry {
    /// The HelmChart object after chart-level overrides.
    pub chart: Bytes,
    /// The Helm values after overrides.
    pub values: Bytes,
    /// What the HelmChart says of its release; `None` when the object is not a HelmChart.
    pub release: Option<ChartRelease>,
}

/// The release a chart of a Description is installed as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartRelease {
    /// The HelmChart's name, which is the release name.
    pub name: String,
    /// The namespace in the parent of the HelmChart the Subscription named (the Description's
    /// `spec.charts`, never the rendered object, whose namespace its source could set): whose
    /// `chartPullSecret` the chart may use.
    pub chart_namespace: String,
    /// The namespace the release is installed in, in the child.
    pub target_namespace: String,
    /// The chart and Helm's options.
    pub options: atoll_crds::helm::HelmOptions,
}

impl ChartEntry {
    /// The entry of a chart object and its values, rendered from the HelmChart of
    /// `chart_namespace` that a Subscription named.
    pub fn new(
        chart_namespace: &str,
        chart: &serde_json::Value,
        values: &serde_json::Value,
    ) -> ChartEntry {
        let encode = |v: &serde_json::Value| Bytes::from(serde_json::to_vec(v).unwrap_or_default());
        let release = serde_json::from_value::<atoll_crds::helm::HelmChart>(chart.clone())
            .ok()
            .map(|c| ChartRelease {
                name: c.metadata.name.unwrap_or_default(),
                chart_namespace: chart_namespace.to_owned(),
                target_namespace: c.spec.target_namespace,
                options: c.spec.options,
            });
        ChartEntry {
            chart: encode(chart),
            values: encode(values),
            release,
        }
    }
}

/// Limits applied to each Description before it is delivered.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most objects in one Description.
    pub max_objects_per_description: usize,
    /// Most encoded bytes of one Description's objects (keep below the agent's decode limit).
    pub max_description_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_objects_per_description: 1000,
            max_description_bytes: 4 * 1024 * 1024 - 64 * 1024,
        }
    }
}

impl DescEntry {
    /// Builds the entry of a watched Description, keeping each object's JSON text as received.
    pub fn from_watched(d: &WatchedDescription, limits: Limits) -> DescEntry {
        let objects: Vec<Bytes> = d
            .spec
            .raw
            .iter()
            .map(|o| Bytes::copy_from_slice(o.get().as_bytes()))
            .collect();
        let empty = serde_json::Value::Object(serde_json::Map::new());
        let charts: Vec<ChartEntry> = d
            .spec
            .chart_raw
            .iter()
            .enumerate()
            .map(|(i, chart)| {
                let source = d.spec.charts.get(i).map_or("", |c| c.namespace.as_str());
                ChartEntry::new(source, chart, d.spec.chart_values.get(i).unwrap_or(&empty))
            })
            .collect();
        let size: usize = objects.iter().map(Bytes::len).sum::<usize>()
            + charts
                .iter()
                .map(|c| c.chart.len() + c.values.len())
                .sum::<usize>();
        let rejected = if objects.len() > limits.max_objects_per_description {
            Some(format!(
                "the Description has {} objects, more than the hub's limit of {} \
                 (--max-objects-per-description); split the Subscription's feeds",
                objects.len(),
                limits.max_objects_per_description
            ))
        } else if size > limits.max_description_bytes {
            Some(format!(
                "the Description's objects take {size} bytes, more than the hub's limit of {} \
                 (--max-message-bytes); split the Subscription's feeds",
                limits.max_description_bytes
            ))
        } else {
            None
        };
        DescEntry {
            namespace: d.namespace().unwrap_or_default(),
            name: d.name_any(),
            uid: d.uid().unwrap_or_default(),
            resource_version: d.resource_version().unwrap_or_default(),
            generation: d.metadata.generation.unwrap_or_default(),
            objects: if rejected.is_some() {
                Vec::new()
            } else {
                objects
            },
            charts: if rejected.is_some() {
                Vec::new()
            } else {
                charts
            },
            deleting: d.metadata.deletion_timestamp.is_some(),
            labels: d.labels().clone(),
            finalizers: d.finalizers().to_vec(),
            status: d.status.clone(),
            rejected,
        }
    }

    /// Whether agents get this entry's objects: it is within the limits, it keeps an earlier
    /// version that was, or it is being deleted (the agent deletes from its inventory, so the
    /// objects are not needed). Other entries are sent as withheld.
    pub fn deliverable(&self) -> bool {
        self.deleting
            || self.rejected.is_none()
            || !self.objects.is_empty()
            || !self.charts.is_empty()
    }

    /// What a stream is sent for this entry.
    fn change(self: &Arc<Self>) -> Change {
        if self.deliverable() {
            Change::Upsert(self.clone())
        } else {
            Change::Withheld(self.clone())
        }
    }

    /// Whether the hub's finalizer is set.
    pub fn has_finalizer(&self) -> bool {
        self.finalizers.iter().any(|f| f == known::FINALIZER)
    }

    /// The Subscription `(namespace, name)` this Description was rendered for, from its labels
    /// (or, failing that, its name).
    pub fn subscription(&self) -> Option<(String, String)> {
        match (
            self.labels.get(known::LABEL_SUBS_NAMESPACE),
            self.labels.get(known::LABEL_SUBS_NAME),
        ) {
            (Some(ns), Some(name)) => Some((ns.clone(), name.clone())),
            _ => known::parse_description_name(&self.name)
                .map(|(ns, name)| (ns.to_string(), name.to_string())),
        }
    }

    /// Whether anything an agent sees changed between `self` and `other`.
    fn delivery_differs(&self, other: &DescEntry) -> bool {
        self.uid != other.uid
            || self.generation != other.generation
            || self.deleting != other.deleting
            || self.objects != other.objects
            || self.labels != other.labels
            || self.deliverable() != other.deliverable()
    }
}

/// A change queued for one stream.
#[derive(Clone, Debug)]
pub enum Change {
    /// Send (or resend) this Description.
    Upsert(Arc<DescEntry>),
    /// The Description exists but is over a limit with no earlier version within it: the agent
    /// is told to keep what runs for it (and not to prune it after a snapshot).
    Withheld(Arc<DescEntry>),
    /// The Description is gone from the parent.
    Removed {
        /// Its uid.
        uid: String,
    },
}

/// The queue and wake-up of one stream.
#[derive(Debug, Default)]
pub struct StreamQueue {
    state: Mutex<QueueState>,
    notify: Notify,
    /// The stream's epoch (0 for a pushed cluster's session).
    epoch: u64,
}

#[derive(Debug, Default)]
struct QueueState {
    pending: PendingQueue<Change>,
    snapshot_pending: bool,
}

/// What a stream should send next.
#[derive(Debug)]
pub enum Next {
    /// A Description change.
    Change(Arc<str>, Change),
    /// The snapshot has been sent: send SnapshotComplete.
    SnapshotComplete,
}

impl StreamQueue {
    fn push(&self, name: &str, change: Change) {
        self.state.lock().pending.push(Arc::from(name), change);
        self.notify.notify_one();
    }

    fn load_snapshot(&self, entries: &BTreeMap<String, Arc<DescEntry>>) {
        let mut state = self.state.lock();
        state.pending.clear();
        // Every Description is in the snapshot, withheld ones included: an entry left out would
        // make the agent prune what runs for it.
        for (name, e) in entries {
            state.pending.push(Arc::from(name.as_str()), e.change());
        }
        state.snapshot_pending = true;
        drop(state);
        self.notify.notify_one();
    }

    /// Takes the next thing to send, if any: queued changes first, then the snapshot marker.
    pub fn next(&self) -> Option<Next> {
        let mut state = self.state.lock();
        if let Some((name, change)) = state.pending.pop() {
            return Some(Next::Change(name, change));
        }
        if state.snapshot_pending {
            state.snapshot_pending = false;
            return Some(Next::SnapshotComplete);
        }
        None
    }

    /// Number of queued changes.
    pub fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Resolves when something was queued since the last call.
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

#[derive(Debug, Default)]
struct NamespaceEntry {
    descs: BTreeMap<String, Arc<DescEntry>>,
    subscribers: Vec<Arc<StreamQueue>>,
}

#[derive(Debug, Default)]
struct Inner {
    namespaces: HashMap<String, NamespaceEntry>,
    by_subscription: HashMap<(String, String), BTreeSet<(String, String)>>,
    relist_seen: Option<HashSet<(String, String)>>,
}

/// What an index update changed, for the controllers that follow the index.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    /// The entry after the change (`None` when removed).
    pub current: Option<Arc<DescEntry>>,
    /// The entry before the change.
    pub previous: Option<Arc<DescEntry>>,
}

/// The Description index shared by the watch and every stream.
#[derive(Debug)]
pub struct Index {
    inner: RwLock<Inner>,
    synced: Ready,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            inner: RwLock::new(Inner::default()),
            synced: Ready::new(),
        }
    }
}

impl Index {
    /// An empty, not yet synced index.
    pub fn new() -> Index {
        Index::default()
    }

    /// Inserts or replaces an entry and queues it for the namespace's streams when an agent
    /// would see a difference.
    ///
    /// A Description over the limits keeps its last delivered version (objects and
    /// generation) in the index, so its agent keeps running that version rather than pruning
    /// it; a Description without such a version (e.g. the hub restarted since) is sent as
    /// withheld, and its agent keeps what runs.
    pub fn apply(&self, entry: DescEntry) -> Update {
        let mut entry = entry;
        let key = (entry.namespace.clone(), entry.name.clone());
        let mut inner = self.inner.write();
        if let Some(seen) = inner.relist_seen.as_mut() {
            seen.insert(key.clone());
        }
        let ns = inner.namespaces.entry(entry.namespace.clone()).or_default();
        if entry.rejected.is_some()
            && let Some(p) = ns.descs.get(&entry.name)
            && p.uid == entry.uid
            && p.deliverable()
        {
            entry.objects = p.objects.clone();
            entry.generation = p.generation;
        }
        let entry = Arc::new(entry);
        let previous = ns.descs.insert(entry.name.clone(), entry.clone());
        let deliver = previous.as_ref().is_none_or(|p| p.delivery_differs(&entry));
        tracing::trace!(namespace = %entry.namespace, name = %entry.name, generation = entry.generation, deliver, streams = ns.subscribers.len(), "Description changed");
        for s in &ns.subscribers {
            // Only asked when the change would not be delivered anyway.
            let again = !deliver
                && entry.rejected.is_none()
                && previous.as_ref().is_some_and(|p| {
                    crate::report_order::earlier_stream_status_arrived(
                        p.status.as_ref(),
                        entry.status.as_ref(),
                        s.epoch,
                    )
                });
            if again {
                tracing::info!(namespace = %entry.namespace, name = %entry.name, stream_epoch = s.epoch, report = ?entry.status.as_ref().and_then(|st| st.report_order), "an earlier stream's status arrived after this stream began; sending the Description again for a new report");
            }
            if deliver || again {
                s.push(&entry.name, entry.change());
            }
        }
        let old_sub = previous.as_ref().and_then(|p| p.subscription());
        let new_sub = entry.subscription();
        if old_sub != new_sub
            && let Some(s) = old_sub
        {
            remove_sub(&mut inner.by_subscription, &s, &key);
        }
        if let Some(s) = new_sub {
            inner.by_subscription.entry(s).or_default().insert(key);
        }
        Update {
            current: Some(entry),
            previous,
        }
    }

    /// Removes an entry and queues its removal for the namespace's streams.
    pub fn delete(&self, namespace: &str, name: &str) -> Update {
        let mut inner = self.inner.write();
        Self::delete_locked(&mut inner, namespace, name)
    }

    fn delete_locked(inner: &mut Inner, namespace: &str, name: &str) -> Update {
        let Some(ns) = inner.namespaces.get_mut(namespace) else {
            return Update {
                current: None,
                previous: None,
            };
        };
        let previous = ns.descs.remove(name);
        if let Some(p) = &previous {
            for s in &ns.subscribers {
                s.push(name, Change::Removed { uid: p.uid.clone() });
            }
            if let Some(sub) = p.subscription() {
                remove_sub(
                    &mut inner.by_subscription,
                    &sub,
                    &(namespace.to_string(), name.to_string()),
                );
            }
        }
        if let Some(ns) = inner.namespaces.get(namespace)
            && ns.descs.is_empty()
            && ns.subscribers.is_empty()
        {
            inner.namespaces.remove(namespace);
        }
        Update {
            current: None,
            previous,
        }
    }

    /// A (re-)list of every Description starts: entries not applied before
    /// [`finish_relist`](Index::finish_relist) are then removed.
    pub fn begin_relist(&self) {
        self.inner.write().relist_seen = Some(HashSet::new());
    }

    /// The (re-)list is complete: removes entries it did not contain, marks the index synced and
    /// returns the removals.
    pub fn finish_relist(&self) -> Vec<Update> {
        let mut inner = self.inner.write();
        let seen = inner.relist_seen.take().unwrap_or_default();
        let stale: Vec<(String, String)> = inner
            .namespaces
            .iter()
            .flat_map(|(ns, e)| e.descs.keys().map(move |n| (ns.clone(), n.clone())))
            .filter(|k| !seen.contains(k))
            .collect();
        let updates = stale
            .iter()
            .map(|(ns, n)| Self::delete_locked(&mut inner, ns, n))
            .collect();
        drop(inner);
        self.synced.set();
        updates
    }

    /// Whether the first list completed.
    pub fn is_synced(&self) -> bool {
        self.synced.is_set()
    }

    /// Waits until the first list completed, so that no stream ever gets a partial snapshot
    /// (which would make its agent prune objects it should keep).
    pub async fn wait_synced(&self) {
        self.synced.wait().await;
    }

    /// Subscribes a stream of `epoch` (0: a pushed cluster's session) to `namespace`: its queue
    /// starts with a snapshot of every Description there, followed by the snapshot marker.
    pub fn subscribe(&self, namespace: &str, epoch: u64) -> Arc<StreamQueue> {
        let queue = Arc::new(StreamQueue {
            epoch,
            ..StreamQueue::default()
        });
        let mut inner = self.inner.write();
        let ns = inner.namespaces.entry(namespace.to_string()).or_default();
        queue.load_snapshot(&ns.descs);
        ns.subscribers.push(queue.clone());
        queue
    }

    /// Refills a subscribed stream's queue with a fresh snapshot (the agent asked for a resync).
    pub fn resync(&self, namespace: &str, queue: &StreamQueue) {
        let inner = self.inner.read();
        let empty = BTreeMap::new();
        let descs = inner
            .namespaces
            .get(namespace)
            .map_or(&empty, |ns| &ns.descs);
        queue.load_snapshot(descs);
    }

    /// Queues the current version of Description `namespace/name` on a subscribed stream again
    /// (a chart's credentials could not be read when it was sent); nothing if it is gone.
    pub fn redeliver(&self, namespace: &str, name: &str, queue: &StreamQueue) {
        let inner = self.inner.read();
        if let Some(e) = inner
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.descs.get(name))
        {
            queue.push(name, e.change());
        }
    }

    /// Unsubscribes a stream.
    pub fn unsubscribe(&self, namespace: &str, queue: &Arc<StreamQueue>) {
        let mut inner = self.inner.write();
        if let Some(ns) = inner.namespaces.get_mut(namespace) {
            ns.subscribers.retain(|s| !Arc::ptr_eq(s, queue));
            if ns.descs.is_empty() && ns.subscribers.is_empty() {
                inner.namespaces.remove(namespace);
            }
        }
    }

    /// The entry `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<DescEntry>> {
        self.inner
            .read()
            .namespaces
            .get(namespace)
            .and_then(|ns| ns.descs.get(name).cloned())
    }

    /// Every entry of `namespace`.
    pub fn namespace_entries(&self, namespace: &str) -> Vec<Arc<DescEntry>> {
        self.inner
            .read()
            .namespaces
            .get(namespace)
            .map(|ns| ns.descs.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every entry.
    pub fn all_entries(&self) -> Vec<Arc<DescEntry>> {
        self.inner
            .read()
            .namespaces
            .values()
            .flat_map(|ns| ns.descs.values().cloned())
            .collect()
    }

    /// The entries rendered for Subscription `namespace/name`.
    pub fn by_subscription(&self, namespace: &str, name: &str) -> Vec<Arc<DescEntry>> {
        let inner = self.inner.read();
        inner
            .by_subscription
            .get(&(namespace.to_string(), name.to_string()))
            .map(|keys| {
                keys.iter()
                    .filter_map(|(ns, n)| {
                        inner
                            .namespaces
                            .get(ns)
                            .and_then(|e| e.descs.get(n).cloned())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Number of streams subscribed to `namespace`.
    pub fn subscribers(&self, namespace: &str) -> usize {
        self.inner
            .read()
            .namespaces
            .get(namespace)
            .map_or(0, |ns| ns.subscribers.len())
    }
}

fn remove_sub(
    map: &mut HashMap<(String, String), BTreeSet<(String, String)>>,
    sub: &(String, String),
    key: &(String, String),
) {
    if let Some(set) = map.get_mut(sub) {
        set.remove(key);
        if set.is_empty() {
            map.remove(sub);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use atoll_crds::apps::Description;

    /// The entry of a whole Description, as the watch builds it.
    fn watched_entry(d: &Description, limits: Limits) -> DescEntry {
        DescEntry::from_watched(&WatchedDescription::from_description(d).unwrap(), limits)
    }

    #[test]
    fn a_charts_namespace_is_the_one_its_subscription_named_not_the_rendered_objects() {
        let d: Description = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "apps.web", "namespace": "clusternet-a"},
            "spec": {"deployer": "Helm",
                "charts": [{"namespace": "apps", "name": "web"}],
                "chartRaw": [
                    {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                     "metadata": {"name": "web", "namespace": "victim"},
                     "spec": {"repo": "https://r", "chart": "web", "targetNamespace": "demo"}},
                    {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                     "metadata": {"name": "extra", "namespace": "apps"},
                     "spec": {"repo": "https://r", "chart": "extra", "targetNamespace": "demo"}}]}
        }))
        .unwrap();
        let e = watched_entry(&d, Limits::default());
        let namespaces: Vec<&str> = e
            .charts
            .iter()
            .map(|c| c.release.as_ref().unwrap().chart_namespace.as_str())
            .collect();
        assert_eq!(namespaces, ["apps", ""]);
    }

    pub(crate) fn entry(ns: &str, name: &str, rv: &str, generation: i64) -> DescEntry {
        DescEntry {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: rv.into(),
            generation,
            objects: vec![Bytes::from(format!("{{\"g\":{generation}}}"))],
            charts: Vec::new(),
            deleting: false,
            labels: BTreeMap::new(),
            finalizers: vec![],
            status: None,
            rejected: None,
        }
    }

    fn drain(q: &StreamQueue) -> Vec<String> {
        std::iter::from_fn(|| q.next())
            .map(|n| match n {
                Next::Change(name, Change::Upsert(e)) => format!("up:{name}:{}", e.generation),
                Next::Change(name, Change::Removed { .. }) => format!("rm:{name}"),
                Next::Change(name, Change::Withheld(_)) => format!("withheld:{name}"),
                Next::SnapshotComplete => "marker".into(),
            })
            .collect()
    }

    #[test]
    fn subscribe_yields_snapshot_of_own_namespace_then_marker() {
        let idx = Index::new();
        idx.apply(entry("ns-a", "d1", "1", 1));
        idx.apply(entry("ns-a", "d2", "1", 1));
        idx.apply(entry("ns-b", "other", "1", 1));
        let q = idx.subscribe("ns-a", 1);
        assert_eq!(drain(&q), vec!["up:d1:1", "up:d2:1", "marker"]);
        assert_eq!(drain(&q), Vec::<String>::new());
    }

    #[test]
    fn deltas_reach_only_subscribers_of_the_namespace_latest_version_only() {
        let idx = Index::new();
        let a = idx.subscribe("ns-a", 1);
        let b = idx.subscribe("ns-b", 1);
        drain(&a);
        drain(&b);
        idx.apply(entry("ns-a", "d1", "1", 1));
        idx.apply(entry("ns-a", "d1", "2", 2));
        idx.apply(entry("ns-a", "d1", "3", 3));
        idx.apply(entry("ns-a", "d2", "1", 1));
        idx.delete("ns-a", "d2");
        assert_eq!(drain(&a), vec!["up:d1:3", "rm:d2"]);
        assert!(drain(&b).is_empty());
    }

    #[test]
    fn status_only_updates_are_not_redelivered() {
        let idx = Index::new();
        idx.apply(entry("ns", "d", "1", 1));
        let q = idx.subscribe("ns", 1);
        drain(&q);
        let mut e = entry("ns", "d", "2", 1);
        e.status = Some(DescriptionStatus::default());
        e.finalizers = vec![known::FINALIZER.into()];
        idx.apply(e);
        assert!(drain(&q).is_empty());
        let mut e = entry("ns", "d", "3", 1);
        e.deleting = true;
        idx.apply(e);
        assert_eq!(drain(&q), vec!["up:d:1"]);
    }

    #[test]
    fn a_status_an_earlier_stream_wrote_sends_the_description_again_to_newer_streams_only() {
        use atoll_crds::apps::{DescriptionPhase, ReportOrder};
        let with_status = |rv: &str, phase: DescriptionPhase, epoch: i64| {
            let mut e = entry("ns", "d", rv, 1);
            e.status = Some(DescriptionStatus {
                phase: Some(phase),
                report_order: Some(ReportOrder { epoch, sequence: 1 }),
                ..DescriptionStatus::default()
            });
            e
        };
        let idx = Index::new();
        idx.apply(with_status("1", DescriptionPhase::Success, 2));
        let (stream_3, stream_4, pushed) = (
            idx.subscribe("ns", 3),
            idx.subscribe("ns", 4),
            idx.subscribe("ns", 0),
        );
        for q in [&stream_3, &stream_4, &pushed] {
            drain(q);
        }
        idx.apply(with_status("2", DescriptionPhase::Failure, 3));
        assert_eq!(drain(&stream_4), vec!["up:d:1"]);
        assert!(drain(&stream_3).is_empty(), "its own stream's write");
        assert!(drain(&pushed).is_empty());
        idx.apply(with_status("3", DescriptionPhase::Success, 4));
        assert!(drain(&stream_4).is_empty(), "its own write");
    }

    #[test]
    fn relist_removes_entries_that_disappeared_while_not_watching() {
        let idx = Index::new();
        assert!(!idx.is_synced());
        idx.begin_relist();
        idx.apply(entry("ns", "keep", "1", 1));
        idx.apply(entry("ns", "gone", "1", 1));
        assert!(idx.finish_relist().is_empty());
        assert!(idx.is_synced());
        let q = idx.subscribe("ns", 1);
        drain(&q);
        idx.begin_relist();
        idx.apply(entry("ns", "keep", "1", 1));
        let removed = idx.finish_relist();
        assert_eq!(removed.len(), 1);
        assert_eq!(drain(&q), vec!["rm:gone"]);
        assert!(idx.get("ns", "gone").is_none());
        assert!(idx.get("ns", "keep").is_some());
    }

    #[test]
    fn resync_resends_everything_and_the_marker() {
        let idx = Index::new();
        idx.apply(entry("ns", "d1", "1", 1));
        let q = idx.subscribe("ns", 1);
        drain(&q);
        idx.resync("ns", &q);
        assert_eq!(drain(&q), vec!["up:d1:1", "marker"]);
    }

    #[test]
    fn unsubscribed_streams_get_nothing() {
        let idx = Index::new();
        let q = idx.subscribe("ns", 1);
        drain(&q);
        assert_eq!(idx.subscribers("ns"), 1);
        idx.unsubscribe("ns", &q);
        assert_eq!(idx.subscribers("ns"), 0);
        idx.apply(entry("ns", "d1", "1", 1));
        assert!(drain(&q).is_empty());
    }

    #[test]
    fn by_subscription_follows_labels_and_falls_back_to_the_name() {
        let idx = Index::new();
        let mut e = entry("c1", "x.y", "1", 1);
        e.labels
            .insert(known::LABEL_SUBS_NAMESPACE.into(), "apps".into());
        e.labels.insert(known::LABEL_SUBS_NAME.into(), "web".into());
        idx.apply(e);
        idx.apply(entry("c2", "apps.web", "1", 1));
        idx.apply(entry("c3", "apps.other", "1", 1));
        let mut got: Vec<String> = idx
            .by_subscription("apps", "web")
            .iter()
            .map(|e| e.namespace.clone())
            .collect();
        got.sort();
        assert_eq!(got, vec!["c1", "c2"]);
        idx.delete("c2", "apps.web");
        assert_eq!(idx.by_subscription("apps", "web").len(), 1);
    }

    #[test]
    fn an_oversized_update_keeps_the_last_delivered_version() {
        let limits = Limits {
            max_objects_per_description: 2,
            max_description_bytes: 1 << 20,
        };
        let mut d = Description::new("apps.web", Default::default());
        d.metadata.namespace = Some("c1".into());
        d.metadata.uid = Some("u1".into());
        d.metadata.generation = Some(1);
        d.spec.raw = vec![serde_json::json!({"v": 1})];
        let idx = Index::new();
        idx.apply(watched_entry(&d, limits));
        let q = idx.subscribe("c1", 1);
        assert_eq!(drain(&q), vec!["up:apps.web:1", "marker"]);
        d.metadata.generation = Some(2);
        d.spec.raw = (0..5).map(|i| serde_json::json!({"i": i})).collect();
        let u = idx.apply(watched_entry(&d, limits));
        assert!(
            drain(&q).is_empty(),
            "the agent was told to change or prune"
        );
        let kept = u.current.unwrap();
        assert_eq!((kept.generation, kept.objects.len()), (1, 1));
        assert!(kept.rejected.is_some());
        idx.resync("c1", &q);
        assert_eq!(drain(&q), vec!["up:apps.web:1", "marker"]);
        d.metadata.generation = Some(3);
        d.spec.raw = vec![serde_json::json!({"v": 3})];
        idx.apply(watched_entry(&d, limits));
        assert_eq!(drain(&q), vec!["up:apps.web:3"]);
    }

    #[test]
    fn descriptions_over_the_limits_are_rejected_not_delivered() {
        let mut d = Description::new("apps.web", Default::default());
        d.metadata.namespace = Some("c1".into());
        d.spec.raw = (0..5).map(|i| serde_json::json!({"i": i})).collect();
        let cases = [
            (
                Limits {
                    max_objects_per_description: 10,
                    max_description_bytes: 1000,
                },
                false,
            ),
            (
                Limits {
                    max_objects_per_description: 4,
                    max_description_bytes: 1000,
                },
                true,
            ),
            (
                Limits {
                    max_objects_per_description: 10,
                    max_description_bytes: 10,
                },
                true,
            ),
        ];
        for (limits, rejected) in cases {
            let e = watched_entry(&d, limits);
            assert_eq!(e.rejected.is_some(), rejected, "{limits:?}");
            let idx = Index::new();
            idx.apply(e);
            let q = idx.subscribe("c1", 1);
            let expected = if rejected {
                "withheld:apps.web"
            } else {
                "up:apps.web:0"
            };
            assert_eq!(drain(&q), vec![expected, "marker"]);
        }
    }
}
