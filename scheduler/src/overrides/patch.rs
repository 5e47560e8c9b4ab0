//! Applying one `OverrideConfig` to a JSON document.

use atoll_crds::apps::{FieldFormat, OverrideConfig, OverrideType};
use json_patch::{Patch, PatchError, PatchErrorKind, PatchOperation};
use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// Largest number of operations one JSONPatch override may carry (as Clusternet).
pub const MAX_PATCH_OPERATIONS: usize = 10_000;

/// Most bytes (as compact JSON) that the `copy` operations of the JSON patches of one rendering
/// may add, as kube-apiserver's `JSONPatchMaxCopyBytes` (3 MiB) does for one patch: each `copy`
/// of the root into itself doubles the document, so without a limit 40 operations would ask
/// for terabytes, and a limit per patch would let many overrides multiply it.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Most bytes (as compact JSON) the override values of one rendering may hold together: each
/// is bounded by its own text and by `atoll_yaml`'s expansion limit, and this bounds what many
/// overrides of one feed and cluster add up to.
pub const MAX_RENDER_VALUE_BYTES: usize = 16 * 1024 * 1024;

/// What the overrides of one rendering (one feed for one cluster) may still add: shared by all
/// of them, so that neither many overrides nor many patches multiply the limits.
#[derive(Debug)]
pub struct RenderBudget {
    copy_bytes: usize,
    value_bytes: usize,
}

impl Default for RenderBudget {
    fn default() -> Self {
        RenderBudget {
            copy_bytes: MAX_COPY_BYTES,
            value_bytes: MAX_RENDER_VALUE_BYTES,
        }
    }
}

impl RenderBudget {
    /// Spends `bytes` of the values' budget; `false` when it is spent.
    fn spend_value(&mut self, bytes: usize) -> bool {
        spend(&mut self.value_bytes, bytes)
    }

    /// Spends `bytes` of the copies' budget; `false` when it is spent.
    fn spend_copy(&mut self, bytes: usize) -> bool {
        spend(&mut self.copy_bytes, bytes)
    }
}

fn spend(left: &mut usize, bytes: usize) -> bool {
    match left.checked_sub(bytes) {
        Some(rest) => {
            *left = rest;
            true
        }
        None => false,
    }
}

