//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`).

use serde_json::{Value, json};

use super::request::Query;
use crate::api::resource::ResourceInfo;

/// `includeObject` of a table request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No `object` per row.
    None,
    /// `PartialObjectMetadata` per row (the default).
    Metadata,
    /// The full object per row.
    Object,
}

/// Reads `includeObject` (default `Metadata`).
pub fn include_object(q: &Query) -> Include {
    match q.get("includeObject") {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    }
}

fn age(ts: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let secs = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn simple_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

/// Builds a `Table` for `objects`.
pub fn table(info: &ResourceInfo, objects: &[Value], include: Include, list_meta: Value) -> Value {
    let now = chrono::Utc::now();
    let mut cols = vec![
        json!({"name":"Name","type":"string","format":"name","description":"Name must be unique within a namespace.","priority":0}),
    ];
    for c in &info.printer_columns {
        cols.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}));
    }
    if info.printer_columns.is_empty() {
        cols.push(json!({"name":"Age","type":"string","format":"","description":"CreationTimestamp","priority":0}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            for c in &info.printer_columns {
                let v = simple_path(o, &c.json_path).cloned().unwrap_or(Value::Null);
                cells.push(match (c.type_.as_str(), &v) {
                    ("date", Value::String(s)) => json!(age(s, now)),
                    _ => v,
                });
            }
            if info.printer_columns.is_empty() {
                cells.push(json!(age(o["metadata"]["creationTimestamp"].as_str().unwrap_or(""), now)));
            }
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata": o["metadata"]})
                }
                Include::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    json!({"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata": list_meta,
        "columnDefinitions": cols, "rows": rows})
}
