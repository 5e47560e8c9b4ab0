//! Strategic merge patch for built-in kinds.

use super::patch::PatchError;
use serde_json::Value;

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
    Err(PatchError::Malformed(
        "strategic merge patch: not implemented yet".into(),
    ))
}
