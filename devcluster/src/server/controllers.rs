//! Background controllers that a real cluster runs in kube-controller-manager and
//! apiextensions: garbage collection by ownerReferences (background and foreground; orphaning
//! is done by the engine at delete time), namespace cleanup and finalization, CRD instance
//! cleanup; plus the fresh-cluster seed. Every write goes through the write engine
//! (`server::engine`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::State;
use super::engine::{self, DeleteOpts, Manager, finalizers, mstr};
use super::registry::storage_key;
use crate::store::{ObjRef, ResKey, Txn};

/// How long a namespace stays Terminating before its contents are deleted.
const NAMESPACE_GRACE: Duration = Duration::from_millis(800);

fn ns_key() -> ResKey {
    ResKey::new("", "namespaces")
}

/// Seeds a fresh cluster (idempotent: only what is missing is created).
pub(crate) fn seed(state: &State) -> Result<(), crate::Error> {
    let Some(ns_info) = state.lookup("", "v1", "namespaces") else {
        return Err(crate::Error::Seed("namespaces are not served".into()));
    };
    let mut txn = state.store.begin();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        if txn.get(&ns_key(), "", ns).is_none() {
            engine::store_new(
                state,
                &mut txn,
                &ns_info,
                json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name": ns}}),
                Manager::Internal("kube-apiserver"),
                false,
            )
            .map_err(|e| crate::Error::Seed(e.message))?;
        }
    }
    let svc_key = ResKey::new("", "services");
    if txn.get(&svc_key, "default", "kubernetes").is_none()
        && let Some(svc_info) = state.lookup("", "v1", "services")
    {
        engine::store_new(
            state,
            &mut txn,
            &svc_info,
            json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"kubernetes","namespace":"default",
                "labels":{"component":"apiserver","provider":"kubernetes"}},
                "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],
                    "ports":[{"name":"https","port":443,"protocol":"TCP","targetPort":6443}],
                    "sessionAffinity":"None"}}),
            Manager::Internal("kube-apiserver"),
            false,
        )
        .map_err(|e| crate::Error::Seed(e.message))?;
    }
    txn.commit()
}

