//! Drift repair: one watcher per kind the applier has applied (filtered by the agent's
//! managed-by label), re-applying an object within seconds when someone else changes or
//! deletes it, and recording each object's `.status` for the reports. A watcher on the
//! inventory ConfigMaps rewrites an inventory someone deleted.

use crate::applier::{Applier, Notice};
use crate::discovery::Kind;
use crate::fieldpath;
use crate::inventory;
use crate::model::{LABEL_MANAGED_BY, MANAGED_BY_AGENT, ObjectRef};
use atoll_crds::known::ANNOTATION_OWNED_BY_DESCRIPTION;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use tokio::task::JoinHandle;

/// The drift watchers of one applier.
#[derive(Default)]
pub struct Watchers {
    inner: Mutex<Inner>,
    /// Objects being repaired → whether another repair was asked for meanwhile.
    inflight: Mutex<HashMap<ObjectRef, bool>>,
}

#[derive(Default)]
struct Inner {
    applier: Option<Weak<Applier>>,
    kinds: HashMap<String, Kind>,
    watched: HashSet<String>,
    tasks: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn kind_key(kind: &Kind) -> String {
    format!("{}/{}", kind.resource.api_version, kind.resource.kind)
}

impl Watchers {
    /// Remembers that `kind` was applied and, when drift repair runs, watches it.
    pub(crate) fn ensure(&self, applier: &Applier, kind: &Kind) {
        let mut inner = lock(&self.inner);
        let key = kind_key(kind);
        inner
            .kinds
            .entry(key.clone())
            .or_insert_with(|| kind.clone());
        let Some(weak) = inner.applier.clone() else {
            return;
        };
        if inner.watched.insert(key) {
            for namespace in scopes(applier, kind) {
                inner.tasks.push(tokio::spawn(watch_kind(
                    weak.clone(),
                    kind.clone(),
                    namespace,
                )));
            }
        }
    }

    /// How many kinds are watched.
    pub fn watched_kinds(&self) -> usize {
        lock(&self.inner).watched.len()
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in lock(&self.inner).tasks.drain(..) {
            task.abort();
        }
    }
}

impl Applier {
    /// Starts drift repair: watchers for every kind applied so far and from now on, and the
    /// inventory watcher. Watchers stop when the applier is dropped.
    pub fn start_drift_repair(self: &Arc<Self>) {
        let mut inner = lock(&self.drift.inner);
        if inner.applier.is_some() {
            return;
        }
        let weak = Arc::downgrade(self);
        inner.applier = Some(weak.clone());
        let kinds: Vec<(String, Kind)> = inner
            .kinds
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, kind) in kinds {
            if inner.watched.insert(key) {
                for namespace in scopes(self, &kind) {
                    inner.tasks.push(tokio::spawn(watch_kind(
                        weak.clone(),
                        kind.clone(),
                        namespace,
                    )));
                }
            }
        }
        inner.tasks.push(tokio::spawn(watch_inventory(weak)));
    }
}

/// What to watch for `kind`: the whole cluster (`None`), or, for an agent restricted to some
/// namespaces (`--namespaces`), each of them for a namespaced kind and nothing for a
/// cluster-scoped one (the agent applies none).
fn scopes(applier: &Applier, kind: &Kind) -> Vec<Option<String>> {
    match applier.allowed_namespaces() {
        None => vec![None],
        Some(_) if !kind.namespaced => Vec::new(),
        Some(allowed) => allowed.iter().cloned().map(Some).collect(),
    }
}

fn object_ref(kind: &Kind, obj: &DynamicObject) -> ObjectRef {
    ObjectRef {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// Whether the live object differs from what the applier wants.
fn drifted(applier: &Applier, object: &ObjectRef, live: &DynamicObject) -> bool {
    let state = applier.state();
    let Some(desired) = state.objects.get(object) else {
        return false;
    };
    let owner = live
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OWNED_BY_DESCRIPTION));
    if owner != Some(&desired.owner) {
        return true;
    }
    match serde_json::to_value(live) {
        Ok(live) => desired
            .config()
            .is_some_and(|config| !fieldpath::is_subset(&config, &live)),
        Err(_) => false,
    }
}

