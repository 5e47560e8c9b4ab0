//! The optimistic-concurrency commit loop of writes computed from the stored object.

use std::sync::Arc;

use super::meta::mstr;
use crate::api::resource::ResourceInfo;
use crate::server::State;
use crate::server::error::ApiError;
use crate::store::{Obj, ResKey, Txn};

/// After this many lost races the client gets a Conflict and retries itself.
const ATTEMPTS: usize = 16;

/// Runs a write computed from the stored object the way kube-apiserver's GuaranteedUpdate
/// does: `prepare` works on a snapshot without the store lock (patching, server-side apply,
/// validation and managedFields are the expensive part), then `commit` runs under the lock
/// only if the object is still that snapshot; otherwise the write is prepared again from the
/// newer object. Writes to different objects thus run in parallel.
pub(super) fn optimistic<T, R>(
    state: &State,
    info: &ResourceInfo,
    key: &ResKey,
    ns: &str,
    name: &str,
    mut prepare: impl FnMut(Option<&Obj>) -> Result<T, ApiError>,
    mut commit: impl FnMut(&mut Txn<'_>, Option<&Obj>, T) -> Result<R, ApiError>,
) -> Result<R, ApiError> {
    for _ in 0..ATTEMPTS {
        let seen = state.store.get(key, ns, name);
        let prepared = prepare(seen.as_ref())?;
        let mut txn = state.store.begin();
        let current = txn.get(key, ns, name);
        if !same_version(seen.as_ref(), current.as_ref()) {
            continue;
        }
        let result = commit(&mut txn, seen.as_ref(), prepared)?;
        txn.commit()?;
        return Ok(result);
    }
    Err(ApiError::conflict(info, name))
}

/// Whether the object is still the snapshot a write was prepared from.
fn same_version(seen: Option<&Obj>, current: Option<&Obj>) -> bool {
    match (seen, current) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            Arc::ptr_eq(a, b) || mstr(a, "resourceVersion") == mstr(b, "resourceVersion")
        }
        _ => false,
    }
}
