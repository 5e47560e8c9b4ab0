//! The resource registry: built-in kinds plus the served versions of Established CRDs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::api::resource::ResourceInfo;
use crate::store::ResKey;

/// Resources currently served.
pub struct Registry {
    builtins: Vec<Arc<ResourceInfo>>,
    crds: BTreeMap<String, Vec<Arc<ResourceInfo>>>,
    index: HashMap<(String, String, String), Arc<ResourceInfo>>,
    all: Arc<Vec<ResourceInfo>>,
    generation: u64,
}

/// The storage key of a resource. Both Event APIs share one storage.
pub fn storage_key(info: &ResourceInfo) -> ResKey {
    if is_events_v1(info) {
        return ResKey::new("", "events");
    }
    ResKey::new(&info.group, &info.plural)
}

/// `events.k8s.io` Events, stored in core `v1` form.
pub fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

const EVENT_RENAMES: &[(&str, &str)] = &[
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Converts an `events.k8s.io/v1` Event to the stored core `v1` form.
pub fn event_to_core(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(m) = v.as_object_mut() {
        for (new, core) in EVENT_RENAMES {
            if let Some(x) = m.remove(*new) {
                m.insert((*core).to_string(), x);
            }
        }
        m.insert("apiVersion".into(), "v1".into());
        m.insert("kind".into(), "Event".into());
    }
    v
}

/// Converts a stored core `v1` Event to the `events.k8s.io/v1` form.
pub fn event_from_core(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(m) = v.as_object_mut() {
        for (new, core) in EVENT_RENAMES {
            if let Some(x) = m.remove(*core) {
                m.insert((*new).to_string(), x);
            }
        }
        m.insert("apiVersion".into(), "events.k8s.io/v1".into());
        m.insert("kind".into(), "Event".into());
    }
    v
}

impl Registry {
    /// A registry with the given built-ins.
    pub fn new(builtins: Vec<ResourceInfo>) -> Registry {
        let mut r = Registry {
            builtins: builtins.into_iter().map(Arc::new).collect(),
            crds: BTreeMap::new(),
            index: HashMap::new(),
            all: Arc::new(Vec::new()),
            generation: 0,
        };
        r.rebuild();
        r
    }

    fn rebuild(&mut self) {
        self.index.clear();
        let mut all = Vec::new();
        for info in self.builtins.iter().chain(self.crds.values().flatten()) {
            self.index.insert(
                (
                    info.group.clone(),
                    info.version.clone(),
                    info.plural.clone(),
                ),
                info.clone(),
            );
            all.push((**info).clone());
        }
        self.all = Arc::new(all);
        self.generation += 1;
    }

    /// Changes whenever the set of served resources changes (for caches of derived documents).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Serves the resources of CRD `name` (replacing what it served before).
    pub fn set_crd(&mut self, name: &str, infos: Vec<ResourceInfo>) {
        let infos: Vec<Arc<ResourceInfo>> = infos.into_iter().map(Arc::new).collect();
        if self.crds.get(name) == Some(&infos) {
            return;
        }
        self.crds.insert(name.to_string(), infos);
        self.rebuild();
    }

    /// Stops serving CRD `name`.
    pub fn remove_crd(&mut self, name: &str) {
        if self.crds.remove(name).is_some() {
            self.rebuild();
        }
    }

    /// The resources of CRD `name`.
    pub fn crd_resources(&self, name: &str) -> Vec<Arc<ResourceInfo>> {
        self.crds.get(name).cloned().unwrap_or_default()
    }

    /// Finds a served resource.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.index
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Whether any version of `group` is served.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.all
            .iter()
            .any(|r| r.group == group && r.version == version)
    }

    /// Every served resource (built-ins first, in registration order).
    pub fn all(&self) -> Arc<Vec<ResourceInfo>> {
        self.all.clone()
    }

    /// The preferred served resource of a storage key.
    pub fn by_key(&self, key: &ResKey) -> Option<Arc<ResourceInfo>> {
        self.builtins
            .iter()
            .chain(self.crds.values().flatten())
            .find(|r| r.group == key.group && r.plural == key.resource)
            .cloned()
    }

    /// The served resource for a kind (`apiVersion` + `kind`).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.builtins
            .iter()
            .chain(self.crds.values().flatten())
            .find(|r| r.api_version() == api_version && r.kind == kind)
            .cloned()
    }
}
