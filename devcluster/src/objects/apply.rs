//! Server-side apply and `metadata.managedFields` bookkeeping.

use super::fieldset::{FieldSet, UNTRACKED_METADATA, Walker, render_path};
use serde_json::{Map, Value, json};

/// One field-manager conflict of a server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldConflict {
    /// The manager that owns the field, e.g. `kubectl-client-side-apply`.
    pub manager: String,
    /// The field in kubectl's notation, e.g. `.spec.replicas` or `.data.key`.
    pub field: String,
    /// The owner as kube-apiserver's messages print it: `"name"` for appliers,
    /// `"name" using v1` for updaters, plus ` with subresource "status"` where it applies.
    /// A cause's message is `conflict with <owner>`.
    pub owner: String,
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    /// Fields owned by other managers would change and `force` was not set (409 Conflict).
    /// Its `Display` is kube-apiserver's Status message for them.
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<FieldConflict>),
    /// The applied configuration is not a valid object (400 or 422).
    #[error("{0}")]
    Invalid(String),
}

/// kube-apiserver's message for apply conflicts [AM `internal/conflict.go`]:
/// `Apply failed with 1 conflict: conflict with "m" using v1: .data.a`, or for several
/// `Apply failed with 2 conflicts: conflicts with "a":\n- .spec.x\nconflicts with ...`.
pub fn conflicts_message(conflicts: &[FieldConflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.owner, only.field
        );
    }
    let mut owners: Vec<&str> = conflicts.iter().map(|c| c.owner.as_str()).collect();
    owners.sort_unstable();
    owners.dedup();
    let mut lines = Vec::new();
    for owner in owners {
        lines.push(format!("conflicts with {owner}:"));
        for c in conflicts.iter().filter(|c| c.owner == owner) {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";
/// Update entries kept before the oldest merge into `ancient-changes` [AM `capmanagers.go`].
const MAX_UPDATE_ENTRIES: usize = 10;

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn from_json(v: &Value) -> Option<Entry> {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        if v.get("fieldsType").and_then(Value::as_str) != Some("FieldsV1") {
            return None;
        }
        Some(Entry {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            time: s("time"),
            subresource: v
                .get("subresource")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from),
            set: v
                .get("fieldsV1")
                .map(FieldSet::from_fields_v1)
                .unwrap_or_default(),
        })
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), json!(self.manager));
        out.insert("operation".into(), json!(self.operation));
        out.insert("apiVersion".into(), json!(self.api_version));
        if !self.time.is_empty() {
            out.insert("time".into(), json!(self.time));
        }
        out.insert("fieldsType".into(), json!("FieldsV1"));
        out.insert("fieldsV1".into(), self.set.to_fields_v1());
        if let Some(sub) = &self.subresource {
            out.insert("subresource".into(), json!(sub));
        }
        Value::Object(out)
    }

    /// apimachinery's `printManager`.
    fn owner_text(&self) -> String {
        let mut out = go_quote(&self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {}", go_quote(sub)));
        }
        if self.operation == UPDATE {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn sort_key(&self) -> (&str, &str, &str, &str, &str) {
        (
            &self.operation,
            &self.time,
            &self.manager,
            &self.api_version,
            self.subresource.as_deref().unwrap_or_default(),
        )
    }
}

fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

/// Drops empty entries, caps Update entries, sorts as kube does and stores them in `obj`.
fn write_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    cap_updates(&mut entries);
    entries.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    let Some(meta) = metadata_mut(obj) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

const ANCIENT_CHANGES: &str = "ancient-changes";

/// Beyond the cap, merges the oldest Update entries into one `ancient-changes` bucket per
/// apiVersion, oldest first, until the cap holds [AM `internal/capmanagers.go`].
fn cap_updates(entries: &mut Vec<Entry>) {
    let mut count = entries.iter().filter(|e| e.operation == UPDATE).count();
    if count <= MAX_UPDATE_ENTRIES {
        return;
    }
    let mut updaters: Vec<Entry> = Vec::new();
    let mut rest: Vec<Entry> = Vec::new();
    for e in entries.drain(..) {
        if e.operation == UPDATE {
            updaters.push(e);
        } else {
            rest.push(e);
        }
    }
    updaters.sort_by(|a, b| (&a.time, &a.manager).cmp(&(&b.time, &b.manager)));
    // Per apiVersion: the index of the bucket, or of the first entry seen for it.
    let mut first_of_version: std::collections::BTreeMap<String, usize> = Default::default();
    let mut merged: Vec<Option<Entry>> = updaters.into_iter().map(Some).collect();
    for i in 0..merged.len() {
        if count <= MAX_UPDATE_ENTRIES {
            break;
        }
        let Some(entry) = merged.get(i).cloned().flatten() else {
            continue;
        };
        let version = entry.api_version.clone();
        let Some(&first) = first_of_version.get(&version) else {
            first_of_version.insert(version, i);
            continue;
        };
        if let Some(Some(bucket)) = merged.get_mut(first) {
            // The first entry of the version becomes (or already is) the bucket.
            bucket.manager = ANCIENT_CHANGES.into();
            bucket.subresource = None;
            bucket.set.union(&entry.set);
            bucket.time = entry.time.clone();
        }
        if let Some(slot) = merged.get_mut(i) {
            *slot = None;
        }
        count -= 1;
    }
    entries.extend(rest);
    entries.extend(merged.into_iter().flatten());
}

fn metadata_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let root = obj.as_object_mut()?;
    root.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

/// The object without `metadata.managedFields`.
fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    out
}

