//! Update: carried metadata, subresource and finalizer rules, generation, the skip of no-op
//! writes, and the completion of a deletion whose last finalizer went.

use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::{WriteKind, admit_custom, validate_metadata};
use super::defaults::{
    job_immutable_fields, secret_string_data, service_allocations_on_update, set_name_label,
    spec_defaults,
};
use super::hooks::{after_remove, after_write};
use super::meta::{finalizers, is_crd, is_namespace, meta_mut, mstr, now, to_storage};
use super::optimistic::optimistic;
use super::{Manager, WriteOptions, Written};
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::server::{State, crd};
use crate::store::{Obj, Txn};

/// Replaces the stored object `ns`/`name` with `obj` (a PUT; its type, namespace and name
/// already checked against the request): admission of a custom resource, the preconditions
/// in `obj` (resourceVersion, uid), then [`prepare_update`] and [`commit_update`] in the
/// optimistic loop. Returns the written object and the admission warnings.
pub(crate) fn update(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    mut obj: Value,
    opts: &WriteOptions<'_>,
) -> Result<(Written, Vec<String>), ApiError> {
    let body_rv = mstr(&obj, "resourceVersion").to_string();
    let warnings = admit_custom(
        info,
        &mut obj,
        opts.field_validation,
        WriteKind::CreateOrUpdate,
    )?;
    let key = storage_key(info);
    let obj = to_storage(info, obj);
    let written = optimistic(
        state,
        info,
        &key,
        ns,
        name,
        |old| {
            let old = old.ok_or_else(|| ApiError::not_found(info, name))?;
            check_update_preconditions(info, name, old, &obj, &body_rv)?;
            prepare_update(
                info,
                old,
                obj.clone(),
                opts.sub,
                Manager::Update(opts.manager),
            )
        },
        |txn, old, new| {
            let old = old.ok_or_else(|| ApiError::not_found(info, name))?;
            commit_update(state, txn, info, old, new, opts.dry_run)
        },
    )?;
    Ok((written, warnings))
}

/// The checks of a PUT against the stored object: the resourceVersion sent (required for
/// custom resources), the uid, and no `deletionTimestamp` set by a client.
fn check_update_preconditions(
    info: &ResourceInfo,
    name: &str,
    old: &Obj,
    obj: &Value,
    body_rv: &str,
) -> Result<(), ApiError> {
    if body_rv.is_empty() {
        if !info.builtin {
            return Err(ApiError::invalid_field(
                info,
                name,
                "FieldValueInvalid",
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            ));
        }
    } else if body_rv != mstr(old, "resourceVersion") {
        return Err(ApiError::conflict(info, name));
    }
    let uid = mstr(obj, "uid");
    if !uid.is_empty() && uid != mstr(old, "uid") {
        return Err(ApiError::conflict_msg(
            info,
            name,
            &format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                mstr(old, "uid")
            ),
        ));
    }
    if !mstr(obj, "deletionTimestamp").is_empty() && mstr(old, "deletionTimestamp").is_empty() {
        return Err(ApiError::invalid_field(
            info,
            name,
            "FieldValueForbidden",
            "metadata.deletionTimestamp",
            "Forbidden: field is immutable; may only be changed via deletion",
        ));
    }
    Ok(())
}

/// The tail of a patch or apply computed from `old`: admission (CRD schema) and the update
/// rules. Returns the object to store and the admission warnings.
pub(super) fn admit_update(
    info: &ResourceInfo,
    old: &Obj,
    mut new: Value,
    opts: &WriteOptions<'_>,
    manager: Manager<'_>,
) -> Result<(Value, Vec<String>), ApiError> {
    let warnings = admit_custom(info, &mut new, opts.field_validation, WriteKind::Patch)?;
    let new = prepare_update(info, old, to_storage(info, new), opts.sub, manager)?;
    Ok((new, warnings))
}

/// The common tail of update, patch and apply: keeps immutable metadata, enforces finalizer
/// and status rules, bumps generation, skips no-ops, stores.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_update(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    new: Value,
    sub: Option<&str>,
    manager: Manager<'_>,
    dry_run: bool,
) -> Result<Written, ApiError> {
    let new = prepare_update(info, old, new, sub, manager)?;
    commit_update(state, txn, info, old, new, dry_run)
}

