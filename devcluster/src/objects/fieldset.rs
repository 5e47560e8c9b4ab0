//! Field sets of server-side apply: the `fieldsV1` trie of structured-merge-diff
//! [SMD `fieldpath/set.go`, `fieldpath/serialize.go`], and walking objects into them.

use super::lists::{SsaList, atomic_map, key_default, strategy};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A set of field paths. A node is a member when the path ending there is in the set (a leaf
/// `{}` in `fieldsV1`, or a `".": {}` entry next to children).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

/// Metadata fields server-side apply never tracks [AM `internal/stripmeta.go`].
pub(crate) const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "clusterName",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

impl FieldSet {
    /// Parses a `fieldsV1` object (the root itself is never a member).
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::parse(value);
        set.member = false;
        set
    }

    fn parse(value: &Value) -> FieldSet {
        let Some(map) = value.as_object() else {
            return FieldSet {
                member: true,
                children: BTreeMap::new(),
            };
        };
        let children: BTreeMap<String, FieldSet> = map
            .iter()
            .filter(|(k, _)| k.as_str() != ".")
            .map(|(k, v)| (k.clone(), FieldSet::parse(v)))
            .collect();
        FieldSet {
            member: children.is_empty() || map.contains_key("."),
            children,
        }
    }

    /// Serialises to `fieldsV1`.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        if self.member && self.children.values().any(|c| !c.is_empty()) {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, child) in &self.children {
            if !child.is_empty() {
                out.insert(k.clone(), child.to_fields_v1());
            }
        }
        Value::Object(out)
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, child) in &other.children {
            self.children.entry(k.clone()).or_default().union(child);
        }
    }

    /// Removes the members of `other`.
    pub fn subtract(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        for (k, child) in &other.children {
            if let Some(mine) = self.children.get_mut(k) {
                mine.subtract(child);
            }
        }
        self.children.retain(|_, c| !c.is_empty());
    }

    /// Keeps only the members also in `other`.
    pub fn intersect(&self, other: &FieldSet) -> FieldSet {
        let mut children = BTreeMap::new();
        for (k, child) in &self.children {
            if let Some(theirs) = other.children.get(k) {
                let both = child.intersect(theirs);
                if !both.is_empty() {
                    children.insert(k.clone(), both);
                }
            }
        }
        FieldSet {
            member: self.member && other.member,
            children,
        }
    }

    /// Whether the path is a member.
    pub fn has(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Every member path, parents before children.
    pub fn members(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, child) in &self.children {
            prefix.push(k.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }
}

/// Renders a path as SMD prints it in conflicts: `.spec.replicas`,
/// `.spec.containers[name="nginx"].image`, `.metadata.finalizers[="x"]`.
pub(crate) fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(field) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = element.strip_prefix("k:") {
            let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(value) = element.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
        } else if let Some(index) = element.strip_prefix("i:") {
            out.push_str(&format!("[{index}]"));
        } else {
            out.push_str(element);
        }
    }
    out
}

/// Walks objects with the list strategies of one kind.
pub(crate) struct Walker<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    /// The CRD `openAPIV3Schema` of a custom resource: its `x-kubernetes-list-type` and
    /// `x-kubernetes-list-map-keys` decide outside `metadata`. `None` for built-in kinds.
    pub schema: Option<&'a Value>,
}

/// How SSA tracks one list.
enum ListType {
    Atomic,
    Map(Vec<String>),
    Set,
}

/// The schema node of the field at `names` (list items are skipped in `names`).
fn schema_at<'s>(schema: &'s Value, names: &[String]) -> Option<&'s Value> {
    let mut node = schema;
    for name in names {
        while let Some(items) = node.get("items").filter(|i| i.is_object()) {
            node = items;
        }
        node = node
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?;
    }
    Some(node)
}

/// What changed between two objects: fields added or modified in the new one, and fields
/// that are gone.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub written: FieldSet,
    pub removed: FieldSet,
}

impl Changes {
    pub fn all(&self) -> FieldSet {
        let mut all = self.written.clone();
        all.union(&self.removed);
        all
    }
}