fn walker_for(obj: &Value) -> (String, String) {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = match api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    (group.to_string(), kind.to_string())
}

/// A `null` in an applied configuration means "not specified".
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Server-side apply (`application/apply-patch+yaml`) of `applied` by `manager`.
///
/// `live` is the stored object (`None` when the apply creates it). Returns the new object,
/// with `metadata.managedFields` updated (operation `Apply`, `fieldsV1` in the wire format,
/// `time` = `now`). Fields the manager applied before but no longer applies are removed when
/// no other manager owns them. Server-populated metadata (uid, resourceVersion,
/// creationTimestamp, generation) is taken from `live`, not from `applied`.
///
/// An apply that changes neither the object nor the manager's fields returns `live`
/// unchanged (same `time`), so the caller can skip the write.
///
/// This entry point does not know the endpoint; a configuration that carries nothing but
/// `status` (and the object's name) is taken as an apply through `/status`, so that a
/// controller applying spec and status under one manager keeps two entries instead of
/// flipping one back and forth on every write. [`server_side_apply_with`] says it exactly.
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApplyError> {
    let options = ApplyOptions {
        force,
        subresource: is_status_only(applied).then_some("status"),
        ..ApplyOptions::default()
    };
    server_side_apply_with(live, applied, manager, now, &options)
}

/// Whether an applied configuration only sets `status`.
fn is_status_only(applied: &Value) -> bool {
    let Some(root) = applied.as_object() else {
        return false;
    };
    let meta_ok = root
        .get("metadata")
        .and_then(Value::as_object)
        .is_none_or(|m| m.keys().all(|k| UNTRACKED_METADATA.contains(&k.as_str())));
    root.contains_key("status")
        && meta_ok
        && root
            .keys()
            .all(|k| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
}

/// Options of [`server_side_apply_with`] beyond what [`server_side_apply`] takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyOptions<'a> {
    /// `force=true`: take conflicting fields from their owners instead of failing.
    pub force: bool,
    /// `Some("status")` for an apply through `/status`: only `status` is applied and owned,
    /// and the entry carries `"subresource": "status"` (so the same manager applying spec
    /// on the main endpoint and status on `/status` keeps two entries, as in kube).
    pub subresource: Option<&'a str>,
    /// The resource has a status subresource: an apply through the main endpoint neither
    /// changes nor owns `status`.
    pub status_subresource: bool,
    /// For a custom resource, the CRD version's `openAPIV3Schema`: its
    /// `x-kubernetes-list-type: map|set` (with `x-kubernetes-list-map-keys`) makes lists
    /// granular, other CR lists are atomic, as in kube-apiserver. `None` uses the built-in
    /// kinds' list types.
    pub schema: Option<&'a Value>,
}

