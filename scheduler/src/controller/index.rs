//! The scheduler's view of its own Descriptions, kept current by a metadata-only watch.
//!
//! It holds per Description only what decides whether to write or delete it (a few dozen
//! bytes), not the Description: at 100,000 Descriptions a cache of whole objects, or even of
//! their metadata, would dominate the scheduler's memory. Lookups are by Subscription uid, so
//! finding a Subscription's Descriptions costs its own Descriptions, not a scan.

use atoll_crds::apps::Description;
use atoll_crds::known;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use parking_lot::RwLock;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// `(namespace, name)` of a Description.
pub type DescriptionKey = (String, String);

/// What the scheduler remembers of one Description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptionRecord {
    /// Its `apps.clusternet.io/subs.uid` label.
    pub subscription_uid: String,
    /// Its `apps.clusternet.io/render-hash` annotation.
    pub render_hash: Option<String>,
    /// Fingerprint of its scheduler-owned labels ([`labels_fingerprint`]).
    pub labels: u64,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// Someone other than the scheduler changed what the scheduler writes in its spec
    /// (`spec.deployer` or `spec.raw`): their field manager owns some of it now.
    pub edited: bool,
    /// Fingerprint ([`hash_fingerprint`]) of the render hash of this process's last write of
    /// it, kept across its watch events; `None` until this process writes it.
    pub written: Option<u64>,
}

/// Fingerprint of a render hash, kept per Description in place of a second copy of the string.
pub fn hash_fingerprint(render_hash: Option<&str>) -> u64 {
    let mut hasher = DefaultHasher::new();
    render_hash.hash(&mut hasher);
    hasher.finish()
}

impl DescriptionRecord {
    /// Whether this process wrote the Description last with another render hash than this
    /// record shows: an older write of its own landed after the newer one (a request held up in
    /// the network and delivered late, or sent again), and nothing else would write it again
    /// until the Subscription's next pass. The watch event of an earlier write arriving after a
    /// later write was sent looks the same; it costs one write that changes nothing.
    fn behind_own_write(&self) -> bool {
        self.written
            .is_some_and(|w| w != hash_fingerprint(self.render_hash.as_deref()))
    }
}

/// The spec fields the scheduler writes, as they appear in managedFields (`fieldsV1`).
const SCHEDULER_SPEC_FIELDS: [&str; 2] = ["f:deployer", "f:raw"];

/// Whether a field manager other than the scheduler owns a spec field the scheduler writes.
/// An update takes over the fields it changes (server-side apply bookkeeping), so a hand edit
/// of `spec.raw` shows here until the scheduler applies its own content again with force.
fn edited_by_someone_else(description: &PartialObjectMeta<Description>) -> bool {
    description
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.as_deref() != Some(known::FIELD_MANAGER_SCHEDULER))
        // Status writes (the hub's) go through the status subresource.
        .filter(|entry| entry.subresource.as_deref().unwrap_or_default().is_empty())
        .filter_map(|entry| entry.fields_v1.as_ref())
        .filter_map(|fields| fields.0.get("f:spec"))
        .any(|spec| SCHEDULER_SPEC_FIELDS.iter().any(|f| spec.get(f).is_some()))
}

/// Fingerprint of the labels the scheduler sets on a Description ([`SCHEDULER_LABELS`], present
/// or not), so that a label edit by someone else, or one the scheduler drops, is seen as a
/// difference.
pub fn labels_fingerprint(labels: &BTreeMap<String, String>) -> u64 {
    let mut hasher = DefaultHasher::new();
    for key in SCHEDULER_LABELS {
        (key, labels.get(key)).hash(&mut hasher);
    }
    hasher.finish()
}

#[derive(Default)]
struct Maps {
    records: HashMap<DescriptionKey, DescriptionRecord>,
    by_uid: HashMap<String, BTreeSet<DescriptionKey>>,
}

impl Maps {
    fn insert(&mut self, key: DescriptionKey, record: DescriptionRecord) {
        self.remove(&key);
        self.by_uid
            .entry(record.subscription_uid.clone())
            .or_default()
            .insert(key.clone());
        self.records.insert(key, record);
    }