fn is_desired(applier: &Applier, object: &ObjectRef) -> bool {
    applier.state().objects.contains_key(object)
}

/// Re-applies `object` in the background, coalescing repeated requests.
fn schedule_repair(weak: Weak<Applier>, object: ObjectRef) {
    let Some(applier) = weak.upgrade() else {
        return;
    };
    {
        let mut inflight = lock(&applier.drift.inflight);
        if let Some(again) = inflight.get_mut(&object) {
            *again = true;
            return;
        }
        inflight.insert(object.clone(), false);
    }
    drop(applier);
    tokio::spawn(async move {
        loop {
            let Some(applier) = weak.upgrade() else {
                return;
            };
            tracing::info!(%object, "repairing drift");
            match applier.reapply(&object).await {
                Ok(true) => {
                    crate::metrics::Metrics::count(&applier.metrics.drift_repairs, "repaired");
                    let owner = applier
                        .state()
                        .objects
                        .get(&object)
                        .map(|d| d.owner.clone());
                    if let Some(owner) = owner {
                        applier.notify(Notice::ReportChanged(owner));
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    crate::metrics::Metrics::count(&applier.metrics.drift_repairs, "failed");
                    tracing::warn!(%object, error = %e, "drift repair failed");
                }
            }
            let mut inflight = lock(&applier.drift.inflight);
            match inflight.get_mut(&object) {
                Some(again) if *again => *again = false,
                _ => {
                    inflight.remove(&object);
                    return;
                }
            }
        }
    });
}

async fn watch_kind(weak: Weak<Applier>, kind: Kind, namespace: Option<String>) {
    let api = {
        let Some(applier) = weak.upgrade() else {
            return;
        };
        match &namespace {
            Some(ns) => {
                Api::<DynamicObject>::namespaced_with(applier.client.clone(), ns, &kind.resource)
            }
            None => Api::<DynamicObject>::all_with(applier.client.clone(), &kind.resource),
        }
    };
    let config =
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_AGENT}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut seen: HashSet<ObjectRef> = HashSet::new();
    while let Some(event) = stream.next().await {
        let Some(applier) = weak.upgrade() else {
            return;
        };
        match event {
            Ok(Event::Apply(obj)) | Ok(Event::InitApply(obj)) => {
                let object = object_ref(&kind, &obj);
                seen.insert(object.clone());
                let status = obj.data.get("status").filter(|s| !s.is_null()).cloned();
                if let Some(owner) = applier.observe_status(&object, status) {
                    applier.notify(Notice::ReportChanged(owner));
                }
                if obj.metadata.deletion_timestamp.is_none() && drifted(&applier, &object, &obj) {
                    schedule_repair(weak.clone(), object);
                }
            }
            Ok(Event::Delete(obj)) => {
                let object = object_ref(&kind, &obj);
                seen.remove(&object);
                if is_desired(&applier, &object) {
                    schedule_repair(weak.clone(), object);
                }
            }
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitDone) => {
                let missing: Vec<ObjectRef> = applier
                    .state()
                    .objects
                    .iter()
                    .filter(|(r, d)| {
                        kind_key(&d.kind) == kind_key(&kind)
                            && namespace.as_ref().is_none_or(|ns| &r.namespace == ns)
                            && !seen.contains(*r)
                    })
                    .map(|(r, _)| r.clone())
                    .collect();
                for object in missing {
                    schedule_repair(weak.clone(), object);
                }
            }
            Err(e) => tracing::debug!(kind = %kind_key(&kind), error = %e, "drift watch error"),
        }
    }
}

async fn watch_inventory(weak: Weak<Applier>) {
    let api: Api<ConfigMap> = {
        let Some(applier) = weak.upgrade() else {
            return;
        };
        Api::namespaced(applier.client.clone(), applier.state_namespace())
    };
    let config = watcher::Config::default().labels(inventory::INVENTORY_SELECTOR);
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        if let Ok(Event::Delete(cm)) = event
            && let Some(inv) = inventory::from_config_map(&cm)
        {
            let Some(applier) = weak.upgrade() else {
                return;
            };
            applier.restore_inventory(&inv.description).await;
        }
    }
}