/// [`server_side_apply`] with subresource, status reset and CRD schema handling.
pub fn server_side_apply_with(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    now: &str,
    options: &ApplyOptions<'_>,
) -> Result<Value, ApplyError> {
    let force = options.force;
    let schema = options.schema;
    let subresource = options.subresource.filter(|s| !s.is_empty());
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be an object".into(),
        ));
    }
    let mut config = applied.clone();
    strip_nulls(&mut config);
    if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in UNTRACKED_METADATA {
            if !matches!(*field, "name" | "namespace") {
                meta.remove(*field);
            }
        }
    }
    // Fields the strategy resets are neither applied nor owned [AS `GetResetFields`].
    if let Some(root) = config.as_object_mut() {
        if subresource == Some("status") {
            root.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "status"));
            if let Some(meta) = applied.get("metadata").and_then(Value::as_object) {
                let ids: Map<String, Value> = meta
                    .iter()
                    .filter(|(k, _)| matches!(k.as_str(), "name" | "namespace"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                root.insert("metadata".into(), Value::Object(ids));
            }
        } else if subresource.is_none() && options.status_subresource {
            root.remove("status");
        }
    }
    let (group, kind) = walker_for(&config);
    let walker = Walker {
        group: &group,
        kind: &kind,
        schema,
    };
    let applied_set = walker.object_set(&config, false);
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();

    let Some(live) = live else {
        let mut created = config;
        let entry = Entry {
            manager: manager.to_string(),
            operation: APPLY.into(),
            api_version,
            time: now.to_string(),
            subresource: subresource.map(String::from),
            set: applied_set,
        };
        write_entries(&mut created, vec![entry]);
        return Ok(created);
    };

    let live_plain = without_managed_fields(live);
    let mut entries = read_entries(live);
    if entries.is_empty() {
        // The first apply to an unmanaged object: what is there belongs to someone else
        // [AM `internal/skipnonapplied.go`].
        entries.push(Entry {
            manager: "before-first-apply".into(),
            operation: UPDATE.into(),
            api_version: live
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: now.to_string(),
            subresource: None,
            set: walker.object_set(&live_plain, true),
        });
    }
    let me = entries.iter().position(|e| {
        e.manager == manager && e.operation == APPLY && e.subresource.as_deref() == subresource
    });
    let previous = me
        .and_then(|i| entries.get(i))
        .map(|e| e.set.clone())
        .unwrap_or_default();

    let mut merged = live_plain.clone();
    merge_into(&walker, &mut merged, &config, &mut Vec::new());
    let changed = walker.changes(&live_plain, &merged, false).all();

    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == me {
            continue;
        }
        for path in e.set.intersect(&changed).members() {
            conflicts.push(FieldConflict {
                manager: e.manager.clone(),
                field: render_path(&path),
                owner: e.owner_text(),
            });
        }
    }
    if !conflicts.is_empty() {
        if !force {
            conflicts.sort_by(|a, b| (&a.owner, &a.field).cmp(&(&b.owner, &b.field)));
            return Err(ApplyError::Conflicts(conflicts));
        }
        for (i, e) in entries.iter_mut().enumerate() {
            if Some(i) != me {
                e.set.subtract(&changed);
            }
        }
    }

    // Fields this manager stopped applying go away unless someone else still owns them.
    let mut others = FieldSet::default();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) != me {
            others.union(&e.set);
        }
    }
    let mut owned = others.clone();
    owned.union(&applied_set);
    let mut dropped = previous.clone();
    dropped.subtract(&applied_set);
    for path in dropped.members() {
        if !owns_at_or_below(&owned, &path) {
            remove_path(
                &walker,
                &mut merged,
                &path,
                &owned,
                &mut Vec::new(),
                &mut Vec::new(),
            );
        }
    }

    if manager == "kubectl" {
        sync_last_applied(&mut merged, applied);
    }
    let object_changed = merged != live_plain;

    match me.and_then(|i| entries.get_mut(i)) {
        Some(entry) => {
            if object_changed || entry.set != applied_set || entry.api_version != api_version {
                entry.time = now.to_string();
            }
            entry.set = applied_set;
            entry.api_version = api_version;
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: APPLY.into(),
            api_version,
            time: now.to_string(),
            subresource: subresource.map(String::from),
            set: applied_set,
        }),
    }
    let mut result = merged;
    write_entries(&mut result, entries);
    Ok(result)
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `kubectl apply --server-side` keeps an existing client-side apply annotation in step with
/// what it applied [AM `internal/lastappliedupdater.go`]: the applied object without the
/// annotation, as Go's JSON encoder writes it (sorted keys, trailing newline).
fn sync_last_applied(obj: &mut Value, applied: &Value) {
    let has = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .is_some();
    if !has {
        return;
    }
    let mut config = applied.clone();
    if let Some(annotations) = config
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
    }
    let text = format!("{config}\n");
    if let Some(annotations) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

fn owns_at_or_below(set: &FieldSet, path: &[String]) -> bool {
    let mut node = set;
    for p in path {
        match node.children.get(p) {
            Some(n) => node = n,
            None => return false,
        }
    }
    !node.is_empty()
}

