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

/// The owner key of the Description a live object belongs to, from its ownership annotation.
pub(crate) fn owner_of(live: &kube::api::DynamicObject) -> Option<&str> {
    live.metadata
        .annotations
        .as_ref()?
        .get(atoll_crds::known::ANNOTATION_OWNED_BY_DESCRIPTION)
        .map(String::as_str)
}

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
    /// The charts to install as Helm releases (`spec.chartRaw` with `spec.chartValues`).
    pub charts: Vec<ChartRelease>,
    /// The Subscription's `deletionPolicy` is `Orphan`: objects leaving the cluster (the
    /// Description deleted or pruned, an object dropped from it) are left running, unmanaged.
    pub orphan: bool,
}

/// Whether a Description whose deletion-policy label (or inventory record) is `value` orphans
/// its objects; see [`DeletionPolicy::from_label`].
pub fn orphans(value: Option<&String>) -> bool {
    DeletionPolicy::from_label(value.map(String::as_str)) == DeletionPolicy::Orphan
}

/// A release's state, as `helm status` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseStatus {
    /// Helm's status: `deployed`, `failed`, `pending-install`, `pending-upgrade`,
    /// `superseded`, `uninstalling`, ...
    pub phase: String,
    /// The release revision.
    pub revision: i64,
    /// The chart version installed.
    pub chart_version: String,
    /// When the release was first deployed (RFC 3339).
    pub first_deployed: String,
    /// When it was last deployed (RFC 3339).
    pub last_deployed: String,
    /// Helm's description of the last operation.
    pub description: String,
    /// The chart's rendered NOTES.txt.
    pub notes: String,
}

/// One chart of a Description: the HelmChart object after chart-level overrides, and the
/// values after value overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartRelease {
    /// The HelmChart object.
    pub chart: Value,
    /// The Helm values (a map).
    pub values: Value,
    /// How the chart's repository is reached: anonymously, or with the credentials of its
    /// `chartPullSecret` as the hub read them from the parent.
    pub pull: PullAuth,
}

/// How a chart is pulled from its repository.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PullAuth {
    /// No credentials came with the chart.
    #[default]
    Anonymous,
    /// The credentials of the chart's `chartPullSecret`.
    Credentials(PullCredentials),
    /// The hub could not read the chart's `chartPullSecret`: why (the release fails with it).
    Unavailable(String),
}

/// A chart repository's or registry's username and password. Kept in memory only, and never
/// printed: `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct PullCredentials {
    /// The username.
    pub username: String,
    /// The password (or identity token).
    pub password: String,
}

impl fmt::Debug for PullCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A received JSON document (an object, a chart, values), or a string saying it is not JSON,
/// which the applier then reports as invalid instead of applying.
pub fn parse_received(raw: &[u8]) -> Value {
    serde_json::from_slice(raw).unwrap_or_else(|e| Value::String(format!("not JSON: {e}")))
}

impl ChartRelease {
    /// A chart and its values as received (JSON documents), pulled as `pull` says.
    pub fn from_received(chart: &[u8], values: &[u8], pull: PullAuth) -> ChartRelease {
        ChartRelease {
            chart: parse_received(chart),
            values: parse_received(values),
            pull,
        }
    }
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

/// What became of one chart of a Description: its Helm release.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReleaseReport {
    /// The release name (the HelmChart's name).
    pub name: String,
    /// The namespace the release is in (the chart's `targetNamespace`).
    pub namespace: String,
    /// The release as Helm reports it; `None` when it is not installed.
    pub status: Option<ReleaseStatus>,
    /// Why the release could not be installed, upgraded or uninstalled; `None` when it was.
    pub error: Option<String>,
}

impl ReleaseReport {
    /// The report of release `namespace/name` that Helm did not install, with why.
    pub fn failed(name: &str, namespace: &str, error: impl Into<String>) -> ReleaseReport {
        ReleaseReport {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            status: None,
            error: Some(error.into()),
        }
    }
}

impl fmt::Display for ReleaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "release {}/{}", self.namespace, self.name)
    }
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
    /// One entry per chart.
    pub releases: Vec<ReleaseReport>,
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
            releases: Vec::new(),
            deleted: false,
        }
    }

    /// The report with its charts' releases: a release that failed (or Helm reports `failed`)
    /// makes it a Failure and is named in the reason; otherwise a release Helm is still
    /// installing, upgrading or uninstalling gives that phase (as Clusternet maps a
    /// HelmRelease's status onto its Description).
    pub fn with_releases(mut self, releases: Vec<ReleaseReport>) -> Report {
        let mut failures: Vec<String> = if self.reason.is_empty() {
            Vec::new()
        } else {
            vec![std::mem::take(&mut self.reason)]
        };
        fn helm_phase(r: &ReleaseReport) -> &str {
            r.status.as_ref().map_or("", |s| s.phase.as_str())
        }
        for r in &releases {
            match (&r.error, helm_phase(r)) {
                (Some(e), _) => failures.push(format!("{r}: {e}")),
                (None, "failed") => failures.push(format!("{r}: Helm reports it failed")),
                _ => {}
            }
        }
        self.phase = if !failures.is_empty() {
            Phase::Failure
        } else if releases.iter().any(|r| helm_phase(r) == "pending-install") {
            Phase::Installing
        } else if releases
            .iter()
            .any(|r| matches!(helm_phase(r), "pending-upgrade" | "pending-rollback"))
        {
            Phase::Upgrading
        } else if releases.iter().any(|r| helm_phase(r) == "uninstalling") {
            Phase::Uninstalling
        } else {
            self.phase
        };
        self.reason = failures.join("; ");
        self.releases = releases;
        self
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
    fn releases_set_the_phase_and_name_their_failures() {
        let release = |phase: &str, error: Option<&str>| ReleaseReport {
            name: "hello".into(),
            namespace: "demo".into(),
            status: (!phase.is_empty()).then(|| ReleaseStatus {
                phase: phase.into(),
                ..ReleaseStatus::default()
            }),
            error: error.map(str::to_owned),
        };
        let cases = [
            (vec![], vec![], Phase::Success, ""),
            (vec![], vec![release("deployed", None)], Phase::Success, ""),
            (
                vec![],
                vec![release("pending-install", None)],
                Phase::Installing,
                "",
            ),
            (
                vec![],
                vec![release("pending-upgrade", None)],
                Phase::Upgrading,
                "",
            ),
            (
                vec![],
                vec![release("uninstalling", None)],
                Phase::Uninstalling,
                "",
            ),
            (
                vec![],
                vec![release("failed", None)],
                Phase::Failure,
                "release demo/hello: Helm reports it failed",
            ),
            (
                vec![],
                vec![
                    release("deployed", None),
                    release("", Some("no such version")),
                ],
                Phase::Failure,
                "release demo/hello: no such version",
            ),
            (
                vec![obj("a", Some("x"))],
                vec![release("pending-install", Some("timed out"))],
                Phase::Failure,
                "ConfigMap default/a: x; release demo/hello: timed out",
            ),
        ];
        for (objects, releases, phase, reason) in cases {
            let r = Report::from_objects("d", "u", 1, objects).with_releases(releases.clone());
            assert_eq!(
                (r.phase, r.reason.as_str()),
                (phase, reason),
                "{releases:?}"
            );
            assert_eq!(r.releases, releases);
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