/// An update the server makes itself (a controller removing a finalizer or an owner
/// reference), recorded under the internal field manager, never a dry run.
pub(crate) fn finish_internal_update(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    new: Value,
) -> Result<Written, ApiError> {
    finish_update(
        state,
        txn,
        info,
        old,
        new,
        None,
        Manager::Internal(super::INTERNAL_MANAGER),
        false,
    )
}

/// The part of an update that needs only the old object, not the store: immutable metadata,
/// finalizer and status rules, validation, managedFields, generation. Done before the store
/// lock is taken (see [`optimistic`]).
pub(super) fn prepare_update(
    info: &ResourceInfo,
    old: &Obj,
    mut new: Value,
    sub: Option<&str>,
    manager: Manager<'_>,
) -> Result<Value, ApiError> {
    let name = mstr(old, "name").to_string();
    carry_metadata(info, old, &mut new);
    let mut new = through_subresource(info, old, new, sub);
    forbid_new_finalizers(info, &name, old, &new)?;
    if is_crd(info) {
        crd::prepare(info, &mut new, Some(old))?;
    }
    secret_string_data(info, &mut new);
    if sub.is_none() {
        spec_defaults(info, &mut new);
        service_allocations_on_update(info, old, &mut new);
    }
    let mut errs = validate_metadata(info, &new);
    if sub.is_none() {
        errs.extend(job_immutable_fields(info, old, &new));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid(info, &name, &errs));
    }
    let now = now();
    match manager {
        Manager::Update(m) | Manager::Internal(m) => {
            objects::apply::record_update(Some(old), &mut new, m, sub, &now)
        }
        Manager::Applied => {}
    }
    if info.has_generation && spec_changed(info, old, &new) {
        let g = old
            .get("metadata")
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    Ok(new)
}

/// Copies the immutable and server-owned metadata of `old` into `new`.
fn carry_metadata(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata");
    let meta = meta_mut(new);
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "name",
        "namespace",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.and_then(|m| m.get(f)) {
            Some(v) => {
                meta.insert(f.into(), v.clone());
            }
            None => {
                meta.remove(f);
            }
        }
    }
    meta.remove("selfLink");
    if is_namespace(info) {
        set_name_label(new, mstr(old, "name").to_string());
    }
}

/// What a write through `sub` may change: `/status` only the status (and managedFields),
/// `/finalize` only the spec; the main resource neither the status of a resource with a
/// status subresource nor a Namespace's spec.
fn through_subresource(info: &ResourceInfo, old: &Obj, new: Value, sub: Option<&str>) -> Value {
    match sub {
        Some("status") => {
            let mut merged = (**old).clone();
            match new.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => remove_status(&mut merged),
            }
            if let Some(mf) = new.get("metadata").and_then(|m| m.get("managedFields")) {
                meta_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            merged
        }
        Some("finalize") => {
            let mut merged = (**old).clone();
            if let Some(s) = new.get("spec") {
                merged["spec"] = s.clone();
            }
            merged
        }
        _ => {
            let mut new = new;
            if info.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => remove_status(&mut new),
                }
            }
            if is_namespace(info) {
                new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
            }
            new
        }
    }
}

fn remove_status(obj: &mut Value) {
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
}

