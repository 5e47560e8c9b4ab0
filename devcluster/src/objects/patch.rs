//! JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch, as
//! kube-apiserver applies them.

use serde_json::Value;

/// Why a patch could not be applied. The HTTP layer maps these to `metav1.Status`.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// The patch body is not a valid patch document (400 BadRequest).
    #[error("{0}")]
    Malformed(String),
    /// A JSON patch operation failed, e.g. `test` or a missing path (422 Invalid).
    #[error("{0}")]
    OperationFailed(String),
}

/// Applies an RFC 6902 JSON patch (`application/json-patch+json`).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let _ = (doc, patch);
    Err(PatchError::Malformed("json patch: not implemented yet".into()))
}

/// Applies an RFC 7386 merge patch (`application/merge-patch+json`): `null` deletes, arrays
/// are replaced whole.
pub fn merge_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let _ = (doc, patch);
    Err(PatchError::Malformed("merge patch: not implemented yet".into()))
}

/// Applies a strategic merge patch (`application/strategic-merge-patch+json`) to an object of
/// a built-in kind, honouring the keyed lists kubectl relies on (containers, ports, env,
/// volumes, volumeMounts, conditions, ...) and the `$patch`, `$retainKeys`,
/// `$deleteFromPrimitiveList` and `$setElementOrder` directives.
pub fn strategic_merge_patch(
    group: &str,
    kind: &str,
    doc: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let _ = (group, kind, doc, patch);
    Err(PatchError::Malformed("strategic merge patch: not implemented yet".into()))
}
