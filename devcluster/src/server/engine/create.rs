//! Create: the rules of a new object, name generation, the namespace check, insertion.

use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::{WriteKind, admit_custom, validate_metadata};
use super::defaults::init_created;
use super::hooks::{after_create, after_write};
use super::meta::{is_crd, meta_mut, mstr, now, to_storage};
use super::{Manager, WriteOptions};
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::server::{State, crd};
use crate::store::{Obj, ResKey, Txn};

/// How often a generated name is drawn again when it is taken.
const GENERATE_ATTEMPTS: usize = 8;

const GENERATE_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Creates `obj` (its type and namespace already checked against the request): the create
/// rules, admission of a custom resource, then [`prepare_new`] and [`insert_new`] in one
/// transaction. Returns the stored object (under dry run, what would be stored) and the
/// admission warnings.
pub(crate) fn create(
    state: &State,
    info: &ResourceInfo,
    mut obj: Value,
    opts: &WriteOptions<'_>,
) -> Result<(Obj, Vec<String>), ApiError> {
    if !mstr(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if mstr(&obj, "name").is_empty() && mstr(&obj, "generateName").is_empty() {
        return Err(ApiError::invalid_field(
            info,
            "",
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let warnings = admit_custom(
        info,
        &mut obj,
        opts.field_validation,
        WriteKind::CreateOrUpdate,
    )?;
    let mut obj = to_storage(info, obj);
    prepare_new(info, &mut obj, Manager::Update(opts.manager))?;
    let mut txn = state.store.begin();
    let stored = insert_new(state, &mut txn, info, obj, opts.dry_run)?;
    txn.commit()?;
    Ok((stored, warnings))
}

/// Stores a new object in `txn` (seeding, simulated nodes). Returns the stored object.
pub(crate) fn store_new(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    mut obj: Value,
    manager: Manager<'_>,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    prepare_new(info, &mut obj, manager)?;
    insert_new(state, txn, info, obj, dry_run)
}

/// The part of a create that needs no stored state (server-owned fields, CRD status,
/// managedFields): done before the store lock is taken.
pub(super) fn prepare_new(
    info: &ResourceInfo,
    obj: &mut Value,
    manager: Manager<'_>,
) -> Result<(), ApiError> {
    let now = now();
    init_created(info, obj, &now);
    if is_crd(info) {
        crd::prepare(info, obj, None)?;
    }
    match manager {
        Manager::Update(m) | Manager::Internal(m) => {
            objects::apply::record_update(None, obj, m, None, &now)
        }
        Manager::Applied => {}
    }
    Ok(())
}

/// Stores a prepared new object: name generation, validation, namespace checks, conflicts.
pub(super) fn insert_new(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    mut obj: Value,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    let key = storage_key(info);
    pick_name(txn, info, &key, &mut obj)?;
    if dry_run {
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(String::new()));
        return Ok(Arc::new(obj));
    }
    let stored = txn.put(&key, obj);
    after_create(txn, info, &stored);
    after_write(state, txn, info, &stored);
    Ok(stored)
}

/// Settles the name of a new object (drawing one from `generateName`, again while it is
/// taken) and checks the metadata and the namespace.
fn pick_name(
    txn: &Txn<'_>,
    info: &ResourceInfo,
    key: &ResKey,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let generate = mstr(obj, "name").is_empty() && !mstr(obj, "generateName").is_empty();
    let ns = mstr(obj, "namespace").to_string();
    let mut attempts = 0;
    loop {
        if generate {
            let base = mstr(obj, "generateName").to_string();
            meta_mut(obj).insert("name".into(), Value::String(generate_name(&base)));
        }
        let name = mstr(obj, "name").to_string();
        let errs = validate_metadata(info, obj);
        if !errs.is_empty() {
            return Err(ApiError::invalid(info, &name, &errs));
        }
        check_namespace_writable(txn, info, &ns, &name)?;
        if txn.get(key, &ns, &name).is_none() {
            return Ok(());
        }
        attempts += 1;
        if !(generate && attempts < GENERATE_ATTEMPTS) {
            return Err(ApiError::already_exists(info, &name));
        }
    }
}

fn generate_name(base: &str) -> String {
    use rand::Rng;
    let base: String = base.chars().take(58).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| GENERATE_CHARS[rng.random_range(0..GENERATE_CHARS.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// A namespaced object needs an existing namespace that is not terminating.
fn check_namespace_writable(
    txn: &Txn<'_>,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    if !info.namespaced {
        return Ok(());
    }
    let nskey = ResKey::new("", "namespaces");
    match txn.get(&nskey, "", ns) {
        None => Err(ApiError::namespace_not_found(ns)),
        Some(n) if !mstr(&n, "deletionTimestamp").is_empty() => {
            let mut e = ApiError::forbidden(
                info,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{"reason":"NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field":"metadata.namespace"}]);
            }
            Err(e)
        }
        Some(_) => Ok(()),
    }
}
