//! Drift watchers: one watch per kind the applier has applied (filtered by the agent's
//! managed-by label) and one on the inventory ConfigMaps. They only observe: every event goes
//! down a channel as an [`Observation`] to the repair loop ([`crate::repair`]), which decides
//! what to record and what to re-apply. Watchers stop when they are dropped with their applier.

use crate::discovery::Kind;
use crate::inventory;
use crate::model::{LABEL_MANAGED_BY, MANAGED_BY_AGENT, ObjectRef};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

/// What a drift watcher saw in the child.
#[derive(Debug)]
pub(crate) enum Observation {
    /// An object of a watched kind exists as `live` (created, changed, or listed).
    Live {
        /// The object.
        object: ObjectRef,
        /// Its state in the child.
        live: Box<DynamicObject>,
        /// A held observation sent again once its Description's apply ended. Its status was
        /// recorded then, and newer observations of the object may be queued ahead of it: only
        /// drift is judged from it.
        replayed: bool,
    },
    /// An object of a watched kind was deleted.
    Deleted(ObjectRef),
    /// A (re)list of `kind` in `namespace` (`None`: every namespace) finished: `present` are the
    /// objects it found, so that the ones deleted while the watch was down are known.
    Listed {
        /// The kind listed.
        kind: Kind,
        /// The namespace listed.
        namespace: Option<String>,
        /// The objects found.
        present: HashSet<ObjectRef>,
    },
    /// Someone deleted the inventory ConfigMap of this Description key.
    InventoryDeleted(String),
}

/// The drift watchers of one applier.
pub(crate) struct Watchers {
    client: kube::Client,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Where observations go, once started.
    sender: Option<UnboundedSender<Observation>>,
    /// Every kind applied so far, with the namespaces to watch it in.
    kinds: HashMap<String, (Kind, Vec<Option<String>>)>,
    watched: HashSet<String>,
    tasks: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The key of a kind among the watched ones.
pub(crate) fn kind_key(kind: &Kind) -> String {
    format!("{}/{}", kind.resource.api_version, kind.resource.kind)
}

impl Watchers {
    /// Watchers reading the child through `client`; nothing is watched until [`Watchers::start`].
    pub(crate) fn new(client: kube::Client) -> Watchers {
        Watchers {
            client,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Remembers that `kind` was applied, to be watched in `scopes` (`None`: the whole cluster;
    /// asked only for a kind not seen before), and watches it at once when started.
    pub(crate) fn ensure(&self, kind: &Kind, scopes: impl FnOnce() -> Vec<Option<String>>) {
        let key = kind_key(kind);
        let mut inner = lock(&self.inner);
        if inner.kinds.contains_key(&key) {
            return;
        }
        inner.kinds.insert(key.clone(), (kind.clone(), scopes()));
        if inner.sender.is_some() {
            self.watch(&mut inner, key);
        }
    }

    /// Starts watching every kind applied so far and from now on, and the inventories in
    /// `state_namespace`. Returns what the watchers observe; `None` when already started.
    pub(crate) fn start(&self, state_namespace: &str) -> Option<UnboundedReceiver<Observation>> {
        let mut inner = lock(&self.inner);
        if inner.sender.is_some() {
            return None;
        }
        let (sender, observations) = mpsc::unbounded_channel();
        let inventories = Api::namespaced(self.client.clone(), state_namespace);
        inner
            .tasks
            .push(tokio::spawn(watch_inventories(inventories, sender.clone())));
        inner.sender = Some(sender);
        let keys: Vec<String> = inner.kinds.keys().cloned().collect();
        for key in keys {
            self.watch(&mut inner, key);
        }
        Some(observations)
    }

    /// Hands `observation` to the repair loop again (once started).
    pub(crate) fn replay(&self, observation: Observation) {
        if let Some(sender) = lock(&self.inner).sender.as_ref() {
            let _ = sender.send(observation);
        }
    }

    fn watch(&self, inner: &mut Inner, key: String) {
        let (Some(sender), Some((kind, scopes))) = (inner.sender.clone(), inner.kinds.get(&key))
        else {
            return;
        };
        let (kind, scopes) = (kind.clone(), scopes.clone());
        if !inner.watched.insert(key) {
            return;
        }
        for namespace in scopes {
            let api = match &namespace {
                Some(ns) => {
                    Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &kind.resource)
                }
                None => Api::<DynamicObject>::all_with(self.client.clone(), &kind.resource),
            };
            inner.tasks.push(tokio::spawn(watch_kind(
                api,
                kind.clone(),
                namespace,
                sender.clone(),
            )));
        }
    }

    /// How many kinds are watched.
    pub(crate) fn watched_kinds(&self) -> usize {
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

fn object_ref(kind: &Kind, obj: &DynamicObject) -> ObjectRef {
    ObjectRef {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// Watches the agent's objects of `kind`; ends when nobody reads the observations any more.
async fn watch_kind(
    api: Api<DynamicObject>,
    kind: Kind,
    namespace: Option<String>,
    observations: UnboundedSender<Observation>,
) {
    let config =
        watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_AGENT}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut present: HashSet<ObjectRef> = HashSet::new();
    while let Some(event) = stream.next().await {
        let observation = match event {
            Ok(Event::Apply(live) | Event::InitApply(live)) => {
                let object = object_ref(&kind, &live);
                present.insert(object.clone());
                Observation::Live {
                    object,
                    live: Box::new(live),
                    replayed: false,
                }
            }
            Ok(Event::Delete(live)) => {
                let object = object_ref(&kind, &live);
                present.remove(&object);
                Observation::Deleted(object)
            }
            Ok(Event::Init) => {
                present.clear();
                continue;
            }
            Ok(Event::InitDone) => Observation::Listed {
                kind: kind.clone(),
                namespace: namespace.clone(),
                present: present.clone(),
            },
            Err(e) => {
                tracing::debug!(kind = %kind_key(&kind), error = %e, "drift watch error");
                continue;
            }
        };
        if observations.send(observation).is_err() {
            return;
        }
    }
}

/// Watches the inventory ConfigMaps for deletions by someone else.
async fn watch_inventories(api: Api<ConfigMap>, observations: UnboundedSender<Observation>) {
    let config = watcher::Config::default().labels(inventory::INVENTORY_SELECTOR);
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        if let Ok(Event::Delete(cm)) = event
            && let Some(inv) = inventory::from_config_map(&cm)
            && observations
                .send(Observation::InventoryDeleted(inv.description))
                .is_err()
        {
            return;
        }
    }
}
