//! Strategic merge patch for built-in kinds [AM `pkg/util/strategicpatch/patch.go`].

use super::lists::{SmpList, strategy};
use super::patch::PatchError;
use serde_json::{Map, Value};

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

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
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(
            "strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = doc.as_object().cloned().unwrap_or_default();
    let ctx = Ctx { group, kind };
    let merged = ctx.merge_map(original, patch, &mut Vec::new())?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

struct Ctx<'a> {
    group: &'a str,
    kind: &'a str,
}

fn malformed(msg: impl Into<String>) -> PatchError {
    PatchError::Malformed(msg.into())
}

impl Ctx<'_> {
    /// Merges `patch` into the map `original`; `None` means `$patch: delete` removed the map.
    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
        path: &mut Vec<String>,
    ) -> Result<Option<Map<String, Value>>, PatchError> {
        match patch.get(PATCH_DIRECTIVE) {
            None => {}
            Some(Value::String(d)) if d == "replace" => {
                let mut rest = patch.clone();
                rest.remove(PATCH_DIRECTIVE);
                return self.merge_map(Map::new(), &rest, path);
            }
            Some(Value::String(d)) if d == "delete" => return Ok(None),
            Some(Value::String(d)) if d == "merge" => {}
            Some(other) => {
                return Err(malformed(format!(
                    "Unknown patch type: {other} in map: {}",
                    Value::Object(patch.clone())
                )));
            }
        }

        if let Some(retain) = patch.get(RETAIN_KEYS) {
            let keys = string_list(retain, RETAIN_KEYS)?;
            for (k, v) in patch {
                if !k.starts_with('$') && !v.is_null() && !keys.contains(&k.as_str()) {
                    return Err(PatchError::OperationFailed(format!(
                        "The order in patch list: {retain} doesn't match $retainKeys: field {k} is not in it"
                    )));
                }
            }
            original.retain(|k, _| keys.contains(&k.as_str()));
        }

        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                let Value::Array(remove) = v else {
                    return Err(malformed(format!("{k} must be a list")));
                };
                if let Some(Value::Array(items)) = original.get_mut(field) {
                    items.retain(|item| !remove.contains(item));
                }
            }
        }

        for (k, v) in patch {
            if k.starts_with('$') {
                continue;
            }
            if v.is_null() {
                original.remove(k);
                continue;
            }
            path.push(k.clone());
            let current = original.remove(k);
            let merged = self.merge_value(current, v, path);
            path.pop();
            if let Some(value) = merged? {
                original.insert(k.clone(), value);
            }
        }

        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(SET_ELEMENT_ORDER) {
                let Value::Array(order) = v else {
                    return Err(malformed(format!("{k} must be a list")));
                };
                path.push(field.to_string());
                let merge_key = match strategy(self.group, self.kind, path).smp {
                    SmpList::MergeKey(key) => Some(key),
                    _ => None,
                };
                path.pop();
                if let Some(Value::Array(items)) = original.get_mut(field) {
                    reorder(items, order, merge_key);
                }
            }
        }
        Ok(Some(original))
    }

    /// Merges one patch value into the current one; `None` means the field goes away.
    fn merge_value(
        &self,
        current: Option<Value>,
        patch: &Value,
        path: &mut Vec<String>,
    ) -> Result<Option<Value>, PatchError> {
        match (current, patch) {
            (_, Value::Null) => Ok(None),
            (Some(Value::Object(cur)), Value::Object(p)) => {
                Ok(self.merge_map(cur, p, path)?.map(Value::Object))
            }
            (_, Value::Object(p)) => Ok(self.merge_map(Map::new(), p, path)?.map(Value::Object)),
            (Some(Value::Array(cur)), Value::Array(p)) => {
                self.merge_list(cur, p, path).map(|l| Some(Value::Array(l)))
            }
            (_, Value::Array(p)) => self
                .merge_list(Vec::new(), p, path)
                .map(|l| Some(Value::Array(l))),
            (_, scalar) => Ok(Some(scalar.clone())),
        }
    }

    /// New content from the patch, with directives and nulls taken out.
    fn fresh(&self, patch: &Value, path: &mut Vec<String>) -> Result<Option<Value>, PatchError> {
        self.merge_value(None, patch, path)
    }

    fn merge_list(
        &self,
        original: Vec<Value>,
        patch: &[Value],
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        let replace = patch.iter().any(|item| {
            item.get(PATCH_DIRECTIVE).and_then(Value::as_str) == Some("replace")
                && item.as_object().is_some_and(|m| m.len() == 1)
        });
        if replace {
            let rest: Vec<Value> = patch
                .iter()
                .filter(|item| item.get(PATCH_DIRECTIVE).is_none())
                .cloned()
                .collect();
            return self.merge_list(Vec::new(), &rest, path);
        }
        let strategy = strategy(self.group, self.kind, path).smp;
        // Only merging lists care about their items' type; replaced lists are taken as sent.
        if strategy != SmpList::Replace && patch.iter().any(Value::is_array) {
            return Err(PatchError::OperationFailed(
                "strategic merge patch does not support lists of lists".into(),
            ));
        }
        match strategy {
            SmpList::Replace => {
                let mut out = Vec::with_capacity(patch.len());
                for item in patch {
                    if let Some(v) = self.fresh(item, path)? {
                        out.push(v);
                    }
                }
                Ok(out)
            }
            SmpList::MergePrimitive => {
                let mut out = original;
                for item in patch {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Ok(out)
            }
            SmpList::MergeKey(key) => {
                let mut out = original;
                for item in patch {
                    let Value::Object(fields) = item else {
                        if !out.contains(item) {
                            out.push(item.clone());
                        }
                        continue;
                    };
                    let Some(id) = fields.get(key) else {
                        return Err(PatchError::OperationFailed(format!(
                            "map: {item} does not contain declared merge key: {key}"
                        )));
                    };
                    let pos = out.iter().position(|o| o.get(key) == Some(id));
                    if fields.get(PATCH_DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                        out.retain(|o| o.get(key) != Some(id));
                        continue;
                    }
                    match pos {
                        Some(i) => {
                            let cur = match out.get(i) {
                                Some(Value::Object(m)) => m.clone(),
                                _ => Map::new(),
                            };
                            match self.merge_map(cur, fields, path)? {
                                Some(m) => {
                                    if let Some(slot) = out.get_mut(i) {
                                        *slot = Value::Object(m);
                                    }
                                }
                                None => {
                                    out.remove(i);
                                }
                            }
                        }
                        None => {
                            if let Some(m) = self.merge_map(Map::new(), fields, path)? {
                                out.push(Value::Object(m));
                            }
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

fn string_list<'v>(value: &'v Value, what: &str) -> Result<Vec<&'v str>, PatchError> {
    value
        .as_array()
        .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
        .ok_or_else(|| malformed(format!("{what} must be a list of strings")))
}

/// `$setElementOrder`: the items named in `order` take the slots they already occupy, in
/// the given order; items the order does not name (server-only) keep their place.
fn reorder(items: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    let identity = |v: &Value| -> Option<Value> {
        match merge_key {
            Some(key) => v.get(key).cloned(),
            None => Some(v.clone()),
        }
    };
    let rank = |v: &Value| -> Option<usize> {
        let id = identity(v)?;
        order.iter().position(|o| identity(o).as_ref() == Some(&id))
    };
    let slots: Vec<usize> = (0..items.len())
        .filter(|&i| items.get(i).and_then(rank).is_some())
        .collect();
    let mut ordered: Vec<Value> = slots
        .iter()
        .filter_map(|&i| items.get(i).cloned())
        .collect();
    ordered.sort_by_key(|v| rank(v).unwrap_or(usize::MAX));
    for (slot, value) in slots.into_iter().zip(ordered) {
        if let Some(s) = items.get_mut(slot) {
            *s = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn strategic_merge_patch_merges_keyed_lists_and_honours_directives() {
        let base = deployment(json!([
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}],
             "ports": [{"containerPort": 80}], "args": ["x", "y"]},
            {"name": "b", "image": "b:1"}
        ]));
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "containers merge by name",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}]}}}}),
                deployment(json!([
                    {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}],
                     "ports": [{"containerPort": 80}], "args": ["x", "y"]},
                    {"name": "b", "image": "b:2"}
                ])),
            ),
            (
                "nested env and ports merge, args are replaced",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a",
                    "env": [{"name": "Y", "value": "2"}], "ports": [{"containerPort": 443}],
                    "args": ["z"]}]}}}}),
                deployment(json!([
                    {"name": "a", "image": "a:1",
                     "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                     "ports": [{"containerPort": 80}, {"containerPort": 443}], "args": ["z"]},
                    {"name": "b", "image": "b:1"}
                ])),
            ),
            (
                "$patch delete removes a list element, $setElementOrder orders",
                json!({"spec": {"template": {"spec": {
                    "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
                    "containers": [{"name": "b", "$patch": "delete"}, {"name": "c", "image": "c:1"}]}}}}),
                deployment(json!([
                    {"name": "c", "image": "c:1"},
                    {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}],
                     "ports": [{"containerPort": 80}], "args": ["x", "y"]}
                ])),
            ),
            (
                "$patch replace in a list replaces it",
                json!({"spec": {"template": {"spec": {"containers": [
                    {"$patch": "replace"}, {"name": "z", "image": "z:1"}]}}}}),
                deployment(json!([{"name": "z", "image": "z:1"}])),
            ),
            (
                "null deletes a field inside a keyed element",
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "env": null, "ports": null, "args": null}]}}}}),
                deployment(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}])),
            ),
            (
                "$patch replace on a map replaces the map",
                json!({"spec": {"$patch": "replace", "replicas": 3}}),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                       "spec": {"replicas": 3}}),
            ),
            (
                "$patch delete on a map deletes it",
                json!({"spec": {"$patch": "delete"}}),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
            ),
        ];
        for (name, patch, want) in cases {
            let got = strategic_merge_patch("apps", "Deployment", &base, &patch);
            assert_eq!(got, Ok(want), "{name}");
        }
    }

    #[test]
    fn strategic_merge_patch_handles_metadata_lists() {
        let base = json!({"metadata": {"name": "c", "finalizers": ["a", "b"],
            "labels": {"x": "1", "y": "2"},
            "ownerReferences": [{"uid": "1", "name": "o1"}]}});
        let patch = json!({"metadata": {
            "finalizers": ["c", "a"],
            "$deleteFromPrimitiveList/finalizers": ["b"],
            "labels": {"x": null, "z": "3"},
            "ownerReferences": [{"uid": "2", "name": "o2"}]}});
        let want = json!({"metadata": {"name": "c", "finalizers": ["a", "c"],
            "labels": {"y": "2", "z": "3"},
            "ownerReferences": [{"uid": "1", "name": "o1"}, {"uid": "2", "name": "o2"}]}});
        assert_eq!(
            strategic_merge_patch("", "ConfigMap", &base, &patch),
            Ok(want)
        );
    }

    #[test]
    fn strategic_merge_patch_retain_keys_clears_other_fields() {
        let base = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}],
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {
            "volumes": [{"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}],
            "strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}});
        let want = json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm"}}],
            "strategy": {"type": "Recreate"}}});
        assert_eq!(strategic_merge_patch("", "Pod", &base, &patch), Ok(want));
    }

    #[test]
    fn strategic_merge_patch_service_ports_merge_by_port_and_tolerations_replace() {
        let svc = json!({"spec": {"ports": [{"port": 80, "name": "http"}]}});
        let got = strategic_merge_patch(
            "",
            "Service",
            &svc,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
        );
        assert_eq!(
            got,
            Ok(
                json!({"spec": {"ports": [{"port": 80, "name": "http", "targetPort": 8080}, {"port": 443}]}})
            )
        );
        let pod = json!({"spec": {"tolerations": [{"key": "a"}]}});
        let got = strategic_merge_patch(
            "",
            "Pod",
            &pod,
            &json!({"spec": {"tolerations": [{"key": "b"}]}}),
        );
        assert_eq!(got, Ok(json!({"spec": {"tolerations": [{"key": "b"}]}})));
    }

    #[test]
    fn strategic_merge_patch_rejects_bad_patches() {
        let doc = json!({"spec": {"containers": [{"name": "a"}]}});
        type Check = fn(&PatchError) -> bool;
        let cases: Vec<(&str, Value, Check)> = vec![
            ("not an object", json!([1]), |e| {
                matches!(e, PatchError::Malformed(_))
            }),
            ("unknown $patch", json!({"spec": {"$patch": "frob"}}), |e| {
                matches!(e, PatchError::Malformed(_))
            }),
            (
                "element without merge key",
                json!({"spec": {"containers": [{"image": "x"}]}}),
                |e| matches!(e, PatchError::OperationFailed(_)),
            ),
            (
                "retainKeys mismatch",
                json!({"spec": {"$retainKeys": ["a"], "b": 1}}),
                |e| matches!(e, PatchError::OperationFailed(_)),
            ),
        ];
        for (name, patch, check) in cases {
            match strategic_merge_patch("", "Pod", &doc, &patch) {
                Err(e) => assert!(check(&e), "{name}: {e:?}"),
                Ok(v) => panic!("{name}: accepted, got {v}"),
            }
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use proptest::sample::subsequence;

        const NAMES: &[&str] = &["a", "b", "c", "d", "e"];

        fn containers(names: &[&str], image: &str) -> Value {
            Value::Array(
                names
                    .iter()
                    .map(|n| json!({"name": n, "image": image}))
                    .collect(),
            )
        }

        proptest! {
            #[test]
            fn containers_merge_by_name_keeping_unpatched_ones(
                live in subsequence(NAMES, 0..=5),
                patched in subsequence(NAMES, 0..=5).prop_shuffle(),
            ) {
                let doc = json!({"spec": {"containers": containers(&live, "old")}});
                let patch = json!({"spec": {"containers": containers(&patched, "new")}});
                let got = strategic_merge_patch("", "Pod", &doc, &patch);
                prop_assert!(got.is_ok());
                let got = got.unwrap_or_default();
                let mut want: Vec<&str> = live.clone();
                want.extend(patched.iter().filter(|n| !live.contains(n)));
                let names: Vec<&str> = got["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["name"].as_str())
                    .collect();
                prop_assert_eq!(&names, &want);
                for c in got["spec"]["containers"].as_array().into_iter().flatten() {
                    let name = c["name"].as_str().unwrap_or_default();
                    let image = if patched.contains(&name) { "new" } else { "old" };
                    prop_assert_eq!(c["image"].as_str(), Some(image));
                }
            }

            #[test]
            fn set_element_order_puts_patched_containers_in_the_given_order(
                names in subsequence(NAMES, 1..=5).prop_shuffle(),
            ) {
                let mut sorted = names.clone();
                sorted.sort_unstable();
                let doc = json!({"spec": {"containers": containers(&sorted, "x")}});
                let order: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
                let patch = json!({"spec": {"$setElementOrder/containers": order}});
                let got = strategic_merge_patch("", "Pod", &doc, &patch);
                prop_assert_eq!(got, Ok(json!({"spec": {"containers": containers(&names, "x")}})));
            }
        }
    }
}
