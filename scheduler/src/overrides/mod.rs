//! Rendering: a feed's object, through the Globalization and Localization overrides that apply
//! to one cluster, into what that cluster's Description carries.
//!
//! Order (Clusternet `localizer`): Globalizations by priority ascending, then creationTimestamp
//! ascending, then name; then Localizations the same way. A later override wins. Then the
//! server-populated metadata and `status` are stripped ([`strip_server_fields`]), and last the
//! divided replica count is written ([`DividedReplicas`]), so no override can undo the scheduler's
//! split (Clusternet applies it as an override of priority 1000, which a Localization of equal
//! priority created later could overwrite).
//!
//! Deliberate differences from Clusternet, each visible to a user:
//! - A JSONPatch operation on a missing path is an error naming the override and the path.
//!   Clusternet silently discards the whole patch, which hides typos.
//! - FieldJSONPatch/FieldMergePatch without `fieldFormat` detect the format (JSON when the string
//!   parses as JSON, YAML otherwise) instead of failing.
//! - A MergePatch value must be a map (a scalar would replace the whole object).
//! - `Helm` overrides and `overrideChart: true` on a feed that is not a HelmChart are rejected
//!   (Clusternet would apply them to a values document the object never uses). HelmChart feeds
//!   are rendered by [`helm::render_chart`].

pub mod helm;
mod patch;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use atoll_crds::apps::{Feed, Globalization, Localization, OverrideConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::error::Error;
use crate::selector::Selector;
pub use patch::{RenderBudget, apply_override, detect_format};

/// The JSON pointer of the replica field of divisible kinds.
pub const REPLICAS_PATH: &str = "/spec/replicas";

/// The annotation `kubectl apply` writes; stripped from rendered objects.
pub const ANNOTATION_KUBECTL_LAST_APPLIED: &str =
    "kubectl.kubernetes.io/last-applied-configuration";

/// Annotations the parent's own controllers write on feeds, describing the parent's state (the
/// Deployment controller's rollout revision, the DaemonSet controller's template generation).
/// They are stripped: a child's controllers write their own, and the parent's changing them must
/// not re-render (and re-write) every Description of the feed.
pub const PARENT_CONTROLLER_ANNOTATIONS: [&str; 4] = [
    "deployment.kubernetes.io/revision",
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "deprecated.daemonset.template.generation",
];

/// Where the replica count of a divisible kind lives: `/spec/replicas` for apps/v1 Deployment,
/// StatefulSet and ReplicaSet; `None` for every other kind (not divisible).
pub fn replica_path(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "ReplicaSet") => Some(REPLICAS_PATH),
        _ => None,
    }
}

/// Which kind of object an override set comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OverrideKind {
    /// A cluster-scoped Globalization (applied first).
    Globalization,
    /// A Localization in the cluster's dedicated namespace (applied after every Globalization).
    Localization,
}

impl fmt::Display for OverrideKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OverrideKind::Globalization => "Globalization",
            OverrideKind::Localization => "Localization",
        })
    }
}

/// The overrides of one Globalization or Localization, with what orders them.
#[derive(Debug, Clone, PartialEq)]
pub struct OverrideSet {
    /// Globalization or Localization.
    pub kind: OverrideKind,
    /// Namespace (Localization only).
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// `spec.priority`: lower is applied first.
    pub priority: i32,
    /// `metadata.creationTimestamp`: older is applied first at equal priority (absent sorts
    /// first).
    pub created: Option<Time>,
    /// `spec.overrides`, applied in list order.
    pub overrides: Vec<OverrideConfig>,
}

impl OverrideSet {
    /// The overrides of a Globalization.
    pub fn from_globalization(g: &Globalization) -> Self {
        OverrideSet {
            kind: OverrideKind::Globalization,
            namespace: None,
            name: g.metadata.name.clone().unwrap_or_default(),
            priority: g.spec.priority,
            created: g.metadata.creation_timestamp.clone(),
            overrides: g.spec.overrides.clone(),
        }
    }

    /// The overrides of a Localization.
    pub fn from_localization(l: &Localization) -> Self {
        OverrideSet {
            kind: OverrideKind::Localization,
            namespace: l.metadata.namespace.clone(),
            name: l.metadata.name.clone().unwrap_or_default(),
            priority: l.spec.priority,
            created: l.metadata.creation_timestamp.clone(),
            overrides: l.spec.overrides.clone(),
        }
    }

    /// `Localization ns/name` or `Globalization name`, for messages.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {}/{}", self.kind, ns, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// How one override of this set is named in errors.
    pub fn origin(&self, index: usize) -> String {
        let name = self
            .overrides
            .get(index)
            .and_then(|o| o.name.as_deref())
            .unwrap_or("");
        format!("{} override {:?} (#{index})", self.describe(), name)
    }

    fn order_key(&self, other: &Self) -> Ordering {
        self.kind
            .cmp(&other.kind)
            .then(self.priority.cmp(&other.priority))
            .then_with(|| match (&self.created, &other.created) {
                (Some(a), Some(b)) => a.0.cmp(&b.0),
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            })
            .then_with(|| self.namespace.cmp(&other.namespace))
            .then_with(|| self.name.cmp(&other.name))
    }
}

/// Orders override sets for application: every Globalization (priority ascending, then
/// creationTimestamp ascending, then name) before every Localization (same order).
pub fn order_overrides<'a>(
    globalizations: impl IntoIterator<Item = &'a Globalization>,
    localizations: impl IntoIterator<Item = &'a Localization>,
) -> Vec<OverrideSet> {
    sort_override_sets(
        globalizations
            .into_iter()
            .map(OverrideSet::from_globalization)
            .chain(
                localizations
                    .into_iter()
                    .map(OverrideSet::from_localization),
            )
            .collect(),
    )
}

