//! The watch history of one resource: its latest events whole, the older ones (once a later
//! write replaced their object, and a watcher took them as they were) as their encoded lines,
//! decoded again only for a watch that resumes that far back.
//!
//! Whole, an event holds its object as a tree of JSON values, several times the size of its
//! encoding; most of a busy resource's history is never read again (a watch resumes from a
//! recent resourceVersion), so only the latest events keep the tree. An event whose object is
//! still stored keeps it too: the store holds that tree anyway.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use super::{EventType, ResKey, WatchEvent};

/// How many of a resource's latest events are kept whole (a watch that fell behind the
/// broadcast catches up from these without decoding).
pub const WHOLE_EVENTS: usize = 512;

/// One resource's events, oldest first.
#[derive(Default)]
pub(super) struct History {
    events: VecDeque<Slot>,
    /// Every event with an RV above this is in `events`.
    pub(super) floor: u64,
}

/// One event of the history.
struct Slot {
    /// Its resourceVersion (searched without reaching into the event).
    rv: u64,
    /// Whether its object is still the stored one: a later write has not replaced it.
    stored: bool,
    /// The resourceVersion of the state its change replaced (read once, at its write).
    replaced: Option<u64>,
    kept: Kept,
}

/// An event as the history keeps it.
#[derive(Clone)]
pub(super) enum Kept {
    Whole(Arc<WatchEvent>),
    Encoded(Box<Encoded>),
}

/// An event without its trees: what a watch needs to send it and to filter it by selectors.
#[derive(Clone)]
pub(super) struct Encoded {
    type_: EventType,
    namespace: String,
    /// The event's line (`{"type":..,"object":..}`), as watchers were sent it.
    line: Bytes,
    /// The state before the change.
    prev: Option<Earlier>,
}

/// The state before an encoded event's change.
#[derive(Clone)]
enum Earlier {
    /// The line of the event that stored it (the same bytes, not a copy).
    Line(Bytes),
    /// The state itself, when no line of it is in the history: encoding it would cost the
    /// writer a serialisation under the store lock.
    Tree(super::Obj),
}

impl History {
    /// Appends `ev` and drops the oldest events beyond `limit`. Of the events no longer among
    /// the latest `whole`, those whose object is no longer stored are encoded: the one that
    /// just left the latest, and the one whose object `ev` replaced. An event whose object is
    /// still stored stays whole: its tree is kept anyway.
    pub(super) fn push(&mut self, ev: Arc<WatchEvent>, limit: usize, whole: usize) {
        let replaced = ev.prev.as_deref().and_then(stored_at);
        self.events.push_back(Slot {
            rv: ev.rv,
            stored: ev.type_ != EventType::Deleted,
            replaced,
            kept: Kept::Whole(ev),
        });
        while self.events.len() > limit {
            if let Some(old) = self.events.pop_front() {
                self.floor = old.rv;
            }
        }
        let boundary = self.events.len().checked_sub(whole + 1);
        if let Some(j) = replaced.and_then(|rv| self.position(rv)) {
            self.events[j].stored = false;
            if boundary.is_some_and(|b| j < b) {
                self.encode(j);
            }
        }
        if let Some(b) = boundary
            && !self.events[b].stored
        {
            self.encode(b);
        }
    }

    /// The events after `from` with their resourceVersions, or `Err(floor)` when they are no
    /// longer all here.
    pub(super) fn after(&self, from: u64) -> Result<Vec<(u64, Kept)>, u64> {
        if from < self.floor {
            return Err(self.floor);
        }
        let start = self.events.partition_point(|e| e.rv <= from);
        Ok(self
            .events
            .range(start..)
            .map(|e| (e.rv, e.kept.clone()))
            .collect())
    }

    fn encode(&mut self, i: usize) {
        let Some(Slot {
            kept: Kept::Whole(ev),
            replaced,
            ..
        }) = self.events.get(i)
        else {
            return;
        };
        // Only an event a watcher took as it was has its line: encoding another would cost the
        // writer a serialisation under the store lock (a resource nobody watches keeps its
        // events whole).
        let Some(line) = ev.line.get().cloned() else {
            return;
        };
        let prev = ev
            .prev
            .as_ref()
            .map(|p| self.earlier(p, *replaced, &ev.namespace, i));
        let encoded = Encoded {
            type_: ev.type_,
            namespace: ev.namespace.clone(),
            line,
            prev,
        };
        self.events[i].kept = Kept::Encoded(Box::new(encoded));
    }

