//! Rendering a HelmChart feed for one cluster: the overrides that apply to it produce the Helm
//! values the release is installed with, and (with `overrideChart: true`) a patched HelmChart.
//!
//! As Clusternet: values start empty (the chart's own `values.yaml` applies underneath, in the
//! child); a `Helm` override deep-merges its value over them, later overrides winning, a `null`
//! removing a key (Helm's coalescing, which for maps is an RFC 7386 merge patch); `JSONPatch` and
//! `MergePatch` act on the values document too. `overrideChart: true` merge-patches the HelmChart
//! object instead, for example its `version`.
//!
//! Deliberate difference: an override that changes the chart's `spec.chart` or
//! `spec.targetNamespace` is an error naming it (Clusternet silently drops those two fields from
//! the patch), since either would install a different release than the HelmChart describes;
//! so is one that changes `spec.repo` or `spec.chartPullSecret`, which together decide whose
//! credentials are sent where (an override could otherwise hand the chart's pull Secret to a
//! repository of its author's).

use atoll_crds::apps::{ChartReference, OverrideConfig, OverrideType};
use serde_json::{Map, Value};

use super::{OverrideSet, RenderBudget, apply_override, strip_server_fields};
use crate::error::Error;

/// One chart rendered for one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedChart {
    /// The HelmChart object after chart-level overrides, without server-populated fields.
    pub chart: Value,
    /// The Helm values after value overrides (a map; empty for the chart's defaults).
    pub values: Value,
}

impl RenderedChart {
    /// The HelmChart this was rendered from.
    pub fn reference(&self) -> ChartReference {
        let text = |pointer: &str| {
            self.chart
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        ChartReference {
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
        }
    }
}

/// Renders the HelmChart object `chart` through `overrides` (in application order, see
/// [`super::select_overrides`]).
pub fn render_chart(chart: &Value, overrides: &[OverrideSet]) -> Result<RenderedChart, Error> {
    let mut chart_doc = chart.clone();
    strip_server_fields(&mut chart_doc);
    let mut values = Value::Object(Map::new());
    let mut budget = RenderBudget::default();
    for set in overrides {
        for (index, config) in set.overrides.iter().enumerate() {
            let origin = set.origin(index);
            let as_patch = as_patch(config);
            if config.override_chart == Some(true) {
                let before = chart_doc.clone();
                apply_override(&mut chart_doc, &as_patch, &origin, &mut budget)?;
                if fixed_fields(&chart_doc) != fixed_fields(&before) {
                    return Err(Error::OverrideChartIdentity { origin });
                }
            } else {
                apply_override(&mut values, &as_patch, &origin, &mut budget)?;
            }
        }
    }
    if !values.is_object() {
        return Err(Error::ParseOverrideValue {
            origin: "the Helm values".to_owned(),
            reason: "the overrides left the values a non-map; Helm values must be a map".to_owned(),
        });
    }
    Ok(RenderedChart {
        chart: chart_doc,
        values,
    })
}

/// The override as the patch it is on a chart: `Helm` values are merged as a merge patch.
fn as_patch(config: &OverrideConfig) -> OverrideConfig {
    let mut patch = config.clone();
    patch.override_chart = None;
    if patch.type_ == OverrideType::Helm {
        patch.type_ = OverrideType::MergePatch;
    }
    patch
}

/// The fields of a HelmChart no override may change: which chart from which repository, with
/// which credentials, where it is installed, and the HelmChart's own name and namespace (the
/// release's name; the namespace whose Secrets its `chartPullSecret` may name).
fn fixed_fields(chart: &Value) -> [Option<&Value>; 6] {
    [
        "/spec/chart",
        "/spec/repo",
        "/spec/chartPullSecret",
        "/spec/targetNamespace",
        "/metadata/name",
        "/metadata/namespace",
    ]
    .map(|pointer| chart.pointer(pointer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overrides::OverrideKind;
    use serde_json::json;

    fn set(name: &str, priority: i32, overrides: Vec<OverrideConfig>) -> OverrideSet {
        OverrideSet {
            kind: OverrideKind::Localization,
            namespace: Some("clusternet-abc".into()),
            name: name.into(),
            priority,
            created: None,
            overrides,
        }
    }

    fn config(type_: OverrideType, value: &str, chart: bool) -> OverrideConfig {
        OverrideConfig {
            name: None,
            value: value.into(),
            type_,
            override_chart: chart.then_some(true),
            field_path: None,
            field_format: None,
        }
    }

    fn chart() -> Value {
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "apps", "uid": "u1", "resourceVersion": "7"},
            "spec": {"repo": "https://charts.example.com", "chart": "mysql", "version": "9.1.0", "targetNamespace": "db"},
            "status": {"phase": "Found"},
        })
    }

