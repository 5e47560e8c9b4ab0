//! The commit path of server-side apply: the applied configuration (already decoded and
//! checked against the request) is merged with the stored object under field ownership,
//! creating the object when it is absent.

use serde_json::{Value, json};

use super::admission::{WriteKind, admit_custom};
use super::create::{insert_new, prepare_new};
use super::meta::{mstr, now, present, to_storage};
use super::optimistic::optimistic;
use super::update::{admit_update, commit_update};
use super::{Manager, WriteOptions};
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::objects::apply::{ApplyError, FieldConflict};
use crate::server::State;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::store::Obj;

/// Outcome of a server-side apply.
pub(crate) struct Applied {
    /// Whether the apply created the object.
    pub created: bool,
    /// The stored object (under dry run, what would be stored).
    pub obj: Obj,
    /// Admission warnings.
    pub warnings: Vec<String>,
}

/// Applies `applied` as `opts.manager` to `ns`/`name` (creating it when absent, except
/// through a subresource), with its `metadata.resourceVersion` as a precondition; `force`
/// takes over fields owned by other managers instead of refusing with a conflict.
pub(crate) fn apply(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    applied: &Value,
    force: bool,
    opts: &WriteOptions<'_>,
) -> Result<Applied, ApiError> {
    let applied_rv = mstr(applied, "resourceVersion").to_string();
    let key = storage_key(info);
    let now = now();
    let step = ApplyStep {
        info,
        name,
        applied,
        force,
        now: &now,
        opts,
    };
    optimistic(
        state,
        info,
        &key,
        ns,
        name,
        |old| {
            if !applied_rv.is_empty()
                && old.is_none_or(|o| mstr(o, "resourceVersion") != applied_rv)
            {
                return Err(ApiError::conflict(info, name));
            }
            match old {
                None => step.create(),
                Some(old) => step.update(old),
            }
        },
        |txn, old, (new, warnings)| match old {
            None => Ok(Applied {
                created: true,
                obj: insert_new(state, txn, info, new, opts.dry_run)?,
                warnings,
            }),
            Some(old) => Ok(Applied {
                created: false,
                obj: commit_update(state, txn, info, old, new, opts.dry_run)?.obj,
                warnings,
            }),
        },
    )
}

/// One apply, prepared from a snapshot of the stored object.
struct ApplyStep<'a> {
    info: &'a ResourceInfo,
    name: &'a str,
    applied: &'a Value,
    force: bool,
    now: &'a str,
    opts: &'a WriteOptions<'a>,
}

impl ApplyStep<'_> {
    /// The object an apply creates, with its admission warnings.
    fn create(&self) -> Result<(Value, Vec<String>), ApiError> {
        if self.opts.sub.is_some() {
            return Err(ApiError::not_found(self.info, self.name));
        }
        let uid = mstr(self.applied, "uid");
        if !uid.is_empty() {
            return Err(ApiError::conflict_msg(
                self.info,
                self.name,
                &format!(
                    "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                ),
            ));
        }
        let mut new = self.merge(None)?;
        let warnings = admit_custom(
            self.info,
            &mut new,
            self.opts.field_validation,
            WriteKind::Patch,
        )?;
        let mut new = to_storage(self.info, new);
        prepare_new(self.info, &mut new, Manager::Applied)?;
        Ok((new, warnings))
    }

    /// The update of `old` an apply makes, with its admission warnings.
    fn update(&self, old: &Obj) -> Result<(Value, Vec<String>), ApiError> {
        let live = present(self.info, old);
        let new = self.merge(Some(&live))?;
        admit_update(self.info, old, new, self.opts, Manager::Applied)
    }

    /// The applied configuration merged into `live` (the served form), managedFields
    /// recorded.
    fn merge(&self, live: Option<&Value>) -> Result<Value, ApiError> {
        objects::apply::server_side_apply(
            live,
            self.applied,
            self.opts.manager,
            self.force,
            self.now,
        )
        .map_err(|e| apply_error(self.info, self.name, e))
    }
}

fn apply_error(info: &ResourceInfo, name: &str, e: ApplyError) -> ApiError {
    match e {
        ApplyError::Conflicts(cs) => conflict_error(info, name, &cs),
        ApplyError::Invalid(m) => ApiError::new(422, "Invalid", m),
    }
}

/// The 409 of an apply that would take fields owned by other managers.
fn conflict_error(info: &ResourceInfo, name: &str, cs: &[FieldConflict]) -> ApiError {
    let message = if cs.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\": {}",
            cs[0].manager, cs[0].field
        )
    } else {
        let mut m = format!("Apply failed with {} conflicts: ", cs.len());
        let mut last = "";
        for c in cs {
            if c.manager != last {
                m.push_str(&format!("conflicts with \"{}\":\n", c.manager));
                last = &c.manager;
            }
            m.push_str(&format!("- {}\n", c.field));
        }
        m.trim_end().to_string()
    };
    let mut d = json!({"name": name, "kind": info.plural, "causes": cs.iter().map(|c| json!({
        "reason":"FieldManagerConflict","message": format!("conflict with \"{}\"", c.manager),
        "field": c.field})).collect::<Vec<_>>()});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    ApiError {
        details: Some(d),
        ..ApiError::new(409, "Conflict", message)
    }
}
