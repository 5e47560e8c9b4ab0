//! Server-owned fields and per-kind defaults of new objects, and the Secret `stringData`
//! fold that every write of a Secret gets.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::meta::{ensure_object, meta_mut, mstr};
use crate::api::resource::ResourceInfo;

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
        ("apps", kind @ ("Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet")) => {
            workload_defaults(kind, ensure_object(&mut obj["spec"]));
        }
        ("batch", "Job") => {
            for f in ["completions", "parallelism"] {
                if obj["spec"][f].is_null() {
                    obj["spec"][f] = json!(1);
                }
            }
        }
        _ => {}
    }
    secret_string_data(info, obj);
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

/// The `spec` defaults of an apps/v1 workload: replicas and update strategy.
fn workload_defaults(kind: &str, spec: &mut Map<String, Value>) {
    if kind != "DaemonSet" {
        spec.entry("replicas").or_insert(json!(1));
    }
    match kind {
        "Deployment" => {
            spec.entry("strategy")
                .or_insert(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
        }
        "StatefulSet" => {
            spec.entry("updateStrategy")
                .or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
            spec.entry("podManagementPolicy")
                .or_insert(json!("OrderedReady"));
        }
        "DaemonSet" => {
            spec.entry("updateStrategy")
                .or_insert(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}));
        }
        _ => {}
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