    #[test]
    fn without_overrides_the_values_are_empty_and_the_chart_loses_server_fields() {
        let rendered = render_chart(&chart(), &[]).unwrap();
        assert_eq!(rendered.values, json!({}));
        assert!(rendered.chart.get("status").is_none());
        assert!(rendered.chart.pointer("/metadata/uid").is_none());
        assert_eq!(rendered.chart["spec"]["version"], "9.1.0");
    }

    #[test]
    fn helm_values_deep_merge_in_order_and_null_removes_a_key() {
        let sets = vec![
            set(
                "first",
                100,
                vec![config(
                    OverrideType::Helm,
                    "primary: {persistence: {enabled: true, size: 8Gi}}\nauth: {user: app}",
                    false,
                )],
            ),
            set(
                "second",
                500,
                vec![config(
                    OverrideType::Helm,
                    r#"{"primary": {"persistence": {"size": "20Gi"}}, "auth": null}"#,
                    false,
                )],
            ),
        ];
        let rendered = render_chart(&chart(), &sets).unwrap();
        assert_eq!(
            rendered.values,
            json!({"primary": {"persistence": {"enabled": true, "size": "20Gi"}}})
        );
    }

    #[test]
    fn override_chart_patches_the_chart_but_not_its_identity() {
        let bump = set(
            "bump",
            500,
            vec![config(OverrideType::Helm, "spec: {version: 9.2.0}", true)],
        );
        let rendered = render_chart(&chart(), std::slice::from_ref(&bump)).unwrap();
        assert_eq!(rendered.chart["spec"]["version"], "9.2.0");
        assert_eq!(rendered.values, json!({}));

        let move_it = set(
            "move",
            500,
            vec![config(
                OverrideType::Helm,
                "spec: {targetNamespace: other}",
                true,
            )],
        );
        let err = render_chart(&chart(), &[move_it]).unwrap_err();
        assert!(err.to_string().contains("spec.targetNamespace"), "{err}");

        // The namespace decides whose Secrets the chart's chartPullSecret may name.
        let rehome = set(
            "rehome",
            500,
            vec![config(
                OverrideType::Helm,
                "metadata: {namespace: victim}",
                true,
            )],
        );
        let err = render_chart(&chart(), &[rehome]).unwrap_err();
        assert!(err.to_string().contains("metadata.namespace"), "{err}");

        // The repository and its credentials go together: neither is an override's to change.
        for patch in [
            "spec: {repo: https://charts.attacker.example}",
            "spec: {chartPullSecret: {name: other-creds}}",
        ] {
            let redirect = set(
                "redirect",
                500,
                vec![config(OverrideType::Helm, patch, true)],
            );
            let err = render_chart(&chart(), &[redirect]).unwrap_err();
            assert!(
                err.to_string().contains("spec.repo, spec.chartPullSecret"),
                "{patch}: {err}"
            );
        }
    }

    #[test]
    fn json_and_merge_patches_act_on_the_values() {
        let sets = vec![set(
            "patches",
            500,
            vec![
                config(OverrideType::MergePatch, "replicaCount: 2", false),
                config(
                    OverrideType::JSONPatch,
                    r#"[{"op": "replace", "path": "/replicaCount", "value": 3}]"#,
                    false,
                ),
            ],
        )];
        let rendered = render_chart(&chart(), &sets).unwrap();
        assert_eq!(rendered.values, json!({"replicaCount": 3}));
    }
}