impl Walker<'_> {
    fn list_type(&self, names: &[String]) -> ListType {
        let from_schema = match self.schema {
            Some(schema) if names.first().is_some_and(|n| n != "metadata") => Some(schema),
            _ => None,
        };
        if let Some(schema) = from_schema {
            let node = schema_at(schema, names);
            return match node
                .and_then(|n| n.get("x-kubernetes-list-type"))
                .and_then(Value::as_str)
            {
                Some("map") => ListType::Map(
                    node.and_then(|n| n.get("x-kubernetes-list-map-keys"))
                        .and_then(Value::as_array)
                        .map(|keys| {
                            keys.iter()
                                .filter_map(Value::as_str)
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                Some("set") => ListType::Set,
                _ => ListType::Atomic,
            };
        }
        match strategy(self.group, self.kind, names).ssa {
            SsaList::Map(keys) => ListType::Map(keys.iter().map(|k| (*k).to_string()).collect()),
            SsaList::Set => ListType::Set,
            SsaList::Atomic => ListType::Atomic,
        }
    }

    /// The path element of an item of the list at `names`.
    pub fn item_key(&self, names: &[String], item: &Value, index: usize) -> String {
        match self.list_type(names) {
            ListType::Map(keys) => {
                let mut fields = Map::new();
                for key in keys {
                    match item.get(&key) {
                        Some(v) => {
                            fields.insert(key, v.clone());
                        }
                        None => {
                            if let Some(d) = key_default(&key) {
                                fields.insert(key, Value::String(d.into()));
                            }
                        }
                    }
                }
                if fields.is_empty() {
                    format!("i:{index}")
                } else {
                    format!("k:{}", Value::Object(fields))
                }
            }
            ListType::Set => format!("v:{item}"),
            ListType::Atomic => format!("i:{index}"),
        }
    }

    /// Whether the map at `names` is atomic: one field, replaced whole.
    pub fn atomic_map(&self, names: &[String]) -> bool {
        if names.is_empty() {
            return false;
        }
        match self.schema {
            Some(schema) if names.first().is_some_and(|n| n != "metadata") => {
                schema_at(schema, names)
                    .and_then(|n| n.get("x-kubernetes-map-type"))
                    .and_then(Value::as_str)
                    == Some("atomic")
            }
            _ => atomic_map(names),
        }
    }

    /// Whether the list at `names` is granular (its items are tracked one by one).
    pub fn granular(&self, names: &[String]) -> bool {
        !matches!(self.list_type(names), ListType::Atomic)
    }

    /// The fields of a whole object: every leaf, every item of a granular list, and with
    /// `own_maps` every non-empty map too (as an Update that creates a map owns it).
    pub fn object_set(&self, obj: &Value, own_maps: bool) -> FieldSet {
        let mut set = self.value_set(obj, &mut Vec::new(), own_maps);
        set.member = false;
        strip_untracked(&mut set);
        set
    }

    fn value_set(&self, value: &Value, names: &mut Vec<String>, own_maps: bool) -> FieldSet {
        match value {
            Value::Object(map) if !map.is_empty() && !self.atomic_map(names) => {
                let mut set = FieldSet {
                    member: own_maps,
                    children: BTreeMap::new(),
                };
                for (k, v) in map {
                    names.push(k.clone());
                    let child = self.value_set(v, names, own_maps);
                    names.pop();
                    set.children.insert(format!("f:{k}"), child);
                }
                set
            }
            Value::Array(items) if !items.is_empty() && self.granular(names) => {
                let mut set = FieldSet {
                    member: false,
                    children: BTreeMap::new(),
                };
                for (i, item) in items.iter().enumerate() {
                    let mut child = self.value_set(item, names, own_maps);
                    child.member = true;
                    set.children.insert(self.item_key(names, item, i), child);
                }
                set
            }
            _ => FieldSet {
                member: true,
                children: BTreeMap::new(),
            },
        }
    }

    /// Fields written (added or changed) and removed going from `old` to `new`.
    pub fn changes(&self, old: &Value, new: &Value, own_maps: bool) -> Changes {
        let mut changes = Changes::default();
        self.diff(
            Some(old),
            Some(new),
            &mut Vec::new(),
            &mut Vec::new(),
            own_maps,
            &mut changes,
        );
        strip_untracked(&mut changes.written);
        strip_untracked(&mut changes.removed);
        changes.written.member = false;
        changes.removed.member = false;
        changes
    }

    fn diff(
        &self,
        old: Option<&Value>,
        new: Option<&Value>,
        names: &mut Vec<String>,
        path: &mut Vec<String>,
        own_maps: bool,
        out: &mut Changes,
    ) {
        match (old, new) {
            (None, None) => {}
            (Some(o), Some(n)) if o == n => {}
            (Some(Value::Object(o)), Some(Value::Object(n))) if !self.atomic_map(names) => {
                let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
                for k in keys {
                    names.push(k.clone());
                    path.push(format!("f:{k}"));
                    self.diff(o.get(k), n.get(k), names, path, own_maps, out);
                    path.pop();
                    names.pop();
                }
            }
            (Some(Value::Array(o)), Some(Value::Array(n))) if self.granular(names) => {
                let index = |items: &[Value]| -> Vec<(String, Value)> {
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (self.item_key(names, v, i), v.clone()))
                        .collect()
                };
                let (o, n) = (index(o), index(n));
                let mut keys: Vec<&String> = o.iter().map(|(k, _)| k).collect();
                for (k, _) in &n {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                let find = |items: &[(String, Value)], k: &String| {
                    items
                        .iter()
                        .find(|(key, _)| key == k)
                        .map(|(_, v)| v.clone())
                };
                for k in keys {
                    let (ov, nv) = (find(&o, k), find(&n, k));
                    path.push(k.clone());
                    self.diff(ov.as_ref(), nv.as_ref(), names, path, own_maps, out);
                    path.pop();
                }
            }
            (o, n) => {
                // A whole value came, went or was replaced: the node itself is the change.
                if let Some(o) = o {
                    let mut sub = self.value_set(o, names, true);
                    sub.member = n.is_none();
                    graft(&mut out.removed, path, sub);
                }
                if let Some(n) = n {
                    let mut sub = self.value_set(n, names, own_maps);
                    sub.member = true;
                    graft(&mut out.written, path, sub);
                }
            }
        }
    }
}

fn graft(target: &mut FieldSet, path: &[String], sub: FieldSet) {
    if sub.is_empty() {
        return;
    }
    let mut node = target;
    for p in path {
        node = node.children.entry(p.clone()).or_default();
    }
    node.union(&sub);
}

/// Drops what SSA never tracks: `apiVersion`, `kind`, `metadata` itself and server-owned
/// metadata fields.
fn strip_untracked(set: &mut FieldSet) {
    set.children.remove("f:apiVersion");
    set.children.remove("f:kind");
    if let Some(meta) = set.children.get_mut("f:metadata") {
        meta.member = false;
        for field in UNTRACKED_METADATA {
            meta.children.remove(&format!("f:{field}"));
        }
    }
    set.children.retain(|_, c| !c.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_through_field_set() {
        let cases = [
            json!({}),
            json!({"f:data": {".": {}, "f:a": {}}}),
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}}}}),
            json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}}}),
        ];
        for fields in cases {
            assert_eq!(FieldSet::from_fields_v1(&fields).to_fields_v1(), fields);
        }
    }

    #[test]
    fn render_path_uses_smd_notation() {
        let p = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases = [
            (p(&["f:spec", "f:replicas"]), ".spec.replicas"),
            (
                p(&[
                    "f:spec",
                    "f:containers",
                    "k:{\"name\":\"nginx\"}",
                    "f:image",
                ]),
                ".spec.containers[name=\"nginx\"].image",
            ),
            (
                p(&["f:ports", "k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]),
                ".ports[containerPort=80,protocol=\"TCP\"]",
            ),
            (
                p(&["f:metadata", "f:finalizers", "v:\"x\""]),
                ".metadata.finalizers[=\"x\"]",
            ),
            (p(&["f:args", "i:3"]), ".args[3]"),
        ];
        for (path, want) in cases {
            assert_eq!(render_path(&path), want);
        }
    }

    #[test]
    fn object_set_tracks_leaves_items_and_set_values() {
        let w = Walker {
            group: "apps",
            kind: "Deployment",
            schema: None,
        };
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}, "finalizers": ["f"]},
            "spec": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}],
                "tolerations": [{"key": "k"}]}}}});
        let want = json!({
            "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"f\"": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}},
                "f:tolerations": {}}}}});
        assert_eq!(w.object_set(&obj, false).to_fields_v1(), want);
    }

    #[test]
    fn changes_separate_written_and_removed_fields() {
        let w = Walker {
            group: "",
            kind: "ConfigMap",
            schema: None,
        };
        let old = json!({"metadata": {"name": "c", "resourceVersion": "1"}, "data": {"a": "1", "b": "2"}});
        let new = json!({"metadata": {"name": "c", "resourceVersion": "2", "labels": {"x": "y"}},
                         "data": {"a": "9", "c": "3"}});
        let ch = w.changes(&old, &new, true);
        assert_eq!(
            ch.written.to_fields_v1(),
            json!({"f:data": {"f:a": {}, "f:c": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
        );
        assert_eq!(ch.removed.to_fields_v1(), json!({"f:data": {"f:b": {}}}));
    }
}
