//! Structural schemas of CRDs: pruning, defaulting and validation, as apiextensions does.
//!
//! Error wording follows kube-apiserver: go-openapi's messages as apiextensions converts them
//! into `field.Error`s [AX `pkg/apiserver/validation/validation.go`], and the structural
//! checks of [AX `pkg/apiserver/schema/validation.go`].

use super::validate::go_quote;
use serde_json::{Map, Value};

/// One validation failure, as it appears in a 422 `Invalid` Status `details.causes`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueTypeInvalid`, ...
    pub reason: String,
    /// Path such as `spec.schedulingStrategy`.
    pub field: String,
    /// Message such as `Unsupported value: "Foo": supported values: "Replication", "Dividing"`.
    pub message: String,
}

impl FieldError {
    fn new(reason: &str, field: &str, message: String) -> FieldError {
        FieldError {
            reason: reason.to_string(),
            field: field.to_string(),
            message,
        }
    }
}

/// The fields of `ObjectMeta`; anything else under `metadata` is dropped.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn type_of(schema: &Value) -> &str {
    schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The schema of field `key` of an object node, if the node declares one.
fn field_schema<'s>(schema: &'s Value, key: &str) -> Option<&'s Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Removes fields the schema does not declare (unless `x-kubernetes-preserve-unknown-fields`),
/// returning the paths of what was removed (used for the `Warning` header and for
/// `fieldValidation=Strict`). `apiVersion`, `kind` and `metadata` at the root are kept.
///
/// `null`s of fields that are not `nullable` are dropped too (so that defaulting fills them),
/// without being reported, as apiextensions does.
pub fn prune(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut removed = Vec::new();
    prune_node(obj, schema, "", true, &mut removed);
    removed
}

fn prune_node(
    value: &mut Value,
    schema: &Value,
    path: &str,
    root: bool,
    removed: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let open = schema.get("additionalProperties") == Some(&Value::Bool(true));
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let here = child_path(path, &key);
                if embedded && (key == "apiVersion" || key == "kind") {
                    continue;
                }
                if embedded && key == "metadata" {
                    if let Some(meta) = map.get_mut(&key) {
                        prune_object_meta(meta, &here, removed);
                    }
                    continue;
                }
                match field_schema(schema, &key) {
                    Some(child) => {
                        let drop_null =
                            map.get(&key).is_some_and(Value::is_null) && !flag(child, "nullable");
                        if drop_null {
                            map.remove(&key);
                        } else if let Some(v) = map.get_mut(&key) {
                            prune_node(v, child, &here, false, removed);
                        }
                    }
                    None if preserve || open => {}
                    None => {
                        map.remove(&key);
                        removed.push(here);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item, item_schema, &format!("{path}[{i}]"), false, removed);
                }
            }
        }
        _ => {}
    }
}

fn prune_object_meta(meta: &mut Value, path: &str, removed: &mut Vec<String>) {
    if let Value::Object(map) = meta {
        let unknown: Vec<String> = map
            .keys()
            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            map.remove(&key);
            removed.push(child_path(path, &key));
        }
    }
}

/// Fills `default`s from the schema into `obj`.
///
/// A default applies where the field is absent (or `null` without `nullable`); defaults are
/// applied top-down, so the defaults inside a defaulted object apply too.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    match obj {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (key, prop) in props {
                    let Some(default) = prop.get("default") else {
                        continue;
                    };
                    let missing = match map.get(key) {
                        None => true,
                        Some(Value::Null) => !flag(prop, "nullable"),
                        Some(_) => false,
                    };
                    if missing {
                        map.insert(key.clone(), default.clone());
                    }
                }
            }
            for (key, value) in map.iter_mut() {
                if let Some(child) = field_schema(schema, key) {
                    apply_defaults(value, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    apply_defaults(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Validates `obj` against the schema: type, enum, required, pattern, minimum/maximum,
/// minLength/maxLength, minItems/maxItems, nullable.
pub fn validate(obj: &Value, schema: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_node(obj, schema, "", true, &mut errs);
    errs
}

/// How `field.Error` prints a bad value: strings quoted, numbers and bools bare.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "\"null\"".to_string(),
        other => other.to_string(),
    }
}

/// go-openapi's name for the JSON type of a value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integral(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integral(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "" => true,
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.as_number().is_some_and(is_integral),
        _ => true,
    }
}