    fn remove(&mut self, key: &DescriptionKey) {
        if let Some(old) = self.records.remove(key)
            && let Some(keys) = self.by_uid.get_mut(&old.subscription_uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_uid.remove(&old.subscription_uid);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    maps: Maps,
    /// Filled during a (re-)list, swapped in when it completes.
    relisting: Option<Maps>,
    synced: bool,
}

/// The scheduler's Descriptions, by key and by Subscription uid.
#[derive(Clone, Default)]
pub struct DescriptionIndex(Arc<RwLock<Inner>>);

/// The record of a Description, with the label fingerprint taken over the scheduler's own keys.
fn record_of(
    description: &PartialObjectMeta<Description>,
) -> Option<(DescriptionKey, DescriptionRecord)> {
    let labels = description.labels();
    let subscription_uid = labels.get(known::LABEL_SUBS_UID)?.clone();
    Some((
        (
            description.namespace().unwrap_or_default(),
            description.name_any(),
        ),
        DescriptionRecord {
            subscription_uid,
            render_hash: description
                .annotations()
                .get(known::ANNOTATION_RENDER_HASH)
                .cloned(),
            labels: labels_fingerprint(labels),
            deleting: description.metadata.deletion_timestamp.is_some(),
            edited: edited_by_someone_else(description),
            written: None,
        },
    ))
}

/// The label keys the scheduler sets on every Description.
pub const SCHEDULER_LABELS: [&str; 7] = [
    known::LABEL_SUBS_NAME,
    known::LABEL_SUBS_NAMESPACE,
    known::LABEL_SUBS_UID,
    known::LABEL_CLUSTER_ID,
    known::LABEL_CLUSTER_NAME,
    known::LABEL_CREATED_BY,
    known::LABEL_DELETION_POLICY,
];

impl DescriptionIndex {
    /// Applies one watch event. Returns true when the event's Description must be written
    /// again by its Subscription's next pass: it was deleted, or someone else edited its spec.
    pub fn observe(&self, event: &Event<PartialObjectMeta<Description>>) -> bool {
        let mut inner = self.0.write();
        match event {
            Event::Apply(d) => {
                let key = (d.namespace().unwrap_or_default(), d.name_any());
                match record_of(d) {
                    Some((key, mut record)) => {
                        record.written = inner.maps.records.get(&key).and_then(|r| r.written);
                        let rewrite = record.edited || record.behind_own_write();
                        inner.maps.insert(key, record);
                        return rewrite;
                    }
                    None => inner.maps.remove(&key),
                }
            }
            Event::Delete(d) => {
                inner
                    .maps
                    .remove(&(d.namespace().unwrap_or_default(), d.name_any()));
                return true;
            }
            Event::Init => inner.relisting = Some(Maps::default()),
            Event::InitApply(d) => {
                if let Some((key, mut record)) = record_of(d) {
                    record.written = inner.maps.records.get(&key).and_then(|r| r.written);
                    if let Some(maps) = inner.relisting.as_mut() {
                        maps.insert(key, record);
                    }
                }
            }
            Event::InitDone => {
                if let Some(maps) = inner.relisting.take() {
                    inner.maps = maps;
                }
                inner.synced = true;
            }
        }
        false
    }

    /// Records a Description the scheduler has just written, before its watch event arrives:
    /// a pass meanwhile (another input changed) must not see it missing or outdated and write
    /// it again. Its watch event, or someone else's edit after it, replaces the record.
    pub fn record_write(&self, key: DescriptionKey, record: DescriptionRecord) {
        let mut inner = self.0.write();
        if let Some(relisting) = inner.relisting.as_mut() {
            relisting.insert(key.clone(), record.clone());
        }
        inner.maps.insert(key, record);
    }

    /// Whether the first list has been seen.
    pub fn is_synced(&self) -> bool {
        self.0.read().synced
    }

    /// The record of one Description.
    pub fn get(&self, namespace: &str, name: &str) -> Option<DescriptionRecord> {
        self.0
            .read()
            .maps
            .records
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// `(namespace, name)` of the Descriptions of the Subscription with `uid`.
    pub fn of(&self, uid: &str) -> Vec<DescriptionKey> {
        self.0
            .read()
            .maps
            .by_uid
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desc(ns: &str, name: &str, uid: &str, hash: &str) -> PartialObjectMeta<Description> {
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": ns,
                "labels": {known::LABEL_SUBS_UID: uid},
                "annotations": {known::ANNOTATION_RENDER_HASH: hash}},
        }))
        .unwrap()
    }

