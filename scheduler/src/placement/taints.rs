//! Taints and tolerations with Kubernetes semantics (`v1.Toleration.ToleratesTaint`).

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// `NoSchedule`: the cluster gets no new placements unless tolerated.
pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
/// `NoExecute`: like `NoSchedule` for placement purposes.
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";
/// `PreferNoSchedule`: the cluster is scored lower unless tolerated.
pub const EFFECT_PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// True when `toleration` tolerates `taint`:
/// - an empty effect matches every effect, otherwise the effects must be equal;
/// - an empty key matches every key (Kubernetes only allows it with `Exists`), otherwise the keys
///   must be equal;
/// - operator `Exists` ignores the value; `Equal` (or empty, the default) compares the values, an
///   absent value counting as `""`; any other operator tolerates nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// True when some toleration in `tolerations` tolerates `taint`.
pub fn tolerated_by_any(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first `NoSchedule`/`NoExecute` taint no toleration tolerates, if any.
pub fn first_untolerated_hard_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        (taint.effect == EFFECT_NO_SCHEDULE || taint.effect == EFFECT_NO_EXECUTE)
            && !tolerated_by_any(tolerations, taint)
    })
}

/// Number of `PreferNoSchedule` taints not tolerated. As in Kubernetes' TaintToleration score
/// plugin, only tolerations whose effect is empty or `PreferNoSchedule` count.
pub fn untolerated_soft_taints(taints: &[Taint], tolerations: &[Toleration]) -> usize {
    let soft = |t: &&Toleration| {
        matches!(
            t.effect.as_deref(),
            None | Some("") | Some(EFFECT_PREFER_NO_SCHEDULE)
        )
    };
    taints
        .iter()
        .filter(|taint| taint.effect == EFFECT_PREFER_NO_SCHEDULE)
        .filter(|taint| !tolerations.iter().filter(soft).any(|t| tolerates(t, taint)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: Option<&str>, effect: &str) -> Toleration {
        let opt = |s: &str| {
            if s.is_empty() {
                None
            } else {
                Some(s.to_owned())
            }
        };
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: value.map(str::to_owned),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn toleration_matching_follows_kubernetes_semantics() {
        let t = taint("dedicated", Some("gpu"), "NoSchedule");
        let cases = vec![
            (
                "Equal same key value effect",
                tol("dedicated", "Equal", Some("gpu"), "NoSchedule"),
                true,
            ),
            (
                "empty operator means Equal",
                tol("dedicated", "", Some("gpu"), "NoSchedule"),
                true,
            ),
            (
                "Equal other value",
                tol("dedicated", "Equal", Some("cpu"), "NoSchedule"),
                false,
            ),
            (
                "Equal missing value",
                tol("dedicated", "Equal", None, "NoSchedule"),
                false,
            ),
            (
                "Exists ignores value",
                tol("dedicated", "Exists", None, "NoSchedule"),
                true,
            ),
            (
                "other key",
                tol("other", "Exists", None, "NoSchedule"),
                false,
            ),
            (
                "other effect",
                tol("dedicated", "Exists", None, "NoExecute"),
                false,
            ),
            (
                "empty effect matches all effects",
                tol("dedicated", "Exists", None, ""),
                true,
            ),
            (
                "empty key with Exists tolerates all",
                tol("", "Exists", None, ""),
                true,
            ),
            (
                "unknown operator tolerates nothing",
                tol("dedicated", "Gt", Some("gpu"), ""),
                false,
            ),
        ];
        for (name, toleration, want) in cases {
            assert_eq!(tolerates(&toleration, &t), want, "{name}");
        }
        let no_value = taint("unschedulable", None, "NoSchedule");
        assert!(tolerates(
            &tol("unschedulable", "Equal", None, ""),
            &no_value
        ));
        assert!(tolerates(
            &tol("unschedulable", "Equal", Some(""), ""),
            &no_value
        ));
    }

    #[test]
    fn only_noschedule_and_noexecute_taints_filter() {
        let taints = vec![
            taint("soft", None, "PreferNoSchedule"),
            taint("hard", Some("x"), "NoExecute"),
        ];
        assert_eq!(
            first_untolerated_hard_taint(&taints, &[]).map(|t| t.key.as_str()),
            Some("hard")
        );
        assert!(
            first_untolerated_hard_taint(&taints, &[tol("hard", "Exists", None, "")]).is_none()
        );
        assert!(first_untolerated_hard_taint(&taints[..1], &[]).is_none());
    }

    #[test]
    fn soft_taints_count_only_tolerations_without_hard_effect() {
        let taints = vec![
            taint("a", None, "PreferNoSchedule"),
            taint("b", None, "PreferNoSchedule"),
            taint("c", None, "NoSchedule"),
        ];
        let cases = vec![
            ("no tolerations", vec![], 2),
            (
                "one tolerated",
                vec![tol("a", "Exists", None, "PreferNoSchedule")],
                1,
            ),
            ("empty effect counts", vec![tol("b", "Exists", None, "")], 1),
            (
                "NoSchedule toleration does not count",
                vec![tol("a", "Exists", None, "NoSchedule")],
                2,
            ),
            ("tolerate everything", vec![tol("", "Exists", None, "")], 0),
        ];
        for (name, tols, want) in cases {
            assert_eq!(untolerated_soft_taints(&taints, &tols), want, "{name}");
        }
    }
}