/// Go's `%v` of a float64 bound: integral values print without a fraction.
fn show_bound(bound: f64) -> String {
    if bound.fract() == 0.0 && bound.abs() < 1e15 {
        format!("{}", bound as i64)
    } else {
        format!("{bound}")
    }
}

fn validate_node(
    value: &Value,
    schema: &Value,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    if !schema.is_object() {
        return;
    }
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for sub in all {
            validate_node(value, sub, path, root, errs);
        }
    }
    if value.is_null() && flag(schema, "nullable") {
        return;
    }
    let invalid = |detail: String| {
        FieldError::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {}: {detail}", show(value)),
        )
    };

    if flag(schema, "x-kubernetes-int-or-string") {
        let ok = value.is_string() || value.as_number().is_some_and(is_integral);
        if !ok {
            let actual = json_type(value);
            errs.push(FieldError::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{actual}\": {path} in body must be of type integer,string: \"{actual}\""
                ),
            ));
            return;
        }
    } else {
        let expected = type_of(schema);
        if !type_matches(expected, value) || (value.is_null() && !expected.is_empty()) {
            let actual = json_type(value);
            errs.push(FieldError::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
                ),
            ));
            return;
        }
    }

    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        let supported: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => go_quote(s),
                other => go_quote(&other.to_string()),
            })
            .collect();
        errs.push(FieldError::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                supported.join(", ")
            ),
        ));
    }

    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                let unit = if max == 1 { "byte" } else { "bytes" };
                errs.push(FieldError::new(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} {unit}"),
                ));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errs.push(invalid(format!(
                    "{path} in body should be at least {min} chars long"
                )));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && let Ok(re) = regex::Regex::new(pattern)
                && !re.is_match(s)
            {
                errs.push(invalid(format!("{path} in body should match '{pattern}'")));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                if flag(schema, "exclusiveMinimum") {
                    if x <= min {
                        errs.push(invalid(format!(
                            "{path} in body should be greater than {}",
                            show_bound(min)
                        )));
                    }
                } else if x < min {
                    errs.push(invalid(format!(
                        "{path} in body should be greater than or equal to {}",
                        show_bound(min)
                    )));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                if flag(schema, "exclusiveMaximum") {
                    if x >= max {
                        errs.push(invalid(format!(
                            "{path} in body should be less than {}",
                            show_bound(max)
                        )));
                    }
                } else if x > max {
                    errs.push(invalid(format!(
                        "{path} in body should be less than or equal to {}",
                        show_bound(max)
                    )));
                }
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                errs.push(FieldError::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {len}: {path} in body should have at least {min} items"
                    ),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                let unit = if max == 1 { "item" } else { "items" };
                errs.push(FieldError::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {len}: must have at most {max} {unit}"),
                ));
            }
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    validate_node(item, item_schema, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(map) => {
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        errs.push(FieldError::new(
                            "FieldValueRequired",
                            &child_path(path, name),
                            "Required value".into(),
                        ));
                    }
                }
            }
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            if !root && embedded {
                // An embedded object must say what it is [AX `validateEmbeddedResource`].
                for key in ["apiVersion", "kind"] {
                    if map
                        .get(key)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        errs.push(FieldError::new(
                            "FieldValueRequired",
                            &child_path(path, key),
                            "Required value: must not be empty".into(),
                        ));
                    }
                }
            }
            for (key, v) in map {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child) = field_schema(schema, key) {
                    validate_node(v, child, &child_path(path, key), false, errs);
                }
            }
        }
        _ => {}
    }
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Checks that a CRD's `openAPIV3Schema` is structural; returns the errors worded as the
/// API server words them (empty when valid). Fields are relative to the schema root, e.g.
/// `properties[spec].type`; the caller prefixes `spec.versions[i].schema.openAPIV3Schema`.
pub fn check_structural(schema: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    structural(schema, "", Position::Root, false, &mut errs);
    errs
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    Root,
    Field,
    Item,
}