/// Applies one override to `doc`, within what `budget` (the rendering's) still allows. `origin`
/// names the override in errors (see `OverrideSet::origin`). A blank `value` does nothing (as
/// Clusternet).
pub fn apply_override(
    doc: &mut Value,
    config: &OverrideConfig,
    origin: &str,
    budget: &mut RenderBudget,
) -> Result<(), Error> {
    if config.override_chart == Some(true) || config.type_ == OverrideType::Helm {
        return Err(Error::ApplyHelmOverride {
            origin: origin.to_owned(),
        });
    }
    if config.value.trim().is_empty() {
        return Ok(());
    }
    let value = parse_value(&config.value, origin)?;
    if !budget.spend_value(json_len(&value)) {
        return Err(Error::ParseOverrideValue {
            origin: origin.to_owned(),
            reason: format!(
                "the override values applied to this object for this cluster hold more than \
                 {MAX_RENDER_VALUE_BYTES} bytes together; write fewer or smaller overrides"
            ),
        });
    }
    match config.type_ {
        OverrideType::JSONPatch => {
            let patch = to_json_patch(value, origin)?;
            apply_json_patch(doc, &patch, origin, budget)
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
                apply_json_patch(inner, &patch, origin, budget)
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
    atoll_yaml::parse(text).map_err(|e| Error::ParseOverrideValue {
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
/// naming the operation and the path; the document is left unchanged. The operations run one by
/// one on a copy, so that the bytes added by `copy` operations can be counted against the
/// rendering's [`MAX_COPY_BYTES`] before each one.
fn apply_json_patch(
    doc: &mut Value,
    patch: &Patch,
    origin: &str,
    budget: &mut RenderBudget,
) -> Result<(), Error> {
    let mut work = doc.clone();
    for (index, op) in patch.0.iter().enumerate() {
        if let PatchOperation::Copy(copy) = op
            && let Some(source) = work.pointer(copy.from.as_str())
            && !budget.spend_copy(json_len(source))
        {
            return Err(Error::ApplyJsonPatch {
                origin: origin.to_owned(),
                reason: format!(
                    "JSON patch operation #{index} (copy) from {:?}: the copies of the \
                     overrides applied to this object for this cluster add more than \
                     {MAX_COPY_BYTES} bytes; copy smaller parts or write the values out",
                    copy.from.as_str()
                ),
            });
        }
        json_patch::patch(&mut work, std::slice::from_ref(op))
            .map_err(|e| patch_error(index, op, &e, origin))?;
    }
    *doc = work;
    Ok(())
}

/// The error of operation `index` of a JSON patch, with a hint for the user.
fn patch_error(index: usize, op: &PatchOperation, e: &PatchError, origin: &str) -> Error {
    let hint = match e.kind {
        PatchErrorKind::TestFailed => "the value differs from what the test operation expects",
        PatchErrorKind::InvalidFromPointer => {
            "the \"from\" path does not exist in the object; fix the path"
        }
        PatchErrorKind::CannotMoveInsideItself => {
            "cannot move a value inside itself; fix the paths"
        }
        _ => {
            "the path does not exist in the object (Clusternet would silently skip this patch); \
             fix the path, add the missing parent first, or use a MergePatch"
        }
    };
    Error::ApplyJsonPatch {
        origin: origin.to_owned(),
        reason: format!(
            "JSON patch operation #{index} ({}) failed at path {:?}: {hint}",
            op_name(op),
            e.path.as_str()
        ),
    }
}

/// The length of `value` as compact JSON, without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
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
        FieldFormat::YAML => atoll_yaml::parse(&text).map_err(|e| parse_err(e.to_string()))?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(type_: OverrideType, value: String, field_path: Option<&str>) -> OverrideConfig {
        OverrideConfig {
            name: Some("bomb".to_owned()),
            value,
            type_,
            override_chart: None,
            field_path: field_path.map(str::to_owned),
            field_format: None,
        }
    }

    /// An anchor of 10,000 scalars repeated by 2,000 aliases: 20 million values from 40 KiB,
    /// within serde_yaml's own alias-jump limit (it took seconds and GiBs before the bound).
    fn wide_alias_bomb() -> String {
        let scalars = vec!["x"; 10_000].join(", ");
        let aliases = vec!["*a"; 2_000].join(", ");
        format!("spec:\n  a: &a [{scalars}]\n  b: [{aliases}]\n")
    }

    /// Nine levels of ten aliases: a billion values from 400 bytes.
    fn deep_alias_bomb() -> String {
        let mut text = String::from("spec:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..9 {
            let refs = vec![format!("*l{}", level - 1); 10].join(", ");
            text.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn yaml_alias_bombs_in_an_override_value_are_refused() {
        for (name, bomb) in [("wide", wide_alias_bomb()), ("deep", deep_alias_bomb())] {
            let mut doc = json!({"spec": {"replicas": 1}});
            let before = doc.clone();
            let err = apply_override(
                &mut doc,
                &config(OverrideType::MergePatch, bomb, None),
                "o",
                &mut RenderBudget::default(),
            )
            .unwrap_err();
            assert!(
                matches!(err, Error::ParseOverrideValue { .. }),
                "{name}: {err}"
            );
            assert_eq!(doc, before, "{name}");
        }
    }

    #[test]
    fn yaml_alias_bombs_in_an_embedded_document_are_refused() {
        let mut doc = json!({"data": {"config.yaml": wide_alias_bomb()}});
        let before = doc.clone();
        let cfg = config(
            OverrideType::FieldMergePatch,
            "{\"spec\": {\"c\": 1}}".to_owned(),
            Some("/data/config.yaml"),
        );
        let err = apply_override(&mut doc, &cfg, "o", &mut RenderBudget::default()).unwrap_err();
        assert!(matches!(err, Error::ParseField { .. }), "{err}");
        assert_eq!(doc, before);
    }

    /// 160 KB of flow nesting took serde_yaml's scanner 2.6 s before its depth limit refused
    /// it; the override is refused before the scanner reads it.
    #[test]
    fn yaml_flow_nesting_bombs_in_an_override_value_are_refused() {
        let mut doc = json!({"spec": {"replicas": 1}});
        let bomb = "{a: ".repeat(32_000);
        let err = apply_override(
            &mut doc,
            &config(OverrideType::MergePatch, bomb, None),
            "o",
            &mut RenderBudget::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::ParseOverrideValue { reason, .. } if reason.contains("deeper than 128 levels")),
            "{err}"
        );
        assert_eq!(doc, json!({"spec": {"replicas": 1}}));
    }

    #[test]
    fn yaml_aliases_within_the_bound_still_expand() {
        let mut doc = json!({});
        let value = "a: &x {k: v}\nb: *x\n".to_owned();
        apply_override(
            &mut doc,
            &config(OverrideType::MergePatch, value, None),
            "o",
            &mut RenderBudget::default(),
        )
        .unwrap();
        assert_eq!(doc, json!({"a": {"k": "v"}, "b": {"k": "v"}}));
    }

    /// One copy of a 2 MiB field fits the copy budget; a second override copying it again
    /// does not: the budget is the rendering's, not each override's.
    #[test]
    fn the_copy_and_value_budgets_are_shared_by_every_override_of_a_rendering() {
        let big = "x".repeat(2 * 1024 * 1024);
        let mut doc = json!({"spec": {"big": big}});
        let mut budget = RenderBudget::default();
        let copy = |to: &str| {
            config(
                OverrideType::JSONPatch,
                json!([{"op": "copy", "from": "/spec/big", "path": to}]).to_string(),
                None,
            )
        };
        apply_override(&mut doc, &copy("/spec/c1"), "first", &mut budget).unwrap();
        let err = apply_override(&mut doc, &copy("/spec/c2"), "second", &mut budget).unwrap_err();
        assert!(
            matches!(&err, Error::ApplyJsonPatch { origin, .. } if origin == "second"),
            "{err}"
        );
        assert!(doc["spec"].get("c2").is_none());
        // Values: nine merge patches of just under 2 MiB each pass one by one, not together.
        let merge = |i: usize| {
            config(
                OverrideType::MergePatch,
                json!({"data": {format!("k{i}"): "y".repeat(2 * 1024 * 1024 - 64)}}).to_string(),
                None,
            )
        };
        let mut doc = json!({});
        let mut budget = RenderBudget::default();
        let refused = (0..9)
            .map(|i| apply_override(&mut doc, &merge(i), "m", &mut budget))
            .position(|r| r.is_err());
        assert_eq!(refused, Some(8), "16 MiB hold eight values of 2 MiB");
        for i in 0..9 {
            assert!(
                apply_override(&mut json!({}), &merge(i), "m", &mut RenderBudget::default())
                    .is_ok()
            );
        }
    }

    /// Forty copies of the root into itself would double the document forty times.
    #[test]
    fn json_patch_copies_beyond_the_limit_are_refused_and_leave_the_object_alone() {
        let ops: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        let mut doc = json!({"spec": {"replicas": 1, "note": "x".repeat(64)}});
        let before = doc.clone();
        let cfg = config(OverrideType::JSONPatch, Value::Array(ops).to_string(), None);
        let err = apply_override(&mut doc, &cfg, "o", &mut RenderBudget::default()).unwrap_err();
        match &err {
            Error::ApplyJsonPatch { reason, .. } => assert!(reason.contains("(copy)"), "{err}"),
            other => panic!("{other}"),
        }
        assert_eq!(doc, before);
    }

    #[test]
    fn json_patch_copies_within_the_limit_apply() {
        let mut doc = json!({"spec": {"a": [1, 2]}});
        let value = r#"[{"op": "copy", "from": "/spec/a", "path": "/spec/b"},
                        {"op": "add", "path": "/spec/b/-", "value": 3}]"#;
        let cfg = config(OverrideType::JSONPatch, value.to_owned(), None);
        apply_override(&mut doc, &cfg, "o", &mut RenderBudget::default()).unwrap();
        assert_eq!(doc, json!({"spec": {"a": [1, 2], "b": [1, 2, 3]}}));
    }

    #[test]
    fn a_failing_operation_is_named_by_its_index_and_leaves_the_object_alone() {
        let mut doc = json!({"spec": {"replicas": 1}});
        let before = doc.clone();
        let value = r#"[{"op": "replace", "path": "/spec/replicas", "value": 2},
                        {"op": "remove", "path": "/spec/missing"}]"#;
        let cfg = config(OverrideType::JSONPatch, value.to_owned(), None);
        let err = apply_override(&mut doc, &cfg, "o", &mut RenderBudget::default()).unwrap_err();
        assert!(err.to_string().contains("#1 (remove)"), "{err}");
        assert_eq!(doc, before);
    }
}