/// The SSA merge of an applied configuration into the live object, in place: maps merge,
/// granular lists merge item by item, everything else is replaced. In place because a merge
/// that built each level afresh copied every nested value once per level above it.
fn merge_into(walker: &Walker<'_>, target: &mut Value, config: &Value, names: &mut Vec<String>) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) if !walker.atomic_map(names) => {
            for (k, cv) in c {
                match t.get_mut(k) {
                    Some(tv) => {
                        names.push(k.clone());
                        merge_into(walker, tv, cv, names);
                        names.pop();
                    }
                    None => {
                        t.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(t), Value::Array(c)) if walker.granular(names) => {
            for (i, item) in c.iter().enumerate() {
                let key = walker.item_key(names, item, i);
                let pos = t
                    .iter()
                    .enumerate()
                    .position(|(j, o)| walker.item_key(names, o, j) == key);
                match pos.and_then(|p| t.get_mut(p)) {
                    Some(slot) => merge_into(walker, slot, item, names),
                    None => t.push(item.clone()),
                }
            }
        }
        (target, _) => *target = config.clone(),
    }
}

/// Removes the field or item at `path`; containers it leaves empty go too unless owned.
/// Returns whether `value` itself is now an empty container nobody owns.
fn remove_path(
    walker: &Walker<'_>,
    value: &mut Value,
    path: &[String],
    owned: &FieldSet,
    names: &mut Vec<String>,
    prefix: &mut Vec<String>,
) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    prefix.push(first.clone());
    if let Some(field) = first.strip_prefix("f:") {
        if let Value::Object(map) = value {
            if rest.is_empty() {
                map.remove(field);
            } else if let Some(child) = map.get_mut(field) {
                names.push(field.to_string());
                let empty = remove_path(walker, child, rest, owned, names, prefix);
                names.pop();
                if empty && !owned.has(prefix) {
                    map.remove(field);
                }
            }
        }
    } else if let Value::Array(items) = value {
        let pos = items
            .iter()
            .enumerate()
            .position(|(i, it)| walker.item_key(names, it, i) == *first);
        if let Some(i) = pos {
            if rest.is_empty() {
                items.remove(i);
            } else if let Some(item) = items.get_mut(i) {
                remove_path(walker, item, rest, owned, names, prefix);
            }
        }
    }
    prefix.pop();
    // The root and `metadata` stay, whatever is left in them.
    let keep = prefix.is_empty()
        || (prefix.len() == 1 && prefix.first().is_some_and(|p| p == "f:metadata"));
    !keep
        && match value {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }
}

/// Records a non-apply write (create, update, patch) by `manager` in `new`'s
/// `metadata.managedFields` (operation `Update`): the fields that changed from `old` (all
/// fields on create) become owned by `manager` and are removed from other managers' sets.
/// `subresource` is `Some("status")` for writes through `/status`.
///
/// Entries come from `new` when the client sent some (clients may rewrite them), else from
/// `old`; `[]` or `[{}]` resets them, and then nothing is recorded for this write.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
    record_update_with_schema(old, new, manager, subresource, now, None);
}

/// [`record_update`] for a custom resource, with the list types of its CRD schema (see
/// [`ApplyOptions::schema`]).
pub fn record_update_with_schema(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    schema: Option<&Value>,
) {
    if !new.is_object() {
        return;
    }
    let incoming = new.pointer("/metadata/managedFields").cloned();
    let mut entries = match &incoming {
        Some(Value::Array(items)) if is_reset(items) => {
            if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            return;
        }
        Some(Value::Array(_)) => read_entries(new),
        _ => Vec::new(),
    };
    if entries.is_empty() {
        entries = old.map(read_entries).unwrap_or_default();
    }
    let old_plain = old.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let new_plain = without_managed_fields(new);
    let (group, kind) = walker_for(&new_plain);
    let walker = Walker {
        group: &group,
        kind: &kind,
        schema,
    };
    let changes = walker.changes(&old_plain, &new_plain, true);
    let all = changes.all();
    let api_version = new_plain
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let subresource = subresource.filter(|s| !s.is_empty()).map(String::from);
    let me = entries.iter().position(|e| {
        e.manager == manager
            && e.operation == UPDATE
            && e.api_version == api_version
            && e.subresource == subresource
    });
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != me {
            e.set.subtract(&all);
        }
    }
    match me.and_then(|i| entries.get_mut(i)) {
        Some(entry) => {
            let mut set = entry.set.clone();
            set.subtract(&changes.removed);
            set.union(&changes.written);
            if set != entry.set {
                entry.set = set;
                entry.time = now.to_string();
            }
        }
        None if !changes.written.is_empty() => entries.push(Entry {
            manager: manager.to_string(),
            operation: UPDATE.into(),
            api_version,
            time: now.to_string(),
            subresource,
            set: changes.written,
        }),
        None => {}
    }
    write_entries(new, entries);
}