    fn key(ns: &str, name: &str) -> DescriptionKey {
        (ns.to_owned(), name.to_owned())
    }

    /// The record of the scheduler's own write of Subscription `u1`'s Description with `hash`.
    fn written(hash: &str) -> DescriptionRecord {
        DescriptionRecord {
            subscription_uid: "u1".to_owned(),
            render_hash: Some(hash.to_owned()),
            labels: 0,
            deleting: false,
            edited: false,
            written: Some(hash_fingerprint(Some(hash))),
        }
    }

    #[test]
    fn a_write_is_known_before_its_watch_event_and_survives_a_relist_in_progress() {
        let index = DescriptionIndex::default();
        index.record_write(key("c1", "default.web"), written("h1"));
        assert_eq!(index.get("c1", "default.web"), Some(written("h1")));
        assert_eq!(index.of("u1"), vec![key("c1", "default.web")]);

        index.observe(&Event::Init);
        index.record_write(key("c2", "default.web"), written("h1"));
        index.observe(&Event::InitDone);
        assert_eq!(index.get("c2", "default.web"), Some(written("h1")));
        assert_eq!(
            index.get("c1", "default.web"),
            None,
            "not in the relist: gone"
        );

        // The watch event of someone else's later edit replaces the record.
        index.observe(&Event::Apply(desc("c2", "default.web", "u1", "h9")));
        assert_eq!(
            index
                .get("c2", "default.web")
                .unwrap()
                .render_hash
                .as_deref(),
            Some("h9")
        );
    }

