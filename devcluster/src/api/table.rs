//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as `kubectl get` asks.
//!
//! Column rules: built-ins use their complete `printer_columns` (see
//! [`crate::api::builtin`]) or, when they have none, the default convertor (`Name`,
//! `Created At`); CRD resources get `Name` followed by their `additionalPrinterColumns`, or
//! `Name`, `Age` when they declare none. Plain column paths are kubectl-style JSONPaths
//! evaluated by [`jsonpath`]; paths starting with `#` are the computed cells documented in
//! [`crate::api::builtin`].

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::builtin::{AGE_DESCRIPTION, created_at_col, name_col};
use super::resource::{PrinterColumn, ResourceInfo};

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

// ---------------------------------------------------------------------------------------------
// Minimal JSONPath
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Field(String),
    Index(i64),
    Wildcard,
    Filter {
        path: Vec<Segment>,
        op: Option<(String, Value)>,
    },
}

/// Evaluates a kubectl-style JSONPath (`.a.b`, `{.a.b}`, `['a.b']`, `[0]`, `[-1]`, `[*]`,
/// `.*`, `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`, `>`, `>=` or bare existence) and
/// returns every match, in order. Missing keys and unparsable paths yield no matches.
pub fn jsonpath(path: &str, root: &Value) -> Vec<Value> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    let p = p.strip_prefix('$').unwrap_or(p);
    let Some(segments) = parse_segments(p) else {
        return Vec::new();
    };
    apply(&segments, vec![root.clone()])
}

