//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as `kubectl get` asks.
//!
//! Column rules: built-ins use their complete `printer_columns` (see
//! [`crate::api::builtin`]) or, when they have none, the default convertor (`Name`,
//! `Created At`); CRD resources get `Name` followed by their `additionalPrinterColumns`, or
//! `Name`, `Age` when they declare none. Plain column paths are kubectl-style JSONPaths
//! evaluated by [`jsonpath()`]; paths starting with `#` are the computed cells documented in
//! [`crate::api::builtin`].
//!
//! The module assembles the table and types the plain cells; the JSONPath evaluator
//! (`jsonpath.rs`) and the per-kind computed cells (`printers.rs`) live in their own files, each
//! with its tests.

mod jsonpath;
mod printers;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::builtin::{AGE_DESCRIPTION, created_at_col, name_col};
use super::resource::{PrinterColumn, ResourceInfo};
use printers::computed;

pub use jsonpath::jsonpath;
pub use printers::format_selector;

/// What each row's `object` holds (`?includeObject=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// No `object`.
    None,
    /// A `meta.k8s.io/v1` `PartialObjectMetadata` (the default).
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter; anything but `None`/`Object` is `Metadata`.
    pub fn parse(s: Option<&str>) -> IncludeObject {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a `meta.k8s.io` Table (v1 or v1beta1).
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|entry| {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let mut as_table = false;
        let mut group = false;
        for p in parts {
            match p.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                Some(("as", "Table")) => as_table = true,
                Some(("g", "meta.k8s.io")) => group = true,
                _ => {}
            }
        }
        media == "application/json" && as_table && group
    })
}

/// The columns of `resource`'s table, in order.
pub fn columns(resource: &ResourceInfo) -> Vec<PrinterColumn> {
    if resource.builtin {
        if resource.printer_columns.is_empty() {
            vec![name_col(), created_at_col()]
        } else {
            resource.printer_columns.clone()
        }
    } else if resource.printer_columns.is_empty() {
        vec![
            name_col(),
            PrinterColumn {
                name: "Age".to_string(),
                type_: "date".to_string(),
                format: String::new(),
                description: AGE_DESCRIPTION.to_string(),
                priority: 0,
                json_path: ".metadata.creationTimestamp".to_string(),
            },
        ]
    } else {
        let mut cols = vec![name_col()];
        cols.extend(resource.printer_columns.iter().cloned());
        cols
    }
}

