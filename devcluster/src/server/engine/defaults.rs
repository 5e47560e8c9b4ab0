//! Server-owned fields and per-kind defaults of new objects, and the Secret `stringData`
//! fold that every write of a Secret gets.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::meta::{ensure_object, meta_mut, mstr};
use crate::api::resource::ResourceInfo;
use crate::objects::schema::FieldError;

/// Sets the server-owned fields of a new object.
pub(super) fn init_created(info: &ResourceInfo, obj: &mut Value, now: &str) {
    let meta = meta_mut(obj);
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(now.to_string()));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("selfLink");
    meta.remove("resourceVersion");
    if info.has_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if info.status_subresource
        && !(info.builtin && info.kind == "Node")
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    kind_defaults_on_create(info, obj);
}

fn kind_defaults_on_create(info: &ResourceInfo, obj: &mut Value) {
    if !info.builtin {
        return;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => new_namespace_defaults(obj),
        ("", "Service") => service_defaults(obj),
        ("", "Pod") => {
            obj["status"] = json!({"phase": "Pending"});
        }
        ("batch", "Job") => {
            spec_defaults(info, obj);
            job_selector(obj);
        }
        _ => spec_defaults(info, obj),
    }
    secret_string_data(info, obj);
}

/// The label of a Job's generated selector (the Job's uid).
const JOB_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";

/// A new Job without `spec.manualSelector: true` gets kube-apiserver's generated selector: the
/// pod template labelled with the Job's uid and name (and their legacy unprefixed twins), and
/// `spec.selector` matching the uid.
fn job_selector(obj: &mut Value) {
    if obj["spec"]["manualSelector"] == json!(true) {
        return;
    }
    let (uid, name) = (mstr(obj, "uid").to_string(), mstr(obj, "name").to_string());
    let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    for (k, v) in [
        (JOB_CONTROLLER_UID, &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels[k] = json!(v);
    }
    obj["spec"]["selector"] = json!({"matchLabels": {JOB_CONTROLLER_UID: uid}});
}

/// What an update may not change in a Job's spec: its selector and its pod template (kube-apiserver
/// allows a few template fields while a Job is suspended; devcluster runs no Job, so none).
/// `helm upgrade --force` replacing a Job with its manifest (no generated selector) fails so.
pub(super) fn job_immutable_fields(
    info: &ResourceInfo,
    old: &Value,
    new: &Value,
) -> Vec<FieldError> {
    if !(info.builtin && info.group == "batch" && info.kind == "Job") {
        return Vec::new();
    }
    ["selector", "template"]
        .into_iter()
        .filter(|f| new["spec"][f] != old["spec"][f])
        .map(|f| FieldError {
            reason: "FieldValueInvalid".into(),
            field: format!("spec.{f}"),
            message: format!("Invalid value: {}: field is immutable", new["spec"][f]),
        })
        .collect()
}

/// The `spec` defaults kube-apiserver gives a workload on every write (create and update, so a
/// PUT without them, such as `helm upgrade --force` sends, keeps them): replicas, update
/// strategies (with their `rollingUpdate` parameters), a Job's completions, parallelism and
/// backoff limit. Clients dereference them: `helm --wait` reads a Deployment's
/// `strategy.rollingUpdate` and a Job's `backoffLimit` without a nil check.
pub(super) fn spec_defaults(info: &ResourceInfo, obj: &mut Value) {
    if !info.builtin {
        return;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("apps", kind @ ("Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet")) => {
            workload_defaults(kind, ensure_object(&mut obj["spec"]));
        }
        ("batch", "Job") => {
            let spec = ensure_object(&mut obj["spec"]);
            for (f, v) in [
                ("completions", json!(1)),
                ("parallelism", json!(1)),
                ("backoffLimit", json!(6)),
                ("completionMode", json!("NonIndexed")),
                ("suspend", json!(false)),
            ] {
                default(spec, f, v);
            }
        }
        _ => {}
    }
}

/// A new Namespace: the `kubernetes` finalizer, phase Active, the name label.
fn new_namespace_defaults(obj: &mut Value) {
    let name = mstr(obj, "name").to_string();
    obj["spec"] = json!({"finalizers": ["kubernetes"]});
    obj["status"] = json!({"phase": "Active"});
    set_name_label(obj, name);
}

/// Sets the `kubernetes.io/metadata.name` label of a Namespace.
pub(super) fn set_name_label(obj: &mut Value, name: String) {
    let meta = meta_mut(obj);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
    }
}

