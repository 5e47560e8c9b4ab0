//! JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch, as
//! kube-apiserver applies them.

use serde_json::{Map, Value};

pub use super::smp::strategic_merge_patch;

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

/// The most operations kube-apiserver accepts in one JSON patch; more is 413
/// `RequestEntityTooLarge`. [`json_patch()`] reports it as [`PatchError::Malformed`] with the
/// message of [`too_many_operations_message`]; the HTTP layer should check the count first.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The most bytes (as JSON) that the `copy` operations of one JSON patch may add: kube-apiserver's
/// `JSONPatchMaxCopyBytes` (3 MiB), which it hands to evanphx/json-patch as
/// `AccumulatedCopySizeLimit`. Without it, each `copy` of the root into a new member doubles the
/// document, and a few dozen operations exhaust memory.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// The message kube-apiserver sends (413) for a JSON patch with `count` operations.
pub fn too_many_operations_message(count: usize) -> String {
    format!(
        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {count}"
    )
}

/// Applies an RFC 6902 JSON patch (`application/json-patch+json`).
///
/// Follows evanphx/json-patch v4 as kube-apiserver uses it: `test` of a missing member against
/// `null` succeeds (kube-runtime's finalizer helper relies on it), `replace` and `remove` need
/// an existing member, and the patch is atomic (any failed op leaves `doc` untouched).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError::Malformed("json patch must be a JSON array".into()))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::Malformed(too_many_operations_message(
            ops.len(),
        )));
    }
    let parsed = ops.iter().map(parse_op).collect::<Result<Vec<_>, _>>()?;
    let mut out = doc.clone();
    let mut copied = 0;
    for op in parsed {
        apply_op(&mut out, op, &mut copied)?;
    }
    Ok(out)
}

/// One decoded JSON patch operation.
enum Op<'a> {
    Add(Vec<String>, &'a Value),
    Remove(Vec<String>),
    Replace(Vec<String>, &'a Value),
    Move {
        from: Vec<String>,
        path: Vec<String>,
    },
    Copy {
        from: Vec<String>,
        path: Vec<String>,
    },
    Test(Vec<String>, &'a Value),
}

fn parse_op(op: &Value) -> Result<Op<'_>, PatchError> {
    let obj = op
        .as_object()
        .ok_or_else(|| PatchError::Malformed("json patch operation must be an object".into()))?;
    let kind = obj
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| PatchError::Malformed("json patch operation has no \"op\"".into()))?;
    let pointer = |key: &str| -> Result<Vec<String>, PatchError> {
        let raw = obj.get(key).and_then(Value::as_str).ok_or_else(|| {
            PatchError::Malformed(format!("json patch operation {kind} has no \"{key}\""))
        })?;
        parse_pointer(raw)
    };
    // A missing "value" is an error for add/replace/test (evanphx: "missing value").
    let value = || -> Result<&Value, PatchError> {
        obj.get("value").ok_or_else(|| {
            PatchError::OperationFailed(format!("json patch operation {kind} has no \"value\""))
        })
    };
    Ok(match kind {
        "add" => Op::Add(pointer("path")?, value()?),
        "remove" => Op::Remove(pointer("path")?),
        "replace" => Op::Replace(pointer("path")?, value()?),
        "move" => Op::Move {
            from: pointer("from")?,
            path: pointer("path")?,
        },
        "copy" => Op::Copy {
            from: pointer("from")?,
            path: pointer("path")?,
        },
        // evanphx treats a `test` without "value" as a test against null.
        "test" => Op::Test(pointer("path")?, obj.get("value").unwrap_or(&Value::Null)),
        other => {
            return Err(PatchError::OperationFailed(format!(
                "Unexpected kind: {other}"
            )));
        }
    })
}

