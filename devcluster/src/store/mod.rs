//! Object storage: one global, monotonically increasing resourceVersion; objects keyed by
//! (group, resource, namespace, name) in memory, optionally persisted to SQLite; a bounded
//! event history per resource and a broadcast channel for watch fan-out.
//!
//! All writes go through a [`Txn`], which holds the store lock: a request's reads and writes
//! are serialised, get consecutive resourceVersions, land in SQLite in one transaction and are
//! broadcast in order.

mod history;
mod sqlite;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::Error;
use history::History;
pub use history::WHOLE_EVENTS;
use sqlite::{Db, DbOp, Writer};

/// A stored object (immutable once stored; writes replace it).
pub type Obj = Arc<Value>;

/// Storage identity of a resource: group and plural, independent of the version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResKey {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl ResKey {
    /// Builds a key.
    pub fn new(group: &str, resource: &str) -> ResKey {
        ResKey {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// A reference to one stored object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjRef {
    /// Its resource.
    pub key: ResKey,
    /// Namespace, `""` when cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Watch event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed (the object is its last state, stamped with the deletion's RV).
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and broadcast to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// The resource.
    pub key: ResKey,
    /// Namespace of the object (`""` for cluster-scoped).
    pub namespace: String,
    /// What happened.
    pub type_: EventType,
    /// The new state (for `Deleted`, the last state with the new RV).
    pub object: Obj,
    /// The state before the change (for selector watches), if any.
    pub prev: Option<Obj>,
    line: OnceLock<Bytes>,
    metadata_line: OnceLock<Bytes>,
}

/// An object seen as `meta.k8s.io/v1` PartialObjectMetadata (what a client asking for
/// metadata only gets), serialised straight from the stored object without copying it.
pub struct PartialMetadata<'a>(pub &'a Value);

impl serde::Serialize for PartialMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let empty = serde_json::Map::new();
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("kind", "PartialObjectMetadata")?;
        map.serialize_entry("apiVersion", "meta.k8s.io/v1")?;
        match self.0.get("metadata") {
            Some(meta) => map.serialize_entry("metadata", meta)?,
            None => map.serialize_entry("metadata", &empty)?,
        }
        map.end()
    }
}

impl WatchEvent {
    /// The event as one newline-terminated JSON line, serialised once and shared by watchers.
    pub fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| event_line(self.type_, &*self.object))
            .clone()
    }

    /// The event's line for watchers of metadata only (PartialObjectMetadata), serialised
    /// once and shared by them.
    pub fn metadata_line(&self) -> Bytes {
        self.metadata_line
            .get_or_init(|| event_line(self.type_, &PartialMetadata(&self.object)))
            .clone()
    }
}