/// No new finalizers once deleting.
fn forbid_new_finalizers(
    info: &ResourceInfo,
    name: &str,
    old: &Obj,
    new: &Value,
) -> Result<(), ApiError> {
    if mstr(old, "deletionTimestamp").is_empty() {
        return Ok(());
    }
    let before = finalizers(old);
    let added: Vec<String> = finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_field(
        info,
        name,
        "FieldValueForbidden",
        "metadata.finalizers",
        &format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            added
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// Stores a prepared update of `old` (which must still be the stored object): skips no-ops,
/// completes a deletion whose last finalizer went, runs the write hooks.
pub(super) fn commit_update(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    new: Value,
    dry_run: bool,
) -> Result<Written, ApiError> {
    if same_object(old, &new) {
        return Ok(Written { obj: old.clone() });
    }
    if dry_run {
        return Ok(Written { obj: Arc::new(new) });
    }
    let key = storage_key(info);
    if deletion_complete(info, &new) {
        let ns = mstr(&new, "namespace").to_string();
        // Store the final state first so the DELETED event carries it.
        txn.put(&key, new);
        let removed = txn
            .remove(&key, &ns, mstr(old, "name"))
            .ok_or_else(|| ApiError::internal("object vanished"))?;
        after_remove(state, info, &removed);
        return Ok(Written { obj: removed });
    }
    let stored = txn.put(&key, new);
    after_write(state, txn, info, &stored);
    Ok(Written { obj: stored })
}

/// Whether `new` is a terminating object with no finalizer left (for a Namespace, also no
/// `spec.finalizers`).
fn deletion_complete(info: &ResourceInfo, new: &Value) -> bool {
    let spec_finalizers_empty = new["spec"]["finalizers"]
        .as_array()
        .is_none_or(|a| a.is_empty());
    !mstr(new, "deletionTimestamp").is_empty()
        && finalizers(new).is_empty()
        && (!is_namespace(info) || spec_finalizers_empty)
}

/// Compares two objects ignoring `resourceVersion` and managedFields timestamps, without
/// copying either (this runs on every write).
fn same_object(a: &Value, b: &Value) -> bool {
    same_map_except(a, b, None, |k, av, bv| {
        if k == "metadata" {
            same_map_except(av, bv, Some("resourceVersion"), |k, av, bv| {
                if k == "managedFields" {
                    same_entries(av, bv)
                } else {
                    av == bv
                }
            })
        } else {
            av == bv
        }
    })
}

/// Whether two managedFields lists differ in nothing but their entries' `time`.
fn same_entries(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_array(), b.as_array()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(ae, be)| same_map_except(ae, be, Some("time"), |_, av, bv| av == bv))
}

/// Whether two values are equal, key `ignored` of two maps left out and their other values
/// compared by `same` (called with the key); values that are not both maps compare whole.
fn same_map_except(
    a: &Value,
    b: &Value,
    ignored: Option<&str>,
    same: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let counted = |m: &serde_json::Map<String, Value>| {
        m.len() - usize::from(ignored.is_some_and(|k| m.contains_key(k)))
    };
    counted(a) == counted(b)
        && a.iter()
            .filter(|(k, _)| Some(k.as_str()) != ignored)
            .all(|(k, av)| b.get(k).is_some_and(|bv| same(k, av, bv)))
}

/// Whether anything but metadata (and status, with a status subresource) differs.
fn spec_changed(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let skip = |k: &str| {
        k == "metadata"
            || k == "apiVersion"
            || k == "kind"
            || (info.status_subresource && k == "status")
    };
    let ok: Vec<_> = o.iter().filter(|(k, _)| !skip(k)).collect();
    let nk: Vec<_> = n.iter().filter(|(k, _)| !skip(k)).collect();
    if ok.len() != nk.len() {
        return true;
    }
    ok.iter().any(|(k, v)| n.get(k.as_str()) != Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(rv: &str, time: &str, value: &str) -> Value {
        json!({
            "kind": "ConfigMap",
            "metadata": {
                "name": "a",
                "resourceVersion": rv,
                "managedFields": [{"manager": "m", "time": time, "fieldsV1": {"f:data": {}}}],
            },
            "data": {"k": value},
        })
    }

    #[test]
    fn objects_differing_only_in_resource_version_and_entry_times_are_the_same() {
        assert!(same_object(&obj("1", "t1", "v"), &obj("2", "t2", "v")));
        let mut without_rv = obj("1", "t1", "v");
        without_rv["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert!(same_object(&without_rv, &obj("2", "t2", "v")));
        assert!(same_object(&obj("2", "t2", "v"), &without_rv));
    }

    #[test]
    fn objects_differing_anywhere_else_are_not_the_same() {
        let base = obj("1", "t1", "v");
        assert!(!same_object(&base, &obj("1", "t1", "w")));
        let mut manager = base.clone();
        manager["metadata"]["managedFields"][0]["manager"] = json!("other");
        assert!(!same_object(&base, &manager));
        let mut extra_entry_key = base.clone();
        extra_entry_key["metadata"]["managedFields"][0]["subresource"] = json!("status");
        assert!(!same_object(&base, &extra_entry_key));
        let mut no_time = base.clone();
        no_time["metadata"]["managedFields"][0]
            .as_object_mut()
            .unwrap()
            .remove("time");
        no_time["metadata"]["managedFields"][0]["operation"] = json!("Apply");
        assert!(!same_object(&base, &no_time));
        let mut label = base.clone();
        label["metadata"]["labels"] = json!({"a": "b"});
        assert!(!same_object(&base, &label));
        assert!(!same_object(&label, &base));
        let mut status = base.clone();
        status["status"] = json!({});
        assert!(!same_object(&base, &status));
    }
}
