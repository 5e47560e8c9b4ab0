//! Which Descriptions an agent answers for. A child cluster's inventories may hold Descriptions
//! of other registrations: of this cluster's earlier registrations (the parent lost it and the
//! agent registered again, into another dedicated namespace), or of another agent that shares
//! the state namespace. Only the former are ever pruned, and a Description of the current
//! registration takes over the objects its namesake of an earlier one applied, so that
//! re-registering deletes nothing that runs.

use std::collections::BTreeSet;

/// How many earlier dedicated namespaces are remembered.
pub const MAX_PREVIOUS_NAMESPACES: usize = 8;

/// The dedicated namespace of the agent's registration, and those of its earlier registrations
/// with the same hub.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// The dedicated namespace the hub assigned at this registration.
    pub namespace: String,
    /// Dedicated namespaces of earlier registrations of this cluster with the same hub.
    pub previous: BTreeSet<String>,
}

impl Scope {
    /// A scope for `namespace` after the earlier `previous` ones (`namespace` itself is dropped
    /// from them).
    pub fn new(namespace: &str, previous: impl IntoIterator<Item = String>) -> Self {
        Self {
            namespace: namespace.to_owned(),
            previous: previous.into_iter().filter(|p| p != namespace).collect(),
        }
    }

    /// Whether the Description with owner key `key` (`<dedicated-namespace>.<name>`) belongs to
    /// this registration or to an earlier one.
    pub fn covers(&self, key: &str) -> bool {
        let namespace = namespace_of(key);
        namespace == self.namespace || self.previous.contains(namespace)
    }

    /// Whether `key` belongs to an earlier registration.
    pub fn is_earlier(&self, key: &str) -> bool {
        self.previous.contains(namespace_of(key))
    }

    /// Whether the Description `key` of this registration succeeds `owner`: the Description of
    /// the same name in an earlier registration, whose objects it may take over.
    pub fn succeeds(&self, key: &str, owner: &str) -> bool {
        let (Some((namespace, name)), Some((owner_namespace, owner_name))) =
            (key.split_once('.'), owner.split_once('.'))
        else {
            return false;
        };
        namespace == self.namespace && name == owner_name && self.previous.contains(owner_namespace)
    }
}

/// The dedicated namespace of an owner key: namespace names hold no dots, Description names may.
fn namespace_of(key: &str) -> &str {
    key.split_once('.').map_or(key, |(namespace, _)| namespace)
}

/// The earlier dedicated namespaces of a registration in `namespace`, from what the agent
/// stored at its last registration: those it stored and the one it was in, when that
/// registration was with the same hub for the same cluster (another hub's namespaces are
/// another parent's, never this one's). The newest [`MAX_PREVIOUS_NAMESPACES`] are kept, oldest
/// first.
pub fn previous_namespaces(
    stored_previous: &[String],
    stored_namespace: &str,
    same_registrar: bool,
    namespace: &str,
) -> Vec<String> {
    if !same_registrar {
        return Vec::new();
    }
    let mut previous: Vec<String> = Vec::new();
    for ns in stored_previous
        .iter()
        .map(String::as_str)
        .chain([stored_namespace])
    {
        if !ns.is_empty() && ns != namespace {
            previous.retain(|p| p != ns);
            previous.push(ns.to_owned());
        }
    }
    let excess = previous.len().saturating_sub(MAX_PREVIOUS_NAMESPACES);
    previous.drain(..excess);
    previous
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_covers_its_registration_and_earlier_ones_and_succeeds_only_namesakes() {
        let scope = Scope::new("clusternet-new", ["clusternet-old".to_owned()]);
        assert!(scope.covers("clusternet-new.default.web"));
        assert!(scope.covers("clusternet-old.default.web"));
        assert!(
            !scope.covers("clusternet-other.default.web"),
            "another agent's"
        );
        assert!(scope.is_earlier("clusternet-old.default.web"));
        assert!(!scope.is_earlier("clusternet-new.default.web"));
        assert!(scope.succeeds("clusternet-new.default.web", "clusternet-old.default.web"));
        assert!(!scope.succeeds("clusternet-new.default.web", "clusternet-old.default.api"));
        assert!(!scope.succeeds("clusternet-new.default.web", "clusternet-other.default.web"));
        assert!(!scope.succeeds("clusternet-old.default.web", "clusternet-new.default.web"));
        assert!(!scope.succeeds("clusternet-new.default.web", "nobody"));
        assert!(
            Scope::new("a", ["a".to_owned()]).previous.is_empty(),
            "a namespace never precedes itself"
        );
    }

    #[test]
    fn previous_namespaces_table() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // (stored previous, stored namespace, same hub and cluster, new namespace) -> previous
        type Case<'a> = (&'a [&'a str], &'a str, bool, &'a str, &'a [&'a str]);
        let cases: &[Case] = &[
            (&[], "", true, "ns-1", &[]),
            (&[], "ns-1", true, "ns-1", &[]),
            (&[], "ns-1", true, "ns-2", &["ns-1"]),
            (&["ns-1"], "ns-2", true, "ns-3", &["ns-1", "ns-2"]),
            (&["ns-1"], "ns-2", true, "ns-1", &["ns-2"]),
            (&["ns-1"], "ns-2", false, "ns-3", &[]),
            (&["ns-1", "ns-1"], "ns-2", true, "ns-2", &["ns-1"]),
        ];
        for (stored_previous, stored, same, namespace, want) in cases {
            assert_eq!(
                previous_namespaces(&s(stored_previous), stored, *same, namespace),
                s(want),
                "{stored_previous:?} {stored} {same} {namespace}"
            );
        }
        let many: Vec<String> = (0..20).map(|i| format!("ns-{i}")).collect();
        let kept = previous_namespaces(&many, "ns-20", true, "ns-21");
        assert_eq!(kept.len(), MAX_PREVIOUS_NAMESPACES);
        assert_eq!(
            kept.last().map(String::as_str),
            Some("ns-20"),
            "newest kept"
        );
    }
}
