//! Validation of a write: metadata rules (names, annotations, owner references, data size,
//! labels, Event namespaces) and the schema of a custom resource (prune, default, validate).

use serde_json::Value;

use super::meta::mstr;
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::objects::schema::FieldError;
use crate::server::error::ApiError;

/// What happens to fields a custom resource's schema does not know (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Refuse the write.
    Strict,
    /// Drop them silently.
    Ignore,
    /// Drop them with a warning.
    #[default]
    Warn,
}

impl FieldValidation {
    /// Reads the `fieldValidation` parameter: `Strict`, `Ignore`, anything else warns.
    pub(crate) fn from_param(param: Option<&str>) -> FieldValidation {
        match param {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

/// Where a write comes from, for CR field validation wording.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteKind {
    CreateOrUpdate,
    Patch,
}

/// CR schema handling: prune, default, validate. Returns warnings for pruned fields.
pub(super) fn admit_custom(
    info: &ResourceInfo,
    obj: &mut Value,
    mode: FieldValidation,
    write: WriteKind,
) -> Result<Vec<String>, ApiError> {
    let Some(schema) = info.schema.as_ref() else {
        return Ok(Vec::new());
    };
    let name = mstr(obj, "name").to_string();
    let pruned = objects::schema::prune(obj, schema);
    let mut warnings = Vec::new();
    if !pruned.is_empty() {
        match mode {
            FieldValidation::Strict => return Err(strict_error(info, &name, &pruned, write)),
            FieldValidation::Ignore => {}
            FieldValidation::Warn => {
                warnings = pruned
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect();
            }
        }
    }
    objects::schema::apply_defaults(obj, schema);
    let errs = objects::schema::validate(obj, schema);
    if !errs.is_empty() {
        return Err(ApiError::invalid(info, &name, &errs));
    }
    Ok(warnings)
}

/// The refusal of unknown fields under `fieldValidation=Strict`.
fn strict_error(info: &ResourceInfo, name: &str, pruned: &[String], write: WriteKind) -> ApiError {
    let list = pruned
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    match write {
        WriteKind::CreateOrUpdate => ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {list}",
            info.kind, info.version, info.kind
        )),
        WriteKind::Patch => ApiError::invalid_field(
            info,
            name,
            "FieldValueInvalid",
            "patch",
            &format!("Invalid value: \"patch\": strict decoding error: {list}"),
        ),
    }
}

fn name_rule(info: &ResourceInfo) -> objects::validate::NameRule {
    use objects::validate::NameRule;
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035Label,
        _ => NameRule::Subdomain,
    }
}

/// The metadata rules of every write (and the data size of ConfigMaps and Secrets, the
/// namespace of Events), as kube-apiserver's causes.
pub(super) fn validate_metadata(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    errs.extend(name_error(info, obj));
    errs.extend(annotations_error(obj));
    owner_reference_errors(obj, &mut errs);
    errs.extend(data_size_error(info, obj));
    label_errors(obj, &mut errs);
    if info.builtin && info.kind == "Event" {
        errs.extend(event_namespace_error(obj));
    }
    errs
}

fn cause(reason: &str, field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        reason: reason.into(),
        field: field.into(),
        message: message.into(),
    }
}

fn name_error(info: &ResourceInfo, obj: &Value) -> Option<FieldError> {
    let name = mstr(obj, "name");
    if name.is_empty() {
        return Some(cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let msg = objects::validate::validate_name(name, name_rule(info))?;
    Some(cause(
        "FieldValueInvalid",
        "metadata.name",
        format!("Invalid value: \"{name}\": {msg}"),
    ))
}

/// `metadata.<field>` as a map, when it is one.
fn meta_map<'a>(obj: &'a Value, field: &str) -> Option<&'a serde_json::Map<String, Value>> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
}

fn annotations_error(obj: &Value) -> Option<FieldError> {
    let ann = meta_map(obj, "annotations")?;
    let size: usize = ann
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    (size > 256 * 1024).then(|| {
        cause(
            "FieldValueTooLong",
            "metadata.annotations",
            "Too long: must have at most 262144 bytes",
        )
    })
}

fn owner_reference_errors(obj: &Value, errs: &mut Vec<FieldError>) {
    let Some(refs) = obj
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return;
    };
    let controllers = refs.iter().filter(|r| r["controller"] == true).count();
    if controllers > 1 {
        errs.push(cause(
            "FieldValueInvalid",
            "metadata.ownerReferences",
            "Invalid value: []v1.OwnerReference: Only one reference can have Controller set to true",
        ));
    }
    for (i, r) in refs.iter().enumerate() {
        for f in ["apiVersion", "kind", "name", "uid"] {
            if r[f].as_str().is_none_or(str::is_empty) {
                errs.push(cause(
                    "FieldValueRequired",
                    format!("metadata.ownerReferences[{i}].{f}"),
                    "Required value",
                ));
            }
        }
    }
}

/// ConfigMaps and Secrets hold at most 1 MiB of data.
fn data_size_error(info: &ResourceInfo, obj: &Value) -> Option<FieldError> {
    if !(info.builtin
        && info.group.is_empty()
        && matches!(info.kind.as_str(), "ConfigMap" | "Secret"))
    {
        return None;
    }
    let size: usize = ["data", "binaryData"]
        .iter()
        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    (size > 1024 * 1024).then(|| {
        cause(
            "FieldValueTooLong",
            String::new(),
            format!(
                "Too long: must have at most 1048576 bytes (data of a {})",
                info.kind
            ),
        )
    })
}

fn label_errors(obj: &Value, errs: &mut Vec<FieldError>) {
    if let Some(labels) = meta_map(obj, "labels") {
        for (field, message) in objects::validate::validate_labels(labels) {
            errs.push(cause("FieldValueInvalid", field, message));
        }
    }
}

/// kube-apiserver's check that an Event lives where the object it is about does (either API;
/// the message always says `involvedObject`): an Event about a cluster-scoped object belongs in
/// `default` (also `kube-system` for an Event with `eventTime`, the events.k8s.io form); one
/// without `eventTime` about a namespaced object belongs in that object's namespace.
fn event_namespace_error(obj: &Value) -> Option<FieldError> {
    let event_ns = mstr(obj, "namespace");
    let target = obj
        .get("involvedObject")
        .or_else(|| obj.get("regarding"))
        .unwrap_or(&Value::Null);
    let target_ns = target
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let new_style = obj.get("eventTime").is_some_and(|t| !t.is_null());
    let ok = match (new_style, target_ns.is_empty()) {
        (false, true) => event_ns.is_empty() || event_ns == "default",
        (false, false) => event_ns == target_ns,
        (true, true) => event_ns == "default" || event_ns == "kube-system",
        (true, false) => true,
    };
    (!ok).then(|| {
        cause(
            "FieldValueInvalid",
            "involvedObject.namespace",
            format!("Invalid value: \"{target_ns}\": does not match event.namespace"),
        )
    })
}