    /// `state`, stored at `stored_at`, as an encoded event keeps it: the line of the event
    /// before `before` that stored it (each write has its own resourceVersion, stamped on the
    /// object it stores), else the state itself.
    fn earlier(
        &self,
        state: &super::Obj,
        stored_at: Option<u64>,
        namespace: &str,
        before: usize,
    ) -> Earlier {
        let earlier = stored_at
            .and_then(|rv| self.position(rv))
            .filter(|&j| j < before)
            .and_then(|j| self.events.get(j))
            .map(|e| &e.kept);
        match earlier {
            Some(Kept::Encoded(e)) if e.namespace == namespace && e.type_ != EventType::Deleted => {
                Earlier::Line(e.line.clone())
            }
            Some(Kept::Whole(e)) if Arc::ptr_eq(&e.object, state) => match e.line.get() {
                Some(line) => Earlier::Line(line.clone()),
                None => Earlier::Tree(state.clone()),
            },
            _ => Earlier::Tree(state.clone()),
        }
    }

    /// Where the event with resourceVersion `rv` is.
    fn position(&self, rv: u64) -> Option<usize> {
        self.events.binary_search_by_key(&rv, |e| e.rv).ok()
    }
}

/// The resourceVersion an object was stored at.
fn stored_at(object: &Value) -> Option<u64> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok())
}

impl Kept {
    /// The event at `rv` as watchers take it; `None` when an encoded one does not decode
    /// (never expected: this history encoded it).
    pub(super) fn into_event(self, rv: u64, key: &ResKey) -> Option<Arc<WatchEvent>> {
        let e = match self {
            Kept::Whole(ev) => return Some(ev),
            Kept::Encoded(e) => e,
        };
        let object = Arc::new(object_of(&e.line)?);
        let prev = match &e.prev {
            Some(Earlier::Line(line)) => Some(Arc::new(object_of(line)?)),
            Some(Earlier::Tree(state)) => Some(state.clone()),
            None => None,
        };
        let line = OnceLock::new();
        let _ = line.set(e.line);
        Some(Arc::new(WatchEvent {
            rv,
            key: key.clone(),
            namespace: e.namespace,
            type_: e.type_,
            object,
            prev,
            line,
            metadata_line: OnceLock::new(),
        }))
    }
}

