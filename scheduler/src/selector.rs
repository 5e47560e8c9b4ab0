//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), compiled once and matched
//! many times.
//!
//! Semantics follow `metav1.LabelSelectorAsSelector`: all requirements must hold; an empty
//! selector matches everything; `NotIn` and `DoesNotExist` match a cluster without the key;
//! `In`/`NotIn` need at least one value and `Exists`/`DoesNotExist` must have none.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::error::Error;

/// One compiled requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A validated label selector, ready to match label maps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Compiles `selector`; `location` names it in errors (e.g.
    /// `spec.subscribers[0].clusterAffinity`).
    pub fn compile(selector: &LabelSelector, location: &str) -> Result<Self, Error> {
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let bad = |reason: String| Error::ParseLabelSelector {
                location: format!("{location}.matchExpressions[{i}]"),
                reason,
            };
            if expr.key.is_empty() {
                return Err(bad("key is empty; set the label key to test".to_owned()));
            }
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let key = expr.key.clone();
            let requirement = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(bad(format!(
                        "operator {} needs at least one value; add `values: [...]`",
                        expr.operator
                    )));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(bad(format!(
                        "operator {} takes no values; remove `values`",
                        expr.operator
                    )));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(bad(format!(
                        "unknown operator {other:?}; use In, NotIn, Exists or DoesNotExist"
                    )));
                }
            };
            requirements.push(requirement);
        }
        Ok(Selector { requirements })
    }

    /// True when every requirement holds for `labels` (always true for an empty selector).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: if match_labels.is_empty() {
                None
            } else {
                Some(labels(match_labels))
            },
            match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
        }
    }

    #[test]
    fn selector_matching_follows_kubernetes_semantics() {
        type Case<'a> = (&'a str, LabelSelector, &'a [(&'a str, &'a str)], bool);
        let cases: Vec<Case<'_>> = vec![
            ("empty matches everything", selector(&[], vec![]), &[], true),
            (
                "empty matches labelled",
                selector(&[], vec![]),
                &[("a", "1")],
                true,
            ),
            (
                "matchLabels equal",
                selector(&[("env", "prod")], vec![]),
                &[("env", "prod")],
                true,
            ),
            (
                "matchLabels different value",
                selector(&[("env", "prod")], vec![]),
                &[("env", "dev")],
                false,
            ),
            (
                "matchLabels missing key",
                selector(&[("env", "prod")], vec![]),
                &[],
                false,
            ),
            (
                "In hit",
                selector(&[], vec![expr("zone", "In", &["a", "b"])]),
                &[("zone", "b")],
                true,
            ),
            (
                "In miss",
                selector(&[], vec![expr("zone", "In", &["a", "b"])]),
                &[("zone", "c")],
                false,
            ),
            (
                "In absent key",
                selector(&[], vec![expr("zone", "In", &["a"])]),
                &[],
                false,
            ),
            (
                "NotIn other value",
                selector(&[], vec![expr("zone", "NotIn", &["a"])]),
                &[("zone", "b")],
                true,
            ),
            (
                "NotIn listed value",
                selector(&[], vec![expr("zone", "NotIn", &["a"])]),
                &[("zone", "a")],
                false,
            ),
            (
                "NotIn absent key matches",
                selector(&[], vec![expr("zone", "NotIn", &["a"])]),
                &[],
                true,
            ),
            (
                "Exists present",
                selector(&[], vec![expr("gpu", "Exists", &[])]),
                &[("gpu", "")],
                true,
            ),
            (
                "Exists absent",
                selector(&[], vec![expr("gpu", "Exists", &[])]),
                &[],
                false,
            ),
            (
                "DoesNotExist absent",
                selector(&[], vec![expr("gpu", "DoesNotExist", &[])]),
                &[],
                true,
            ),
            (
                "DoesNotExist present",
                selector(&[], vec![expr("gpu", "DoesNotExist", &[])]),
                &[("gpu", "x")],
                false,
            ),
            (
                "all requirements must hold",
                selector(&[("env", "prod")], vec![expr("zone", "In", &["a"])]),
                &[("env", "prod"), ("zone", "b")],
                false,
            ),
            (
                "all requirements hold",
                selector(&[("env", "prod")], vec![expr("zone", "In", &["a"])]),
                &[("env", "prod"), ("zone", "a")],
                true,
            ),
        ];
        for (name, sel, lbls, want) in cases {
            let compiled = Selector::compile(&sel, "test").unwrap();
            assert_eq!(compiled.matches(&labels(lbls)), want, "{name}");
        }
    }

    #[test]
    fn invalid_selectors_are_rejected_with_the_location() {
        let cases = vec![
            (
                "unknown operator",
                expr("k", "Gt", &["1"]),
                "unknown operator",
            ),
            (
                "In without values",
                expr("k", "In", &[]),
                "at least one value",
            ),
            (
                "NotIn without values",
                expr("k", "NotIn", &[]),
                "at least one value",
            ),
            (
                "Exists with values",
                expr("k", "Exists", &["x"]),
                "takes no values",
            ),
            ("empty key", expr("", "Exists", &[]), "key is empty"),
        ];
        for (name, e, want) in cases {
            let err = Selector::compile(
                &selector(&[], vec![e]),
                "spec.subscribers[3].clusterAffinity",
            )
            .unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(want), "{name}: {msg}");
            assert!(
                msg.contains("spec.subscribers[3].clusterAffinity.matchExpressions[0]"),
                "{name}: {msg}"
            );
        }
    }
}
