//! The override engine (`atoll_scheduler::overrides::apply_override`): JSONPatch, MergePatch,
//! FieldJSONPatch and FieldMergePatch with values in JSON or YAML, including YAML alias bombs,
//! deep nesting and copy-amplifying JSON patches.
//!
//! Checked: an error never panics and leaves the object as it was; the same override gives the
//! same result; a MergePatch and a FieldMergePatch that succeed change nothing when applied
//! again (merge patches are idempotent, and the embedded document must read back as written);
//! a YAML value that serde_yaml reads (small, alias-free texts) merges as serde_yaml reads it;
//! nothing grows without bound (libFuzzer's `-rss_limit_mb` and `-timeout` catch bombs; alias
//! bombs past the bound of 1,000,000 values are the unit tests' job, see `Text::DeepBomb`).
#![no_main]

use arbitrary::Arbitrary;
use atoll_crds::apps::{FieldFormat, OverrideConfig, OverrideType};
use atoll_scheduler::overrides::{RenderBudget, apply_override};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

#[derive(Arbitrary, Debug)]
struct Input {
    kind: Kind,
    value: Text,
    field: Field,
    /// `Some(true)`: JSON, `Some(false)`: YAML, `None`: detected.
    field_format: Option<bool>,
    /// Replaces the embedded YAML document at `/data/config.yaml`.
    embedded: Option<Text>,
    /// Extra content of the object.
    extra: Option<J>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Kind {
    JsonPatch,
    MergePatch,
    FieldJsonPatch,
    FieldMergePatch,
    Helm,
}

#[derive(Arbitrary, Debug)]
enum Field {
    Yaml,
    Json,
    Empty,
    Replicas,
    Missing,
    Raw(String),
}

/// A value text: raw, a generated JSON value written as JSON or YAML, a generated JSON patch,
/// an alias bomb or deep nesting.
#[derive(Arbitrary, Debug)]
enum Text {
    Raw(String),
    Json(J),
    Yaml(J),
    Patch {
        ops: Vec<Op>,
        yaml: bool,
    },
    /// `levels` anchors, each listing `width` aliases of the one before (at most 4,096
    /// values). Bombs past the bound are pinned by the unit tests of `overrides::patch`: each
    /// costs the whole budget, about a second with sanitizers, and libFuzzer kept finding
    /// them, which slowed this target to a few runs a second.
    DeepBomb {
        levels: u8,
        width: u8,
    },
    /// One anchor of `scalars` values repeated by `aliases` aliases (at most 4,096 values).
    WideBomb {
        scalars: u8,
        aliases: u8,
    },
    /// `depth` nested lists or maps, in flow or block style.
    Deep {
        depth: u16,
        maps: bool,
        block: bool,
    },
}

/// A JSON value.
#[derive(Arbitrary, Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Name),
    List(Vec<J>),
    Map(Vec<(Name, J)>),
}

/// Keys and strings: mostly those of the object, so that patches meet what they name.
#[derive(Arbitrary, Debug, Clone)]
enum Name {
    Known(u8),
    Raw(String),
}