/// Keys a schema inside `allOf`/`anyOf`/`oneOf`/`not` must not set.
const JUNCTOR_FORBIDDEN: &[&str] = &[
    "type",
    "default",
    "description",
    "nullable",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

fn structural(
    schema: &Value,
    path: &str,
    pos: Position,
    junctor: bool,
    errs: &mut Vec<FieldError>,
) {
    let Some(node) = schema.as_object() else {
        return;
    };
    let at = |key: &str| child_path(path, key);
    if junctor {
        for key in JUNCTOR_FORBIDDEN {
            if node.contains_key(*key) {
                errs.push(FieldError::new(
                    "FieldValueForbidden",
                    &at(key),
                    "Forbidden: must be empty to be structural".into(),
                ));
            }
        }
    } else {
        check_node(node, path, pos, errs);
    }

    if let Some(Value::Object(props)) = node.get("properties") {
        for (key, prop) in props {
            structural(
                prop,
                &at(&format!("properties[{key}]")),
                Position::Field,
                junctor,
                errs,
            );
        }
    }
    match node.get("items") {
        Some(Value::Array(_)) => errs.push(FieldError::new(
            "FieldValueForbidden",
            &at("items"),
            "Forbidden: items must be a schema object and not an array".into(),
        )),
        Some(items) => structural(items, &at("items"), Position::Item, junctor, errs),
        None => {}
    }
    if let Some(addl) = node.get("additionalProperties").filter(|a| a.is_object()) {
        structural(
            addl,
            &at("additionalProperties"),
            Position::Field,
            junctor,
            errs,
        );
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = node.get(key) {
            // The one junctor shape int-or-string may carry [AX `validation.go`].
            if int_or_string && key == "anyOf" && is_int_or_string_any_of(subs) {
                continue;
            }
            for (i, sub) in subs.iter().enumerate() {
                let allowed = int_or_string
                    && key == "allOf"
                    && sub.as_object().is_some_and(|m| m.len() == 1)
                    && sub
                        .get("anyOf")
                        .and_then(Value::as_array)
                        .is_some_and(|a| is_int_or_string_any_of(a));
                if !allowed {
                    structural(sub, &at(&format!("{key}[{i}]")), pos, true, errs);
                }
            }
        }
    }
    if let Some(not) = node.get("not") {
        structural(not, &at("not"), pos, true, errs);
    }
}

/// `[{type: integer}, {type: string}]`, in either order.
fn is_int_or_string_any_of(subs: &[Value]) -> bool {
    let mut types: Vec<&str> = subs
        .iter()
        .filter(|s| s.as_object().is_some_and(|m| m.len() == 1))
        .filter_map(|s| s.get("type").and_then(Value::as_str))
        .collect();
    types.sort_unstable();
    subs.len() == 2 && types == ["integer", "string"]
}

fn check_node(node: &Map<String, Value>, path: &str, pos: Position, errs: &mut Vec<FieldError>) {
    let at = |key: &str| child_path(path, key);
    let schema = Value::Object(node.clone());
    let ty = type_of(&schema);
    let int_or_string = flag(&schema, "x-kubernetes-int-or-string");
    let preserve = flag(&schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(&schema, "x-kubernetes-embedded-resource");

    if ty.is_empty() && !int_or_string && !preserve {
        let detail = match pos {
            Position::Root => "must not be empty at the root",
            Position::Field => "must not be empty for specified object fields",
            Position::Item => "must not be empty for specified array items",
        };
        errs.push(FieldError::new(
            "FieldValueRequired",
            &at("type"),
            format!("Required value: {detail}"),
        ));
    }
    if pos == Position::Root && !ty.is_empty() && ty != "object" {
        errs.push(FieldError::new(
            "FieldValueInvalid",
            &at("type"),
            format!(
                "Invalid value: {}: must be object at the root",
                go_quote(ty)
            ),
        ));
    }
    if ty == "array" && !node.contains_key("items") {
        errs.push(FieldError::new(
            "FieldValueRequired",
            &at("items"),
            "Required value: must be specified".into(),
        ));
    }
    let has_addl = node
        .get("additionalProperties")
        .is_some_and(|a| a != &Value::Bool(false));
    if node.contains_key("properties") && has_addl {
        errs.push(FieldError::new(
            "FieldValueForbidden",
            &at("additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive".into(),
        ));
    }
    if pos == Position::Root && has_addl {
        errs.push(FieldError::new(
            "FieldValueForbidden",
            &at("additionalProperties"),
            "Forbidden: must not be used at the root".into(),
        ));
    }
    if int_or_string && !ty.is_empty() {
        errs.push(FieldError::new(
            "FieldValueInvalid",
            &at("type"),
            format!(
                "Invalid value: {}: must be empty if x-kubernetes-int-or-string is true",
                go_quote(ty)
            ),
        ));
    }
    if embedded {
        if ty != "object" {
            errs.push(FieldError::new(
                "FieldValueInvalid",
                &at("type"),
                format!(
                    "Invalid value: {}: must be object if x-kubernetes-embedded-resource is true",
                    go_quote(ty)
                ),
            ));
        }
        if !node.contains_key("properties") && !preserve {
            errs.push(FieldError::new(
                "FieldValueRequired",
                &at("properties"),
                "Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields".into(),
            ));
        }
    }
    if node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
        && node
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    {
        errs.push(FieldError::new(
            "FieldValueRequired",
            &at("x-kubernetes-list-map-keys"),
            "Required value: must not be empty if x-kubernetes-list-type is map".into(),
        ));
    }
    if pos == Position::Root
        && let Some(meta) = node.get("properties").and_then(|p| p.get("metadata"))
    {
        let only_names = meta.as_object().is_some_and(|m| {
            m.keys().all(|k| k == "type" || k == "properties")
                && m.get("properties")
                    .and_then(Value::as_object)
                    .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"))
        });
        if !only_names {
            errs.push(FieldError::new(
                "FieldValueForbidden",
                &at("properties[metadata]"),
                "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subscription_schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["subscribers"], "properties": {
                "schedulingStrategy": {"type": "string", "enum": ["Replication", "Dividing"],
                                       "default": "Replication"},
                "weight": {"type": "integer", "minimum": 0, "maximum": 100},
                "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
                "subscribers": {"type": "array", "minItems": 1, "maxItems": 2,
                    "items": {"type": "object", "properties": {
                        "clusterAffinity": {"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": true},
                        "weight": {"type": "integer", "default": 1}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": true},
                "note": {"type": "string", "nullable": true},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}})
    }

    #[test]
    fn prune_drops_undeclared_fields_and_reports_their_paths() {
        let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Sub",
            "metadata": {"name": "s", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"foo": 1, "weight": null, "note": null,
                "subscribers": [{"clusterAffinity": {"any": {"thing": 1}}, "extra": true}],
                "labels": {"x": "y"},
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "t", "junk": 1}, "data": {"k": "v"}}},
            "status": {"phase": "Ready", "other": 2},
            "top": true});
        let mut removed = prune(&mut obj, &subscription_schema());
        removed.sort();
        assert_eq!(
            removed,
            vec![
                "metadata.bogus",
                "spec.foo",
                "spec.subscribers[0].extra",
                "spec.template.metadata.junk",
                "status.other",
                "top"
            ]
        );
        assert_eq!(
            obj,
            json!({"apiVersion": "example.com/v1", "kind": "Sub",
                "metadata": {"name": "s", "labels": {"a": "b"}},
                "spec": {"note": null,
                    "subscribers": [{"clusterAffinity": {"any": {"thing": 1}}}],
                    "labels": {"x": "y"},
                    "template": {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "t"}, "data": {"k": "v"}}},
                "status": {"phase": "Ready"}})
        );
    }

    #[test]
    fn apply_defaults_fills_missing_fields_top_down() {
        let mut obj = json!({"spec": {"subscribers": [{}, {"weight": 5}]}});
        apply_defaults(&mut obj, &subscription_schema());
        assert_eq!(
            obj,
            json!({"spec": {"schedulingStrategy": "Replication",
                            "subscribers": [{"weight": 1}, {"weight": 5}]}})
        );
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "default": {}, "properties": {"replicas": {"type": "integer", "default": 1}}}}});
        let mut obj = json!({});
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj, json!({"spec": {"replicas": 1}}));
    }

    #[test]
    fn validate_words_errors_like_apiextensions() {
        let schema = subscription_schema();
        type Expected = Vec<(&'static str, &'static str, &'static str)>;
        let cases: Vec<(Value, Expected)> = vec![
            (json!({"spec": {"subscribers": [{}]}}), vec![]),
            (
                json!({"spec": {}}),
                vec![("FieldValueRequired", "spec.subscribers", "Required value")],
            ),
            (
                json!({"spec": {"subscribers": [{}], "schedulingStrategy": "Foo"}}),
                vec![(
                    "FieldValueNotSupported",
                    "spec.schedulingStrategy",
                    "Unsupported value: \"Foo\": supported values: \"Replication\", \"Dividing\"",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "weight": -1}}),
                vec![(
                    "FieldValueInvalid",
                    "spec.weight",
                    "Invalid value: -1: spec.weight in body should be greater than or equal to 0",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "weight": 101}}),
                vec![(
                    "FieldValueInvalid",
                    "spec.weight",
                    "Invalid value: 101: spec.weight in body should be less than or equal to 100",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "weight": "string"}}),
                vec![(
                    "FieldValueTypeInvalid",
                    "spec.weight",
                    "Invalid value: \"string\": spec.weight in body must be of type integer: \"string\"",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "weight": 1.5}}),
                vec![(
                    "FieldValueTypeInvalid",
                    "spec.weight",
                    "Invalid value: \"number\": spec.weight in body must be of type integer: \"number\"",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "weight": 2.0}}),
                vec![],
            ),
            (
                json!({"spec": {"subscribers": [{}], "name": "A1"}}),
                vec![(
                    "FieldValueInvalid",
                    "spec.name",
                    "Invalid value: \"A1\": spec.name in body should match '^[a-z]+$'",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "name": "a"}}),
                vec![(
                    "FieldValueInvalid",
                    "spec.name",
                    "Invalid value: \"a\": spec.name in body should be at least 2 chars long",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}], "name": "abcdef"}}),
                vec![(
                    "FieldValueTooLong",
                    "spec.name",
                    "Too long: may not be more than 5 bytes",
                )],
            ),
            (
                json!({"spec": {"subscribers": []}}),
                vec![(
                    "FieldValueInvalid",
                    "spec.subscribers",
                    "Invalid value: 0: spec.subscribers in body should have at least 1 items",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{}, {}, {}]}}),
                vec![(
                    "FieldValueTooMany",
                    "spec.subscribers",
                    "Too many: 3: must have at most 2 items",
                )],
            ),
            (
                json!({"spec": {"subscribers": [{"weight": "x"}], "labels": {"a": 1}}}),
                vec![
                    (
                        "FieldValueTypeInvalid",
                        "spec.labels.a",
                        "Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                    ),
                    (
                        "FieldValueTypeInvalid",
                        "spec.subscribers[0].weight",
                        "Invalid value: \"string\": spec.subscribers[0].weight in body must be of type integer: \"string\"",
                    ),
                ],
            ),
            (json!({"spec": {"subscribers": [{}], "port": 80}}), vec![]),
            (
                json!({"spec": {"subscribers": [{}], "template": {"metadata": {"name": "x"}}}}),
                vec![
                    (
                        "FieldValueRequired",
                        "spec.template.apiVersion",
                        "Required value: must not be empty",
                    ),
                    (
                        "FieldValueRequired",
                        "spec.template.kind",
                        "Required value: must not be empty",
                    ),
                ],
            ),
            (
                json!({"spec": {"subscribers": [{}], "port": "http"}}),
                vec![],
            ),
            (json!({"spec": {"subscribers": [{}], "note": null}}), vec![]),
            (
                json!({"spec": {"subscribers": [{}], "port": true}}),
                vec![(
                    "FieldValueTypeInvalid",
                    "spec.port",
                    "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                )],
            ),
        ];
        for (obj, want) in cases {
            let got: Vec<(String, String, String)> = validate(&obj, &schema)
                .into_iter()
                .map(|e| (e.reason, e.field, e.message))
                .collect();
            let want: Vec<(String, String, String)> = want
                .into_iter()
                .map(|(r, f, m)| (r.to_string(), f.to_string(), m.to_string()))
                .collect();
            assert_eq!(got, want, "{obj}");
        }
    }

    #[test]
    fn check_structural_accepts_structural_schemas() {
        assert_eq!(check_structural(&subscription_schema()), vec![]);
        let with_meta = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}}});
        assert_eq!(check_structural(&with_meta), vec![]);
    }

    #[test]
    fn check_structural_allows_the_int_or_string_any_of() {
        let schema = json!({"type": "object", "properties": {
            "a": {"x-kubernetes-int-or-string": true,
                  "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "b": {"x-kubernetes-int-or-string": true,
                  "allOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}]}}});
        assert_eq!(check_structural(&schema), vec![]);
    }

    #[test]
    fn check_structural_reports_non_structural_schemas() {
        let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
            (
                json!({"properties": {}}),
                vec![("type", "Required value: must not be empty at the root")],
            ),
            (
                json!({"type": "string"}),
                vec![(
                    "type",
                    "Invalid value: \"string\": must be object at the root",
                )],
            ),
            (
                json!({"type": "object", "properties": {"spec": {"properties": {}}}}),
                vec![(
                    "properties[spec].type",
                    "Required value: must not be empty for specified object fields",
                )],
            ),
            (
                json!({"type": "object", "properties": {"l": {"type": "array", "items": {}}}}),
                vec![(
                    "properties[l].items.type",
                    "Required value: must not be empty for specified array items",
                )],
            ),
            (
                json!({"type": "object", "properties": {"l": {"type": "array"}}}),
                vec![("properties[l].items", "Required value: must be specified")],
            ),
            (
                json!({"type": "object", "properties": {"m": {"type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": {"type": "string"}}}}),
                vec![(
                    "properties[m].additionalProperties",
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                )],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string",
                    "anyOf": [{"type": "string"}]}}}),
                vec![(
                    "properties[a].anyOf[0].type",
                    "Forbidden: must be empty to be structural",
                )],
            ),
            (
                json!({"type": "object", "properties": {"metadata": {"type": "object",
                    "properties": {"labels": {"type": "object"}}}}}),
                vec![(
                    "properties[metadata]",
                    "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
                )],
            ),
            (
                json!({"type": "object", "properties": {"l": {"type": "array",
                    "x-kubernetes-list-type": "map", "items": {"type": "object"}}}}),
                vec![(
                    "properties[l].x-kubernetes-list-map-keys",
                    "Required value: must not be empty if x-kubernetes-list-type is map",
                )],
            ),
        ];
        for (schema, want) in cases {
            let got: Vec<(String, String)> = check_structural(&schema)
                .into_iter()
                .map(|e| (e.field, e.message))
                .collect();
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(f, m)| (f.to_string(), m.to_string()))
                .collect();
            assert_eq!(got, want, "{schema}");
        }
    }
}
