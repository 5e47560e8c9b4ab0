//! Domain types of the agent: what a Description asks for and what the agent reports back.
//! Free of protobuf types; the hub client converts at its gRPC edge.

use atoll_crds::apps::DeletionPolicy;
use serde_json::Value;
use std::fmt;

/// Annotation a user puts on an existing object in the child cluster to let the agent take it
/// over (`"true"`).
pub const ANNOTATION_ADOPT: &str = "apps.clusternet.io/adopt";
/// Label the agent puts on every object it applies, so that its drift watchers can filter.
pub const LABEL_MANAGED_BY: &str = "apps.clusternet.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY_AGENT: &str = "atoll-agent";

/// A Description as the agent receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    /// The Description's namespace in the parent (the cluster's dedicated namespace).
    pub namespace: String,
    /// The Description's name.
    pub name: String,
    /// The Description's uid.
    pub uid: String,
    /// The Description's `metadata.generation`.
    pub generation: i64,
    /// The rendered objects (`spec.raw`).
    pub objects: Vec<Value>,
    /// The Subscription's `deletionPolicy` is `Orphan`: objects leaving the cluster (the
    /// Description deleted or pruned, an object dropped from it) are left running, unmanaged.
    pub orphan: bool,
}

/// Whether a Description whose deletion-policy label (or inventory record) is `value` orphans
/// its objects; see [`DeletionPolicy::from_label`].
pub fn orphans(value: Option<&String>) -> bool {
    DeletionPolicy::from_label(value.map(String::as_str)) == DeletionPolicy::Orphan
}

impl Description {
    /// The owner key `<namespace>.<name>`, the value of the ownership annotation.
    pub fn key(&self) -> String {
        atoll_crds::known::owned_by_description(&self.namespace, &self.name)
    }
}

/// Identifies one object in the child cluster.
#[derive(
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

impl ObjectRef {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        match self.api_version.split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }
}

/// Phase of a Description in the child: the applier reports `Success` or `Failure`.
pub use atoll_crds::apps::DescriptionPhase as Phase;

/// Status of one object of a Description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectReport {
    /// Which object (for an unparsable object, whatever could be read of it).
    pub object: ObjectRef,
    /// The object's `.status` in the child, when it has one.
    pub status: Option<Value>,
    /// Why the object could not be applied; `None` when it was.
    pub error: Option<String>,
}

/// What the agent did with a Description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The Description's name.
    pub name: String,
    /// The Description's uid.
    pub uid: String,
    /// The generation applied.
    pub observed_generation: i64,
    /// Success when every object was applied.
    pub phase: Phase,
    /// Empty on success; otherwise the errors, one per failed object.
    pub reason: String,
    /// One entry per object.
    pub objects: Vec<ObjectReport>,
    /// The Description was being deleted and its objects are gone from the child.
    pub deleted: bool,
}

impl Report {
    /// Builds the report from per-object results: the phase is Failure as soon as one object
    /// failed, and the reason lists every failure.
    pub fn from_objects(
        name: &str,
        uid: &str,
        observed_generation: i64,
        objects: Vec<ObjectReport>,
    ) -> Report {
        let failures: Vec<String> = objects
            .iter()
            .filter_map(|o| o.error.as_ref().map(|e| format!("{}: {e}", o.object)))
            .collect();
        Report {
            name: name.to_owned(),
            uid: uid.to_owned(),
            observed_generation,
            phase: if failures.is_empty() {
                Phase::Success
            } else {
                Phase::Failure
            },
            reason: failures.join("; "),
            objects,
            deleted: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, error: Option<&str>) -> ObjectReport {
        ObjectReport {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "default".into(),
                name: name.into(),
            },
            status: None,
            error: error.map(str::to_owned),
        }
    }

    #[test]
    fn report_phase_is_failure_as_soon_as_one_object_failed() {
        let cases = [
            (vec![], Phase::Success, ""),
            (vec![obj("a", None), obj("b", None)], Phase::Success, ""),
            (
                vec![obj("a", None), obj("b", Some("boom"))],
                Phase::Failure,
                "ConfigMap default/b: boom",
            ),
            (
                vec![obj("a", Some("x")), obj("b", Some("y"))],
                Phase::Failure,
                "ConfigMap default/a: x; ConfigMap default/b: y",
            ),
        ];
        for (objects, phase, reason) in cases {
            let r = Report::from_objects("d", "u", 3, objects);
            assert_eq!(r.phase, phase);
            assert_eq!(r.reason, reason);
            assert_eq!(r.observed_generation, 3);
        }
    }

    #[test]
    fn object_ref_group_splits_api_version() {
        let cases = [
            ("v1", ""),
            ("apps/v1", "apps"),
            ("apiextensions.k8s.io/v1", "apiextensions.k8s.io"),
        ];
        for (av, group) in cases {
            let r = ObjectRef {
                api_version: av.into(),
                kind: "K".into(),
                namespace: String::new(),
                name: "n".into(),
            };
            assert_eq!(r.group(), group);
        }
    }
}
