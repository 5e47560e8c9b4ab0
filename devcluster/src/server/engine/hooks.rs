//! What follows a write in the same transaction or right after it: a new Namespace's
//! defaults, the registration of a CRD's resources, and waking the controllers (garbage
//! collection of dependents whose owner is gone, finalization of terminating objects). The
//! controllers are reached only through [`State`], so the engine does not depend on them.

use serde_json::json;

use super::meta::{is_crd, is_namespace, mstr, now};
use crate::api::resource::ResourceInfo;
use crate::server::{State, crd};
use crate::store::{Obj, ResKey, Txn};

/// Hooks after a create: a new Namespace gets its `default` ServiceAccount and
/// `kube-root-ca.crt` ConfigMap.
pub(super) fn after_create(txn: &mut Txn<'_>, info: &ResourceInfo, obj: &Obj) {
    if is_namespace(info) {
        let ns = mstr(obj, "name").to_string();
        namespace_defaults(txn, &ns);
    }
}

/// Creates the per-namespace defaults: ServiceAccount `default` and ConfigMap
/// `kube-root-ca.crt`.
fn namespace_defaults(txn: &mut Txn<'_>, ns: &str) {
    let now = now();
    let sa_key = ResKey::new("", "serviceaccounts");
    if txn.get(&sa_key, ns, "default").is_none() {
        txn.put(
            &sa_key,
            json!({"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":ns,
                "uid": uuid::Uuid::new_v4().to_string(),"creationTimestamp": now}}),
        );
    }
    let cm_key = ResKey::new("", "configmaps");
    if txn.get(&cm_key, ns, "kube-root-ca.crt").is_none() {
        txn.put(
            &cm_key,
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube-root-ca.crt","namespace":ns,
                "uid": uuid::Uuid::new_v4().to_string(),"creationTimestamp": now,
                "annotations":{"kubernetes.io/description":"Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data":{"ca.crt":"-----BEGIN CERTIFICATE-----\nZGV2Y2x1c3Rlcg==\n-----END CERTIFICATE-----\n"}}),
        );
    }
}

/// Hooks after an object was stored.
pub(super) fn after_write(state: &State, txn: &Txn<'_>, info: &ResourceInfo, obj: &Obj) {
    // A dependent whose owner does not exist (any more) is garbage, as for the real GC.
    for r in obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(uid) = r["uid"].as_str()
            && txn.by_uid(uid).is_none()
        {
            state.removed(uid);
        }
    }
    if is_crd(info) {
        crd::register(state, obj);
    }
    if !mstr(obj, "deletionTimestamp").is_empty() {
        state.wake();
    }
}

/// Hooks after an object was removed: its dependents are queued for garbage collection, a
/// CRD's resources stop being served.
pub(super) fn after_remove(state: &State, info: &ResourceInfo, obj: &Obj) {
    state.removed(mstr(obj, "uid"));
    if is_crd(info) {
        state.registry.write().remove_crd(mstr(obj, "name"));
    }
    state.wake();
}
