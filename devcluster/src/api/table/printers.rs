//! The computed cells (`#function:args`) of the built-in printer columns: what kube-apiserver's
//! per-kind printers (`pkg/printers/internalversion/printers.go`) compute and a JSONPath cannot
//! express. The forms are listed in [`crate::api::builtin`]; they are kept apart from table
//! assembly because they are most of the code and change kind by kind.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::jsonpath::jsonpath;
use super::{age, human_duration, parse_time, print_value};

/// The cell of a computed column (`#function` or `#function:arg1;arg2`, the forms listed in
/// [`crate::api::builtin`]); `null` for an unknown function. The functions are grouped by the
/// printers they serve, one match per group.
pub(super) fn computed(expr: &str, obj: &Value, now: DateTime<Utc>) -> Value {
    let (func, arg) = expr.split_once(':').unwrap_or((expr, ""));
    let args: Vec<&str> = arg.split(';').filter(|a| !a.is_empty()).collect();
    let arg0 = args.first().copied().unwrap_or_default();
    path_cell(func, &args, obj, now)
        .or_else(|| rbac_cell(func, arg0, obj))
        .or_else(|| pod_cell(func, obj))
        .or_else(|| service_cell(func, obj))
        .or_else(|| node_cell(func, arg0, obj))
        .or_else(|| job_cell(func, obj, now))
        .or_else(|| event_cell(func, obj, now))
        .unwrap_or(Value::Null)
}

/// The generic functions, which read the JSONPaths they are given (any kind may use them).
fn path_cell(func: &str, args: &[&str], obj: &Value, now: DateTime<Utc>) -> Option<Value> {
    let arg0 = args.first().copied().unwrap_or_default();
    Some(match func {
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
        _ => return None,
    })
}

/// RoleBinding and ClusterRoleBinding cells.
fn rbac_cell(func: &str, arg0: &str, obj: &Value) -> Option<Value> {
    Some(match func {
        "subjects" => json!(subjects(obj, arg0)),
        "role-ref" => json!(format!(
            "{}/{}",
            obj["roleRef"]["kind"].as_str().unwrap_or_default(),
            obj["roleRef"]["name"].as_str().unwrap_or_default()
        )),
        _ => return None,
    })
}

/// Pod cells.
fn pod_cell(func: &str, obj: &Value) -> Option<Value> {
    Some(match func {
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
        _ => return None,
    })
}

/// Service cells.
fn service_cell(func: &str, obj: &Value) -> Option<Value> {
    Some(match func {
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
        _ => return None,
    })
}

/// Node cells.
fn node_cell(func: &str, arg0: &str, obj: &Value) -> Option<Value> {
    Some(match func {
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
        _ => return None,
    })
}

/// Job cells.
fn job_cell(func: &str, obj: &Value, now: DateTime<Utc>) -> Option<Value> {
    Some(match func {
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
        _ => return None,
    })
}

/// Event cells, for both event APIs (`v1` and `events.k8s.io/v1`).
fn event_cell(func: &str, obj: &Value, now: DateTime<Utc>) -> Option<Value> {
    Some(match func {
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
        _ => return None,
    })
}

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

/// The `STATUS` cell of the real pod printer: the pod's reason or phase, then an init container
/// still running or failed (`Init:…`), then a waiting or terminated container's reason.
fn pod_status(obj: &Value) -> String {
    let status = &obj["status"];
    let phase = status["phase"].as_str().unwrap_or("Pending");
    let mut reason = status["reason"]
        .as_str()
        .filter(|r| !r.is_empty())
        .unwrap_or(phase)
        .to_string();
    let mut has_running = false;
    let init_reason = init_container_reason(obj);
    let initializing = init_reason.is_some();
    if let Some(r) = init_reason {
        reason = r;
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

/// The `Init:` reason of the first init container that has not exited 0 (`Init:Error`,
/// `Init:CrashLoopBackOff`, `Init:1/2`, ...); `None` when every one has (or none reported).
fn init_container_reason(obj: &Value) -> Option<String> {
    let init_total = obj["spec"]["initContainers"].as_array().map_or(0, Vec::len);
    for (i, c) in obj["status"]["initContainerStatuses"]
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
        return Some(if terminated.is_object() {
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
        });
    }
    None
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
    use serde_json::json;

    use crate::api::table::tests::{builtin, now};
    use crate::api::table::{IncludeObject, to_table};

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