/// The object of an event line.
fn object_of(line: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Line {
        object: Value,
    }
    serde_json::from_slice::<Line>(line).ok().map(|l| l.object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An event a watcher took (its line made).
    fn event(
        rv: u64,
        type_: EventType,
        object: &Arc<Value>,
        prev: Option<&Arc<Value>>,
    ) -> Arc<WatchEvent> {
        let ev = unwatched_event(rv, type_, object, prev);
        ev.line();
        ev
    }

    fn unwatched_event(
        rv: u64,
        type_: EventType,
        object: &Arc<Value>,
        prev: Option<&Arc<Value>>,
    ) -> Arc<WatchEvent> {
        Arc::new(WatchEvent {
            rv,
            key: ResKey::new("", "configmaps"),
            namespace: "ns".into(),
            type_,
            object: object.clone(),
            prev: prev.cloned(),
            line: OnceLock::new(),
            metadata_line: OnceLock::new(),
        })
    }

    fn version(rv: u64, colour: &str) -> Arc<Value> {
        Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv.to_string(),
                "labels": {"colour": colour}},
            "data": {"n": 1.5, "big": u64::MAX, "neg": -3}}))
    }

    #[test]
    fn an_encoded_previous_state_shares_the_bytes_of_the_event_that_stored_it() {
        let (v1, v2, v3) = (version(1, "red"), version(2, "blue"), version(3, "green"));
        let mut h = History::default();
        h.push(event(1, EventType::Added, &v1, None), 10, 1);
        h.push(event(2, EventType::Modified, &v2, Some(&v1)), 10, 1);
        h.push(event(3, EventType::Modified, &v3, Some(&v2)), 10, 1);
        let [Kept::Encoded(first), Kept::Encoded(second), Kept::Whole(_)] =
            [&h.events[0].kept, &h.events[1].kept, &h.events[2].kept].map(Kept::clone)
        else {
            panic!("all but the latest event encoded");
        };
        let Some(Earlier::Line(shared)) = &second.prev else {
            panic!("the previous state kept as a line");
        };
        assert_eq!(shared.as_ptr(), first.line.as_ptr());
    }

    #[test]
    fn an_event_whose_object_is_still_stored_stays_whole_until_it_is_replaced() {
        let (a1, a3) = (version(1, "red"), version(3, "blue"));
        let mut b2 = (*version(2, "red")).clone();
        b2["metadata"]["name"] = json!("b");
        let b2 = Arc::new(b2);
        let mut h = History::default();
        h.push(event(1, EventType::Added, &a1, None), 10, 0);
        h.push(event(2, EventType::Added, &b2, None), 10, 0);
        let whole = |h: &History| {
            h.events
                .iter()
                .map(|e| matches!(e.kept, Kept::Whole(_)))
                .collect::<Vec<_>>()
        };
        assert_eq!(whole(&h), [true, true]);
        h.push(event(3, EventType::Modified, &a3, Some(&a1)), 10, 0);
        assert_eq!(whole(&h), [false, true, true]);
    }

    #[test]
    fn a_previous_state_whose_event_is_gone_is_kept_as_it_is() {
        let (v1, gone) = (version(1, "red"), version(2, "red"));
        let mut h = History::default();
        h.push(event(1, EventType::Added, &v1, None), 1, 0);
        h.push(event(2, EventType::Deleted, &gone, Some(&v1)), 1, 0);
        let Some(Kept::Encoded(e)) = h.events.front().map(|e| &e.kept) else {
            panic!("one event, encoded");
        };
        assert!(matches!(&e.prev, Some(Earlier::Tree(t)) if Arc::ptr_eq(t, &v1)));
        let key = ResKey::new("", "configmaps");
        let (rv, kept) = h.after(1).unwrap().pop().unwrap();
        let resumed = kept.into_event(rv, &key).unwrap();
        assert_eq!((&resumed.object, resumed.prev.as_ref()), (&gone, Some(&v1)));
    }

    #[test]
    fn an_event_no_watcher_took_stays_whole() {
        let (v1, v2, gone) = (version(1, "red"), version(2, "blue"), version(3, "blue"));
        let unwatched = unwatched_event(2, EventType::Modified, &v2, Some(&v1));
        let mut h = History::default();
        h.push(event(1, EventType::Added, &v1, None), 10, 0);
        h.push(unwatched, 10, 0);
        h.push(event(3, EventType::Deleted, &gone, Some(&v2)), 10, 0);
        let whole: Vec<bool> = h
            .events
            .iter()
            .map(|e| matches!(e.kept, Kept::Whole(_)))
            .collect();
        assert_eq!(whole, [false, true, false]);
    }

    #[test]
    fn encoded_events_decode_to_what_was_recorded() {
        let (v1, v2) = (version(1, "red"), version(2, "blue"));
        let mut last = (*v2).clone();
        last["metadata"]["resourceVersion"] = json!("3");
        let last = Arc::new(last);
        let recorded = [
            event(1, EventType::Added, &v1, None),
            event(2, EventType::Modified, &v2, Some(&v1)),
            event(3, EventType::Deleted, &last, Some(&v2)),
        ];
        let mut h = History::default();
        for ev in &recorded {
            h.push(ev.clone(), 10, 0);
        }
        let key = ResKey::new("", "configmaps");
        let resumed: Vec<Arc<WatchEvent>> = h
            .after(0)
            .unwrap()
            .into_iter()
            .map(|(rv, k)| k.into_event(rv, &key).unwrap())
            .collect();
        assert_eq!(resumed.len(), 3);
        for (r, e) in resumed.iter().zip(&recorded) {
            assert!(!Arc::ptr_eq(r, e), "event {} was encoded", e.rv);
            assert_eq!((r.rv, r.type_, &r.namespace), (e.rv, e.type_, &e.namespace));
            assert_eq!(r.object, e.object);
            assert_eq!(r.prev, e.prev);
            assert_eq!(r.line(), e.line());
        }
        assert_eq!(h.after(1).unwrap().len(), 2);
    }
}