fn apply(segments: &[Segment], mut current: Vec<Value>) -> Vec<Value> {
    for seg in segments {
        let mut next = Vec::new();
        for v in current {
            match seg {
                Segment::Field(name) => {
                    if let Some(x) = v.get(name.as_str()) {
                        next.push(x.clone());
                    }
                }
                Segment::Index(i) => {
                    if let Value::Array(a) = &v {
                        let len = a.len() as i64;
                        let idx = if *i < 0 { len + i } else { *i };
                        if (0..len).contains(&idx)
                            && let Some(x) = usize::try_from(idx).ok().and_then(|i| a.get(i))
                        {
                            next.push(x.clone());
                        }
                    }
                }
                Segment::Wildcard => match v {
                    Value::Array(a) => next.extend(a),
                    Value::Object(m) => next.extend(m.into_iter().map(|(_, x)| x)),
                    _ => {}
                },
                Segment::Filter { path, op } => {
                    let items = match v {
                        Value::Array(a) => a,
                        other => vec![other],
                    };
                    for item in items {
                        let found = apply(path, vec![item.clone()]);
                        let keep = match op {
                            None => found.first().is_some_and(|x| !x.is_null()),
                            Some((op, lit)) => found.first().is_some_and(|x| compare(x, op, lit)),
                        };
                        if keep {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

fn compare(left: &Value, op: &str, right: &Value) -> bool {
    if let (Some(a), Some(b)) = (left.as_f64(), right.as_f64()) {
        return match op {
            "==" => a == b,
            "!=" => a != b,
            "<" => a < b,
            "<=" => a <= b,
            ">" => a > b,
            ">=" => a >= b,
            _ => false,
        };
    }
    match op {
        "==" => left == right,
        "!=" => left != right,
        _ => match (left.as_str(), right.as_str()) {
            (Some(a), Some(b)) => match op {
                "<" => a < b,
                "<=" => a <= b,
                ">" => a > b,
                ">=" => a >= b,
                _ => false,
            },
            _ => false,
        },
    }
}

fn parse_segments(p: &str) -> Option<Vec<Segment>> {
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'*') {
                    out.push(Segment::Wildcard);
                    i += 1;
                    continue;
                }
                let name = scan_field(&chars, &mut i);
                if !name.is_empty() {
                    out.push(Segment::Field(name));
                }
            }
            '[' => {
                let end = matching_bracket(&chars, i)?;
                let inner: String = chars[i + 1..end].iter().collect();
                out.extend(parse_bracket(inner.trim())?);
                i = end + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                // A leading bare field name (`spec.replicas`).
                out.push(Segment::Field(scan_field(&chars, &mut i)));
            }
        }
    }
    Some(out)
}

/// The field name starting at `*i`, up to the next unescaped `.` or `[`; a backslash takes the
/// next character literally (`labels.app\.kubernetes\.io/name`), as client-go's parser does.
fn scan_field(chars: &[char], i: &mut usize) -> String {
    let mut name = String::new();
    while let Some(&c) = chars.get(*i) {
        match c {
            '\\' => {
                if let Some(&next) = chars.get(*i + 1) {
                    name.push(next);
                }
                *i += 2;
            }
            '.' | '[' => break,
            c => {
                name.push(c);
                *i += 1;
            }
        }
    }
    name
}

/// Index of the `]` closing the `[` at `open`, skipping quoted strings and nested brackets.
fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (j, c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(*c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Option<Vec<Segment>> {
    if inner == "*" {
        return Some(vec![Segment::Wildcard]);
    }
    if let Some(key) = unquote(inner) {
        // client-go reads `['key']` as the path `.key`: an unescaped `.` in the key separates
        // fields, so a label key with dots needs them escaped (`['app\.kubernetes\.io/name']`),
        // exactly as kube-apiserver evaluates a CRD's printer column.
        return parse_segments(&format!(".{key}"));
    }
    if let Ok(i) = inner.parse::<i64>() {
        return Some(vec![Segment::Index(i)]);
    }
    let expr = inner.strip_prefix('?')?.trim();
    let expr = expr.strip_prefix('(')?.strip_suffix(')')?.trim();
    let ops = ["==", "!=", "<=", ">=", "<", ">"];
    let split = ops
        .iter()
        .filter_map(|op| find_outside_quotes(expr, op).map(|at| (at, *op)))
        .min_by_key(|(at, _)| *at);
    let (left, op) = match split {
        Some((at, op)) => {
            let lit = parse_literal(expr[at + op.len()..].trim())?;
            (expr[..at].trim(), Some((op.to_string(), lit)))
        }
        None => (expr, None),
    };
    let rel = left.strip_prefix('@')?;
    Some(vec![Segment::Filter {
        path: parse_segments(rel)?,
        op,
    }])
}

fn find_outside_quotes(s: &str, needle: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if s[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<String> {
    let q = s.chars().next()?;
    if (q == '"' || q == '\'') && s.len() >= 2 && s.ends_with(q) {
        Some(s[1..s.len() - 1].to_string())
    } else {
        None
    }
}

fn parse_literal(s: &str) -> Option<Value> {
    if let Some(u) = unquote(s) {
        return Some(json!(u));
    }
    serde_json::from_str(s).ok()
}

// ---------------------------------------------------------------------------------------------
// Computed cells (`#function:args`)
// ---------------------------------------------------------------------------------------------

fn first(path: &str, obj: &Value) -> Option<Value> {
    jsonpath(path, obj)
        .into_iter()
        .next()
        .filter(|v| !v.is_null())
}

/// The integer at `path`; `path|N` defaults to `N` (e.g. `.spec.replicas|1`), otherwise 0.
fn int_at(path: &str, obj: &Value) -> i64 {
    let (path, default) = match path.rsplit_once('|') {
        Some((p, d)) => (p, d.trim().parse().unwrap_or(0)),
        None => (path, 0),
    };
    first(path, obj).and_then(|v| v.as_i64()).unwrap_or(default)
}

fn none_if_empty(s: String) -> Value {
    if s.is_empty() {
        json!("<none>")
    } else {
        json!(s)
    }
}

fn computed(expr: &str, obj: &Value, now: DateTime<Utc>) -> Value {
    let (func, arg) = expr.split_once(':').unwrap_or((expr, ""));
    let args: Vec<&str> = arg.split(';').filter(|a| !a.is_empty()).collect();
    let arg0 = args.first().copied().unwrap_or_default();
    match func {
        "age" => json!(age(first(arg0, obj).as_ref(), now).unwrap_or_else(|| "<unknown>".into())),
        "age-or-none" => {
            json!(age(first(arg0, obj).as_ref(), now).unwrap_or_else(|| "<none>".into()))
        }
        "timestamp" => first(arg0, obj).unwrap_or(Value::Null),
        "int0" => json!(int_at(arg0, obj)),
        "ratio" => {
            let b = args.get(1).copied().unwrap_or_default();
            json!(format!("{}/{}", int_at(arg0, obj), int_at(b, obj)))
        }
        "count" => json!(
            args.iter()
                .map(|p| match first(p, obj) {
                    Some(Value::Object(m)) => m.len() as i64,
                    Some(Value::Array(a)) => a.len() as i64,
                    _ => 0,
                })
                .sum::<i64>()
        ),
        "none" => none_if_empty(
            jsonpath(arg0, obj)
                .iter()
                .map(print_value)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(","),
        ),
        "first" => json!(
            args.iter()
                .filter_map(|p| first(p, obj))
                .map(|v| print_value(&v))
                .find(|s| !s.is_empty())
                .unwrap_or_default()
                .trim()
        ),
        "bool" => json!(
            if first(arg0, obj).and_then(|v| v.as_bool()).unwrap_or(false) {
                "True"
            } else {
                "False"
            }
        ),
        "selector" => none_if_empty(format_selector(first(arg0, obj).as_ref())),
        "subjects" => json!(subjects(obj, arg0)),
        "role-ref" => json!(format!(
            "{}/{}",
            obj["roleRef"]["kind"].as_str().unwrap_or_default(),
            obj["roleRef"]["name"].as_str().unwrap_or_default()
        )),
        "pod-ready" => {
            let ready = obj["status"]["containerStatuses"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|c| c["ready"] == true && c["state"]["running"].is_object())
                        .count()
                })
                .unwrap_or(0);
            let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
            json!(format!("{ready}/{total}"))
        }
        "pod-status" => json!(pod_status(obj)),
        "pod-restarts" => {
            let restarts: i64 = ["initContainerStatuses", "containerStatuses"]
                .iter()
                .filter_map(|k| obj["status"][*k].as_array())
                .flatten()
                .filter_map(|c| c["restartCount"].as_i64())
                .sum();
            json!(restarts.to_string())
        }
        "pod-readiness-gates" => {
            let gates = obj["spec"]["readinessGates"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if gates.is_empty() {
                json!("<none>")
            } else {
                let conditions = obj["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let true_count = gates
                    .iter()
                    .filter(|g| {
                        conditions
                            .iter()
                            .any(|c| c["type"] == g["conditionType"] && c["status"] == "True")
                    })
                    .count();
                json!(format!("{true_count}/{}", gates.len()))
            }
        }
        "svc-external-ip" => json!(service_external_ip(obj)),
        "svc-ports" => {
            let ports: Vec<String> = obj["spec"]["ports"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|p| {
                            let port = p["port"].as_i64().unwrap_or(0);
                            let proto = p["protocol"].as_str().unwrap_or("TCP");
                            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                                Some(np) => format!("{port}:{np}/{proto}"),
                                None => format!("{port}/{proto}"),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            none_if_empty(ports.join(","))
        }
        "node-status" => json!(node_status(obj)),
        "node-roles" => {
            let mut roles: Vec<String> = obj["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| {
                            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                                (!role.is_empty()).then(|| role.to_string())
                            } else if k == "kubernetes.io/role" {
                                v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
                            } else {
                                None
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            roles.sort();
            roles.dedup();
            none_if_empty(roles.join(","))
        }
        "node-address" => none_if_empty(
            obj["status"]["addresses"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|x| x["type"] == arg0)
                        .and_then(|x| x["address"].as_str())
                })
                .unwrap_or_default()
                .to_string(),
        ),
        "job-status" => json!(job_status(obj)),
        "job-completions" => {
            let succeeded = obj["status"]["succeeded"].as_i64().unwrap_or(0);
            let s = match obj["spec"]["completions"].as_i64() {
                Some(c) => format!("{succeeded}/{c}"),
                None => match obj["spec"]["parallelism"].as_i64().unwrap_or(0) {
                    p if p > 1 => format!("{succeeded}/1 of {p}"),
                    _ => format!("{succeeded}/1"),
                },
            };
            json!(s)
        }
        "job-duration" => {
            let start = obj["status"]["startTime"].as_str().and_then(parse_time);
            let end = obj["status"]["completionTime"]
                .as_str()
                .and_then(parse_time);
            json!(match (start, end) {
                (None, _) => String::new(),
                (Some(s), None) => human_duration(now - s),
                (Some(s), Some(e)) => human_duration(e - s),
            })
        }
        "event-first-seen" => json!(event_first_seen(obj, now)),
        "event-last-seen" => {
            let series_last = obj["series"]["lastObservedTime"]
                .as_str()
                .and_then(parse_time);
            let last = obj["lastTimestamp"]
                .as_str()
                .or(obj["deprecatedLastTimestamp"].as_str())
                .and_then(parse_time);
            json!(match (series_last, last) {
                (Some(t), _) | (None, Some(t)) => human_duration(now - t),
                (None, None) => event_first_seen(obj, now),
            })
        }
        "event-object" => {
            let target = if obj["involvedObject"].is_object() {
                &obj["involvedObject"]
            } else {
                &obj["regarding"]
            };
            json!(format!(
                "{}/{}",
                target["kind"].as_str().unwrap_or_default().to_lowercase(),
                target["name"].as_str().unwrap_or_default()
            ))
        }
        "event-source" => {
            let source = if obj["source"].is_object() {
                &obj["source"]
            } else {
                &obj["deprecatedSource"]
            };
            let component = source["component"]
                .as_str()
                .or(obj["reportingController"].as_str())
                .unwrap_or_default();
            let host = source["host"].as_str().unwrap_or_default();
            json!(format!("{component}, {host}").trim().to_string())
        }
        "event-count" => {
            let count = obj["series"]["count"]
                .as_i64()
                .or(obj["count"].as_i64())
                .or(obj["deprecatedCount"].as_i64())
                .filter(|c| *c != 0)
                .unwrap_or(1);
            json!(count)
        }
        _ => Value::Null,
    }
}

fn event_first_seen(obj: &Value, now: DateTime<Utc>) -> String {
    let t = obj["firstTimestamp"]
        .as_str()
        .or(obj["deprecatedFirstTimestamp"].as_str())
        .or(obj["eventTime"].as_str())
        .and_then(parse_time);
    t.map_or_else(|| "<unknown>".to_string(), |t| human_duration(now - t))
}

/// `metav1.FormatLabelSelector` for a LabelSelector, `labels.FormatLabels` for a plain map.
/// A LabelSelector (or a plain string map) as kube-apiserver prints it (`a=b,k in (x,y)`,
/// requirements sorted by key); `""` when empty.
pub fn format_selector(v: Option<&Value>) -> String {
    let Some(Value::Object(m)) = v else {
        return String::new();
    };
    let is_label_selector = m.contains_key("matchLabels") || m.contains_key("matchExpressions");
    let mut reqs: Vec<(String, String)> = Vec::new();
    let labels = if is_label_selector {
        m.get("matchLabels").and_then(Value::as_object)
    } else {
        Some(m)
    };
    if let Some(labels) = labels {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    if is_label_selector {
        for e in m
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            let mut values: Vec<String> = e["values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            values.sort();
            let s = match e["operator"].as_str().unwrap_or_default() {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.clone(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            };
            reqs.push((key, s));
        }
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(",")
}

fn subjects(obj: &Value, kind: &str) -> String {
    obj["subjects"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["kind"] == kind)
                .map(|s| {
                    let name = s["name"].as_str().unwrap_or_default();
                    match (kind, s["namespace"].as_str()) {
                        ("ServiceAccount", Some(ns)) => format!("{ns}/{name}"),
                        _ => name.to_string(),
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// The `STATUS` cell of the real pod printer (simplified: init containers are not inspected).
fn pod_status(obj: &Value) -> String {
    let status = &obj["status"];
    let phase = status["phase"].as_str().unwrap_or("Pending");
    let mut reason = status["reason"]
        .as_str()
        .filter(|r| !r.is_empty())
        .unwrap_or(phase)
        .to_string();
    let mut has_running = false;
    let init_total = obj["spec"]["initContainers"].as_array().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, c) in status["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let state = &c["state"];
        let terminated = &state["terminated"];
        let waiting = state["waiting"]["reason"].as_str().unwrap_or_default();
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        reason = if terminated.is_object() {
            match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => match terminated["signal"].as_i64().unwrap_or(0) {
                    0 => format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    ),
                    sig => format!("Init:Signal:{sig}"),
                },
            }
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{init_total}")
        };
        initializing = true;
        break;
    }
    let initialized = status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Initialized" && c["status"] == "True")
    });
    // While init containers run, their state is the status; the containers have not started.
    if (!initializing || initialized)
        && let Some(statuses) = status["containerStatuses"].as_array()
    {
        for c in statuses.iter().rev() {
            let state = &c["state"];
            if let Some(r) = state["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if let Some(r) = state["terminated"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if state["terminated"].is_object() {
                let signal = state["terminated"]["signal"].as_i64().unwrap_or(0);
                reason = if signal != 0 {
                    format!("Signal:{signal}")
                } else {
                    format!(
                        "ExitCode:{}",
                        state["terminated"]["exitCode"].as_i64().unwrap_or(0)
                    )
                };
            } else if c["ready"] == true && state["running"].is_object() {
                has_running = true;
            }
        }
    }
    if reason == "Completed" && has_running {
        let ready = status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        reason = if ready { "Running" } else { "NotReady" }.to_string();
    }
    let terminal = matches!(phase, "Succeeded" | "Failed");
    if obj["metadata"]["deletionTimestamp"].is_string() {
        if status["reason"] == "NodeLost" {
            reason = "Unknown".to_string();
        } else if !terminal {
            reason = "Terminating".to_string();
        }
    }
    reason
}

fn service_external_ip(obj: &Value) -> String {
    let spec = &obj["spec"];
    let external: Vec<String> = spec["externalIPs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    match spec["type"].as_str().unwrap_or("ClusterIP") {
        "LoadBalancer" => {
            let mut ips: Vec<String> = obj["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|i| {
                            i["ip"]
                                .as_str()
                                .filter(|s| !s.is_empty())
                                .or(i["hostname"].as_str())
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            ips.extend(external);
            if ips.is_empty() {
                "<pending>".to_string()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => spec["externalName"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
    }
}

fn node_status(obj: &Value) -> String {
    let ready = obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].as_str().unwrap_or_default().to_string());
    let mut status = match ready.as_deref() {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if obj["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn job_status(obj: &Value) -> &'static str {
    let has = |t: &str| {
        obj["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if obj["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::builtin::builtin_resources;
    use crate::api::crd::resources_from_crd;

    fn now() -> DateTime<Utc> {
        parse_time("2026-01-10T12:00:00Z").unwrap_or_default()
    }

    fn builtin(group: &str, plural: &str) -> ResourceInfo {
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
    fn jsonpath_supports_fields_indexes_wildcards_and_filters() {
        let obj = json!({
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}], "replicas": 3},
            "status": {"conditions": [
                {"type": "Available", "status": "False", "n": 1},
                {"type": "Ready", "status": "True", "n": 2}
            ]}
        });
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (".metadata.name", vec![json!("a")]),
            ("{.metadata.name}", vec![json!("a")]),
            ("metadata.name", vec![json!("a")]),
            (".spec.replicas", vec![json!(3)]),
            (".spec.containers[0].name", vec![json!("c1")]),
            (".spec.containers[-1].name", vec![json!("c2")]),
            (".spec.containers[*].image", vec![json!("i1"), json!("i2")]),
            // As client-go (and so kube-apiserver's CRD printer columns): the dots of a key
            // in brackets must be escaped, or they separate fields.
            (".metadata.labels['app.kubernetes.io/name']", vec![]),
            (
                ".metadata.labels['app\\.kubernetes\\.io/name']",
                vec![json!("x")],
            ),
            (
                ".metadata.labels.app\\.kubernetes\\.io/name",
                vec![json!("x")],
            ),
            (".metadata['labels']['name']", vec![]),
            (".metadata['name']", vec![json!("a")]),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type=='Ready')].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type != \"Ready\")].type",
                vec![json!("Available")],
            ),
            (".status.conditions[?(@.n > 1)].type", vec![json!("Ready")]),
            (".status.conditions[?(@.type==\"Gone\")].status", vec![]),
            (".spec.missing.deeper", vec![]),
            (".spec.containers[5]", vec![]),
            (".spec.containers[", vec![]),
        ];
        for (path, want) in cases {
            assert_eq!(jsonpath(path, &obj), want, "{path}");
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

    #[test]
    fn computed_builtin_cells() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-10T11:58:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        });
        let t = to_table(
            &builtin("", "pods"),
            &[pod],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "p",
                "1/2",
                "CrashLoopBackOff",
                "3",
                "2m",
                "10.0.0.5",
                "node-1",
                "<none>",
                "<none>"
            ])
        );

        let init = json!({"metadata": {"name": "i"},
            "spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "i1", "restartCount": 1, "state": {"terminated": {"exitCode": 0}}},
                    {"name": "i2", "restartCount": 0, "state": {"running": {}}}],
                "containerStatuses": [{"name": "a", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}}]}});
        let t = to_table(
            &builtin("", "pods"),
            &[init],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(t["rows"][0]["cells"][2], "Init:1/2");
        assert_eq!(t["rows"][0]["cells"][3], "1");

        let done = json!({"metadata": {"name": "d"}, "spec": {"containers": [{"name": "a"}]},
                          "status": {"phase": "Succeeded"}});
        let t = to_table(
            &builtin("", "pods"),
            &[done],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(t["rows"][0]["cells"][2], "Succeeded");
        assert_eq!(t["rows"][0]["conditions"][0]["type"], "Completed");

        let svc = json!({"metadata": {"name": "s"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "selector": {"b": "2", "a": "1"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
        let t = to_table(
            &builtin("", "services"),
            &[svc],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "s",
                "NodePort",
                "10.96.0.10",
                "<none>",
                "80:30080/TCP,53/UDP",
                "<unknown>",
                "a=1,b=2"
            ])
        );

        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}});
        let t = to_table(
            &builtin("", "configmaps"),
            &[cm],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(t["rows"][0]["cells"], json!(["c", 3, "<unknown>"]));

        let ev = json!({"metadata": {"name": "e1"}, "type": "Normal", "reason": "Scheduled",
            "regarding": {"kind": "Pod", "name": "p"}, "note": "assigned", "reportingController": "sched",
            "eventTime": "2026-01-10T11:59:00.123456Z"});
        let t = to_table(
            &builtin("events.k8s.io", "events"),
            &[ev],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "59s",
                "Normal",
                "Scheduled",
                "pod/p",
                "",
                "sched,",
                "assigned",
                "59s",
                1,
                "e1"
            ])
        );

        let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 2, "selector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}, {"key": "x", "operator": "Exists"}]},
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"succeeded": 2, "startTime": "2026-01-10T11:00:00Z", "completionTime": "2026-01-10T11:01:30Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}});
        let t = to_table(
            &builtin("batch", "jobs"),
            &[job],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "j",
                "Complete",
                "2/2",
                "90s",
                "<unknown>",
                "c",
                "busybox",
                "tier in (a,b),x"
            ])
        );

        let node = json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"},
                       "addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}});
        let t = to_table(
            &builtin("", "nodes"),
            &[node],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(t["rows"][0]["cells"][1], "Ready,SchedulingDisabled");
        assert_eq!(t["rows"][0]["cells"][2], "control-plane");
        assert_eq!(t["rows"][0]["cells"][4], "v1.32.0");
        assert_eq!(t["rows"][0]["cells"][5], "172.18.0.2");
        assert_eq!(t["rows"][0]["cells"][6], "<none>");

        let rb = json!({"metadata": {"name": "rb"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        let t = to_table(
            &builtin("rbac.authorization.k8s.io", "rolebindings"),
            &[rb],
            IncludeObject::None,
            now(),
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["rb", "ClusterRole/view", "<unknown>", "alice", "", "ns/sa"])
        );
    }
}