/// Splits an RFC 6901 pointer into unescaped reference tokens.
fn parse_pointer(raw: &str) -> Result<Vec<String>, PatchError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    let rest = raw
        .strip_prefix('/')
        .ok_or_else(|| PatchError::OperationFailed(format!("invalid JSON pointer {raw:?}")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn failed(msg: impl Into<String>) -> PatchError {
    PatchError::OperationFailed(msg.into())
}

/// Resolves an array index token; `-` (append) only when `allow_end`.
fn array_index(token: &str, len: usize, allow_end: bool) -> Result<usize, PatchError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid_digits = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let idx: usize = if valid_digits {
        token
            .parse()
            .map_err(|_| failed(format!("invalid array index {token:?}")))?
    } else {
        return Err(failed(format!("invalid array index {token:?}")));
    };
    let limit = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if idx > limit || (!allow_end && len == 0) {
        return Err(failed(format!("array index {idx} out of bounds")));
    }
    Ok(idx)
}

fn get<'v>(doc: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(doc, |cur, token| match cur {
        Value::Object(m) => m.get(token),
        Value::Array(a) => array_index(token, a.len(), false)
            .ok()
            .and_then(|i| a.get(i)),
        _ => None,
    })
}

fn parent_mut<'v>(doc: &'v mut Value, path: &[String]) -> Result<&'v mut Value, PatchError> {
    let mut cur = doc;
    for token in path {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(token)
                .ok_or_else(|| failed(format!("missing path element {token:?}")))?,
            Value::Array(a) => {
                let i = array_index(token, a.len(), false)?;
                a.get_mut(i)
                    .ok_or_else(|| failed(format!("missing path element {token:?}")))?
            }
            _ => {
                return Err(failed(format!(
                    "cannot traverse into a scalar at {token:?}"
                )));
            }
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), PatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(failed("add: parent is not a container")),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, PatchError> {
    let Some((last, parent)) = path.split_last() else {
        return Err(failed("remove: cannot remove the root"));
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| failed(format!("remove: missing key {last:?}"))),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(failed("remove: parent is not a container")),
    }
}

fn replace(doc: &mut Value, path: &[String], value: Value) -> Result<(), PatchError> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent)? {
        Value::Object(m) => match m.get_mut(last) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(failed(format!("replace: missing key {last:?}"))),
        },
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            if let Some(slot) = a.get_mut(i) {
                *slot = value;
            }
            Ok(())
        }
        _ => Err(failed("replace: parent is not a container")),
    }
}

/// Applies one operation; `copied` sums the bytes added by `copy` operations so far (see
/// [`MAX_JSON_PATCH_COPY_BYTES`]).
fn apply_op(doc: &mut Value, op: Op<'_>, copied: &mut usize) -> Result<(), PatchError> {
    match op {
        Op::Add(path, value) => add(doc, &path, value.clone()),
        Op::Remove(path) => remove(doc, &path).map(|_| ()),
        Op::Replace(path, value) => replace(doc, &path, value.clone()),
        Op::Move { from, path } => {
            if path.len() > from.len() && path.starts_with(&from) {
                return Err(failed("move: cannot move a value into one of its children"));
            }
            let value = remove(doc, &from)?;
            add(doc, &path, value)
        }
        Op::Copy { from, path } => {
            let source = get(doc, &from).ok_or_else(|| failed("copy: missing \"from\" path"))?;
            *copied = copied.saturating_add(json_len(source));
            if *copied > MAX_JSON_PATCH_COPY_BYTES {
                // evanphx's AccumulatedCopySizeError, as kube-apiserver returns it (422).
                return Err(failed(format!(
                    "Unable to complete the copy, the accumulated size increase of copy is {}, \
                     exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}",
                    *copied
                )));
            }
            let value = source.clone();
            add(doc, &path, value)
        }
        Op::Test(path, expected) => {
            let actual = match path.split_last() {
                None => Some(&*doc),
                Some((last, parent)) => match get(doc, parent) {
                    Some(Value::Object(m)) => m.get(last),
                    Some(Value::Array(a)) => {
                        let i = array_index(last, a.len(), false)?;
                        a.get(i)
                    }
                    _ => return Err(failed("test: missing path")),
                },
            };
            match actual {
                Some(actual) if json_equal(actual, expected) => Ok(()),
                // evanphx: a missing member of an existing object equals null (§11 item 23).
                None if expected.is_null() => Ok(()),
                _ => Err(failed("testing value failed")),
            }
        }
    }
}

