//! Hand-written schema fragments for fields schemars cannot describe the Kubernetes way.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Objects stored as strings of JSON text (see [`crate::json_text`]). The items have no type:
/// a Description stored before holds objects there, and an item typed `string` would read back
/// from etcd pruned to `{}` (its objects gone, so an agent would prune them from its cluster).
pub(crate) fn json_texts(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"x-kubernetes-preserve-unknown-fields": true},
    })
}

/// An arbitrary JSON object kept as is (for example an object's `.status`).
pub(crate) fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Marks `fields` as required in an object schema (used where the Rust side keeps a lenient
/// `#[serde(default)]` but the API server must insist on the field).
pub(crate) fn require(schema: &mut Schema, fields: &[&str]) {
    if let Some(obj) = schema.as_object_mut() {
        let required = obj
            .entry("required")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let Some(list) = required.as_array_mut() {
            for field in fields {
                let value = serde_json::Value::String((*field).to_string());
                if !list.contains(&value) {
                    list.push(value);
                }
            }
        }
    }
}

/// Bytes, base64-encoded in JSON (`[]byte` in Go).
pub(crate) fn bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "byte",
    })
}

/// Drops the `default` schemars derives from `#[serde(default)]`, for fields whose Rust default
/// is only a deserialization convenience (status booleans and nested status objects), so that
/// the API server does not invent values nobody reported.
pub(crate) fn no_default(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("default");
    }
}