/// `{"type":..,"object":..}` and a newline.
pub fn event_line(type_: EventType, object: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(type_.as_str().as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut buf, object).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// A resumed watch: buffered events after the requested RV, a receiver for later ones and
/// the store's RV at subscription time.
pub type Resumed = (
    Vec<Arc<WatchEvent>>,
    broadcast::Receiver<Arc<WatchEvent>>,
    u64,
);

/// A page of a list.
pub struct Page {
    /// Matching objects, in (namespace, name) order.
    pub items: Vec<Obj>,
    /// The store's resourceVersion at read time.
    pub rv: u64,
    /// `(namespace, name)` of the last returned item when more matching items follow.
    pub next: Option<(String, String)>,
    /// How many matching items follow, when known (0 = unknown).
    pub remaining: usize,
}

#[derive(Default)]
struct Table {
    objects: BTreeMap<(String, String), Obj>,
    history: History,
}

struct Inner {
    rv: u64,
    /// No watch resumes from below this RV: after a crash, the RV the database had (the writes
    /// after it were lost, and watchers may have seen them).
    resume_floor: u64,
    tables: HashMap<ResKey, Table>,
    uids: HashMap<String, ObjRef>,
    owners: HashMap<String, BTreeSet<ObjRef>>,
    persisted: bool,
    count: usize,
}

/// The store.
pub struct Store {
    inner: Mutex<Inner>,
    writer: Option<Writer>,
    events: broadcast::Sender<Arc<WatchEvent>>,
    history_limit: usize,
    /// How many of each resource's latest events its history keeps whole.
    whole_events: usize,
}

/// Default number of events kept per resource for watch resumption.
pub const DEFAULT_HISTORY: usize = 10_000;

/// How far resourceVersions jump after a crash: past every RV handed out before it (the writes
/// still queued for the database when the process died). The same remedy as etcd's after a
/// restore (`etcdutl snapshot restore --bump-revision 1000000000 --mark-compacted`).
const CRASH_RV_BUMP: u64 = 1_000_000_000;

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// An in-memory store (nothing persisted).
    pub fn memory() -> Store {
        Store::with_db(None, 0, 0, Vec::new(), Vec::new())
    }

    /// A store persisted in `<dir>/devcluster.db`; loads everything stored there.
    pub fn open(dir: &Path) -> Result<Store, Error> {
        let mut db = Db::open(dir)?;
        let rv = db.load_rv()?;
        let rows = db.load_objects()?;
        let last = db.load_last_changes()?;
        let mut objects = Vec::with_capacity(rows.len());
        for row in rows {
            let obj: Value = serde_json::from_slice(&row.data)
                .map_err(|e| Error::OpenStore(format!("corrupt object in database: {e}")))?;
            objects.push((ResKey::new(&row.group, &row.resource), obj));
        }
        // A new database (counter 0) has nothing a crash could have lost.
        let (rv, resume_floor) = if db.take_clean_stop()? || rv == 0 {
            (rv, 0)
        } else {
            let bumped = rv.saturating_add(CRASH_RV_BUMP);
            // Kept at once: lists show it before any write does.
            db.write(&[], bumped)?;
            tracing::warn!(
                stored_rv = rv,
                resumes_at = bumped,
                "the data directory was not closed cleanly: writes watchers saw may be lost, so resourceVersions jump ahead and every watch from before the restart gets 410 Expired (clients list again)"
            );
            (bumped, bumped)
        };
        let writer = Writer::start(db)?;
        Ok(Store::with_db(
            Some(writer),
            rv,
            resume_floor,
            objects,
            last,
        ))
    }

    fn with_db(
        writer: Option<Writer>,
        rv: u64,
        resume_floor: u64,
        objects: Vec<(ResKey, Value)>,
        last: Vec<(String, String, u64)>,
    ) -> Store {
        let (events, _) = broadcast::channel(65_536);
        let mut inner = Inner {
            rv,
            resume_floor,
            tables: HashMap::new(),
            uids: HashMap::new(),
            owners: HashMap::new(),
            persisted: writer.is_some(),
            count: 0,
        };
        for (g, r, lrv) in last {
            inner
                .tables
                .entry(ResKey::new(&g, &r))
                .or_default()
                .history
                .floor = lrv;
        }
        for (key, obj) in objects {
            let r = ObjRef {
                key: key.clone(),
                namespace: meta_str(&obj, "namespace").to_string(),
                name: meta_str(&obj, "name").to_string(),
            };
            let obj = Arc::new(obj);
            inner.index(&r, None, Some(&obj));
            inner
                .tables
                .entry(key)
                .or_default()
                .objects
                .insert((r.namespace, r.name), obj);
            inner.count += 1;
        }
        Store {
            inner: Mutex::new(inner),
            writer,
            events,
            history_limit: DEFAULT_HISTORY,
            whole_events: WHOLE_EVENTS,
        }
    }

    /// Starts a transaction (takes the store lock until the [`Txn`] is dropped).
    pub fn begin(&self) -> Txn<'_> {
        Txn {
            guard: self.inner.lock(),
            store: self,
            ops: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The current (latest) resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.lock().rv
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.lock().count
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads one object.
    pub fn get(&self, key: &ResKey, namespace: &str, name: &str) -> Option<Obj> {
        let inner = self.inner.lock();
        inner
            .tables
            .get(key)
            .and_then(|t| t.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// Lists one page. `namespace: None` = all namespaces; `after` = continue after this key;
    /// `limit` 0 = everything.
    pub fn list_page(
        &self,
        key: &ResKey,
        namespace: Option<&str>,
        after: Option<(String, String)>,
        limit: usize,
        filter: &dyn Fn(&Value) -> bool,
    ) -> Page {
        let inner = self.inner.lock();
        let rv = inner.rv;
        let Some(table) = inner.tables.get(key) else {
            return Page {
                items: Vec::new(),
                rv,
                next: None,
                remaining: 0,
            };
        };
        let lower = match (&after, namespace) {
            (Some(a), _) => Bound::Excluded(a.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut items = Vec::new();
        let mut next = None;
        let mut iter = table
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|((ns, _), _)| namespace.is_none_or(|want| ns == want));
        for ((ns, name), obj) in iter.by_ref() {
            if !filter(obj) {
                continue;
            }
            items.push(obj.clone());
            if limit > 0 && items.len() == limit {
                next = Some((ns.clone(), name.clone()));
                break;
            }
        }
        // Like etcd: a continue token whenever more keys follow (matching or not), so that a
        // page costs O(page) however large the collection is.
        if next.is_some() && iter.next().is_none() {
            next = None;
        }
        let remaining = 0;
        Page {
            items,
            rv,
            next,
            remaining,
        }
    }

    /// Subscribes to changes of `key` after `from` (exclusive). Returns the buffered events
    /// after `from`, a receiver for later ones and the current RV; `Err(floor)` when events
    /// after `from` are no longer all in the history.
    pub fn watch_from(&self, key: &ResKey, from: u64) -> Result<Resumed, u64> {
        let (kept, rx, rv) = {
            let inner = self.inner.lock();
            let rx = self.events.subscribe();
            if from < inner.resume_floor {
                return Err(inner.resume_floor);
            }
            let Some(table) = inner.tables.get(key) else {
                return Ok((Vec::new(), rx, inner.rv));
            };
            (table.history.after(from)?, rx, inner.rv)
        };
        // Decoded outside the lock: a resume from far back decodes many events.
        let mut events = Vec::with_capacity(kept.len());
        for (at, k) in kept {
            let Some(ev) = k.into_event(at, key) else {
                tracing::warn!(resource = %key.resource, rv = at, "a kept watch event does not decode; the watch must list again");
                return Err(at);
            };
            events.push(ev);
        }
        Ok((events, rx, rv))
    }

    /// Subscribes to changes and returns the current objects of `key` (optionally one
    /// namespace) atomically, with the RV they are valid at.
    pub fn snapshot_and_subscribe(
        &self,
        key: &ResKey,
        namespace: Option<&str>,
    ) -> (Vec<Obj>, broadcast::Receiver<Arc<WatchEvent>>, u64) {
        let inner = self.inner.lock();
        let rx = self.events.subscribe();
        let objs = inner
            .tables
            .get(key)
            .map(|t| in_namespace(t, namespace))
            .unwrap_or_default();
        (objs, rx, inner.rv)
    }

    /// Resolves once every write so far is in the database (at once in memory). The server
    /// answers a write only then, as kube-apiserver answers once etcd has it: a write a client
    /// saw acknowledged survives a crash.
    pub async fn durable(&self) {
        if let Some(committed) = self.writer.as_ref().and_then(Writer::committed) {
            let _ = committed.await;
        }
    }

    /// Waits until every write so far is in the database (no-op in memory).
    pub fn sync(&self) {
        if let Some(w) = self.writer.as_ref() {
            w.sync();
        }
    }

    /// Commits what is queued and stops the database writer (later writes stay in memory).
    pub fn close(&self) {
        if let Some(w) = self.writer.as_ref() {
            w.close();
        }
    }

    /// Calls `f` for every stored object (holding the store lock).
    pub fn scan(&self, mut f: impl FnMut(&ResKey, &Obj)) {
        let inner = self.inner.lock();
        for (key, table) in &inner.tables {
            for obj in table.objects.values() {
                f(key, obj);
            }
        }
    }

    /// A receiver of every future event.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }
}

/// The objects of a table, optionally of one namespace (a range scan, not a filter).
fn in_namespace(t: &Table, namespace: Option<&str>) -> Vec<Obj> {
    match namespace {
        None => t.objects.values().cloned().collect(),
        Some(ns) => t
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, o)| o.clone())
            .collect(),
    }
}

impl Inner {
    fn index(&mut self, r: &ObjRef, old: Option<&Value>, new: Option<&Value>) {
        if let Some(old) = old {
            for uid in owner_uids(old) {
                if let Some(set) = self.owners.get_mut(&uid) {
                    set.remove(r);
                    if set.is_empty() {
                        self.owners.remove(&uid);
                    }
                }
            }
            let uid = meta_str(old, "uid");
            if !uid.is_empty() && new.is_none() {
                self.uids.remove(uid);
            }
        }
        if let Some(new) = new {
            for uid in owner_uids(new) {
                self.owners.entry(uid).or_default().insert(r.clone());
            }
            let uid = meta_str(new, "uid");
            if !uid.is_empty() {
                self.uids.insert(uid.to_string(), r.clone());
            }
        }
    }
}

/// A write transaction: holds the store lock; writes become visible at once in memory and
/// are persisted and broadcast when the transaction is committed or dropped.
pub struct Txn<'a> {
    guard: MutexGuard<'a, Inner>,
    store: &'a Store,
    ops: Vec<DbOp>,
    events: Vec<Arc<WatchEvent>>,
}

impl Txn<'_> {
    /// Reads one object.
    pub fn get(&self, key: &ResKey, namespace: &str, name: &str) -> Option<Obj> {
        self.guard
            .tables
            .get(key)
            .and_then(|t| t.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// All objects of a resource (optionally one namespace).
    pub fn list(&self, key: &ResKey, namespace: Option<&str>) -> Vec<Obj> {
        self.guard
            .tables
            .get(key)
            .map(|t| in_namespace(t, namespace))
            .unwrap_or_default()
    }

    /// Resources that have at least one object in `namespace`.
    pub fn keys_with_objects_in(&self, namespace: &str) -> Vec<ResKey> {
        self.guard
            .tables
            .iter()
            .filter(|(_, t)| {
                t.objects
                    .range((namespace.to_string(), String::new())..)
                    .next()
                    .is_some_and(|((ns, _), _)| ns == namespace)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The object with this uid, if stored.
    pub fn by_uid(&self, uid: &str) -> Option<ObjRef> {
        self.guard.uids.get(uid).cloned()
    }

    /// Objects whose `ownerReferences` name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<ObjRef> {
        self.guard
            .owners
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.guard.rv
    }

    /// Stores `obj` (create or replace), stamping a new resourceVersion. Returns the stored
    /// object.
    pub fn put(&mut self, key: &ResKey, mut obj: Value) -> Obj {
        self.guard.rv += 1;
        let rv = self.guard.rv;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let r = ObjRef {
            key: key.clone(),
            namespace: meta_str(&obj, "namespace").to_string(),
            name: meta_str(&obj, "name").to_string(),
        };
        let obj = Arc::new(obj);
        let prev = self
            .guard
            .tables
            .entry(key.clone())
            .or_default()
            .objects
            .insert((r.namespace.clone(), r.name.clone()), obj.clone());
        if prev.is_none() {
            self.guard.count += 1;
        }
        self.guard.index(&r, prev.as_deref(), Some(&obj));
        if self.guard.persisted {
            self.ops.push(DbOp::Put {
                group: key.group.clone(),
                resource: key.resource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                rv,
                data: obj.clone(),
            });
        }
        let type_ = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(key, r.namespace, type_, obj.clone(), prev, rv);
        obj
    }

    /// Removes an object; the DELETED event carries its last state with a new RV.
    pub fn remove(&mut self, key: &ResKey, namespace: &str, name: &str) -> Option<Obj> {
        let k = (namespace.to_string(), name.to_string());
        let prev = self.guard.tables.get_mut(key)?.objects.remove(&k)?;
        self.guard.count = self.guard.count.saturating_sub(1);
        self.guard.rv += 1;
        let rv = self.guard.rv;
        let r = ObjRef {
            key: key.clone(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.guard.index(&r, Some(&prev), None);
        let mut last = (*prev).clone();
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let last = Arc::new(last);
        if self.guard.persisted {
            self.ops.push(DbOp::Delete {
                group: key.group.clone(),
                resource: key.resource.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        self.record(
            key,
            namespace.to_string(),
            EventType::Deleted,
            last.clone(),
            Some(prev),
            rv,
        );
        Some(last)
    }

    fn record(
        &mut self,
        key: &ResKey,
        namespace: String,
        type_: EventType,
        object: Obj,
        prev: Option<Obj>,
        rv: u64,
    ) {
        let ev = Arc::new(WatchEvent {
            rv,
            key: key.clone(),
            namespace,
            type_,
            object,
            prev,
            line: OnceLock::new(),
            metadata_line: OnceLock::new(),
        });
        if let Some(table) = self.guard.tables.get_mut(key) {
            table.history.push(
                ev.clone(),
                self.store.history_limit,
                self.store.whole_events,
            );
        }
        if self.guard.persisted {
            self.ops.push(DbOp::LastChange {
                group: key.group.clone(),
                resource: key.resource.clone(),
                rv,
            });
        }
        self.events.push(ev);
    }

    /// Persists the staged writes and broadcasts the events.
    pub fn commit(mut self) -> Result<(), Error> {
        self.flush()
    }

    fn flush(&mut self) -> Result<(), Error> {
        if !self.ops.is_empty() {
            let rv = self.guard.rv;
            let ops = std::mem::take(&mut self.ops);
            if let Some(w) = self.store.writer.as_ref() {
                w.write(ops, rv);
            }
        }
        for ev in self.events.drain(..) {
            // No receivers is fine.
            let _ = self.store.events.send(ev);
        }
        Ok(())
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!(error = %e, "persisting a write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(ns: &str, name: &str) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"namespace":ns}})
    }

    #[test]
    fn resource_versions_are_global_and_increasing() {
        let s = Store::memory();
        let k1 = ResKey::new("", "configmaps");
        let k2 = ResKey::new("apps", "deployments");
        let mut tx = s.begin();
        let a = tx.put(&k1, cm("a", "x"));
        let b = tx.put(&k2, cm("a", "y"));
        drop(tx);
        assert_eq!(meta_str(&a, "resourceVersion"), "1");
        assert_eq!(meta_str(&b, "resourceVersion"), "2");
        assert_eq!(s.current_rv(), 2);
    }

    #[test]
    fn list_pages_follow_each_other() {
        let s = Store::memory();
        let k = ResKey::new("", "configmaps");
        let mut tx = s.begin();
        for i in 0..5 {
            tx.put(&k, cm("ns", &format!("c{i}")));
        }
        tx.put(&k, cm("other", "z"));
        drop(tx);
        let p1 = s.list_page(&k, Some("ns"), None, 2, &|_| true);
        assert_eq!(p1.items.len(), 2);
        let p2 = s.list_page(&k, Some("ns"), p1.next.clone(), 2, &|_| true);
        let p3 = s.list_page(&k, Some("ns"), p2.next.clone(), 2, &|_| true);
        assert_eq!(p3.items.len(), 1);
        assert!(p3.next.is_none());
        assert_eq!(s.list_page(&k, None, None, 0, &|_| true).items.len(), 6);
    }

    #[test]
    fn watch_history_is_bounded_and_reports_expiry() {
        let mut s = Store::memory();
        s.history_limit = 3;
        let k = ResKey::new("", "configmaps");
        for i in 0..5 {
            let mut tx = s.begin();
            tx.put(&k, cm("ns", &format!("c{i}")));
        }
        assert_eq!(s.watch_from(&k, 1).err(), Some(2));
        let (evs, _, rv) = s.watch_from(&k, 3).ok().unwrap();
        assert_eq!(evs.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(rv, 5);
    }

    #[test]
    fn a_watch_resuming_past_the_whole_events_gets_them_as_recorded() {
        let mut s = Store::memory();
        s.whole_events = 1;
        let k = ResKey::new("", "configmaps");
        let mut rx = s.subscribe();
        let mut recorded = Vec::new();
        let mut watch = |recorded: &mut Vec<Arc<WatchEvent>>| {
            while let Ok(ev) = rx.try_recv() {
                ev.line();
                recorded.push(ev);
            }
        };
        for colour in ["red", "blue", "green"] {
            let mut obj = cm("ns", "a");
            obj["metadata"]["labels"] = json!({ "colour": colour });
            s.begin().put(&k, obj);
            watch(&mut recorded);
        }
        s.begin().remove(&k, "ns", "a");
        watch(&mut recorded);
        let (resumed, _, _) = s.watch_from(&k, 0).ok().unwrap();
        assert_eq!(resumed.len(), 4);
        for (r, e) in resumed.iter().zip(&recorded) {
            assert_eq!((r.rv, r.type_), (e.rv, e.type_));
            assert_eq!((&r.object, &r.prev), (&e.object, &e.prev));
        }
        // The latest is kept whole, the others were decoded.
        assert!(Arc::ptr_eq(&resumed[3], &recorded[3]));
        assert!(!Arc::ptr_eq(&resumed[2], &recorded[2]));
    }

    #[test]
    fn sqlite_store_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let k = ResKey::new("", "configmaps");
        {
            let s = Store::open(dir.path()).unwrap();
            let mut tx = s.begin();
            tx.put(&k, cm("ns", "a"));
            tx.put(&k, cm("ns", "b"));
            tx.remove(&k, "ns", "a");
            tx.commit().unwrap();
            s.sync();
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.current_rv(), 3);
        assert!(s.get(&k, "ns", "a").is_none());
        assert!(s.get(&k, "ns", "b").is_some());
        // The history is gone, but nothing changed after RV 3.
        assert!(s.watch_from(&k, 3).is_ok());
        assert_eq!(s.watch_from(&k, 2).err(), Some(3));
    }

    #[test]
    fn after_a_crash_resource_versions_jump_and_every_earlier_watch_is_expired() {
        let dir = tempfile::tempdir().unwrap();
        let k = ResKey::new("", "configmaps");
        let s = Store::open(dir.path()).unwrap();
        let mut tx = s.begin();
        tx.put(&k, cm("ns", "a"));
        tx.commit().unwrap();
        s.sync();
        // A crash: the store is never closed, so no clean stop is recorded.
        std::mem::forget(s);

        let s = Store::open(dir.path()).unwrap();
        let bumped = 1 + CRASH_RV_BUMP;
        assert_eq!(s.current_rv(), bumped);
        assert!(s.get(&k, "ns", "a").is_some());
        // A watcher may have seen RVs the database lost: none resumes from before the restart,
        // in any resource (one never written durably has no history at all).
        assert_eq!(s.watch_from(&k, 1).err(), Some(bumped));
        assert_eq!(s.watch_from(&k, 5).err(), Some(bumped));
        let secrets = ResKey::new("", "secrets");
        assert_eq!(s.watch_from(&secrets, 5).err(), Some(bumped));
        assert!(s.watch_from(&k, bumped).is_ok());
        // Stopped cleanly before any write: lists showed the jump, so it is kept.
        s.close();
        drop(s);
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.current_rv(), bumped);
        assert!(s.watch_from(&k, bumped).is_ok());

        let mut tx = s.begin();
        let b = tx.put(&k, cm("ns", "b"));
        tx.commit().unwrap();
        assert_eq!(meta_str(&b, "resourceVersion"), (bumped + 1).to_string());
        s.close();
        drop(s);
        // A clean stop after a write: the sequence goes on, and watchers resume.
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.current_rv(), bumped + 1);
        assert!(s.watch_from(&k, bumped + 1).is_ok());
    }
}
