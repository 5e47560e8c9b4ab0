//! How the lists of built-in kinds merge: the `patchStrategy`/`patchMergeKey` struct tags
//! (strategic merge patch) and the `listType`/`listMapKey` markers (server-side apply) of
//! k8s.io/api 1.32, for the lists kubectl and controllers actually touch.

/// How a strategic merge patch treats a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SmpList {
    /// No `patchStrategy`: the patch's list replaces the live one.
    Replace,
    /// `patchStrategy: merge` with `patchMergeKey`.
    MergeKey(&'static str),
    /// `patchStrategy: merge` on a list of scalars: union.
    MergePrimitive,
}

/// How server-side apply treats a list (`x-kubernetes-list-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SsaList {
    /// Replaced whole, owned as one field.
    Atomic,
    /// Associative list keyed by these fields.
    Map(&'static [&'static str]),
    /// Set of scalars.
    Set,
}

/// Both strategies of one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListStrategy {
    pub smp: SmpList,
    pub ssa: SsaList,
}

const ATOMIC: ListStrategy = ListStrategy {
    smp: SmpList::Replace,
    ssa: SsaList::Atomic,
};

const fn keyed(smp_key: &'static str, ssa_keys: &'static [&'static str]) -> ListStrategy {
    ListStrategy {
        smp: SmpList::MergeKey(smp_key),
        ssa: SsaList::Map(ssa_keys),
    }
}

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// Defaults kube-apiserver fills into key fields before server-side apply sees them; used so
/// that `{containerPort: 80}` and `{containerPort: 80, protocol: TCP}` are the same item.
pub(crate) fn key_default(field: &str) -> Option<&'static str> {
    match field {
        "protocol" => Some("TCP"),
        _ => None,
    }
}

/// The strategy of the list at `path` (field names from the root; list items are not part of
/// the path) in an object of `group`/`kind`. Lists not known here are atomic.
pub(crate) fn strategy(group: &str, kind: &str, path: &[String]) -> ListStrategy {
    let Some((last, parents)) = path.split_last() else {
        return ATOMIC;
    };
    let parent = parents.last().map(String::as_str);
    let last = last.as_str();
    match (parent, last) {
        (Some("metadata"), "finalizers") => ListStrategy {
            smp: SmpList::MergePrimitive,
            ssa: SsaList::Set,
        },
        (Some("metadata"), "ownerReferences") => keyed("uid", &["uid"]),
        (Some("status"), "conditions") => keyed("type", &["type"]),
        (Some("spec"), l) if CONTAINER_LISTS.contains(&l) => keyed("name", &["name"]),
        (Some(p), "ports") if CONTAINER_LISTS.contains(&p) => {
            keyed("containerPort", &["containerPort", "protocol"])
        }
        (Some(p), "env") if CONTAINER_LISTS.contains(&p) => keyed("name", &["name"]),
        (Some(p), "volumeMounts") if CONTAINER_LISTS.contains(&p) => {
            keyed("mountPath", &["mountPath"])
        }
        (Some(p), "volumeDevices") if CONTAINER_LISTS.contains(&p) => {
            keyed("devicePath", &["devicePath"])
        }
        (Some("spec"), "ports") if group.is_empty() && kind == "Service" && parents.len() == 1 => {
            keyed("port", &["port", "protocol"])
        }
        (Some("spec"), "volumes") => keyed("name", &["name"]),
        (Some("spec"), "imagePullSecrets") => keyed("name", &["name"]),
        (Some("spec"), "hostAliases") => keyed("ip", &["ip"]),
        (Some("spec"), "topologySpreadConstraints") => {
            keyed("topologyKey", &["topologyKey", "whenUnsatisfiable"])
        }
        (Some("spec"), "resourceClaims" | "schedulingGates") => keyed("name", &["name"]),
        (Some("status"), "podIPs" | "hostIPs") => keyed("ip", &["ip"]),
        (Some("status"), "addresses") if kind == "Node" => ListStrategy {
            smp: SmpList::MergeKey("type"),
            ssa: SsaList::Atomic,
        },
        (Some("spec"), "podCIDRs") if kind == "Node" => ListStrategy {
            smp: SmpList::MergePrimitive,
            ssa: SsaList::Set,
        },
        (None, "secrets") if group.is_empty() && kind == "ServiceAccount" => ListStrategy {
            smp: SmpList::MergeKey("name"),
            ssa: SsaList::Atomic,
        },
        _ => ATOMIC,
    }
}

/// Whether the map at `path` is owned and replaced as a whole by server-side apply
/// (`+structType=atomic` / `+mapType=atomic`): label selectors and node selectors.
pub(crate) fn atomic_map(path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    match last.as_str() {
        "selector" => parents.last().is_some_and(|p| p == "spec"),
        "nodeSelector" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn strategy_knows_the_keyed_lists_of_built_in_kinds() {
        let cases = [
            (
                "apps",
                "Deployment",
                "spec.template.spec.containers",
                SmpList::MergeKey("name"),
            ),
            ("", "Pod", "spec.initContainers", SmpList::MergeKey("name")),
            (
                "apps",
                "Deployment",
                "spec.template.spec.containers.ports",
                SmpList::MergeKey("containerPort"),
            ),
            ("", "Service", "spec.ports", SmpList::MergeKey("port")),
            ("", "Pod", "spec.containers.env", SmpList::MergeKey("name")),
            (
                "",
                "Pod",
                "spec.containers.volumeMounts",
                SmpList::MergeKey("mountPath"),
            ),
            ("", "Pod", "spec.volumes", SmpList::MergeKey("name")),
            ("", "Pod", "spec.tolerations", SmpList::Replace),
            ("", "Pod", "spec.containers.args", SmpList::Replace),
            (
                "",
                "ConfigMap",
                "metadata.finalizers",
                SmpList::MergePrimitive,
            ),
            (
                "",
                "ConfigMap",
                "metadata.ownerReferences",
                SmpList::MergeKey("uid"),
            ),
            (
                "apps",
                "Deployment",
                "status.conditions",
                SmpList::MergeKey("type"),
            ),
            ("", "ServiceAccount", "secrets", SmpList::MergeKey("name")),
        ];
        for (group, kind, path, want) in cases {
            assert_eq!(strategy(group, kind, &p(path)).smp, want, "{kind} {path}");
        }
    }
}