const NAMES: [&str; 14] = [
    "spec",
    "replicas",
    "metadata",
    "labels",
    "data",
    "config.yaml",
    "config.json",
    "a",
    "b",
    "0",
    "1",
    "-",
    "",
    "~1x",
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
            J::Float(f) => json!(f),
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

impl Text {
    fn render(&self) -> String {
        match self {
            Text::Raw(s) => s.clone(),
            Text::Json(j) => j.value().to_string(),
            Text::Yaml(j) => serde_yaml::to_string(&j.value()).unwrap_or_default(),
            Text::Patch { ops, yaml } => {
                let ops: Vec<Value> = ops
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
                if *yaml {
                    serde_yaml::to_string(&ops).unwrap_or_default()
                } else {
                    Value::Array(ops).to_string()
                }
            }
            Text::DeepBomb { levels, width } => {
                let width = usize::from(*width % 8).max(1);
                let levels = *levels % 4;
                let mut t = format!("spec:\n  l0: &l0 [{}]\n", vec!["x"; width].join(", "));
                for level in 1..=usize::from(levels) {
                    let refs = vec![format!("*l{}", level - 1); width].join(", ");
                    t.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
                }
                t
            }
            Text::WideBomb { scalars, aliases } => {
                let (scalars, aliases) = (*scalars % 64, *aliases % 64);
                format!(
                    "spec:\n  a: &a [{}]\n  b: [{}]\n",
                    vec!["x"; usize::from(scalars).max(1)].join(", "),
                    vec!["*a"; usize::from(aliases)].join(", ")
                )
            }
            Text::Deep { depth, maps, block } => {
                // Block style indents each level: keep the text (depth^2 / 2) small.
                match (maps, block) {
                    (false, false) => {
                        let depth = usize::from(*depth % 4_000);
                        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
                    }
                    (true, false) => {
                        // Past 128 levels atoll-yaml refuses it before serde_yaml's scanner
                        // (quadratic in flow depth) reads it: any depth stays fast.
                        let depth = usize::from(*depth % 40_000);
                        format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth))
                    }
                    (false, true) => (0..usize::from(*depth % 400))
                        .map(|i| format!("{}- ", " ".repeat(2 * i)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    (true, true) => (0..usize::from(*depth % 400))
                        .map(|i| format!("{}a:", " ".repeat(2 * i)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                }
            }
        }
    }
}

fn document(input: &Input) -> Value {
    let yaml = input.embedded.as_ref().map_or_else(
        || "greeting: hello\nlist: [1, 2]\n".to_owned(),
        Text::render,
    );
    let mut doc = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "data": {"config.yaml": yaml, "config.json": "{\"a\": [1, {\"b\": null}]}", "empty": ""},
    });
    if let Some(extra) = &input.extra {
        doc["extra"] = extra.value();
    }
    doc
}

fn check(input: &Input) {
    let value = input.value.render();
    let field_path = match &input.field {
        Field::Yaml => Some("/data/config.yaml".to_owned()),
        Field::Json => Some("/data/config.json".to_owned()),
        Field::Empty => Some("/data/empty".to_owned()),
        Field::Replicas => Some("/spec/replicas".to_owned()),
        Field::Missing => None,
        Field::Raw(s) => Some(s.clone()),
    };
    let type_ = match input.kind {
        Kind::JsonPatch => OverrideType::JSONPatch,
        Kind::MergePatch => OverrideType::MergePatch,
        Kind::FieldJsonPatch => OverrideType::FieldJSONPatch,
        Kind::FieldMergePatch => OverrideType::FieldMergePatch,
        Kind::Helm => OverrideType::Helm,
    };
    let config = OverrideConfig {
        name: Some("fuzz".to_owned()),
        value: value.clone(),
        type_,
        override_chart: None,
        field_path,
        field_format: input.field_format.map(|json| {
            if json {
                FieldFormat::JSON
            } else {
                FieldFormat::YAML
            }
        }),
    };
    let before = document(input);
    let mut doc = before.clone();
    let result = apply_override(&mut doc, &config, "fuzz", &mut RenderBudget::default());

    // Same override, same result.
    let mut again = before.clone();
    let second = apply_override(&mut again, &config, "fuzz", &mut RenderBudget::default());
    assert_eq!(result.is_ok(), second.is_ok());
    assert_eq!(doc, again, "not deterministic");

    if let Err(e) = &result {
        assert_eq!(doc, before, "a failed override ({e}) changed the object");
        // Helm overrides are always refused.
        return;
    }
    assert!(
        !matches!(input.kind, Kind::Helm),
        "a Helm override was applied"
    );

    // Merge patches are idempotent; for FieldMergePatch this also says that the embedded
    // document reads back as it was written.
    if matches!(input.kind, Kind::MergePatch | Kind::FieldMergePatch) {
        let mut twice = doc.clone();
        let r = apply_override(&mut twice, &config, "fuzz", &mut RenderBudget::default());
        assert!(
            r.is_ok(),
            "a merge patch applied once fails the second time: {r:?}"
        );
        if matches!(input.kind, Kind::FieldMergePatch) {
            // Compared as documents: a JSON scalar written back ("true") is detected as YAML
            // the next time (detection calls JSON only what starts with `{` or `[`) and
            // rewritten as "true\n", the same document.
            let path = config.field_path.as_deref().unwrap_or("");
            let read = |d: &Value| {
                let mut d = d.clone();
                if let Some(slot) = d.pointer_mut(path)
                    && let Some(text) = slot.as_str()
                {
                    *slot = serde_yaml::from_str::<Value>(text).unwrap_or(Value::Null);
                }
                d
            };
            assert_eq!(
                read(&twice),
                read(&doc),
                "a field merge patch is not idempotent"
            );
        } else {
            assert_eq!(twice, doc, "a merge patch is not idempotent");
        }
    }

    // A YAML value that serde_yaml reads merges exactly as serde_yaml reads it (the bounded
    // reader must not change what it reads).
    if matches!(input.kind, Kind::MergePatch)
        && !value.trim().is_empty()
        && value.len() < 4096
        && serde_json::from_str::<Value>(&value).is_err()
        && let Ok(parsed) = serde_yaml::from_str::<Value>(&value)
    {
        let mut want = before.clone();
        json_patch::merge(&mut want, &parsed);
        assert_eq!(
            doc, want,
            "the YAML value merged differently from serde_yaml's reading"
        );
    }
}

fuzz_target!(|input: Input| check(&input));
