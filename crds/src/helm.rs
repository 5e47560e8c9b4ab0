//! `apps.clusternet.io/v1alpha1` Helm kinds, as Clusternet defines them: `HelmChart`, a chart
//! to distribute (a feed of a Subscription, installed in each selected child as a release named
//! after it), and `HelmRelease`, what one child cluster installs of one chart, with its values
//! after overrides.

// kube's `printcolumn(...)` attributes repeat `type_ = "string"`; that is not a mistake.
#![allow(clippy::duplicated_attributes)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `kind` of a HelmChart.
pub const HELM_CHART_KIND: &str = "HelmChart";

/// The chart repository URLs Clusternet accepts: HTTP(S) chart repositories and OCI registries.
const REPO_PATTERN: &str =
    r"^(http|https|oci)?://(?:[a-zA-Z]|[0-9]|[$-_@.&+]|[!*\(\),]|(?:%[0-9a-fA-F][0-9a-fA-F]))+$";

/// How to fetch a chart and how Helm installs, upgrades and uninstalls it; shared by HelmChart
/// and HelmRelease.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmOptions {
    /// The chart repository: an HTTP(S) Helm repository (for example
    /// `https://charts.bitnami.com/bitnami`) or an OCI registry (for example
    /// `oci://localhost:5000/helm-charts`).
    #[schemars(regex(pattern = REPO_PATTERN))]
    pub repo: String,

    /// The Secret holding the repository's credentials (data keys `username` and `password`),
    /// in the HelmChart's own namespace. The hub reads it when it delivers the chart (grant
    /// ServiceAccount clusternet-system/atoll-hub `get` on it) and sends the credentials to the
    /// agents that install the chart, never in the Description.
    #[serde(default, skip_serializing_if = "ChartPullSecret::is_empty")]
    #[schemars(transform = crate::schema::no_default)]
    pub chart_pull_secret: ChartPullSecret,

    /// Talk plain HTTP to an OCI registry that does not serve HTTPS (opt-in).
    #[serde(default, rename = "plainHTTP", skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<bool>,

    /// The name of the chart in the repository.
    pub chart: String,

    /// The chart version to deploy; the latest version when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// Create the target namespace when installing the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub create_namespace: Option<bool>,

    /// Timeout of an install, upgrade, rollback or uninstall, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 300))]
    pub timeout_seconds: Option<i32>,

    /// Wait until the release's resources are ready after an install, upgrade or uninstall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,

    /// With `wait`, also wait until the release's Jobs have completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_job: Option<bool>,

    /// Re-use the release name when it belongs to a deleted release still in the history
    /// (unsafe in production).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<bool>,

    /// On install: uninstall the release if the install fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic: Option<bool>,

    /// On upgrade: roll the release back if the upgrade fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_atomic: Option<bool>,

    /// Do not install the chart's CRDs.
    #[serde(default, rename = "skipCRDs", skip_serializing_if = "Option::is_none")]
    pub skip_crds: Option<bool>,

    /// Replace the CRDs of the chart and its subcharts before an install or upgrade (ignored
    /// with `skipCRDs`).
    #[serde(
        default,
        rename = "replaceCRDs",
        skip_serializing_if = "Option::is_none"
    )]
    pub replace_crds: Option<bool>,

    /// Do not run the chart's hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_hooks: Option<bool>,

    /// Upgrade even where Helm would refuse (replaces objects that cannot be patched); use with
    /// caution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// A reference to the Secret with a chart repository's credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartPullSecret {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(transform = crate::schema::no_default)]
    pub name: String,
    /// Namespace of the Secret; empty or the HelmChart's own (another namespace's Secret is
    /// refused).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(transform = crate::schema::no_default)]
    pub namespace: String,
}

impl ChartPullSecret {
    /// Whether no Secret is named.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty() && self.namespace.is_empty()
    }
}