/// Sorts override sets into application order (see [`order_overrides`]); the order is total, so
/// the result does not depend on the input order.
pub fn sort_override_sets(mut sets: Vec<OverrideSet>) -> Vec<OverrideSet> {
    sets.sort_by(OverrideSet::order_key);
    sets
}

fn same_feed(a: &Feed, b: &Feed) -> bool {
    let ns = |f: &Feed| f.namespace.clone().unwrap_or_default();
    a.api_version == b.api_version && a.kind == b.kind && a.name == b.name && ns(a) == ns(b)
}

/// The overrides that apply to `feed` in one cluster, ordered: Globalizations for the feed whose
/// `clusterAffinity` is absent or matches `cluster_labels`, and Localizations for the feed in the
/// cluster's dedicated namespace `cluster_namespace`. Objects being deleted are skipped.
pub fn select_overrides<'a>(
    feed: &Feed,
    cluster_namespace: &str,
    cluster_labels: &BTreeMap<String, String>,
    globalizations: impl IntoIterator<Item = &'a Globalization>,
    localizations: impl IntoIterator<Item = &'a Localization>,
) -> Result<Vec<OverrideSet>, Error> {
    let mut globs = Vec::new();
    for g in globalizations {
        if g.metadata.deletion_timestamp.is_some() || !same_feed(&g.spec.feed, feed) {
            continue;
        }
        if let Some(affinity) = &g.spec.cluster_affinity {
            let location = format!(
                "Globalization {} spec.clusterAffinity",
                g.metadata.name.as_deref().unwrap_or("")
            );
            if !Selector::compile(affinity, &location)?.matches(cluster_labels) {
                continue;
            }
        }
        globs.push(g);
    }
    let locs = localizations.into_iter().filter(|l| {
        l.metadata.deletion_timestamp.is_none()
            && l.metadata.namespace.as_deref() == Some(cluster_namespace)
            && same_feed(&l.spec.feed, feed)
    });
    Ok(order_overrides(globs, locs))
}

/// The divided replica count a cluster gets for a divisible feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DividedReplicas {
    /// The replica count, from `Placement.replicas[feed][cluster]`.
    pub replicas: i32,
}

/// Renders `template` for one cluster: applies every override of `overrides` in the given order
/// (use [`order_overrides`] or [`select_overrides`]), strips server-populated fields, then writes
/// `divided` at the kind's [`replica_path`]. The template is not modified.
pub fn render(
    template: &Value,
    overrides: &[OverrideSet],
    divided: Option<DividedReplicas>,
) -> Result<Value, Error> {
    let mut doc = template.clone();
    let mut budget = RenderBudget::default();
    for set in overrides {
        for (index, config) in set.overrides.iter().enumerate() {
            apply_override(&mut doc, config, &set.origin(index), &mut budget)?;
        }
    }
    strip_server_fields(&mut doc);
    if let Some(divided) = divided {
        place_replicas(&mut doc, divided)?;
    }
    Ok(doc)
}

/// Writes the divided replica count at the object's [`replica_path`], creating `spec` if needed.
pub fn place_replicas(doc: &mut Value, divided: DividedReplicas) -> Result<(), Error> {
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let kind_name = format!("{api_version}/{kind}");
    let err = |reason: &str| Error::PlaceReplicas {
        kind: kind_name.clone(),
        replicas: divided.replicas,
        reason: reason.to_owned(),
    };
    let Some(path) = replica_path(api_version, kind) else {
        return Err(err(
            "this kind has no replica field; only apps/v1 Deployment, StatefulSet and \
             ReplicaSet can be divided",
        ));
    };
    let mut cursor = doc;
    let tokens: Vec<&str> = path.split('/').skip(1).collect();
    let Some((last, parents)) = tokens.split_last() else {
        return Err(err("empty replica path"));
    };
    for token in parents {
        let Some(map) = cursor.as_object_mut() else {
            return Err(err("the object is not a map"));
        };
        cursor = map
            .entry((*token).to_owned())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    let Some(map) = cursor.as_object_mut() else {
        return Err(err("spec is not a map; fix the object's spec"));
    };
    map.insert((*last).to_owned(), Value::from(divided.replicas));
    Ok(())
}

/// Removes what the parent's API server populated and a child must not receive: `status`, and
/// `metadata.{uid, resourceVersion, generation, creationTimestamp, deletionTimestamp,
/// deletionGracePeriodSeconds, managedFields, selfLink, ownerReferences}`, plus the
/// `kubectl.kubernetes.io/last-applied-configuration` and
/// `clusternet.io/last-applied-configuration` annotations and those of
/// [`PARENT_CONTROLLER_ANNOTATIONS`] (an emptied `annotations` map is removed too).
pub fn strip_server_fields(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else {
        return;
    };
    obj.remove("status");
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "ownerReferences",
    ] {
        meta.remove(field);
    }
    let emptied = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
        Some(annotations) => {
            annotations.remove(ANNOTATION_KUBECTL_LAST_APPLIED);
            annotations.remove(atoll_crds::known::ANNOTATION_LAST_APPLIED_CONFIG);
            for annotation in PARENT_CONTROLLER_ANNOTATIONS {
                annotations.remove(annotation);
            }
            annotations.is_empty()
        }
        None => false,
    };
    if emptied {
        meta.remove("annotations");
    }
}

#[cfg(test)]
mod tests;