    /// An older write of the scheduler's own landing after its newer one (a late replay) asks
    /// for a rewrite; the event of the newer write, or a Description this process never wrote,
    /// does not.
    #[test]
    fn an_own_older_write_landing_late_asks_for_a_rewrite() {
        let index = DescriptionIndex::default();
        assert!(!index.observe(&Event::Apply(desc("c1", "default.web", "u1", "h1"))));
        index.record_write(key("c1", "default.web"), written("h2"));
        assert!(!index.observe(&Event::Apply(desc("c1", "default.web", "u1", "h2"))));
        assert!(index.observe(&Event::Apply(desc("c1", "default.web", "u1", "h1"))));
        // Still behind until the rewrite's event shows h2 again; a relist keeps what was written.
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(desc("c1", "default.web", "u1", "h1")));
        index.observe(&Event::InitDone);
        assert!(index.observe(&Event::Apply(desc("c1", "default.web", "u1", "h1"))));
        assert!(!index.observe(&Event::Apply(desc("c1", "default.web", "u1", "h2"))));
        let record = index.get("c1", "default.web").unwrap();
        assert_eq!(record.render_hash.as_deref(), Some("h2"));
        assert_eq!(record.written, Some(hash_fingerprint(Some("h2"))));
    }

    #[test]
    fn index_follows_applies_deletes_and_relists() {
        let index = DescriptionIndex::default();
        assert!(!index.is_synced());
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(desc("c1", "default.web", "u1", "h1")));
        index.observe(&Event::InitDone);
        assert!(index.is_synced());
        // The scheduler's own writes need no rewrite; a deletion does.
        assert!(!index.observe(&Event::Apply(desc("c2", "default.web", "u1", "h1"))));
        index.observe(&Event::Apply(desc("c1", "default.api", "u2", "h2")));
        assert_eq!(
            index.of("u1"),
            vec![key("c1", "default.web"), key("c2", "default.web")]
        );
        assert_eq!(
            index
                .get("c1", "default.api")
                .unwrap()
                .render_hash
                .as_deref(),
            Some("h2")
        );

        // A new render hash replaces the record; a delete removes it.
        index.observe(&Event::Apply(desc("c2", "default.web", "u1", "h3")));
        assert_eq!(
            index
                .get("c2", "default.web")
                .unwrap()
                .render_hash
                .as_deref(),
            Some("h3")
        );
        assert!(index.observe(&Event::Delete(desc("c1", "default.web", "u1", "h1"))));
        assert_eq!(index.of("u1"), vec![key("c2", "default.web")]);
        assert!(index.get("c1", "default.web").is_none());

        // A re-list replaces everything once it completes.
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(desc("c3", "default.web", "u1", "h1")));
        assert_eq!(index.of("u1"), vec![key("c2", "default.web")]);
        index.observe(&Event::InitDone);
        assert_eq!(index.of("u1"), vec![key("c3", "default.web")]);
        assert!(index.of("u2").is_empty());
    }

    #[test]
    fn an_edit_is_a_foreign_manager_owning_spec_raw_or_deployer() {
        let with_managers = |entries: serde_json::Value| {
            let mut d = serde_json::to_value(desc("c1", "default.web", "u1", "h1")).unwrap();
            d["metadata"]["managedFields"] = entries;
            let d: PartialObjectMeta<Description> = serde_json::from_value(d).unwrap();
            record_of(&d).unwrap().1.edited
        };
        let entry = |manager: &str, subresource: Option<&str>, fields: serde_json::Value| {
            let mut e = json!({"manager": manager, "operation": "Update",
                "apiVersion": "apps.clusternet.io/v1alpha1", "fieldsType": "FieldsV1",
                "fieldsV1": fields});
            if let Some(s) = subresource {
                e["subresource"] = json!(s);
            }
            e
        };
        let raw = json!({"f:spec": {"f:raw": {}}});
        assert!(!with_managers(json!([entry(
            known::FIELD_MANAGER_SCHEDULER,
            None,
            raw.clone()
        )])));
        assert!(with_managers(json!([
            entry(
                known::FIELD_MANAGER_SCHEDULER,
                None,
                json!({"f:spec": {"f:deployer": {}}})
            ),
            entry("kubectl-edit", None, raw.clone()),
        ])));
        assert!(with_managers(json!([entry(
            "kubectl-edit",
            None,
            json!({"f:spec": {"f:deployer": {}}})
        )])));
        // The hub's status writes and finalizer are not edits of the spec.
        assert!(!with_managers(json!([
            entry(
                "atoll-hub",
                Some("status"),
                json!({"f:status": {"f:phase": {}}})
            ),
            entry(
                "atoll-hub",
                None,
                json!({"f:metadata": {"f:finalizers": {}}})
            ),
        ])));
        // A field the scheduler does not write is someone else's business.
        assert!(!with_managers(json!([entry(
            "helm",
            None,
            json!({"f:spec": {"f:charts": {}}})
        )])));
    }

    #[test]
    fn label_fingerprint_sees_a_changed_added_or_missing_scheduler_label_only() {
        let mut labels: BTreeMap<String, String> = [
            (known::LABEL_SUBS_NAME.to_owned(), "web".to_owned()),
            (known::LABEL_SUBS_UID.to_owned(), "u1".to_owned()),
        ]
        .into();
        let base = labels_fingerprint(&labels);
        labels.insert("other".to_owned(), "x".to_owned());
        assert_eq!(labels_fingerprint(&labels), base);
        labels.insert(known::LABEL_SUBS_UID.to_owned(), "u2".to_owned());
        assert_ne!(labels_fingerprint(&labels), base);
        labels.remove(known::LABEL_SUBS_UID);
        assert_ne!(labels_fingerprint(&labels), base);
        labels.insert(known::LABEL_SUBS_UID.to_owned(), "u1".to_owned());
        labels.insert(known::LABEL_DELETION_POLICY.to_owned(), "Orphan".to_owned());
        assert_ne!(
            labels_fingerprint(&labels),
            base,
            "a label only sometimes set counts"
        );
    }
}