/// `[]` or `[{}]`: the client asks to clear managedFields.
fn is_reset(items: &[Value]) -> bool {
    match items {
        [] => true,
        [only] => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";
    const T3: &str = "2026-01-01T00:02:00Z";

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default"}, "data": data})
    }

    /// What the store adds on create.
    fn stored(mut obj: Value) -> Value {
        obj["metadata"]["uid"] = json!("u1");
        obj["metadata"]["resourceVersion"] = json!("1");
        obj["metadata"]["creationTimestamp"] = json!(T1);
        obj
    }

    fn fields_of(obj: &Value, manager: &str, operation: &str) -> Option<Value> {
        obj["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
            .map(|e| e["fieldsV1"].clone())
    }

    fn created_by(manager: &str, obj: Value) -> Value {
        let mut obj = stored(obj);
        record_update(None, &mut obj, manager, None, T1);
        obj
    }

    #[test]
    fn apply_creates_with_an_apply_entry() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"app": "x"}}, "data": {"k": "v"}});
        let got = server_side_apply(None, &config, "kubectl", false, T1).unwrap();
        assert_eq!(
            got["metadata"]["managedFields"],
            json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}}])
        );
        assert_eq!(got["data"], json!({"k": "v"}));
    }

    #[test]
    fn apply_of_the_same_config_again_changes_nothing() {
        let config = cm(json!({"a": "1"}));
        let live = stored(server_side_apply(None, &config, "m", false, T1).unwrap());
        let again = server_side_apply(Some(&live), &config, "m", false, T2).unwrap();
        assert_eq!(again, live);
    }

    #[test]
    fn apply_keeps_server_populated_metadata_from_live() {
        let live = stored(server_side_apply(None, &cm(json!({"a": "1"})), "m", false, T1).unwrap());
        let mut config = cm(json!({"a": "2"}));
        config["metadata"]["uid"] = json!("other");
        config["metadata"]["resourceVersion"] = json!("99");
        let got = server_side_apply(Some(&live), &config, "m", false, T2).unwrap();
        assert_eq!(got["metadata"]["uid"], "u1");
        assert_eq!(got["metadata"]["resourceVersion"], "1");
        assert_eq!(got["metadata"]["creationTimestamp"], T1);
        assert_eq!(got["data"], json!({"a": "2"}));
        assert_eq!(got["metadata"]["managedFields"][0]["time"], T2);
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying_unless_owned_by_others() {
        // "a" is co-owned with the creator, "b" only by the applier.
        let live = created_by("kubectl-create", cm(json!({"a": "1"})));
        let live = server_side_apply(
            Some(&live),
            &cm(json!({"a": "1", "b": "2"})),
            "m",
            false,
            T2,
        )
        .unwrap();
        let got = server_side_apply(Some(&live), &cm(json!({"c": "3"})), "m", false, T3).unwrap();
        assert_eq!(got["data"], json!({"a": "1", "c": "3"}));
        assert_eq!(
            fields_of(&got, "m", "Apply"),
            Some(json!({"f:data": {"f:c": {}}}))
        );
    }

    #[test]
    fn apply_removes_the_emptied_map_of_a_dropped_field() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"app": "x"}}, "data": {"k": "v"}});
        let live = stored(server_side_apply(None, &config, "m", false, T1).unwrap());
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"k": "v"}});
        let got = server_side_apply(Some(&live), &config, "m", false, T2).unwrap();
        assert_eq!(got["metadata"].get("labels"), None);
    }

    #[test]
    fn apply_conflicts_with_another_managers_different_value() {
        let live = created_by("kubectl-client-side-apply", cm(json!({"a": "1", "b": "1"})));
        // The same value is shared ownership, not a conflict.
        assert!(server_side_apply(Some(&live), &cm(json!({"b": "1"})), "m", false, T2).is_ok());
        let err =
            server_side_apply(Some(&live), &cm(json!({"a": "2"})), "m", false, T2).unwrap_err();
        assert_eq!(
            err,
            ApplyError::Conflicts(vec![FieldConflict {
                manager: "kubectl-client-side-apply".into(),
                field: ".data.a".into(),
                owner: "\"kubectl-client-side-apply\" using v1".into(),
            }])
        );
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
        );
    }

    #[test]
    fn apply_with_force_takes_ownership() {
        let live = created_by("kubectl-client-side-apply", cm(json!({"a": "1"})));
        let got = server_side_apply(Some(&live), &cm(json!({"a": "2"})), "m", true, T2).unwrap();
        assert_eq!(got["data"], json!({"a": "2"}));
        assert_eq!(
            fields_of(&got, "m", "Apply"),
            Some(json!({"f:data": {"f:a": {}}}))
        );
        assert_eq!(
            fields_of(&got, "kubectl-client-side-apply", "Update"),
            Some(json!({"f:data": {}}))
        );
    }

    #[test]
    fn conflicts_message_groups_several_conflicts_by_owner() {
        let c = |owner: &str, field: &str| FieldConflict {
            manager: owner.trim_matches('"').into(),
            field: field.into(),
            owner: owner.into(),
        };
        let msg = conflicts_message(&[c("\"b\" using apps/v1", ".spec.y"), c("\"a\"", ".spec.x")]);
        assert_eq!(
            msg,
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.x\nconflicts with \"b\" using apps/v1:\n- .spec.y"
        );
    }

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn apply_merges_associative_lists_by_key_between_managers() {
        let live = stored(
            server_side_apply(
                None,
                &deployment(json!([{"name": "nginx", "image": "nginx:1"}])),
                "m1",
                false,
                T1,
            )
            .unwrap(),
        );
        let with_sidecar = server_side_apply(
            Some(&live),
            &deployment(json!([{"name": "sidecar", "image": "s:1"}])),
            "m2",
            false,
            T2,
        )
        .unwrap();
        assert_eq!(
            with_sidecar["spec"]["template"]["spec"]["containers"],
            json!([{"name": "nginx", "image": "nginx:1"}, {"name": "sidecar", "image": "s:1"}])
        );
        assert_eq!(
            fields_of(&with_sidecar, "m2", "Apply"),
            Some(
                json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
            )
        );
        let err = server_side_apply(
            Some(&with_sidecar),
            &deployment(json!([{"name": "nginx", "image": "nginx:2"}])),
            "m2",
            false,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"m1\": .spec.template.spec.containers[name=\"nginx\"].image"
        );
        // m2 drops its container: only m1's remains.
        let got = server_side_apply(
            Some(&with_sidecar),
            &deployment(json!([{"name": "nginx", "image": "nginx:1"}])),
            "m2",
            false,
            T3,
        )
        .unwrap();
        assert_eq!(
            got["spec"]["template"]["spec"]["containers"],
            json!([{"name": "nginx", "image": "nginx:1"}])
        );
    }

    #[test]
    fn apply_owns_label_selectors_as_one_atomic_field() {
        let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}}});
        let live = stored(server_side_apply(None, &config, "m1", false, T1).unwrap());
        assert_eq!(
            fields_of(&live, "m1", "Apply"),
            Some(json!({"f:spec": {"f:selector": {}}}))
        );
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"tier": "b"}}}});
        let got = server_side_apply(Some(&live), &other, "m2", true, T2).unwrap();
        assert_eq!(
            got["spec"]["selector"],
            json!({"matchLabels": {"tier": "b"}})
        );
    }

    #[test]
    fn apply_adding_to_a_list_another_manager_emptied_does_not_conflict() {
        let mut obj = cm(json!({}));
        obj["metadata"]["finalizers"] = json!(["a"]);
        let created = created_by("ctrl", obj);
        let mut emptied = created.clone();
        emptied["metadata"]["finalizers"] = json!([]);
        record_update(Some(&created), &mut emptied, "ctrl", None, T2);
        let mut config = cm(json!({}));
        config["metadata"]["finalizers"] = json!(["b"]);
        let got = server_side_apply(Some(&emptied), &config, "m", false, T3).unwrap();
        assert_eq!(got["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn first_apply_to_an_unmanaged_object_conflicts_with_before_first_apply() {
        let live = stored(cm(json!({"a": "1"})));
        let err =
            server_side_apply(Some(&live), &cm(json!({"a": "2"})), "m", false, T2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .data.a"
        );
    }

    #[test]
    fn record_update_owns_created_fields_with_dot_for_new_maps() {
        let obj = created_by(
            "kubectl-create",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "labels": {"app": "x"}}, "data": {"a": "1"}}),
        );
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                "time": T1, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:a": {}},
                             "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}])
        );
    }

    #[test]
    fn record_update_moves_changed_fields_and_drops_empty_entries() {
        let old = created_by("a", cm(json!({"x": "1"})));
        // Manager "b" changes x: "a" keeps only the map it created.
        let mut new = old.clone();
        new["data"]["x"] = json!("2");
        record_update(Some(&old), &mut new, "b", None, T2);
        // A member without children serialises as a leaf.
        assert_eq!(fields_of(&new, "a", "Update"), Some(json!({"f:data": {}})));
        assert_eq!(
            fields_of(&new, "b", "Update"),
            Some(json!({"f:data": {"f:x": {}}}))
        );
        // "b" writes again: still one entry, time moves.
        let old2 = new.clone();
        new["data"]["y"] = json!("3");
        record_update(Some(&old2), &mut new, "b", None, T3);
        let entries = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.iter().filter(|e| e["manager"] == "b").count(), 1);
        assert_eq!(
            fields_of(&new, "b", "Update"),
            Some(json!({"f:data": {"f:x": {}, "f:y": {}}}))
        );
        // "b" deletes the whole map: "a" loses its only field and its entry disappears.
        let old3 = new.clone();
        new.as_object_mut().unwrap().remove("data");
        record_update(Some(&old3), &mut new, "b", None, T3);
        assert_eq!(new["metadata"].get("managedFields"), None);
    }

    #[test]
    fn record_update_without_changes_keeps_entries_as_they_were() {
        let old = created_by("a", cm(json!({"x": "1"})));
        let mut new = old.clone();
        record_update(Some(&old), &mut new, "b", None, T2);
        assert_eq!(new, old);
    }

    #[test]
    fn record_update_marks_status_writes_and_resets_on_empty_list() {
        let old = created_by("a", cm(json!({"x": "1"})));
        let mut new = old.clone();
        new["status"] = json!({"ready": true});
        record_update(Some(&old), &mut new, "ctrl", Some("status"), T2);
        let status_entry = new["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == "ctrl")
            .cloned()
            .unwrap();
        assert_eq!(status_entry["subresource"], "status");
        let mut reset = new.clone();
        reset["metadata"]["managedFields"] = json!([]);
        record_update(Some(&new), &mut reset, "x", None, T3);
        assert_eq!(reset["metadata"].get("managedFields"), None);
    }

    fn ssa_cr(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
        now: &str,
        schema: Option<&Value>,
    ) -> Result<Value, ApplyError> {
        let options = ApplyOptions {
            force,
            schema,
            ..ApplyOptions::default()
        };
        server_side_apply_with(live, applied, manager, now, &options)
    }

    #[test]
    fn apply_through_status_keeps_a_separate_entry_and_spec_ownership() {
        let obj = |spec: Value, status: Value| {
            json!({"apiVersion": "apps.example.com/v1", "kind": "Sub", "metadata": {"name": "s"},
                   "spec": spec, "status": status})
        };
        let main = ApplyOptions {
            status_subresource: true,
            ..ApplyOptions::default()
        };
        let status = ApplyOptions {
            subresource: Some("status"),
            status_subresource: true,
            ..ApplyOptions::default()
        };
        // The main endpoint ignores status.
        let live = stored(
            server_side_apply_with(
                None,
                &obj(json!({"a": 1}), json!({"x": 1})),
                "ctl",
                T1,
                &main,
            )
            .unwrap(),
        );
        assert_eq!(live.get("status"), None);
        let with_status = stored(
            server_side_apply_with(
                Some(&live),
                &obj(json!({"ignored": true}), json!({"phase": "Ready"})),
                "ctl",
                T2,
                &status,
            )
            .unwrap(),
        );
        assert_eq!(with_status["spec"], json!({"a": 1}));
        assert_eq!(with_status["status"], json!({"phase": "Ready"}));
        let entries = with_status["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1],
            json!({"manager": "ctl", "operation": "Apply", "apiVersion": "apps.example.com/v1",
                "time": T2, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"})
        );
        // Re-applying either part is a no-op: no ownership flip-flop between the two.
        let again = server_side_apply_with(
            Some(&with_status),
            &obj(json!({"a": 1}), json!({})),
            "ctl",
            T3,
            &main,
        )
        .unwrap();
        assert_eq!(again, with_status);
        let again = server_side_apply_with(
            Some(&with_status),
            &obj(json!({}), json!({"phase": "Ready"})),
            "ctl",
            T3,
            &status,
        )
        .unwrap();
        assert_eq!(again, with_status);
    }

    #[test]
    fn status_only_applies_get_their_own_entry_without_options() {
        let obj = |body: Value| {
            let mut o = json!({"apiVersion": "apps.example.com/v1", "kind": "Sub",
                               "metadata": {"name": "s", "namespace": "ns"}});
            for (k, v) in body.as_object().unwrap() {
                o[k] = v.clone();
            }
            o
        };
        let live = stored(
            server_side_apply(None, &obj(json!({"spec": {"a": 1}})), "ctl", false, T1).unwrap(),
        );
        let with_status = stored(
            server_side_apply(
                Some(&live),
                &obj(json!({"status": {"phase": "Ready"}})),
                "ctl",
                false,
                T2,
            )
            .unwrap(),
        );
        assert_eq!(with_status["spec"], json!({"a": 1}));
        assert_eq!(
            fields_of(&with_status, "ctl", "Apply"),
            Some(json!({"f:spec": {"f:a": {}}}))
        );
        let again = server_side_apply(
            Some(&with_status),
            &obj(json!({"spec": {"a": 1}})),
            "ctl",
            false,
            T3,
        )
        .unwrap();
        assert_eq!(again, with_status);
    }

    #[test]
    fn apply_to_custom_resources_uses_the_schema_list_types() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "subscribers": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "weight": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "conditions": {"type": "array", "items": {"type": "object"}}}}}});
        let sub = |spec: Value| {
            json!({"apiVersion": "apps.example.com/v1", "kind": "Sub", "metadata": {"name": "s"},
                   "spec": spec})
        };
        let live = stored(
            ssa_cr(
                None,
                &sub(
                    json!({"subscribers": [{"name": "a", "weight": 1}], "tags": ["x"],
                            "conditions": [{"type": "A"}]}),
                ),
                "m1",
                false,
                T1,
                Some(&schema),
            )
            .unwrap(),
        );
        assert_eq!(
            fields_of(&live, "m1", "Apply"),
            Some(json!({"f:spec": {"f:conditions": {},
                "f:subscribers": {"k:{\"name\":\"a\"}": {".": {}, "f:name": {}, "f:weight": {}}},
                "f:tags": {"v:\"x\"": {}}}}))
        );
        let got = ssa_cr(
            Some(&live),
            &sub(json!({"subscribers": [{"name": "b", "weight": 2}], "tags": ["y"]})),
            "m2",
            false,
            T2,
            Some(&schema),
        )
        .unwrap();
        assert_eq!(
            got["spec"],
            json!({"subscribers": [{"name": "a", "weight": 1}, {"name": "b", "weight": 2}],
                   "tags": ["x", "y"], "conditions": [{"type": "A"}]})
        );
        // An atomic CR list owned by another manager conflicts as a whole.
        let err = ssa_cr(
            Some(&got),
            &sub(json!({"conditions": [{"type": "B"}]})),
            "m2",
            false,
            T3,
            Some(&schema),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"m1\": .spec.conditions"
        );
    }

    #[test]
    fn server_side_apply_by_kubectl_rewrites_the_last_applied_annotation() {
        let mut old = cm(json!({"a": "1"}));
        old["metadata"]["annotations"] = json!({LAST_APPLIED: "{}"});
        let live = created_by("kubectl-client-side-apply", old);
        let config = cm(json!({"a": "1"}));
        let got = server_side_apply(Some(&live), &config, "kubectl", false, T2).unwrap();
        assert_eq!(
            got["metadata"]["annotations"][LAST_APPLIED],
            format!("{config}\n")
        );
        // Other managers leave it alone.
        let got = server_side_apply(Some(&live), &config, "other", false, T2).unwrap();
        assert_eq!(got["metadata"]["annotations"][LAST_APPLIED], "{}");
    }

    #[test]
    fn update_entries_beyond_ten_merge_into_ancient_changes() {
        let mut obj = created_by("m00", cm(json!({"k00": "v"})));
        for i in 1..12 {
            let old = obj.clone();
            obj["data"][format!("k{i:02}")] = json!("v");
            record_update(
                Some(&old),
                &mut obj,
                &format!("m{i:02}"),
                None,
                &format!("2026-01-01T00:00:{i:02}Z"),
            );
        }
        let entries = obj["metadata"]["managedFields"].as_array().unwrap();
        let managers: Vec<&str> = entries
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        // m01 and m02 (the oldest after m00) merged into m00's bucket, which took m02's time.
        let mut want = vec!["ancient-changes".to_string()];
        want.extend((3..12).map(|i| format!("m{i:02}")));
        assert_eq!(managers, want);
        assert_eq!(entries.len(), 10);
        let ancient = entries
            .iter()
            .find(|e| e["manager"] == "ancient-changes")
            .unwrap();
        assert_eq!(
            ancient["fieldsV1"],
            json!({"f:data": {".": {}, "f:k00": {}, "f:k01": {}, "f:k02": {}}})
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn data() -> impl Strategy<Value = Value> {
            proptest::collection::btree_map("[a-d]", "[a-c]{0,2}", 0..4)
                .prop_map(|m| serde_json::to_value(m).unwrap_or_default())
        }

        proptest! {
            #[test]
            fn applying_the_same_config_twice_is_a_no_op(first in data(), second in data()) {
                let live = stored(server_side_apply(None, &cm(first), "m", false, T1).unwrap());
                let once = stored(server_side_apply(Some(&live), &cm(second.clone()), "m", false, T2).unwrap());
                let twice = server_side_apply(Some(&once), &cm(second.clone()), "m", false, T3).unwrap();
                prop_assert_eq!(&twice, &once);
                prop_assert_eq!(&once["data"], &second);
            }

            #[test]
            fn managers_own_only_fields_that_exist_and_applies_win_their_fields(
                steps in proptest::collection::vec(
                    (prop_oneof![Just("a"), Just("b"), Just("c")], data(), any::<bool>()),
                    1..8,
                )
            ) {
                let mut live: Option<Value> = None;
                for (manager, config, force) in steps {
                    match server_side_apply(live.as_ref(), &cm(config.clone()), manager, force, T2) {
                        Ok(next) => {
                            let data = next.get("data").cloned().unwrap_or_else(|| json!({}));
                            for (k, v) in config.as_object().into_iter().flatten() {
                                prop_assert_eq!(data.get(k), Some(v));
                            }
                            for entry in read_entries(&next) {
                                for path in entry.set.members() {
                                    if let [f, key] = path.as_slice() {
                                        prop_assert_eq!(f.as_str(), "f:data");
                                        let key = key.trim_start_matches("f:");
                                        prop_assert!(data.get(key).is_some(), "{} owns missing {}", entry.manager, key);
                                    }
                                }
                            }
                            let again = server_side_apply(Some(&next), &cm(config), manager, false, T3);
                            prop_assert_eq!(again.ok(), Some(next.clone()));
                            live = Some(stored(next));
                        }
                        Err(ApplyError::Conflicts(conflicts)) => {
                            prop_assert!(!force);
                            for c in conflicts {
                                prop_assert!(c.manager != manager);
                                let key = c.field.trim_start_matches(".data.");
                                let current = live.as_ref().and_then(|l| l["data"].get(key));
                                prop_assert_ne!(current, config.get(key));
                            }
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    }
                }
            }

            #[test]
            fn applies_by_one_manager_never_conflict(configs in proptest::collection::vec(data(), 1..5)) {
                let mut live: Option<Value> = None;
                for config in configs {
                    let next = server_side_apply(live.as_ref(), &cm(config), "m", false, T2);
                    prop_assert!(next.is_ok());
                    live = next.ok().map(stored);
                }
            }
        }
    }
}
