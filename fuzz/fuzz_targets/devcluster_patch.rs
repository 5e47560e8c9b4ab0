//! devcluster's patch engines (`devcluster::objects`): JSON patch, JSON merge patch, strategic
//! merge patch and server-side apply, on objects and patches built from the field names and
//! directives those engines treat specially.
//!
//! Checked: no input panics; each engine gives the same answer twice; a JSON patch grows the
//! object by no more than its own size plus the copy limit (3 MiB); a merge patch applied twice
//! changes nothing the second time; re-applying the same configuration by the same manager
//! returns the object unchanged, as the apply engine documents.
#![no_main]

use arbitrary::Arbitrary;
use devcluster::objects::apply::server_side_apply;
use devcluster::objects::patch::{
    MAX_JSON_PATCH_COPY_BYTES, json_patch, merge_patch, strategic_merge_patch,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

#[derive(Arbitrary, Debug)]
struct Input {
    engine: Engine,
    doc: J,
    patch: J,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Engine {
    Json,
    Merge,
    Strategic { kind: u8 },
    Apply { force: bool },
}

#[derive(Arbitrary, Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    Str(Name),
    List(Vec<J>),
    Map(Vec<(Name, J)>),
}

#[derive(Arbitrary, Debug, Clone)]
enum Name {
    Known(u8),
    Raw(String),
}

const NAMES: [&str; 30] = [
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "finalizers",
    "ownerReferences",
    "uid",
    "spec",
    "template",
    "containers",
    "ports",
    "containerPort",
    "protocol",
    "env",
    "value",
    "volumes",
    "status",
    "conditions",
    "type",
    "data",
    "$patch",
    "delete",
    "replace",
    "merge",
    "$retainKeys",
    "$setElementOrder/containers",
    "$deleteFromPrimitiveList/finalizers",
    "0",
];

const KINDS: [(&str, &str); 5] = [
    ("apps", "Deployment"),
    ("", "Pod"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("example.com", "Widget"),
];

impl Name {
    fn text(&self) -> String {
        match self {
            Name::Known(i) => NAMES[usize::from(*i) % NAMES.len()].to_owned(),
            Name::Raw(s) => s.clone(),
        }
    }
}

impl J {
    fn value(&self) -> Value {
        match self {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Int(i) => json!(i),
            J::Str(s) => Value::String(s.text()),
            J::List(items) => Value::Array(items.iter().map(J::value).collect()),
            J::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.text(), v.value()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Op {
    op: u8,
    path: Vec<Name>,
    from: Vec<Name>,
    value: Option<J>,
}

fn pointer(tokens: &[Name]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.text().replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// An object of `kind` with the generated content merged in.
fn object(group: &str, kind: &str, content: &Value) -> Value {
    let api_version = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    let mut obj = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x", "namespace": "default", "finalizers": ["a"]},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
    });
    if let (Some(o), Some(c)) = (obj.as_object_mut(), content.as_object()) {
        for (k, v) in c {
            o.insert(k.clone(), v.clone());
        }
    }
    obj
}

fn check(input: &Input) {
    let content = input.doc.value();
    let patch = input.patch.value();
    match input.engine {
        Engine::Json => {
            let doc = object("", "ConfigMap", &content);
            let ops: Vec<Value> = input
                .ops
                .iter()
                .map(|o| {
                    let name = ["add", "remove", "replace", "move", "copy", "test", "nope"]
                        [usize::from(o.op) % 7];
                    let mut op = json!({"op": name, "path": pointer(&o.path)});
                    if matches!(name, "move" | "copy") {
                        op["from"] = json!(pointer(&o.from));
                    }
                    if let Some(v) = &o.value {
                        op["value"] = v.value();
                    }
                    op
                })
                .collect();
            let ops = Value::Array(ops);
            let out = json_patch(&doc, &ops);
            assert_eq!(out, json_patch(&doc, &ops), "not deterministic");
            if let Ok(out) = out {
                let limit = json_len(&doc) + json_len(&ops) + MAX_JSON_PATCH_COPY_BYTES;
                assert!(
                    json_len(&out) <= limit,
                    "a JSON patch grew the object past {limit}"
                );
            }
            // Any JSON value as a patch: an answer, never a panic.
            let _ = json_patch(&doc, &patch);
        }
        Engine::Merge => {
            let doc = object("", "ConfigMap", &content);
            let out = merge_patch(&doc, &patch);
            assert_eq!(out, merge_patch(&doc, &patch), "not deterministic");
            if let Ok(out) = out {
                assert_eq!(
                    merge_patch(&out, &patch).ok(),
                    Some(out.clone()),
                    "a merge patch applied twice changed the object again"
                );
            }
        }
        Engine::Strategic { kind } => {
            let (group, kind) = KINDS[usize::from(kind) % KINDS.len()];
            let doc = object(group, kind, &content);
            let out = strategic_merge_patch(group, kind, &doc, &patch);
            assert_eq!(
                out,
                strategic_merge_patch(group, kind, &doc, &patch),
                "not deterministic"
            );
            if let Ok(out) = &out {
                assert!(out.is_object(), "a strategic merge patch returned {out}");
            }
        }
        Engine::Apply { force } => {
            let (group, kind) = KINDS[input.ops.len() % KINDS.len()];
            let live = object(group, kind, &content);
            let config = object(group, kind, &patch);
            let first = server_side_apply(None, &config, "fuzz", force, "2026-01-01T00:00:00Z");
            let again = server_side_apply(None, &config, "fuzz", force, "2026-01-01T00:00:00Z");
            assert_eq!(
                format!("{first:?}"),
                format!("{again:?}"),
                "not deterministic"
            );
            if let Ok(created) = &first {
                let reapplied = server_side_apply(
                    Some(created),
                    &config,
                    "fuzz",
                    false,
                    "2026-01-02T00:00:00Z",
                );
                match reapplied {
                    Ok(o) => assert_eq!(
                        &o, created,
                        "re-applying the same configuration changed the object"
                    ),
                    Err(e) => panic!("re-applying the same configuration failed: {e}"),
                }
            }
            // Onto an object that other writers shaped: an answer, never a panic.
            let _ = server_side_apply(Some(&live), &config, "fuzz", force, "2026-01-03T00:00:00Z");
            let _ = server_side_apply(Some(&live), &patch, "other", force, "2026-01-03T00:00:00Z");
        }
    }
}

fuzz_target!(|input: Input| check(&input));
