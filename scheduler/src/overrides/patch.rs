//! Applying one `OverrideConfig` to a JSON document.

use atoll_crds::apps::{FieldFormat, OverrideConfig, OverrideType};
use json_patch::{Patch, PatchErrorKind, PatchOperation};
use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// Largest number of operations one JSONPatch override may carry (as Clusternet).
pub const MAX_PATCH_OPERATIONS: usize = 10_000;

/// Applies one override to `doc`. `origin` names the override in errors (see
/// `OverrideSet::origin`). A blank `value` does nothing (as Clusternet).
pub fn apply_override(doc: &mut Value, config: &OverrideConfig, origin: &str) -> Result<(), Error> {
    if config.override_chart == Some(true) || config.type_ == OverrideType::Helm {
        return Err(Error::ApplyHelmOverride {
            origin: origin.to_owned(),
        });
    }
    if config.value.trim().is_empty() {
        return Ok(());
    }
    let value = parse_value(&config.value, origin)?;
    match config.type_ {
        OverrideType::JSONPatch => {
            let patch = to_json_patch(value, origin)?;
            apply_json_patch(doc, &patch, origin)
        }
        OverrideType::MergePatch => {
            if !value.is_object() {
                return Err(Error::ParseOverrideValue {
                    origin: origin.to_owned(),
                    reason: "a MergePatch value must be a map of the fields to change, for \
                             example `metadata: {labels: {tier: web}}`"
                        .to_owned(),
                });
            }
            json_patch::merge(doc, &value);
            Ok(())
        }
        OverrideType::FieldJSONPatch => {
            let patch = to_json_patch(value, origin)?;
            edit_field(doc, config, origin, |inner| {
                apply_json_patch(inner, &patch, origin)
            })
        }
        OverrideType::FieldMergePatch => edit_field(doc, config, origin, |inner| {
            json_patch::merge(inner, &value);
            Ok(())
        }),
        OverrideType::Helm => Err(Error::ApplyHelmOverride {
            origin: origin.to_owned(),
        }),
    }
}

/// Parses an override value: JSON first (fast path), else YAML, which accepts JSON too.
fn parse_value(text: &str, origin: &str) -> Result<Value, Error> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(v);
    }
    serde_yaml::from_str::<Value>(text).map_err(|e| Error::ParseOverrideValue {
        origin: origin.to_owned(),
        reason: format!("not valid YAML or JSON ({e}); fix the value's syntax"),
    })
}

fn to_json_patch(value: Value, origin: &str) -> Result<Patch, Error> {
    let patch: Patch = serde_json::from_value(value).map_err(|e| Error::ParseOverrideValue {
        origin: origin.to_owned(),
        reason: format!(
            "not a JSON patch ({e}); write a list of operations such as \
             `[{{\"op\": \"replace\", \"path\": \"/spec/replicas\", \"value\": 3}}]`"
        ),
    })?;
    if patch.0.len() > MAX_PATCH_OPERATIONS {
        return Err(Error::ParseOverrideValue {
            origin: origin.to_owned(),
            reason: format!(
                "{} operations exceed the limit of {MAX_PATCH_OPERATIONS}; split the override",
                patch.0.len()
            ),
        });
    }
    Ok(patch)
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// Applies a JSON patch atomically. A failing operation (missing path, failed `test`) is an error
/// naming the operation and the path; the document is left unchanged.
fn apply_json_patch(doc: &mut Value, patch: &Patch, origin: &str) -> Result<(), Error> {
    json_patch::patch(doc, &patch.0).map_err(|e| {
        let op = patch.0.get(e.operation).map_or("?", op_name);
        let hint = match e.kind {
            PatchErrorKind::TestFailed => {
                "the value differs from what the test operation expects".to_owned()
            }
            PatchErrorKind::InvalidFromPointer => {
                "the \"from\" path does not exist in the object; fix the path".to_owned()
            }
            PatchErrorKind::CannotMoveInsideItself => {
                "cannot move a value inside itself; fix the paths".to_owned()
            }
            _ => "the path does not exist in the object (Clusternet would silently skip this \
                  patch); fix the path, add the missing parent first, or use a MergePatch"
                .to_owned(),
        };
        Error::ApplyJsonPatch {
            origin: origin.to_owned(),
            reason: format!(
                "JSON patch operation #{} ({op}) failed at path {:?}: {hint}",
                e.operation,
                e.path.as_str()
            ),
        }
    })
}

/// The format of an embedded document when `fieldFormat` is absent: JSON when the text (trimmed)
/// starts with `{` or `[` and parses as JSON, YAML otherwise.
pub fn detect_format(text: &str) -> FieldFormat {
    let t = text.trim_start();
    if (t.starts_with('{') || t.starts_with('[')) && serde_json::from_str::<Value>(t).is_ok() {
        FieldFormat::JSON
    } else {
        FieldFormat::YAML
    }
}

fn format_name(format: FieldFormat) -> &'static str {
    match format {
        FieldFormat::JSON => "JSON",
        FieldFormat::YAML => "YAML",
    }
}

/// Runs `edit` on the document embedded in the string at `fieldPath`, then writes it back in the
/// same format (JSON with 4-space indent as Clusternet, or YAML). An empty string is left alone.
fn edit_field(
    doc: &mut Value,
    config: &OverrideConfig,
    origin: &str,
    edit: impl FnOnce(&mut Value) -> Result<(), Error>,
) -> Result<(), Error> {
    let path = config.field_path.as_deref().unwrap_or("");
    let read_err = |reason: &str| Error::ReadFieldPath {
        origin: origin.to_owned(),
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if path.is_empty() {
        return Err(read_err(
            "is missing; set fieldPath to the JSON pointer of a string field, for example \
             /data/config.yaml",
        ));
    }
    if !path.starts_with('/') {
        return Err(read_err(
            "is not a JSON pointer; start it with `/`, for example /data/config.yaml",
        ));
    }
    let Some(slot) = doc.pointer_mut(path) else {
        return Err(read_err("does not exist in the object; fix the path"));
    };
    let text = match slot {
        Value::String(s) => s.clone(),
        other => {
            let found = match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::Array(_) => "a list",
                Value::Object(_) => "a map",
                Value::String(_) => "a string",
            };
            return Err(read_err(&format!(
                "points to {found}, not a string; FieldJSONPatch/FieldMergePatch edit documents \
                 embedded in string fields (such as ConfigMap data), use JSONPatch or MergePatch \
                 for structured fields"
            )));
        }
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    let format = config.field_format.unwrap_or_else(|| detect_format(&text));
    let parse_err = |reason: String| Error::ParseField {
        origin: origin.to_owned(),
        path: path.to_owned(),
        format: format_name(format).to_owned(),
        reason,
    };
    let mut inner: Value = match format {
        FieldFormat::JSON => serde_json::from_str(&text).map_err(|e| parse_err(e.to_string()))?,
        FieldFormat::YAML => serde_yaml::from_str(&text).map_err(|e| parse_err(e.to_string()))?,
    };
    edit(&mut inner)?;
    let write_err = |reason: String| Error::WriteField {
        origin: origin.to_owned(),
        format: format_name(format).to_owned(),
        reason,
    };
    let written = match format {
        FieldFormat::JSON => to_json_4(&inner).map_err(write_err)?,
        FieldFormat::YAML => serde_yaml::to_string(&inner).map_err(|e| write_err(e.to_string()))?,
    };
    *slot = Value::String(written);
    Ok(())
}

/// JSON with a 4-space indent, as Go's `json.MarshalIndent(v, "", "    ")`.
fn to_json_4(value: &Value) -> Result<String, String> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    value.serialize(&mut ser).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}
