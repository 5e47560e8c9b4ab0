//! atoll-yaml's bounded reader (override values, embedded documents, devcluster's YAML bodies,
//! the kubectl plugin's manifests).
//!
//! Two inputs in one: any bytes must be read or refused without a panic, within the bounds (a
//! text refused for nesting never reaches serde_yaml); and a JSON text (all flow style) built
//! from a tree whose strings hold brackets, quotes and `#` must be found exactly as deep as the
//! tree, and read back as the tree when within the bound.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug)]
enum Input {
    /// Arbitrary bytes.
    Bytes(Vec<u8>),
    /// A tree written as JSON.
    Json { tree: Tree, pretty: bool },
}

#[derive(Arbitrary, Debug)]
enum Tree {
    Scalar(Scalar),
    List(Vec<Tree>),
    Map(Vec<(Scalar, Tree)>),
    /// `levels` lists or maps around `inner`: deep trees from small inputs.
    Deep {
        levels: u16,
        maps: bool,
        inner: Box<Tree>,
    },
}

#[derive(Arbitrary, Debug)]
enum Scalar {
    Number(i32),
    Bool(bool),
    Null,
    /// A string of these pieces.
    Text(Vec<Piece>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Piece {
    Open,
    Close,
    Brace,
    Quote,
    Apostrophe,
    Hash,
    Colon,
    Comma,
    Space,
    Newline,
    Backslash,
    Letter,
}

fn text(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Open => "[",
            Piece::Close => "]",
            Piece::Brace => "{",
            Piece::Quote => "\"",
            Piece::Apostrophe => "'",
            Piece::Hash => " #",
            Piece::Colon => ": ",
            Piece::Comma => ",",
            Piece::Space => " ",
            Piece::Newline => "\n",
            Piece::Backslash => "\\",
            Piece::Letter => "a",
        })
        .collect()
}

fn scalar(s: &Scalar) -> Value {
    match s {
        Scalar::Number(n) => json!(n),
        Scalar::Bool(b) => json!(b),
        Scalar::Null => Value::Null,
        Scalar::Text(pieces) => json!(text(pieces)),
    }
}

fn key(s: &Scalar) -> String {
    match scalar(s) {
        Value::String(t) => t,
        other => other.to_string(),
    }
}

fn value(t: &Tree) -> Value {
    match t {
        Tree::Scalar(s) => scalar(s),
        Tree::List(items) => Value::Array(items.iter().map(value).collect()),
        Tree::Map(entries) => {
            Value::Object(entries.iter().map(|(k, v)| (key(k), value(v))).collect())
        }
        Tree::Deep {
            levels,
            maps,
            inner,
        } => {
            let mut v = value(inner);
            // Built by hand: `json!` with a value inside copies it (through `to_value`), which
            // made the levels cost the square of their number.
            for _ in 0..(*levels % 2_000) {
                v = if *maps {
                    Value::Object([("k".to_string(), v)].into_iter().collect())
                } else {
                    Value::Array(vec![v])
                };
            }
            v
        }
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn check(input: &Input) {
    match input {
        Input::Bytes(bytes) => {
            let _ = atoll_yaml::flow_depth(bytes);
            if let Err(atoll_yaml::Error::CheckFlowDepth { .. }) = atoll_yaml::parse_slice(bytes) {
                assert!(atoll_yaml::flow_depth(bytes) > atoll_yaml::MAX_FLOW_DEPTH);
            }
        }
        Input::Json { tree, pretty } => {
            let v = value(tree);
            let want = depth(&v);
            // Pretty JSON indents every level: its size grows with the square of the depth, so
            // deep trees are written compact (4,000 levels pretty were 64 MB an input).
            let written = if *pretty && want <= 2 * atoll_yaml::MAX_FLOW_DEPTH {
                serde_json::to_string_pretty(&v)
            } else {
                serde_json::to_string(&v)
            };
            let Ok(written) = written else { return };
            assert_eq!(
                atoll_yaml::flow_depth(written.as_bytes()),
                want,
                "{written}"
            );
            match atoll_yaml::parse(&written) {
                Ok(read) => assert_eq!(read, v, "{written}"),
                Err(atoll_yaml::Error::CheckFlowDepth { .. }) => {
                    assert!(want > atoll_yaml::MAX_FLOW_DEPTH)
                }
                // serde_yaml's own refusals (its recursion limit, keys over 1,024 characters)
                // are its to make.
                Err(atoll_yaml::Error::Parse(_)) => {}
            }
        }
    }
}

fuzz_target!(|input: Input| check(&input));
