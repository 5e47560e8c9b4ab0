//! CustomResourceDefinitions: the resources a CRD serves and the status a real server sets.

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use super::resource::{PrinterColumn, ResourceInfo, ScaleSubresource};

/// Verbs a CRD's resources keep while the CRD is terminating.
pub const TERMINATING_VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "watch"];

/// One [`ResourceInfo`] per served version of `crd` (an `apiextensions.k8s.io/v1`
/// CustomResourceDefinition as JSON), in the order of `spec.versions`.
///
/// Singular defaults to the lowercase kind. A terminating CRD (with `deletionTimestamp`)
/// serves only [`TERMINATING_VERBS`]. Whether the CRD is established is the caller's concern
/// (see [`is_established`]).
pub fn resources_from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = str_of(&spec["group"]);
    let kind = str_of(&names["kind"]);
    let plural = str_of(&names["plural"]);
    let singular = match names["singular"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => kind.to_lowercase(),
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let terminating = crd["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|s| !s.is_empty());
    let verbs: Vec<String> = if terminating {
        TERMINATING_VERBS.iter().map(|s| (*s).to_string()).collect()
    } else {
        super::resource::ALL_VERBS
            .iter()
            .map(|s| (*s).to_string())
            .collect()
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .map(|v| {
            let subresources = &v["subresources"];
            ResourceInfo {
                group: group.clone(),
                version: str_of(&v["name"]),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: string_list(&names["shortNames"]),
                categories: string_list(&names["categories"]),
                verbs: verbs.clone(),
                status_subresource: subresources["status"].is_object(),
                scale: scale_of(&subresources["scale"]),
                printer_columns: columns_of(&v["additionalPrinterColumns"]),
                schema: v["schema"]["openAPIV3Schema"]
                    .is_object()
                    .then(|| v["schema"]["openAPIV3Schema"].clone()),
                builtin: false,
                has_generation: true,
            }
        })
        .collect()
}

/// True when `crd.status` has `Established=True` (only then are its resources served).
pub fn is_established(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

/// The `status` a real (single) kube-apiserver gives `crd` once its controllers ran:
/// `NamesAccepted=True` (`NoConflicts`), `Established=True` (`InitialNamesAccepted`), plus
/// `Terminating=True` while it is being deleted; `acceptedNames` from `spec.names` with the
/// defaults filled in; `storedVersions` = the previous ones plus the current storage version.
///
/// Conditions whose status did not change keep their `lastTransitionTime`, so recomputing
/// the status of an unchanged CRD yields an identical value (no spurious writes). Name
/// conflicts with other CRDs are not detected here.
pub fn crd_status(crd: &Value) -> Value {
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let old = &crd["status"];
    let names = &crd["spec"]["names"];
    let kind = str_of(&names["kind"]);

    let mut accepted = serde_json::Map::new();
    let list_kind = match names["listKind"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => format!("{kind}List"),
    };
    let singular = match names["singular"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => kind.to_lowercase(),
    };
    accepted.insert("plural".into(), json!(str_of(&names["plural"])));
    accepted.insert("singular".into(), json!(singular));
    for key in ["shortNames", "categories"] {
        if names[key].as_array().is_some_and(|a| !a.is_empty()) {
            accepted.insert(key.into(), names[key].clone());
        }
    }
    accepted.insert("kind".into(), json!(kind));
    accepted.insert("listKind".into(), json!(list_kind));

    let mut conditions = vec![
        condition(
            old,
            "NamesAccepted",
            "NoConflicts",
            "no conflicts found",
            &now,
        ),
        condition(
            old,
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            &now,
        ),
    ];
    if crd["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        conditions.push(condition(
            old,
            "Terminating",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            &now,
        ));
    }

    let mut stored: Vec<Value> = old["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = crd["spec"]["versions"].as_array().and_then(|vs| {
        vs.iter()
            .find(|v| v["storage"].as_bool() == Some(true))
            .and_then(|v| v["name"].as_str())
    }) && !stored.iter().any(|s| s == storage)
    {
        stored.push(json!(storage));
    }

    json!({
        "conditions": conditions,
        "acceptedNames": Value::Object(accepted),
        "storedVersions": stored,
    })
}

/// A `True` condition of `type_`, keeping the old `lastTransitionTime` if it already was `True`.
fn condition(old_status: &Value, type_: &str, reason: &str, message: &str, now: &str) -> Value {
    let previous = old_status["conditions"].as_array().and_then(|cs| {
        cs.iter()
            .find(|c| c["type"] == type_ && c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str())
    });
    json!({
        "type": type_,
        "status": "True",
        "lastTransitionTime": previous.unwrap_or(now),
        "reason": reason,
        "message": message,
    })
}

