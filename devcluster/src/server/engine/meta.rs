//! Small metadata helpers, and the conversion between the stored form of an object and the
//! form served through one resource version.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::api::resource::ResourceInfo;
use crate::server::registry::{event_from_core, event_to_core, is_events_v1};
use crate::store::Obj;

/// Current time, RFC 3339 seconds, UTC.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `metadata.<field>` as a string (`""` when absent).
pub(crate) fn mstr<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata` as a mutable map (created when missing; a non-object root becomes an object).
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let root = ensure_object(obj);
    ensure_object(
        root.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new())),
    )
}

/// Turns `v` into an object (keeping it when it already is one) and returns the map.
pub(crate) fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The object as served through `info`'s version (apiVersion and kind set).
pub(crate) fn present(info: &ResourceInfo, obj: &Obj) -> Obj {
    if is_events_v1(info) && obj.get("apiVersion").and_then(Value::as_str) == Some("v1") {
        return Arc::new(event_from_core((**obj).clone()));
    }
    if obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|av| api_version_is(info, av))
        && obj.get("kind").and_then(Value::as_str) == Some(info.kind.as_str())
    {
        return obj.clone();
    }
    let av = info.api_version();
    let mut v = (**obj).clone();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(av));
        m.insert("kind".into(), Value::String(info.kind.clone()));
    }
    Arc::new(v)
}

/// Whether `av` is `info`'s apiVersion (without allocating).
pub(crate) fn api_version_is(info: &ResourceInfo, av: &str) -> bool {
    if info.group.is_empty() {
        return av == info.version;
    }
    av.len() == info.group.len() + 1 + info.version.len()
        && av.starts_with(info.group.as_str())
        && av.ends_with(info.version.as_str())
        && av.as_bytes().get(info.group.len()) == Some(&b'/')
}

/// Converts an object written through `info` to its stored form.
pub(super) fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    if is_events_v1(info) {
        event_to_core(obj)
    } else {
        obj
    }
}

/// Whether `info` is the built-in core Namespace.
pub(super) fn is_namespace(info: &ResourceInfo) -> bool {
    info.builtin && info.group.is_empty() && info.kind == "Namespace"
}

/// Whether `info` is CustomResourceDefinitions.
pub(super) fn is_crd(info: &ResourceInfo) -> bool {
    info.builtin && info.group == "apiextensions.k8s.io"
}