/// Runs the controllers until the server shuts down.
pub async fn run(state: Arc<State>) {
    let mut shutdown = state.shutdown_rx();
    loop {
        reconcile(&state);
        tokio::select! {
            _ = state.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

fn background() -> DeleteOpts {
    DeleteOpts {
        propagation: Some("Background".into()),
        ..DeleteOpts::default()
    }
}

fn delete_ref(state: &State, txn: &mut Txn<'_>, r: &ObjRef) {
    let Some(info) = state.registry.read().by_key(&r.key) else {
        return;
    };
    match engine::delete_object(state, txn, &info, &r.namespace, &r.name, &background()) {
        Ok(_) => {}
        Err(e) if e.code == 404 => {}
        Err(e) => tracing::warn!(error = %e.message, name = %r.name, "controller delete failed"),
    }
}

/// Removes `finalizer` from an object (completing its deletion when it was the last one).
fn drop_finalizer(state: &State, txn: &mut Txn<'_>, r: &ObjRef, finalizer: &str) {
    let Some(info) = state.registry.read().by_key(&r.key) else {
        return;
    };
    let Some(obj) = txn.get(&r.key, &r.namespace, &r.name) else {
        return;
    };
    let mut new = (*obj).clone();
    let fins: Vec<String> = finalizers(&obj)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    new["metadata"]["finalizers"] = json!(fins);
    if fins.is_empty()
        && let Some(m) = new["metadata"].as_object_mut()
    {
        m.remove("finalizers");
    }
    if let Err(e) = engine::finish_internal_update(state, txn, &info, &obj, new) {
        tracing::warn!(error = %e.message, "removing finalizer {finalizer} failed");
    }
}

/// One pass of every controller.
pub(crate) fn reconcile(state: &State) {
    garbage_collect(state);
    foreground(state);
    namespaces(state);
    crds(state);
}

fn garbage_collect(state: &State) {
    loop {
        let queue: Vec<String> = std::mem::take(&mut *state.gc_queue.lock());
        if queue.is_empty() {
            return;
        }
        let mut txn = state.store.begin();
        for uid in queue {
            for dep in txn.dependents(&uid) {
                let Some(obj) = txn.get(&dep.key, &dep.namespace, &dep.name) else {
                    continue;
                };
                let owners: Vec<String> = obj["metadata"]["ownerReferences"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| r["uid"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                if owners.iter().all(|o| txn.by_uid(o).is_none()) {
                    delete_ref(state, &mut txn, &dep);
                }
            }
        }
        if let Err(e) = txn.commit() {
            tracing::error!(error = %e, "garbage collection write failed");
        }
    }
}

fn foreground(state: &State) {
    let pending: Vec<ObjRef> = state.foreground.lock().iter().cloned().collect();
    for r in pending {
        let mut txn = state.store.begin();
        let Some(obj) = txn.get(&r.key, &r.namespace, &r.name) else {
            state.foreground.lock().remove(&r);
            continue;
        };
        let uid = mstr(&obj, "uid").to_string();
        let deps = txn.dependents(&uid);
        for d in &deps {
            delete_ref(state, &mut txn, d);
        }
        let remaining = txn.dependents(&uid);
        let blocking = remaining.iter().any(|d| {
            txn.get(&d.key, &d.namespace, &d.name).is_some_and(|o| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| {
                        refs.iter()
                            .any(|x| x["uid"] == uid.as_str() && x["blockOwnerDeletion"] == true)
                    })
            })
        });
        if !blocking {
            drop_finalizer(state, &mut txn, &r, "foregroundDeletion");
            state.foreground.lock().remove(&r);
        }
        if let Err(e) = txn.commit() {
            tracing::error!(error = %e, "foreground deletion write failed");
        }
    }
}

fn namespaces(state: &State) {
    let terminating: Vec<Value> = state
        .store
        .begin()
        .list(&ns_key(), None)
        .into_iter()
        .filter(|n| !mstr(n, "deletionTimestamp").is_empty())
        .map(|n| (*n).clone())
        .collect();
    {
        // Forget namespaces that are gone.
        let mut since = state.terminating_since.lock();
        since.retain(|n, _| terminating.iter().any(|t| mstr(t, "name") == n));
    }
    for ns in terminating {
        let name = mstr(&ns, "name").to_string();
        // Like the real namespace controller, start a moment after the deletion, so that
        // `kubectl delete -f` of a namespace and its contents finds the contents still there.
        let first_seen = *state
            .terminating_since
            .lock()
            .entry(name.clone())
            .or_insert_with(Instant::now);
        if first_seen.elapsed() < NAMESPACE_GRACE {
            continue;
        }
        let mut txn = state.store.begin();
        let mut remaining = 0usize;
        for key in txn.keys_with_objects_in(&name) {
            for obj in txn.list(&key, Some(&name)) {
                remaining += 1;
                if mstr(&obj, "deletionTimestamp").is_empty() {
                    delete_ref(
                        state,
                        &mut txn,
                        &ObjRef {
                            key: key.clone(),
                            namespace: name.clone(),
                            name: mstr(&obj, "name").to_string(),
                        },
                    );
                }
            }
        }
        if remaining > 0 {
            // Re-check what is left after this pass's deletions.
            remaining = txn
                .keys_with_objects_in(&name)
                .iter()
                .map(|k| txn.list(k, Some(&name)).len())
                .sum();
        }
        if remaining == 0
            && let Some(info) = state.lookup("", "v1", "namespaces")
            && let Some(obj) = txn.get(&ns_key(), "", &name)
        {
            let mut new = (*obj).clone();
            new["spec"]["finalizers"] = json!([]);
            if let Err(e) = engine::finish_update(
                state,
                &mut txn,
                &info,
                &obj,
                new,
                Some("finalize"),
                Manager::Internal("kube-controller-manager"),
                false,
            ) {
                tracing::warn!(error = %e.message, "finalizing namespace {name} failed");
            }
        }
        if let Err(e) = txn.commit() {
            tracing::error!(error = %e, "namespace cleanup write failed");
        }
    }
}

fn crds(state: &State) {
    let key = ResKey::new("apiextensions.k8s.io", "customresourcedefinitions");
    let terminating: Vec<Value> = state
        .store
        .begin()
        .list(&key, None)
        .into_iter()
        .filter(|c| !mstr(c, "deletionTimestamp").is_empty())
        .map(|c| (*c).clone())
        .collect();
    for crd in terminating {
        let name = mstr(&crd, "name").to_string();
        let infos = state.registry.read().crd_resources(&name);
        let mut txn = state.store.begin();
        let mut remaining = 0;
        if let Some(info) = infos.first() {
            let ck = storage_key(info);
            for obj in txn.list(&ck, None) {
                if mstr(&obj, "deletionTimestamp").is_empty() {
                    delete_ref(
                        state,
                        &mut txn,
                        &ObjRef {
                            key: ck.clone(),
                            namespace: mstr(&obj, "namespace").to_string(),
                            name: mstr(&obj, "name").to_string(),
                        },
                    );
                }
            }
            remaining = txn.list(&ck, None).len();
        }
        if remaining == 0 {
            drop_finalizer(
                state,
                &mut txn,
                &ObjRef {
                    key: key.clone(),
                    namespace: String::new(),
                    name,
                },
                "customresourcecleanup.apiextensions.k8s.io",
            );
        }
        if let Err(e) = txn.commit() {
            tracing::error!(error = %e, "CRD cleanup write failed");
        }
    }
}
