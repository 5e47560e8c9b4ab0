//! The write engine: the storage rules of every write, kept apart from the HTTP layer
//! ([`super::handlers`]) as kube-apiserver keeps its generic registry
//! (`k8s.io/apiserver/pkg/registry/generic/registry`) apart from `endpoints/handlers`. It owns
//! create (name generation, defaults, metadata validation, the namespace check), update
//! (carried metadata, subresource and finalizer rules, generation), the commit path of patch
//! and server-side apply, delete (options, finalizers, graceful deletion, propagation), the
//! optimistic-concurrency loop, the hooks after a write or a removal, and the small metadata
//! helpers. Its functions take the resource, the object and typed options and return the
//! stored object or an [`ApiError`](super::error::ApiError); they never see a request or a
//! response.
//!
//! It is `server/engine/` rather than a top-level `registry/` because it works on the
//! server's [`State`](super::State) (store, served resources, controller queues) and answers
//! with the server's `ApiError`, and because `server::registry` already names the table of
//! served resources.
//!
//! Dependencies point one way: `handlers`, `controllers` and `crate::simulate` write through
//! the engine and `watch` uses its served-form helpers; the engine imports none of them (it
//! calls `crd` for the CRD strategy and registration) and wakes the controllers only through
//! `State` (`removed`, `wake`, the foreground set).

mod admission;
mod apply;
mod create;
mod defaults;
mod delete;
mod hooks;
mod meta;
mod optimistic;
mod patch;
mod scale;
mod update;

use crate::store::Obj;

pub(crate) use admission::FieldValidation;
pub(crate) use apply::apply;
pub(crate) use create::{create, store_new};
pub(crate) use delete::{DeleteOpts, Deleted, delete, delete_collection, delete_object};
pub(crate) use meta::{api_version_is, finalizers, meta_mut, mstr, now, present};
pub(crate) use patch::patch;
pub(crate) use scale::{scale_of, write_scale};
pub(crate) use update::{finish_internal_update, finish_update, update};

/// The field manager of devcluster's own writes (controllers, orphaning).
pub(crate) const INTERNAL_MANAGER: &str = "devcluster";

/// How managed fields are recorded for a write.
pub(crate) enum Manager<'a> {
    /// A non-apply write by this manager.
    Update(&'a str),
    /// Already recorded by server-side apply.
    Applied,
    /// Internal write by devcluster (controllers); recorded under this name.
    Internal(&'a str),
}

/// Outcome of a write.
pub(crate) struct Written {
    pub obj: Obj,
}

/// Options of a write sent by a client (create, update, patch, apply, scale).
#[derive(Clone, Copy)]
pub(crate) struct WriteOptions<'a> {
    /// The field manager recorded in `managedFields`.
    pub manager: &'a str,
    /// The subresource written through (`status`, `finalize`), if any.
    pub sub: Option<&'a str>,
    /// `dryRun=All`: every rule is checked, nothing is stored.
    pub dry_run: bool,
    /// What to do with fields a custom resource's schema does not know.
    pub field_validation: FieldValidation,
}