/// The length of `value` as compact JSON, counted without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as Go's decoder sees them.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Applies an RFC 7386 merge patch (`application/merge-patch+json`): `null` deletes, arrays
/// are replaced whole.
///
/// Like evanphx/json-patch, a patch that is `null` or a scalar is refused; an array patch
/// replaces the document (the caller then fails to decode it as an object).
pub fn merge_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    match patch {
        Value::Object(_) | Value::Array(_) => Ok(merge_value(Some(doc), patch)),
        _ => Err(PatchError::Malformed("Invalid JSON Patch".into())),
    }
}

/// RFC 7386 `MergePatch(Target, Patch)`.
fn merge_value(target: Option<&Value>, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return strip_nulls(patch);
    };
    let mut out = match target {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            out.remove(key);
        } else {
            let merged = merge_value(out.get(key), value);
            out.insert(key.clone(), merged);
        }
    }
    Value::Object(out)
}

/// A patch value inserted where nothing was: `null`s inside objects mean "absent".
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(_) => merge_value(None, value),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_applies_operations_like_kube_apiserver() {
        let doc = json!({"metadata": {"name": "a"}, "spec": {"list": [1, 2]}});
        let cases: Vec<(&str, Value, Result<Value, ()>)> = vec![
            (
                "finalizer add after test against null on a missing member",
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
                ]),
                Ok(
                    json!({"metadata": {"name": "a", "finalizers": ["x"]}, "spec": {"list": [1, 2]}}),
                ),
            ),
            (
                "test against a different value fails",
                json!([{"op": "test", "path": "/metadata/name", "value": "b"}]),
                Err(()),
            ),
            (
                "test of a missing member against a non-null value fails",
                json!([{"op": "test", "path": "/metadata/x", "value": "b"}]),
                Err(()),
            ),
            (
                "test against null below a missing parent fails",
                json!([{"op": "test", "path": "/status/x", "value": null}]),
                Err(()),
            ),
            (
                "test of an existing null member against null succeeds",
                json!([{"op": "test", "path": "/spec/list", "value": [1, 2]},
                       {"op": "add", "path": "/spec/n", "value": null},
                       {"op": "test", "path": "/spec/n", "value": null},
                       {"op": "remove", "path": "/spec/n"}]),
                Ok(doc.clone()),
            ),
            (
                "test of an array element out of bounds fails",
                json!([{"op": "test", "path": "/spec/list/2", "value": null}]),
                Err(()),
            ),
            (
                "add appends with dash",
                json!([{"op": "add", "path": "/spec/list/-", "value": 3}]),
                Ok(json!({"metadata": {"name": "a"}, "spec": {"list": [1, 2, 3]}})),
            ),
            (
                "add inserts at an index",
                json!([{"op": "add", "path": "/spec/list/0", "value": 0}]),
                Ok(json!({"metadata": {"name": "a"}, "spec": {"list": [0, 1, 2]}})),
            ),
            (
                "remove of a list element",
                json!([{"op": "remove", "path": "/spec/list/1"}]),
                Ok(json!({"metadata": {"name": "a"}, "spec": {"list": [1]}})),
            ),
            (
                "remove of a missing member fails",
                json!([{"op": "remove", "path": "/spec/nope"}]),
                Err(()),
            ),
            (
                "replace of a missing member fails",
                json!([{"op": "replace", "path": "/spec/nope", "value": 1}]),
                Err(()),
            ),
            (
                "add below a missing parent fails",
                json!([{"op": "add", "path": "/status/x", "value": 1}]),
                Err(()),
            ),
            (
                "move and copy",
                json!([
                    {"op": "copy", "from": "/metadata/name", "path": "/spec/n"},
                    {"op": "move", "from": "/spec/list", "path": "/l"}
                ]),
                Ok(json!({"metadata": {"name": "a"}, "spec": {"n": "a"}, "l": [1, 2]})),
            ),
            (
                "escaped pointer tokens",
                json!([{"op": "add", "path": "/metadata/a~1b~0c", "value": 1}]),
                Ok(json!({"metadata": {"name": "a", "a/b~c": 1}, "spec": {"list": [1, 2]}})),
            ),
            (
                "index out of bounds fails",
                json!([{"op": "add", "path": "/spec/list/5", "value": 0}]),
                Err(()),
            ),
            (
                "unknown op fails",
                json!([{"op": "frob", "path": "/spec"}]),
                Err(()),
            ),
        ];
        for (name, patch, want) in cases {
            let got = json_patch(&doc, &patch).map_err(|_| ());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn json_patch_refuses_more_than_ten_thousand_operations() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        let got = json_patch(&json!({}), &Value::Array(ops));
        assert_eq!(
            got,
            Err(PatchError::Malformed(too_many_operations_message(10_001)))
        );
    }

    #[test]
    fn json_patch_is_malformed_when_not_an_array() {
        assert!(matches!(
            json_patch(&json!({}), &json!({"op": "add"})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let cases = vec![
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(merge_patch(&doc, &patch), Ok(want), "{doc} + {patch}");
        }
    }

    #[test]
    fn merge_patch_refuses_null_and_scalar_patches() {
        assert!(merge_patch(&json!({}), &Value::Null).is_err());
        assert!(merge_patch(&json!({}), &json!(3)).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(|i| json!(i)),
                "[a-z]{0,3}".prop_map(Value::String),
            ]
        }

        /// JSON without nulls (a merge patch cannot express a null value).
        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                    proptest::collection::btree_map("[a-d]", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn object() -> impl Strategy<Value = Value> {
            proptest::collection::btree_map("[a-d]", value(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        /// A patch that may also delete (null) keys.
        fn patch() -> impl Strategy<Value = Value> {
            proptest::collection::btree_map("[a-d]", prop_oneof![Just(Value::Null), value()], 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        /// The merge patch that turns `from` into `to` (what kubectl computes).
        fn diff(from: &Value, to: &Value) -> Value {
            let (Value::Object(f), Value::Object(t)) = (from, to) else {
                return to.clone();
            };
            let mut out = Map::new();
            for key in f.keys() {
                if !t.contains_key(key) {
                    out.insert(key.clone(), Value::Null);
                }
            }
            for (key, tv) in t {
                match f.get(key) {
                    Some(fv) if fv == tv => {}
                    Some(fv @ Value::Object(_)) if tv.is_object() => {
                        out.insert(key.clone(), diff(fv, tv));
                    }
                    _ => {
                        out.insert(key.clone(), tv.clone());
                    }
                }
            }
            Value::Object(out)
        }

        proptest! {
            #[test]
            fn merge_patch_of_the_diff_reaches_the_target(from in object(), to in object()) {
                prop_assert_eq!(merge_patch(&from, &diff(&from, &to)), Ok(to));
            }

            #[test]
            fn merge_patch_is_idempotent(doc in object(), p in patch()) {
                let once = merge_patch(&doc, &p);
                prop_assert!(once.is_ok());
                let once = once.unwrap_or_default();
                prop_assert_eq!(merge_patch(&once, &p), Ok(once));
            }

            #[test]
            fn strategic_merge_patch_without_keyed_lists_equals_merge_patch(
                doc in object(),
                p in patch(),
            ) {
                prop_assert_eq!(
                    strategic_merge_patch("", "ConfigMap", &doc, &p),
                    merge_patch(&doc, &p)
                );
            }

            #[test]
            fn json_patch_test_against_null_succeeds_exactly_when_absent_or_null(
                doc in object(),
                key in "[a-e]",
            ) {
                let p = json!([{"op": "test", "path": format!("/{key}"), "value": null}]);
                let absent_or_null = doc.get(&key).is_none_or(Value::is_null);
                prop_assert_eq!(json_patch(&doc, &p).is_ok(), absent_or_null);
            }
        }
    }

    /// Forty copies of the root into new members would double the object forty times; like
    /// kube-apiserver, the copies stop at 3 MiB with an error (422).
    #[test]
    fn json_patch_copies_beyond_the_limit_fail_instead_of_doubling_the_object() {
        let doc = json!({"metadata": {"name": "a"}, "data": {"x": "y".repeat(64)}});
        let ops: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        match json_patch(&doc, &Value::Array(ops)) {
            Err(PatchError::OperationFailed(m)) => {
                assert!(m.contains("accumulated size increase of copy"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let small = json!([{"op": "copy", "from": "/data", "path": "/copy"}]);
        let out = json_patch(&doc, &small).unwrap();
        assert_eq!(out["copy"], doc["data"]);
    }
}
