//! Field paths as the API server names them in server-side-apply conflicts
//! (`.spec.replicas`, `.spec.template.spec.containers[name="app"].image`, `.metadata.labels.a.b/c`),
//! resolved against a JSON object, and the "desired is contained in live" check of drift repair.

use serde_json::Value;

/// One list selector of a field path.
#[derive(Clone, Debug, PartialEq)]
enum Selector {
    /// `[k="v",k2=3]`: the element whose keys have these values.
    Key(Vec<(String, Value)>),
    /// `[="v"]`: the set element equal to the value.
    Value(Value),
    /// `[3]`: the element at this position (atomic lists).
    Index(usize),
}

impl Selector {
    fn matches(&self, element: &Value, position: usize) -> bool {
        match self {
            Selector::Key(pairs) => pairs
                .iter()
                .all(|(k, v)| element.get(k).is_some_and(|e| json_eq(e, v))),
            Selector::Value(v) => json_eq(element, v),
            Selector::Index(i) => *i == position,
        }
    }
}

/// Splits `[...]rest` into the selector and the rest of the path.
fn parse_bracket(s: &str) -> Option<(Selector, &str)> {
    let body = s.strip_prefix('[')?;
    let mut in_string = false;
    let mut escaped = false;
    let mut end = None;
    for (i, c) in body.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == ']' {
            end = Some(i);
            break;
        }
    }
    let end = end?;
    let content = &body[..end];
    let rest = &body[end + 1..];
    if let Some(v) = content.strip_prefix('=') {
        return Some((Selector::Value(parse_scalar(v)), rest));
    }
    if !content.is_empty() && content.chars().all(|c| c.is_ascii_digit()) {
        return Some((Selector::Index(content.parse().ok()?), rest));
    }
    let mut pairs = Vec::new();
    for part in split_top_level(content) {
        let (k, v) = part.split_once('=')?;
        pairs.push((k.to_owned(), parse_scalar(v)));
    }
    Some((Selector::Key(pairs), rest))
}

/// Splits on commas outside of quoted strings.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == ',' {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_scalar(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned()))
}

/// Equality that treats `1` and `1.0` as the same number.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The keys of `map` that `after` (the path after a `.`) can start with, longest first. Field
/// names may contain dots (annotation keys), so the object itself decides where a name ends.
fn candidate_keys(map: &serde_json::Map<String, Value>, after: &str) -> Vec<String> {
    let mut keys: Vec<String> = map
        .keys()
        .filter(|k| {
            after.starts_with(k.as_str())
                && matches!(
                    after[k.len()..].chars().next(),
                    None | Some('.') | Some('[')
                )
        })
        .cloned()
        .collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    keys
}

/// Removes the field at `path` from `object`. Returns whether something was removed.
pub fn remove_path(object: &mut Value, path: &str) -> bool {
    if let Some(after) = path.strip_prefix('.') {
        let Value::Object(map) = object else {
            return false;
        };
        for key in candidate_keys(map, after) {
            let tail = &after[key.len()..];
            if tail.is_empty() {
                map.remove(&key);
                return true;
            }
            if let Some(child) = map.get_mut(&key)
                && remove_path(child, tail)
            {
                return true;
            }
        }
        false
    } else if path.starts_with('[') {
        let Value::Array(items) = object else {
            return false;
        };
        let Some((selector, tail)) = parse_bracket(path) else {
            return false;
        };
        let Some(index) = items
            .iter()
            .enumerate()
            .position(|(i, e)| selector.matches(e, i))
        else {
            return false;
        };
        if tail.is_empty() {
            items.remove(index);
            true
        } else {
            items.get_mut(index).is_some_and(|e| remove_path(e, tail))
        }
    } else {
        false
    }
}

/// Whether `path` names a field present in `object`.
pub fn contains_path(object: &Value, path: &str) -> bool {
    let mut copy = object.clone();
    remove_path(&mut copy, path)
}

/// Whether every field of `desired` has the same value in `live`. Lists must have the same
/// length and match element by element; `null` in `desired` matches anything.
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Null, _) => true,
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, dv)| dv.is_null() || l.get(k).is_some_and(|lv| is_subset(dv, lv))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(dv, lv)| is_subset(dv, lv))
        }
        _ => json_eq(desired, live),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "annotations": {"apps.clusternet.io/owned-by-description": "ns.d", "a": "b"}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "side", "image": "busybox"}
                ]}},
                "finalizers": ["a", "b"]
            }
        })
    }

    #[test]
    fn remove_path_removes_exactly_the_named_field() {
        let cases = [
            (".spec.replicas", "/spec/replicas"),
            (
                ".spec.template.spec.containers[name=\"app\"].image",
                "/spec/template/spec/containers/0/image",
            ),
            (
                ".metadata.annotations.apps.clusternet.io/owned-by-description",
                "/metadata/annotations/apps.clusternet.io~1owned-by-description",
            ),
            (
                ".spec.template.spec.containers[name=\"app\"].ports[containerPort=80,protocol=\"TCP\"]",
                "/spec/template/spec/containers/0/ports/0",
            ),
        ];
        for (path, pointer) in cases {
            let mut obj = deployment();
            assert!(obj.pointer(pointer).is_some(), "{pointer} exists before");
            assert!(remove_path(&mut obj, path), "{path} removed");
            let mut expected = deployment();
            // Remove through the pointer to compute the expected document.
            let (parent, last) = pointer.rsplit_once('/').unwrap_or(("", pointer));
            match expected.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.remove(&last.replace("~1", "/"));
                }
                Some(Value::Array(a)) => {
                    a.remove(last.parse::<usize>().unwrap_or(0));
                }
                _ => unreachable!(),
            }
            assert_eq!(obj, expected, "{path}");
        }
    }

    #[test]
    fn remove_path_handles_set_and_index_selectors() {
        let mut obj = deployment();
        assert!(remove_path(&mut obj, ".spec.finalizers[=\"b\"]"));
        assert_eq!(obj.pointer("/spec/finalizers"), Some(&json!(["a"])));
        let mut obj = deployment();
        assert!(remove_path(&mut obj, ".spec.template.spec.containers[1]"));
        assert_eq!(
            obj.pointer("/spec/template/spec/containers/0/name"),
            Some(&json!("app"))
        );
        assert_eq!(obj.pointer("/spec/template/spec/containers/1"), None);
    }

    #[test]
    fn remove_path_reports_missing_fields() {
        let cases = [
            ".spec.paused",
            ".spec.template.spec.containers[name=\"nope\"].image",
            ".metadata.labels.x",
            "spec",
            "",
        ];
        for path in cases {
            let mut obj = deployment();
            assert!(!remove_path(&mut obj, path), "{path}");
            assert_eq!(obj, deployment());
            assert!(!contains_path(&obj, path));
        }
    }

    #[test]
    fn is_subset_ignores_fields_only_live_has() {
        let desired = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}});
        let cases = [
            (
                json!({"spec": {"replicas": 3, "paused": false, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1", "imagePullPolicy": "Always"}]}}}}),
                true,
            ),
            (
                json!({"spec": {"replicas": 3.0, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}}),
                true,
            ),
            (
                json!({"spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}}),
                false,
            ),
            (
                json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}}),
                false,
            ),
            (
                json!({"spec": {"replicas": 3, "template": {"spec": {"containers": []}}}}),
                false,
            ),
            (
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}}),
                false,
            ),
        ];
        for (live, expected) in cases {
            assert_eq!(is_subset(&desired, &live), expected, "{live}");
        }
    }
}
