//! Delete: preconditions, finalizers, graceful deletion (`deletionTimestamp`), propagation
//! (Foreground through the `foregroundDeletion` finalizer and the controllers, Orphan at
//! once, Background by the garbage collector), and deletecollection.

use std::sync::Arc;

use serde_json::{Value, json};

use super::hooks::after_remove;
use super::meta::{finalizers, is_crd, is_namespace, meta_mut, mstr, now};
use super::update::finish_internal_update;
use crate::api::resource::ResourceInfo;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::server::{State, crd};
use crate::store::{Obj, ObjRef, Txn};

/// Deletion options (`DeleteOptions` and the query).
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOpts {
    pub propagation: Option<String>,
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// Result of deleting one object.
pub(crate) enum Deleted {
    /// Removed now (last state).
    Removed(Obj),
    /// Still there, terminating (finalizers pending).
    Pending(Obj),
}

/// Deletes one object in a transaction of its own (a DELETE).
pub(crate) fn delete(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let mut txn = state.store.begin();
    let result = delete_object(state, &mut txn, info, ns, name, opts)?;
    txn.commit()?;
    Ok(result)
}

/// Deletes every object of `info` in `ns` (all namespaces when `None`) that `matches`
/// accepts, in one transaction, skipping those that may not be deleted (403). Returns the
/// deleted objects (removed or terminating) and the resourceVersion of the list.
pub(crate) fn delete_collection(
    state: &State,
    info: &ResourceInfo,
    ns: Option<&str>,
    matches: impl Fn(&Value) -> bool,
    opts: &DeleteOpts,
) -> Result<(Vec<Obj>, u64), ApiError> {
    let key = storage_key(info);
    let mut txn = state.store.begin();
    let targets: Vec<Obj> = txn
        .list(&key, ns)
        .into_iter()
        .filter(|o| matches(o))
        .collect();
    let mut items = Vec::new();
    for t in targets {
        match delete_object(
            state,
            &mut txn,
            info,
            mstr(&t, "namespace"),
            mstr(&t, "name"),
            opts,
        ) {
            Ok(Deleted::Removed(o)) | Ok(Deleted::Pending(o)) => items.push(o),
            Err(e) if e.code == 403 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = txn.current_rv();
    txn.commit()?;
    Ok((items, rv))
}

/// Deletes one object with kube-apiserver semantics (finalizers, propagation, namespaces,
/// CRDs). Used by DELETE, deletecollection and the controllers.
pub(crate) fn delete_object(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let key = storage_key(info);
    let old = txn
        .get(&key, ns, name)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    check_preconditions(info, name, &old, opts)?;
    if is_namespace(info) && matches!(name, "default" | "kube-system" | "kube-public") {
        return Err(ApiError::forbidden(
            info,
            name,
            "this namespace may not be deleted",
        ));
    }
    if !mstr(&old, "deletionTimestamp").is_empty() {
        return Ok(Deleted::Pending(old));
    }
    let fins = pending_finalizers(state, txn, info, &old, opts);
    if fins.is_empty() && !is_namespace(info) {
        return remove_now(state, txn, info, ns, name, old, opts.dry_run);
    }
    let new = terminating(info, &old, fins);
    if opts.dry_run {
        return Ok(Deleted::Pending(Arc::new(new)));
    }
    let stored = txn.put(&key, new);
    if finalizers(&stored)
        .iter()
        .any(|f| f == "foregroundDeletion")
    {
        state.foreground.lock().insert(ObjRef {
            key,
            namespace: ns.to_string(),
            name: name.to_string(),
        });
    }
    state.wake();
    Ok(Deleted::Pending(stored))
}

/// The uid and resourceVersion preconditions of `DeleteOptions`.
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    old: &Obj,
    opts: &DeleteOpts,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.precondition_uid
        && uid != mstr(old, "uid")
    {
        return Err(ApiError::conflict_msg(
            info,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                mstr(old, "uid")
            ),
        ));
    }
    if let Some(rv) = &opts.precondition_rv
        && rv != mstr(old, "resourceVersion")
    {
        return Err(ApiError::conflict_msg(
            info,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                mstr(old, "resourceVersion")
            ),
        ));
    }
    Ok(())
}

/// The finalizers the object keeps while it terminates: its own, `foregroundDeletion` for a
/// Foreground deletion with dependents, the CRD cleanup for a CRD. An Orphan deletion frees
/// the dependents here (unless dry run).
fn pending_finalizers(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    opts: &DeleteOpts,
) -> Vec<String> {
    let uid = mstr(old, "uid");
    let mut fins = finalizers(old);
    let has_dependents = !txn.dependents(uid).is_empty();
    match opts.propagation.as_deref() {
        Some("Foreground") if has_dependents => fins.push("foregroundDeletion".into()),
        Some("Orphan") if has_dependents && !opts.dry_run => orphan_dependents(state, txn, uid),
        _ => {}
    }
    if is_crd(info) {
        fins.push("customresourcecleanup.apiextensions.k8s.io".into());
    }
    fins
}

/// Removes an object that has nothing to wait for.
fn remove_now(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    old: Obj,
    dry_run: bool,
) -> Result<Deleted, ApiError> {
    if dry_run {
        return Ok(Deleted::Removed(old));
    }
    let removed = txn
        .remove(&storage_key(info), ns, name)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    after_remove(state, info, &removed);
    Ok(Deleted::Removed(removed))
}

/// `old` as a terminating object: `deletionTimestamp`, grace period 0, `finalizers`, the next
/// generation; a Namespace in phase Terminating, a CRD with the Terminating condition.
fn terminating(info: &ResourceInfo, old: &Obj, fins: Vec<String>) -> Value {
    let mut new = (**old).clone();
    let now = now();
    let meta = meta_mut(&mut new);
    meta.insert("deletionTimestamp".into(), json!(now));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if !fins.is_empty() {
        meta.insert("finalizers".into(), json!(fins));
    }
    if info.has_generation {
        let g = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
        meta.insert("generation".into(), json!(g + 1));
    }
    if is_namespace(info) {
        new["status"]["phase"] = json!("Terminating");
    }
    if is_crd(info) {
        crd::set_terminating(&mut new);
    }
    new
}

/// Strips the ownerReference to `owner_uid` from every dependent (Orphan propagation).
fn orphan_dependents(state: &State, txn: &mut Txn<'_>, owner_uid: &str) {
    for dep in txn.dependents(owner_uid) {
        let Some(info) = state.registry.read().by_key(&dep.key) else {
            continue;
        };
        let Some(obj) = txn.get(&dep.key, &dep.namespace, &dep.name) else {
            continue;
        };
        let mut new = (*obj).clone();
        if let Some(refs) = new["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"] != owner_uid);
            if refs.is_empty()
                && let Some(m) = new["metadata"].as_object_mut()
            {
                m.remove("ownerReferences");
            }
        }
        if let Err(e) = finish_internal_update(state, txn, &info, &obj, new) {
            tracing::warn!(error = %e.message, "orphaning a dependent failed");
        }
    }
}
