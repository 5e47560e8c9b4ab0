//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), delegating to
//! [`crate::api::table`].

use serde_json::Value;

use super::request::Query;
use crate::api::resource::ResourceInfo;
use crate::api::table::IncludeObject;

/// `includeObject` of a table request.
pub type Include = IncludeObject;

/// Reads `includeObject` (default `Metadata`).
pub fn include_object(q: &Query) -> Include {
    match q.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

/// Builds a `Table` for `objects`.
pub fn table(info: &ResourceInfo, objects: &[Value], include: Include, list_meta: Value) -> Value {
    crate::api::table::to_table(info, objects, include, chrono::Utc::now(), list_meta)
}