/// A `meta.k8s.io/v1` Table of `objects` (already in `resource`'s version). `list_meta` becomes
/// the table's `metadata` (`resourceVersion`, `continue`, ...). `now` is the reference for
/// relative ages.
pub fn to_table(
    resource: &ResourceInfo,
    objects: &[Value],
    include_object: IncludeObject,
    now: DateTime<Utc>,
    list_meta: Value,
) -> Value {
    let cols = columns(resource);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.type_,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(resource, c, obj, now)).collect();
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            if let Some(conditions) = row_conditions(resource, obj) {
                row.insert("conditions".into(), conditions);
            }
            match include_object {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert(
                        "object".into(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        }),
                    );
                }
                IncludeObject::Object => {
                    row.insert("object".into(), obj.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    let metadata = if list_meta.is_object() {
        list_meta
    } else {
        json!({})
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// Pods that finished carry a `Completed` row condition, as the real pod printer sets.
fn row_conditions(resource: &ResourceInfo, obj: &Value) -> Option<Value> {
    if !(resource.builtin && resource.group.is_empty() && resource.kind == "Pod") {
        return None;
    }
    match obj["status"]["phase"].as_str() {
        Some("Succeeded") => Some(json!([{"type": "Completed", "status": "True",
            "reason": "Succeeded", "message": "The pod has completed successfully."}])),
        Some("Failed") => Some(json!([{"type": "Completed", "status": "True",
            "reason": "Failed", "message": "The pod failed."}])),
        _ => None,
    }
}

fn cell(resource: &ResourceInfo, column: &PrinterColumn, obj: &Value, now: DateTime<Utc>) -> Value {
    if let Some(expr) = column.json_path.strip_prefix('#') {
        return computed(expr, obj, now);
    }
    let Some(value) = jsonpath(&column.json_path, obj).into_iter().next() else {
        return if resource.builtin && column.type_ == "string" {
            json!("")
        } else {
            Value::Null
        };
    };
    match column.type_.as_str() {
        "string" => match value {
            Value::Null => Value::Null,
            v => json!(print_value(&v)),
        },
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, |i| json!(i)),
            _ => Value::Null,
        },
        "number" => match value {
            Value::Number(n) => n.as_f64().map_or(Value::Null, |f| json!(f)),
            _ => Value::Null,
        },
        "boolean" => match value {
            Value::Bool(b) => json!(b),
            _ => Value::Null,
        },
        "date" => match value.as_str() {
            Some(s) if resource.builtin => json!(s),
            Some(s) => match parse_time(s) {
                Some(t) => json!(human_duration(now - t)),
                None => json!("<invalid>"),
            },
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

/// Prints a JSONPath result the way kubectl's JSONPath printer does: strings raw, everything
/// else as compact JSON.
fn print_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A relative duration as apimachinery's `duration.HumanDuration` prints it (`45s`, `5m`,
/// `3h`, `10d`, `2y`).
pub fn human_duration(d: chrono::Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(v: Option<&Value>, now: DateTime<Utc>) -> Option<String> {
    v.and_then(Value::as_str)
        .and_then(parse_time)
        .map(|t| human_duration(now - t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::builtin::builtin_resources;
    use crate::api::crd::resources_from_crd;

    pub(super) fn now() -> DateTime<Utc> {
        parse_time("2026-01-10T12:00:00Z").unwrap_or_default()
    }

    pub(super) fn builtin(group: &str, plural: &str) -> ResourceInfo {
        builtin_resources()
            .into_iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap_or_else(|| panic!("{plural}"))
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (5 * 60 + 3, "5m3s"),
            (10 * 60 + 3, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600 + 5 * 60, "8h"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(chrono::Duration::seconds(secs)),
                want,
                "{secs}"
            );
        }
    }

    #[test]
    fn include_object_and_accept_parsing() {
        assert_eq!(IncludeObject::parse(None), IncludeObject::Metadata);
        assert_eq!(IncludeObject::parse(Some("None")), IncludeObject::None);
        assert_eq!(IncludeObject::parse(Some("Object")), IncludeObject::Object);
        assert_eq!(IncludeObject::parse(Some("bogus")), IncludeObject::Metadata);
        let cases = [
            (
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
                true,
            ),
            ("application/json", false),
            (
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                false,
            ),
            ("application/json; as=Table; g=meta.k8s.io; v=v1", true),
        ];
        for (accept, want) in cases {
            assert_eq!(wants_table(accept), want, "{accept}");
        }
    }

    #[test]
    fn deployment_table_matches_the_real_printer() {
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2026-01-10T11:55:00Z", "uid": "u1"},
            "spec": {"replicas": 3,
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "side", "image": "busybox"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        let table = to_table(
            &builtin("apps", "deployments"),
            std::slice::from_ref(&deploy),
            IncludeObject::Metadata,
            now(),
            json!({"resourceVersion": "4711"}),
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"], json!({"resourceVersion": "4711"}));
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "web",
                "2/3",
                3,
                2,
                "5m",
                "nginx,side",
                "nginx:1.27,busybox",
                "app=web"
            ])
        );
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": deploy["metadata"]})
        );
        let fresh = json!({"metadata": {"name": "new"}});
        let table = to_table(
            &builtin("apps", "deployments"),
            &[fresh],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "new",
                "0/1",
                0,
                0,
                "<unknown>",
                "<none>",
                "<none>",
                "<none>"
            ])
        );
        assert!(table["rows"][0].get("object").is_none());
    }

    fn widget_resource(columns: Value) -> ResourceInfo {
        let crd = json!({
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "additionalPrinterColumns": columns}]}
        });
        resources_from_crd(&crd)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no version"))
    }

    #[test]
    fn crd_table_evaluates_filters_types_and_dates() {
        let r = widget_resource(json!([
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
            {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
            {"name": "Seen", "type": "date", "jsonPath": ".status.seen"},
            {"name": "Feeds", "type": "string", "jsonPath": ".spec.feeds", "priority": 1}
        ]));
        let w = json!({
            "metadata": {"name": "w1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"size": 3, "ratio": 1.5, "on": true, "feeds": [{"a": 1}]},
            "status": {"seen": "2026-01-10T09:00:00Z",
                       "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}
        });
        let empty = json!({"metadata": {"name": "w2"}});
        let table = to_table(
            &r,
            &[w.clone(), empty],
            IncludeObject::Object,
            now(),
            json!({}),
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            names,
            ["Name", "Ready", "Size", "Ratio", "On", "Seen", "Feeds"]
        );
        assert_eq!(table["columnDefinitions"][6]["priority"], 1);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["w1", "True", 3, 1.5, true, "3h", "[{\"a\":1}]"])
        );
        assert_eq!(
            table["rows"][1]["cells"],
            json!(["w2", null, null, null, null, null, null])
        );
        assert_eq!(table["rows"][0]["object"], w);
    }

    #[test]
    fn crd_without_columns_gets_name_and_age() {
        let r = widget_resource(Value::Null);
        let w = json!({"metadata": {"name": "w1", "creationTimestamp": "2026-01-10T11:00:00Z"}});
        let table = to_table(&r, &[w], IncludeObject::Metadata, now(), json!({}));
        assert_eq!(
            table["columnDefinitions"][1],
            json!({"name": "Age", "type": "date", "format": "", "description": AGE_DESCRIPTION, "priority": 0})
        );
        assert_eq!(table["rows"][0]["cells"], json!(["w1", "60m"]));
    }

    #[test]
    fn builtin_without_printer_uses_created_at() {
        let r = builtin("rbac.authorization.k8s.io", "roles");
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2026-01-10T11:00:00Z"}});
        let table = to_table(&r, &[role], IncludeObject::Metadata, now(), json!({}));
        assert_eq!(table["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["r", "2026-01-10T11:00:00Z"])
        );
        let r = builtin("apiextensions.k8s.io", "customresourcedefinitions");
        let t = to_table(
            &r,
            &[json!({"metadata": {"name": "x"}})],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(t["rows"][0]["cells"], json!(["x", null]));
    }
}
