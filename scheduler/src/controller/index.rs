//! An index of the scheduler's Descriptions by Subscription uid, kept current by the Description
//! watch, so that finding a Subscription's Descriptions costs its own Descriptions, not a scan of
//! every Description in the parent.

use atoll_crds::apps::Description;
use atoll_crds::known;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use parking_lot::RwLock;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

type ByUid = HashMap<String, BTreeSet<(String, String)>>;

#[derive(Default)]
struct Inner {
    by_uid: ByUid,
    /// Filled during a re-list, swapped in when it completes.
    relisting: Option<ByUid>,
}

/// `(namespace, name)` of every Description, by its `apps.clusternet.io/subs.uid` label.
#[derive(Clone, Default)]
pub struct DescriptionIndex(Arc<RwLock<Inner>>);

fn entry(description: &PartialObjectMeta<Description>) -> Option<(String, (String, String))> {
    let uid = description.labels().get(known::LABEL_SUBS_UID)?.clone();
    Some((
        uid,
        (
            description.namespace().unwrap_or_default(),
            description.name_any(),
        ),
    ))
}

fn insert(map: &mut ByUid, description: &PartialObjectMeta<Description>) {
    if let Some((uid, key)) = entry(description) {
        map.entry(uid).or_default().insert(key);
    }
}

impl DescriptionIndex {
    /// Applies one watch event.
    pub fn observe(&self, event: &Event<PartialObjectMeta<Description>>) {
        let mut inner = self.0.write();
        match event {
            Event::Apply(d) => {
                // A Description's labels could move it to another uid: drop the old entry.
                let key = (d.namespace().unwrap_or_default(), d.name_any());
                for keys in inner.by_uid.values_mut() {
                    keys.remove(&key);
                }
                insert(&mut inner.by_uid, d);
                inner.by_uid.retain(|_, keys| !keys.is_empty());
            }
            Event::Delete(d) => {
                if let Some((uid, key)) = entry(d)
                    && let Some(keys) = inner.by_uid.get_mut(&uid)
                {
                    keys.remove(&key);
                    if keys.is_empty() {
                        inner.by_uid.remove(&uid);
                    }
                }
            }
            Event::Init => inner.relisting = Some(ByUid::new()),
            Event::InitApply(d) => {
                if let Some(map) = inner.relisting.as_mut() {
                    insert(map, d);
                }
            }
            Event::InitDone => {
                if let Some(map) = inner.relisting.take() {
                    inner.by_uid = map;
                }
            }
        }
    }

    /// `(namespace, name)` of the Descriptions of the Subscription with `uid`.
    pub fn of(&self, uid: &str) -> Vec<(String, String)> {
        self.0
            .read()
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

    fn desc(ns: &str, name: &str, uid: &str) -> PartialObjectMeta<Description> {
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": ns, "labels": {known::LABEL_SUBS_UID: uid}},
        }))
        .unwrap()
    }

    #[test]
    fn index_follows_applies_deletes_and_relists() {
        let index = DescriptionIndex::default();
        index.observe(&Event::Apply(desc("c1", "default.web", "u1")));
        index.observe(&Event::Apply(desc("c2", "default.web", "u1")));
        index.observe(&Event::Apply(desc("c1", "default.api", "u2")));
        assert_eq!(
            index.of("u1"),
            vec![
                ("c1".to_owned(), "default.web".to_owned()),
                ("c2".to_owned(), "default.web".to_owned())
            ]
        );
        index.observe(&Event::Delete(desc("c1", "default.web", "u1")));
        assert_eq!(
            index.of("u1"),
            vec![("c2".to_owned(), "default.web".to_owned())]
        );

        // A re-list replaces everything once it completes.
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(desc("c3", "default.web", "u1")));
        assert_eq!(
            index.of("u1"),
            vec![("c2".to_owned(), "default.web".to_owned())]
        );
        index.observe(&Event::InitDone);
        assert_eq!(
            index.of("u1"),
            vec![("c3".to_owned(), "default.web".to_owned())]
        );
        assert!(index.of("u2").is_empty());
    }
}
