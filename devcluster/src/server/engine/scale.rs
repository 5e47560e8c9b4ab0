//! The `scale` subresource: the autoscaling/v1 Scale view of an object and writes through it.

use serde_json::{Value, json};

use super::meta::{mstr, present};
use super::update::finish_update;
use super::{Manager, WriteOptions};
use crate::api::resource::ResourceInfo;
use crate::server::State;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;

/// The object's `Scale` (autoscaling/v1).
pub(crate) fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(sc) = &info.scale else {
        return json!({});
    };
    let spec = get_path(obj, &sc.spec_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = get_path(obj, &sc.status_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    // Built-in workloads: kube-apiserver prints `spec.selector`; custom resources: the string
    // at the CRD's labelSelectorPath.
    let selector = match sc.label_selector_path.as_deref() {
        Some(p) => get_path(obj, p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        None if info.builtin => crate::api::table::format_selector(obj["spec"].get("selector")),
        None => String::new(),
    };
    let meta = obj.get("metadata").cloned().unwrap_or(json!({}));
    let mut m = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(f) {
            m[f] = v.clone();
        }
    }
    // autoscaling/v1 omits a zero `spec.replicas` and an empty `status.selector`.
    let mut scale = json!({"kind":"Scale","apiVersion":"autoscaling/v1","metadata": m,
        "spec":{},"status":{"replicas": status}});
    if spec != 0 {
        scale["spec"]["replicas"] = json!(spec);
    }
    if !selector.is_empty() {
        scale["status"]["selector"] = json!(selector);
    }
    scale
}

/// Writes `spec.replicas` through `/scale`: `new_scale` computes the new Scale from the
/// current one; its resourceVersion is a precondition when `rv_precondition` (an update, not
/// a patch). `opts.sub` is not used: the write is recorded as one to the main resource, and
/// `opts.field_validation` does not apply. Returns the Scale of the written object.
pub(crate) fn write_scale(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &WriteOptions<'_>,
    rv_precondition: bool,
    new_scale: impl FnOnce(&Value) -> Result<Value, ApiError>,
) -> Result<Value, ApiError> {
    let Some(sc) = info.scale.as_ref() else {
        return Err(ApiError::unknown_path());
    };
    let key = storage_key(info);
    let mut txn = state.store.begin();
    let old = txn
        .get(&key, ns, name)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    let new_scale = new_scale(&scale_of(info, &old))?;
    let rv = mstr(&new_scale, "resourceVersion");
    if rv_precondition && !rv.is_empty() && rv != mstr(&old, "resourceVersion") {
        return Err(ApiError::conflict(info, name));
    }
    let replicas = new_scale["spec"]["replicas"].as_i64().unwrap_or(0);
    let mut new = (*present(info, &old)).clone();
    set_path(&mut new, &sc.spec_replicas_path, json!(replicas));
    let written = finish_update(
        state,
        &mut txn,
        info,
        &old,
        new,
        None,
        Manager::Update(opts.manager),
        opts.dry_run,
    )?;
    txn.commit()?;
    Ok(scale_of(info, &written.obj))
}

fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

fn set_path(obj: &mut Value, path: &str, v: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == segs.len() - 1 {
            cur[*seg] = v;
            return;
        }
        cur = &mut cur[*seg];
    }
}