/// A new Service: type ClusterIP and a cluster IP (unless ExternalName).
fn service_defaults(obj: &mut Value) {
    if obj["spec"]["type"].is_null() {
        obj["spec"]["type"] = json!("ClusterIP");
    }
    if obj["spec"]["clusterIP"].is_null() && obj["spec"]["type"] != json!("ExternalName") {
        use rand::Rng;
        let mut rng = rand::rng();
        let ip = format!(
            "10.96.{}.{}",
            rng.random_range(0..=255u8),
            rng.random_range(2..=254u8)
        );
        obj["spec"]["clusterIP"] = json!(ip);
        obj["spec"]["clusterIPs"] = json!([ip]);
    }
}

/// A Service update keeps what was allocated when the new object leaves it out: kube-apiserver
/// copies `clusterIP`/`clusterIPs` (and the default `type`) from the stored Service, so a PUT of
/// the manifest alone (`helm upgrade --force`) does not lose the address.
pub(super) fn service_allocations_on_update(info: &ResourceInfo, old: &Value, new: &mut Value) {
    if !(info.builtin && info.group.is_empty() && info.kind == "Service") {
        return;
    }
    let unset = |v: &Value| v.is_null() || v == &json!("");
    if unset(&new["spec"]["type"]) && !unset(&old["spec"]["type"]) {
        new["spec"]["type"] = old["spec"]["type"].clone();
    }
    if unset(&new["spec"]["clusterIP"]) && !unset(&old["spec"]["clusterIP"]) {
        for f in ["clusterIP", "clusterIPs"] {
            if !old["spec"][f].is_null() {
                new["spec"][f] = old["spec"][f].clone();
            }
        }
    }
}

/// Sets `map[f]` to `v` unless it holds a value.
fn default(map: &mut Map<String, Value>, f: &str, v: Value) {
    if map.get(f).is_none_or(Value::is_null) {
        map.insert(f.into(), v);
    }
}

/// The `spec` defaults of an apps/v1 workload: replicas and update strategy, each field of the
/// strategy on its own (a given `type: RollingUpdate` gets its `rollingUpdate` parameters).
fn workload_defaults(kind: &str, spec: &mut Map<String, Value>) {
    if kind != "DaemonSet" {
        default(spec, "replicas", json!(1));
    }
    let (field, rolling) = match kind {
        "Deployment" => {
            default(spec, "revisionHistoryLimit", json!(10));
            default(spec, "progressDeadlineSeconds", json!(600));
            (
                "strategy",
                json!({"maxUnavailable": "25%", "maxSurge": "25%"}),
            )
        }
        "StatefulSet" => {
            default(spec, "podManagementPolicy", json!("OrderedReady"));
            ("updateStrategy", json!({"partition": 0}))
        }
        "DaemonSet" => (
            "updateStrategy",
            json!({"maxUnavailable": 1, "maxSurge": 0}),
        ),
        _ => return,
    };
    let strategy = ensure_object(spec.entry(field).or_insert(json!({})));
    default(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let params = ensure_object(strategy.entry("rollingUpdate").or_insert(json!({})));
        if let Value::Object(d) = rolling {
            for (k, v) in d {
                default(params, &k, v);
            }
        }
    }
}

/// Secrets: `stringData` is write-only and merged into `data` (base64); `type` defaults to
/// `Opaque`.
pub(super) fn secret_string_data(info: &ResourceInfo, obj: &mut Value) {
    if !(info.builtin && info.group.is_empty() && info.kind == "Secret") {
        return;
    }
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(sd)) = o.remove("stringData") {
        let data = o.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                d.insert(
                    k,
                    Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
        }
    }
    if o.get("type").is_none_or(Value::is_null) {
        o.insert("type".into(), json!("Opaque"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_strategies_are_defaulted_field_by_field() {
        let table = [
            (
                "Deployment",
                json!({}),
                json!({"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                    "strategy": {"type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}}),
            ),
            (
                "Deployment",
                json!({"replicas": 3, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2}}}),
                json!({"replicas": 3, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                    "strategy": {"type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 2}}}),
            ),
            (
                "Deployment",
                json!({"strategy": {"type": "Recreate"}}),
                json!({"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                    "strategy": {"type": "Recreate"}}),
            ),
            (
                "StatefulSet",
                json!({"updateStrategy": {"type": "RollingUpdate"}}),
                json!({"replicas": 1, "podManagementPolicy": "OrderedReady",
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}),
            ),
            (
                "StatefulSet",
                json!({"updateStrategy": {"type": "OnDelete"}}),
                json!({"replicas": 1, "podManagementPolicy": "OrderedReady",
                    "updateStrategy": {"type": "OnDelete"}}),
            ),
            (
                "DaemonSet",
                json!({"updateStrategy": {}}),
                json!({"updateStrategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}}),
            ),
            ("ReplicaSet", json!({}), json!({"replicas": 1})),
        ];
        for (kind, given, want) in table {
            let mut spec = given.clone();
            workload_defaults(kind, ensure_object(&mut spec));
            assert_eq!(spec, want, "{kind} {given}");
        }
    }
}