/// HelmChartSpec is a chart to distribute: where it comes from, how Helm handles it, and the
/// namespace of each child cluster it is installed in.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "HelmChart",
    namespaced,
    status = "HelmChartStatus",
    shortname = "chart",
    shortname = "charts",
    category = "clusternet",
    derive = "PartialEq",
    doc = "HelmChart is a Helm chart to distribute as a feed of Subscriptions. Each selected child cluster installs it as a Helm release named after the HelmChart.",
    printcolumn(
        name = "CHART",
        type_ = "string",
        json_path = ".spec.chart",
        description = "The helm chart name"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        description = "The helm chart version"
    ),
    printcolumn(
        name = "REPO",
        type_ = "string",
        json_path = ".spec.repo",
        description = "The helm repo url"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "The helm chart status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HelmChartSpec {
    /// The chart and how Helm handles it.
    #[serde(flatten)]
    pub options: HelmOptions,

    /// The namespace of each child cluster the release is installed in.
    pub target_namespace: String,
}

/// Whether the chart was found in its repository at the requested version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmChartStatus {
    /// `Found` or `NotFound`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HelmChartPhase>,

    /// Why the chart is in this phase (for `NotFound`: what the repository answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Whether a HelmChart's chart exists in its repository.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HelmChartPhase {
    /// The repository has the chart at the requested version.
    Found,
    /// The repository does not have it, or could not be read.
    NotFound,
}

/// HelmReleaseSpec is what one child cluster installs of one chart: the chart, Helm's options,
/// the release name and namespace, and the values after overrides.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "HelmRelease",
    namespaced,
    status = "HelmReleaseStatus",
    shortname = "hr",
    category = "clusternet",
    derive = "PartialEq",
    doc = "HelmRelease is what one child cluster installs of one HelmChart, in the cluster's dedicated namespace, with the values after overrides.",
    printcolumn(
        name = "CHART",
        type_ = "string",
        json_path = ".spec.chart",
        description = "The helm chart name"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        description = "The helm chart version"
    ),
    printcolumn(
        name = "REPO",
        type_ = "string",
        json_path = ".spec.repo",
        description = "The helm repo url"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "The helm release status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseSpec {
    /// The chart and how Helm handles it.
    #[serde(flatten)]
    pub options: HelmOptions,

    /// The release name in the child cluster; the HelmChart's name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,

    /// The namespace of the child cluster the release is installed in.
    pub target_namespace: String,

    /// The values of the release after overrides, as JSON (base64 on the wire, as Clusternet
    /// stores them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::bytes")]
    pub overrides: Option<k8s_openapi::ByteString>,
}

/// What the child cluster's Helm reports of a release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseStatus {
    /// When the release was first deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<String>,

    /// When the release was last deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<String>,

    /// Helm's one-line log entry about the release's last action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,

    /// The release's state as Helm names it: `unknown`, `deployed`, `uninstalled`,
    /// `superseded`, `failed`, `uninstalling`, `pending-install`, `pending-upgrade` or
    /// `pending-rollback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,

    /// The chart's rendered `NOTES.txt`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,

    /// The release's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HelmChart as Clusternet's examples write it deserialises, and serialises back to the
    /// same fields.
    #[test]
    fn a_clusternet_helmchart_round_trips() {
        let yaml = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata:
  name: mysql
  namespace: default
spec:
  repo: https://charts.bitnami.com/bitnami
  chart: mysql
  version: 8.6.2
  targetNamespace: abc
  createNamespace: true
  timeoutSeconds: 600
  plainHTTP: false
  skipCRDs: true
  chartPullSecret:
    name: creds
    namespace: default
"#;
        let chart: HelmChart = serde_yaml::from_str(yaml).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(chart.spec.options.chart, "mysql");
        assert_eq!(chart.spec.options.version.as_deref(), Some("8.6.2"));
        assert_eq!(chart.spec.options.skip_crds, Some(true));
        assert_eq!(chart.spec.options.plain_http, Some(false));
        assert_eq!(chart.spec.options.chart_pull_secret.name, "creds");
        assert_eq!(chart.spec.target_namespace, "abc");
        let back = serde_json::to_value(&chart).unwrap_or_else(|e| unreachable!("{e}"));
        let original: serde_json::Value =
            serde_yaml::from_str(yaml).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(back["spec"], original["spec"]);
    }
}