fn scale_of(v: &Value) -> Option<ScaleSubresource> {
    if !v.is_object() {
        return None;
    }
    Some(ScaleSubresource {
        spec_replicas_path: str_of(&v["specReplicasPath"]),
        status_replicas_path: str_of(&v["statusReplicasPath"]),
        label_selector_path: v["labelSelectorPath"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    })
}

fn columns_of(v: &Value) -> Vec<PrinterColumn> {
    v.as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| {
                    let json_path = str_of(&c["jsonPath"]);
                    let description = match c["description"].as_str() {
                        Some(d) if !d.is_empty() => d.to_string(),
                        _ => format!(
                            "Custom resource definition column (in JSONPath format): {json_path}"
                        ),
                    };
                    PrinterColumn {
                        name: str_of(&c["name"]),
                        type_: str_of(&c["type"]),
                        format: str_of(&c["format"]),
                        description,
                        priority: c["priority"]
                            .as_i64()
                            .and_then(|p| i32::try_from(p).ok())
                            .unwrap_or(0),
                        json_path,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                     "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1, "description": "the size"}
                     ]},
                    {"name": "v1beta1", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v2", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn one_resource_per_served_version() {
        let rs = resources_from_crd(&widget_crd());
        let versions: Vec<&str> = rs.iter().map(|r| r.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v2"]);
        let v1 = &rs[0];
        assert_eq!(v1.group, "example.com");
        assert_eq!(v1.kind, "Widget");
        assert_eq!(v1.singular, "widget");
        assert!(v1.namespaced);
        assert!(!v1.builtin);
        assert!(v1.has_generation);
        assert_eq!(v1.short_names, ["wd"]);
        assert_eq!(v1.categories, ["all"]);
        assert!(v1.status_subresource);
        assert_eq!(
            v1.scale
                .as_ref()
                .and_then(|s| s.label_selector_path.clone()),
            Some(".status.selector".to_string())
        );
        assert!(v1.schema.is_some());
        assert!(!rs[1].status_subresource);
        assert!(rs[1].scale.is_none());
    }

    #[test]
    fn printer_columns_get_default_descriptions_and_priorities() {
        let rs = resources_from_crd(&widget_crd());
        let cols = &rs[0].printer_columns;
        assert_eq!(cols.len(), 2);
        assert_eq!(
            cols[0].description,
            "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"Ready\")].status"
        );
        assert_eq!(cols[0].priority, 0);
        assert_eq!(cols[1].description, "the size");
        assert_eq!(cols[1].priority, 1);
    }

    #[test]
    fn cluster_scope_and_terminating_verbs() {
        let mut crd = widget_crd();
        crd["spec"]["scope"] = json!("Cluster");
        crd["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let rs = resources_from_crd(&crd);
        assert!(!rs[0].namespaced);
        assert_eq!(rs[0].verbs, TERMINATING_VERBS);
    }

    #[test]
    fn crd_status_marks_names_accepted_and_established() {
        let crd = widget_crd();
        assert!(!is_established(&crd));
        let status = crd_status(&crd);
        let conds = status["conditions"].as_array().cloned().unwrap_or_default();
        let summary: Vec<(String, String, String)> = conds
            .iter()
            .map(|c| {
                (
                    str_of(&c["type"]),
                    str_of(&c["status"]),
                    str_of(&c["reason"]),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("NamesAccepted".into(), "True".into(), "NoConflicts".into()),
                (
                    "Established".into(),
                    "True".into(),
                    "InitialNamesAccepted".into()
                ),
            ]
        );
        assert!(conds.iter().all(|c| c["lastTransitionTime"].is_string()));
        assert_eq!(
            status["acceptedNames"],
            json!({"plural": "widgets", "singular": "widget", "shortNames": ["wd"],
                   "categories": ["all"], "kind": "Widget", "listKind": "WidgetList"})
        );
        assert_eq!(status["storedVersions"], json!(["v1"]));
        let mut established = crd.clone();
        established["status"] = status;
        assert!(is_established(&established));
    }

    #[test]
    fn crd_status_is_stable_and_keeps_stored_versions() {
        let mut crd = widget_crd();
        crd["status"] = json!({
            "storedVersions": ["v1beta1"],
            "conditions": [
                {"type": "Established", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"},
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
            ]
        });
        let status = crd_status(&crd);
        assert_eq!(status["storedVersions"], json!(["v1beta1", "v1"]));
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        crd["status"] = status.clone();
        assert_eq!(crd_status(&crd), status);
    }

    #[test]
    fn terminating_crd_gets_terminating_condition() {
        let mut crd = widget_crd();
        crd["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let status = crd_status(&crd);
        assert_eq!(status["conditions"][2]["type"], "Terminating");
    }
}
