//! CustomResourceDefinitions: validation, defaulting, status (NamesAccepted, Established) and
//! registration of the served versions. A CRD is Established as soon as it is stored, and
//! its resources are served from that moment.

use serde_json::{Value, json};

use super::State;
use super::error::ApiError;
use crate::api::resource::ResourceInfo;
use crate::objects::schema::FieldError;

fn err(reason: &str, field: &str, message: String) -> FieldError {
    FieldError {
        reason: reason.to_string(),
        field: field.to_string(),
        message,
    }
}

/// Validates and defaults a CRD being written, and computes its status.
pub fn prepare(info: &ResourceInfo, crd: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut errs = names_errors(crd, &name);
    errs.extend(versions_errors(crd));
    if !errs.is_empty() {
        return Err(ApiError::invalid(info, &name, &errs));
    }
    set_defaults(crd);
    // Status (server-owned: recomputed from the previous status on every write).
    crd["status"] = old.map(|o| o["status"].clone()).unwrap_or(Value::Null);
    crd["status"] = crate::api::crd::crd_status(crd);
    Ok(())
}

/// The rules of `spec.group`, `spec.names`, `metadata.name` and `spec.scope`.
fn names_errors(crd: &Value, name: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = crd["spec"]["group"].as_str().unwrap_or("").to_string();
    let kind = crd["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let plural = crd["spec"]["names"]["plural"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if group.is_empty() {
        errs.push(err(
            "FieldValueRequired",
            "spec.group",
            "Required value".into(),
        ));
    } else if !group.contains('.') {
        errs.push(err(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        errs.push(err(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value".into(),
        ));
    } else if plural != plural.to_ascii_lowercase() {
        errs.push(err(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: \"{plural}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        ));
    }
    if kind.is_empty() {
        errs.push(err(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value".into(),
        ));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(err(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match crd["spec"]["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        other => errs.push(err(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{}\": supported values: \"Cluster\", \"Namespaced\"",
                other.unwrap_or("")
            ),
        )),
    }
    errs
}

/// The rules of `spec.versions`: one storage version, at least one served, structural
/// schemas.
fn versions_errors(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(err(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage: Vec<String> = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    if !versions.is_empty() && storage.len() != 1 {
        errs.push(err(
            "FieldValueInvalid",
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                versions.len()
            ),
        ));
    }
    if !versions.is_empty() && !versions.iter().any(|v| v["served"].as_bool() == Some(true)) {
        errs.push(err(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: must have at least one version marked as served".into(),
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        match v["schema"].get("openAPIV3Schema") {
            None => errs.push(err(
                "FieldValueRequired",
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required".into(),
            )),
            Some(schema) => {
                for mut e in crate::objects::schema::check_structural(schema) {
                    e.field = format!(
                        "spec.versions[{i}].schema.openAPIV3Schema{}",
                        if e.field.is_empty() {
                            String::new()
                        } else {
                            format!(".{}", e.field)
                        }
                    );
                    errs.push(e);
                }
            }
        }
    }
    errs
}

/// Defaults of `spec.names` and `spec.conversion`.
fn set_defaults(crd: &mut Value) {
    let kind = crd["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if crd["spec"]["names"]["singular"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        crd["spec"]["names"]["singular"] = json!(kind.to_ascii_lowercase());
    }
    if crd["spec"]["names"]["listKind"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        crd["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if crd["spec"]["conversion"].is_null() {
        crd["spec"]["conversion"] = json!({"strategy": "None"});
    }
}

/// Sets the status of a CRD that just got its `deletionTimestamp` (adds `Terminating`).
pub fn set_terminating(crd: &mut Value) {
    crd["status"] = crate::api::crd::crd_status(crd);
}

/// The resources served for a CRD.
pub fn resources_of(crd: &Value) -> Vec<ResourceInfo> {
    crate::api::crd::resources_from_crd(crd)
}

/// Serves the versions of a stored CRD (called after every write of a CRD).
pub fn register(state: &State, crd: &Value) {
    let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
    let infos = resources_of(crd);
    state.registry.write().set_crd(&name, infos);
}
