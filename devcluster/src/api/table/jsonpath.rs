//! A kubectl-style JSONPath evaluator: CRD printer columns and the arguments of computed cells
//! are JSONPaths. Only the subset those use is implemented, parsed as client-go parses it (so a
//! column shows what kube-apiserver would show).

use serde_json::{Value, json};

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Field(String),
    Index(i64),
    Wildcard,
    Filter {
        path: Vec<Segment>,
        op: Option<(String, Value)>,
    },
}

/// Evaluates a kubectl-style JSONPath (`.a.b`, `{.a.b}`, `['a.b']`, `[0]`, `[-1]`, `[*]`,
/// `.*`, `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`, `>`, `>=` or bare existence) and
/// returns every match, in order. Missing keys and unparsable paths yield no matches.
pub fn jsonpath(path: &str, root: &Value) -> Vec<Value> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    let p = p.strip_prefix('$').unwrap_or(p);
    let Some(segments) = parse_segments(p) else {
        return Vec::new();
    };
    apply(&segments, vec![root.clone()])
}

fn apply(segments: &[Segment], mut current: Vec<Value>) -> Vec<Value> {
    for seg in segments {
        let mut next = Vec::new();
        for v in current {
            match seg {
                Segment::Field(name) => {
                    if let Some(x) = v.get(name.as_str()) {
                        next.push(x.clone());
                    }
                }
                Segment::Index(i) => {
                    if let Value::Array(a) = &v {
                        let len = a.len() as i64;
                        let idx = if *i < 0 { len + i } else { *i };
                        if (0..len).contains(&idx)
                            && let Some(x) = usize::try_from(idx).ok().and_then(|i| a.get(i))
                        {
                            next.push(x.clone());
                        }
                    }
                }
                Segment::Wildcard => match v {
                    Value::Array(a) => next.extend(a),
                    Value::Object(m) => next.extend(m.into_iter().map(|(_, x)| x)),
                    _ => {}
                },
                Segment::Filter { path, op } => {
                    let items = match v {
                        Value::Array(a) => a,
                        other => vec![other],
                    };
                    for item in items {
                        let found = apply(path, vec![item.clone()]);
                        let keep = match op {
                            None => found.first().is_some_and(|x| !x.is_null()),
                            Some((op, lit)) => found.first().is_some_and(|x| compare(x, op, lit)),
                        };
                        if keep {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

fn compare(left: &Value, op: &str, right: &Value) -> bool {
    if let (Some(a), Some(b)) = (left.as_f64(), right.as_f64()) {
        return match op {
            "==" => a == b,
            "!=" => a != b,
            "<" => a < b,
            "<=" => a <= b,
            ">" => a > b,
            ">=" => a >= b,
            _ => false,
        };
    }
    match op {
        "==" => left == right,
        "!=" => left != right,
        _ => match (left.as_str(), right.as_str()) {
            (Some(a), Some(b)) => match op {
                "<" => a < b,
                "<=" => a <= b,
                ">" => a > b,
                ">=" => a >= b,
                _ => false,
            },
            _ => false,
        },
    }
}

fn parse_segments(p: &str) -> Option<Vec<Segment>> {
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'*') {
                    out.push(Segment::Wildcard);
                    i += 1;
                    continue;
                }
                let name = scan_field(&chars, &mut i);
                if !name.is_empty() {
                    out.push(Segment::Field(name));
                }
            }
            '[' => {
                let end = matching_bracket(&chars, i)?;
                let inner: String = chars[i + 1..end].iter().collect();
                out.extend(parse_bracket(inner.trim())?);
                i = end + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                // A leading bare field name (`spec.replicas`).
                out.push(Segment::Field(scan_field(&chars, &mut i)));
            }
        }
    }
    Some(out)
}

/// The field name starting at `*i`, up to the next unescaped `.` or `[`; a backslash takes the
/// next character literally (`labels.app\.kubernetes\.io/name`), as client-go's parser does.
fn scan_field(chars: &[char], i: &mut usize) -> String {
    let mut name = String::new();
    while let Some(&c) = chars.get(*i) {
        match c {
            '\\' => {
                if let Some(&next) = chars.get(*i + 1) {
                    name.push(next);
                }
                *i += 2;
            }
            '.' | '[' => break,
            c => {
                name.push(c);
                *i += 1;
            }
        }
    }
    name
}

/// Index of the `]` closing the `[` at `open`, skipping quoted strings and nested brackets.
fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (j, c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(*c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Option<Vec<Segment>> {
    if inner == "*" {
        return Some(vec![Segment::Wildcard]);
    }
    if let Some(key) = unquote(inner) {
        // client-go reads `['key']` as the path `.key`: an unescaped `.` in the key separates
        // fields, so a label key with dots needs them escaped (`['app\.kubernetes\.io/name']`),
        // exactly as kube-apiserver evaluates a CRD's printer column.
        return parse_segments(&format!(".{key}"));
    }
    if let Ok(i) = inner.parse::<i64>() {
        return Some(vec![Segment::Index(i)]);
    }
    let expr = inner.strip_prefix('?')?.trim();
    let expr = expr.strip_prefix('(')?.strip_suffix(')')?.trim();
    let ops = ["==", "!=", "<=", ">=", "<", ">"];
    let split = ops
        .iter()
        .filter_map(|op| find_outside_quotes(expr, op).map(|at| (at, *op)))
        .min_by_key(|(at, _)| *at);
    let (left, op) = match split {
        Some((at, op)) => {
            let lit = parse_literal(expr[at + op.len()..].trim())?;
            (expr[..at].trim(), Some((op.to_string(), lit)))
        }
        None => (expr, None),
    };
    let rel = left.strip_prefix('@')?;
    Some(vec![Segment::Filter {
        path: parse_segments(rel)?,
        op,
    }])
}

fn find_outside_quotes(s: &str, needle: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if s[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<String> {
    let q = s.chars().next()?;
    if (q == '"' || q == '\'') && s.len() >= 2 && s.ends_with(q) {
        Some(s[1..s.len() - 1].to_string())
    } else {
        None
    }
}

fn parse_literal(s: &str) -> Option<Value> {
    if let Some(u) = unquote(s) {
        return Some(json!(u));
    }
    serde_json::from_str(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_supports_fields_indexes_wildcards_and_filters() {
        let obj = json!({
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}], "replicas": 3},
            "status": {"conditions": [
                {"type": "Available", "status": "False", "n": 1},
                {"type": "Ready", "status": "True", "n": 2}
            ]}
        });
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (".metadata.name", vec![json!("a")]),
            ("{.metadata.name}", vec![json!("a")]),
            ("metadata.name", vec![json!("a")]),
            (".spec.replicas", vec![json!(3)]),
            (".spec.containers[0].name", vec![json!("c1")]),
            (".spec.containers[-1].name", vec![json!("c2")]),
            (".spec.containers[*].image", vec![json!("i1"), json!("i2")]),
            // As client-go (and so kube-apiserver's CRD printer columns): the dots of a key
            // in brackets must be escaped, or they separate fields.
            (".metadata.labels['app.kubernetes.io/name']", vec![]),
            (
                ".metadata.labels['app\\.kubernetes\\.io/name']",
                vec![json!("x")],
            ),
            (
                ".metadata.labels.app\\.kubernetes\\.io/name",
                vec![json!("x")],
            ),
            (".metadata['labels']['name']", vec![]),
            (".metadata['name']", vec![json!("a")]),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type=='Ready')].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type != \"Ready\")].type",
                vec![json!("Available")],
            ),
            (".status.conditions[?(@.n > 1)].type", vec![json!("Ready")]),
            (".status.conditions[?(@.type==\"Gone\")].status", vec![]),
            (".spec.missing.deeper", vec![]),
            (".spec.containers[5]", vec![]),
            (".spec.containers[", vec![]),
        ];
        for (path, want) in cases {
            assert_eq!(jsonpath(path, &obj), want, "{path}");
        }
    }
}
