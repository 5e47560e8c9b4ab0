//! Adding and removing a finalizer, written once for every controller. The change is a JSON
//! patch guarded by the object's `resourceVersion` (a `test` operation), so that it never
//! overwrites a concurrent change of the finalizer list; on a conflict the object is read again
//! and the patch computed anew.
//!
//! kube-runtime's `finalizer()` wraps a whole reconcile into apply and cleanup events; atoll's
//! finalizers are added and removed at points of their own (the hub's on Descriptions it does
//! not reconcile as a controller), so the two edits are offered alone.

use crate::Error;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::fmt::Debug;

/// How often a conflicting edit is computed again before giving up.
const ATTEMPTS: usize = 5;

/// Adds `finalizer` to the object `name` unless it has it, is gone, or is being deleted (the
/// API server refuses new finalizers then). Returns whether it was added.
pub async fn add<K>(api: &Api<K>, name: &str, finalizer: &str) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit(api, name, finalizer, Edit::Add, None).await
}

/// Removes `finalizer` from the object `name`. Returns whether it was removed (false when the
/// object is gone or never had it).
pub async fn remove<K>(api: &Api<K>, name: &str, finalizer: &str) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit(api, name, finalizer, Edit::Remove, None).await
}

/// What a cache (a watch, a reflector) last saw of an object: the first edit is computed from
/// it without reading the object, and only a conflict costs a read. (When the cache shows
/// nothing to change, nothing is read or written.)
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// `metadata.resourceVersion`.
    pub resource_version: &'a str,
    /// `metadata.finalizers`.
    pub finalizers: &'a [String],
    /// Whether it has a deletionTimestamp.
    pub deleting: bool,
}

/// [`add`], first trying the edit on what a cache saw of the object.
pub async fn add_seen<K>(
    api: &Api<K>,
    name: &str,
    finalizer: &str,
    seen: Seen<'_>,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit(api, name, finalizer, Edit::Add, Some(seen)).await
}

/// [`remove`], first trying the edit on what a cache saw of the object.
pub async fn remove_seen<K>(
    api: &Api<K>,
    name: &str,
    finalizer: &str,
    seen: Seen<'_>,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit(api, name, finalizer, Edit::Remove, Some(seen)).await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Edit {
    Add,
    Remove,
}

/// The finalizer list after `edit`, or `None` when nothing is to change.
fn edited(current: &[String], deleting: bool, finalizer: &str, edit: Edit) -> Option<Vec<String>> {
    let has = current.iter().any(|f| f == finalizer);
    match edit {
        Edit::Add if has || deleting => None,
        Edit::Add => Some(
            current
                .iter()
                .cloned()
                .chain([finalizer.to_owned()])
                .collect(),
        ),
        Edit::Remove if !has => None,
        Edit::Remove => Some(
            current
                .iter()
                .filter(|f| *f != finalizer)
                .cloned()
                .collect(),
        ),
    }
}

async fn edit<K>(
    api: &Api<K>,
    name: &str,
    finalizer: &str,
    edit: Edit,
    mut seen: Option<Seen<'_>>,
) -> Result<bool, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let failed = |source| Error::EditFinalizer {
        finalizer: finalizer.to_owned(),
        name: name.to_owned(),
        source,
    };
    for _ in 0..ATTEMPTS {
        let read;
        let (resource_version, current, deleting) = match seen.take() {
            Some(s) => (s.resource_version.to_owned(), s.finalizers, s.deleting),
            None => {
                let Some(object) = api.get_opt(name).await.map_err(failed)? else {
                    return Ok(false);
                };
                read = object;
                (
                    read.resource_version().unwrap_or_default(),
                    read.finalizers(),
                    read.meta().deletion_timestamp.is_some(),
                )
            }
        };
        let Some(finalizers) = edited(current, deleting, finalizer, edit) else {
            return Ok(false);
        };
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ]))
        .map_err(Error::EncodeFinalizerPatch)?;
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(true),
            // The object changed since it was read (a failed `test` is 422): read it again.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(failed(e)),
        }
    }
    Err(Error::FinalizerConflicts {
        finalizer: finalizer.to_owned(),
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_changes_the_list_only_when_needed() {
        let f = "apps.clusternet.io/finalizer";
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (current, deleting, edit) -> new list
        type Case<'a> = (&'a [&'a str], bool, Edit, Option<&'a [&'a str]>);
        let cases: [Case; 7] = [
            (&[], false, Edit::Add, Some(&[f])),
            (&["other"], false, Edit::Add, Some(&["other", f])),
            (&[f], false, Edit::Add, None),
            (&[], true, Edit::Add, None),
            (&["other", f], true, Edit::Remove, Some(&["other"])),
            (&[f], false, Edit::Remove, Some(&[])),
            (&["other"], false, Edit::Remove, None),
        ];
        for (current, deleting, edit, want) in cases {
            assert_eq!(
                edited(&list(current), deleting, f, edit),
                want.map(list),
                "{current:?} deleting={deleting}"
            );
        }
    }
}
