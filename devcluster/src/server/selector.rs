//! Label and field selectors.

use serde_json::Value;

use super::error::ApiError;
use super::request::Query;

#[derive(Clone, Debug, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b,c!=d,e in (f,g),h notin (i),j,!k`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Req>,
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '('"))?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if let Some(bad) = vals.iter().find(|v| !valid_value(v)) {
        return Err(format!("invalid label value: \"{bad}\""));
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parses a selector; the error text is what goes after `unable to parse requirement: `.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err("found ',', expected: identifier".into());
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::Ne(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some(idx) = p.find(" notin ") {
                Req::NotIn(p[..idx].trim().to_string(), parse_set(&p[idx + 7..])?)
            } else if let Some(idx) = p.find(" in ") {
                Req::In(p[..idx].trim().to_string(), parse_set(&p[idx + 4..])?)
            } else if p.contains(' ') || p.contains('(') {
                return Err(format!(
                    "found '{p}', expected: in, notin, =, ==, !=, or end of string"
                ));
            } else {
                Req::Exists(p.to_string())
            };
            let (key, val) = match &req {
                Req::Eq(k, v) | Req::Ne(k, v) => (k, Some(v)),
                Req::In(k, _) | Req::NotIn(k, _) | Req::Exists(k) | Req::NotExists(k) => (k, None),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key \"{key}\""));
            }
            if let Some(v) = val
                && !valid_value(v)
            {
                return Err(format!("invalid label value: \"{v}\""));
            }
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object's labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=y`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Field selector paths whose value kube-apiserver prints from a Go `bool`, so an absent field
/// reads `false` (`spec.unschedulable` of a Node, what `kubectl drain` and the scheduler use).
const BOOL_FIELDS: &[&str] = &["spec.unschedulable"];

fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None if BOOL_FIELDS.contains(&path) => return "false".to_string(),
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses a selector. `builtin` allows any field path (built-in kinds support many);
    /// custom resources support only `metadata.name` and `metadata.namespace`.
    pub fn parse(s: &str, builtin: bool) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{p}'; can't understand '{p}'"));
            };
            let k = k.trim();
            if !builtin && k != "metadata.name" && k != "metadata.namespace" {
                return Err(format!("field label not supported: {k}"));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The name required by a `metadata.name=x` term, if any.
    pub fn name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(k, eq, _)| *eq && k == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether an object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }
}

/// The label and field selectors of a list, watch or deletecollection.
pub(crate) struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    /// Reads `labelSelector` and `fieldSelector` (`builtin`: the resource is a built-in one,
    /// which decides the fields that may be selected).
    pub(crate) fn parse(query: &Query, builtin: bool) -> Result<Selectors, ApiError> {
        let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), builtin)
            .map_err(ApiError::bad_request)?;
        Ok(Selectors { labels, fields })
    }

    /// Whether `obj` matches both selectors.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_based_selectors() {
        let o = json!({"metadata":{"labels":{"app":"web","tier":"fe"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web)"));
        assert!(m("missing notin (x)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata":{"name":"a","namespace":"ns"},"spec":{"nodeName":"n1"}});
        assert!(
            FieldSelector::parse("metadata.name=a", false)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", false)
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("spec.nodeName=n1", true)
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.foo=x", false).is_err());
        // A Node without spec.unschedulable is schedulable, as kube-apiserver prints it.
        let node = json!({"metadata":{"name":"n"},"spec":{}});
        let cordoned = json!({"metadata":{"name":"c"},"spec":{"unschedulable":true}});
        let sel = FieldSelector::parse("spec.unschedulable=false", true).unwrap();
        assert!(sel.matches(&node));
        assert!(!sel.matches(&cordoned));
        let sel = FieldSelector::parse("spec.unschedulable!=true", true).unwrap();
        assert!(sel.matches(&node));
        assert!(!sel.matches(&cordoned));
    }
}
