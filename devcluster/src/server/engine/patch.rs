//! The commit path of a JSON, merge or strategic merge patch: the patch itself is computed
//! by the caller (request parsing) from the served form of the stored object.

use serde_json::Value;

use super::meta::{mstr, present};
use super::optimistic::optimistic;
use super::update::{admit_update, commit_update};
use super::{Manager, WriteOptions, Written};
use crate::api::resource::ResourceInfo;
use crate::server::State;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::store::Obj;

/// Patches the stored object `ns`/`name`: checks `precondition_rv` (the patch's
/// `metadata.resourceVersion`), lets `patched` compute the new object from the object as
/// served through `info`, keeps name and uid, then admission and the update rules, in the
/// optimistic loop. Returns the written object and the admission warnings.
pub(crate) fn patch(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    precondition_rv: Option<&str>,
    opts: &WriteOptions<'_>,
    mut patched: impl FnMut(&Value) -> Result<Value, ApiError>,
) -> Result<(Written, Vec<String>), ApiError> {
    let key = storage_key(info);
    optimistic(
        state,
        info,
        &key,
        ns,
        name,
        |old| {
            let old = old.ok_or_else(|| ApiError::not_found(info, name))?;
            if let Some(rv) = precondition_rv
                && !rv.is_empty()
                && rv != mstr(old, "resourceVersion")
            {
                return Err(ApiError::conflict(info, name));
            }
            let new = patched(&present(info, old))?;
            check_identity(info, name, old, &new)?;
            admit_update(info, old, new, opts, Manager::Update(opts.manager))
        },
        |txn, old, (new, warnings)| {
            let old = old.ok_or_else(|| ApiError::not_found(info, name))?;
            Ok((
                commit_update(state, txn, info, old, new, opts.dry_run)?,
                warnings,
            ))
        },
    )
}

/// A patch may change neither the name nor the uid.
fn check_identity(info: &ResourceInfo, name: &str, old: &Obj, new: &Value) -> Result<(), ApiError> {
    if mstr(new, "name") != name {
        return Err(ApiError::invalid_field(
            info,
            name,
            "FieldValueInvalid",
            "metadata.name",
            "Invalid value: field is immutable",
        ));
    }
    let uid = mstr(new, "uid");
    if !uid.is_empty() && uid != mstr(old, "uid") {
        return Err(ApiError::invalid_field(
            info,
            name,
            "FieldValueInvalid",
            "metadata.uid",
            &format!("Invalid value: \"{uid}\": field is immutable"),
        ));
    }
    Ok(())
}
