//! What devcluster serves: one [`ResourceInfo`] per resource (built-in or from a CRD).
//!
//! The registry of the server holds these; discovery, OpenAPI and table output are derived
//! from them, so a resource is either served completely or not advertised at all.

use serde_json::Value;

/// The verbs of a main resource, in the order kube-apiserver lists them in discovery.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One served resource of one group-version.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    /// API group, `""` for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `deployments`.
    pub plural: String,
    /// Singular name, e.g. `deployment`.
    pub singular: String,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Short names, e.g. `["deploy"]`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `["all"]`.
    pub categories: Vec<String>,
    /// Verbs of the main resource (a subset of [`ALL_VERBS`]).
    pub verbs: Vec<String>,
    /// Whether a `/status` subresource is served (status then only changes through it).
    pub status_subresource: bool,
    /// The `/scale` subresource, if served.
    pub scale: Option<ScaleSubresource>,
    /// Extra printer columns (CRD `additionalPrinterColumns`, or the built-in printers).
    pub printer_columns: Vec<PrinterColumn>,
    /// The structural `openAPIV3Schema` of a CRD version; `None` for built-ins.
    pub schema: Option<Value>,
    /// True for built-in kinds (strategic merge patch allowed), false for CRD-defined kinds.
    pub builtin: bool,
    /// True when `metadata.generation` is maintained (everything but ConfigMap, Secret,
    /// Namespace, ServiceAccount, Event, Lease, Node, RBAC kinds).
    pub has_generation: bool,
}

impl ResourceInfo {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, or `configmaps` for the core group (the form used in error messages).
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The `scale` subresource of a CRD (or of Deployment, StatefulSet and ReplicaSet).
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleSubresource {
    /// JSON path of the desired replica count, e.g. `.spec.replicas`.
    pub spec_replicas_path: String,
    /// JSON path of the observed replica count, e.g. `.status.replicas`.
    pub status_replicas_path: String,
    /// JSON path of the label selector string, e.g. `.status.selector`.
    pub label_selector_path: Option<String>,
}

/// A column of table output (`kubectl get`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    /// Column header, e.g. `Ready`.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint, usually empty.
    pub format: String,
    /// Help text.
    pub description: String,
    /// 0 is always shown, greater only with `-o wide`.
    pub priority: i32,
    /// JSONPath (kubectl style, e.g. `.status.conditions[?(@.type=="Ready")].status`).
    pub json_path: String,
}
