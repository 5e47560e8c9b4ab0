//! Helpers for `metav1.Condition` lists keyed by `type` (as in `status.conditions`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition of type `type_`, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status (`"True"`, `"False"`, `"Unknown"`) of the condition of type `type_`, if present.
pub fn status<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    get(conditions, type_).map(|c| c.status.as_str())
}

/// Whether the condition of type `type_` is present with status `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == Some("True")
}

/// Sets `condition` in `conditions`, replacing the one with the same `type`. When the status is
/// unchanged, the existing `lastTransitionTime` is kept, so that it records when the status last
/// changed, not when the condition was last written. Returns whether anything changed, so that
/// callers write status only when needed.
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == condition {
                false
            } else {
                *existing = condition;
                true
            }
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// Removes the condition of type `type_`. Returns whether one was removed.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Builds a condition. `status` is `"True"`, `"False"` or `"Unknown"`; `now` becomes its
/// `lastTransitionTime` (kept from the existing condition by [`set`] when the status is
/// unchanged).
pub fn new(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation,
        last_transition_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: &str, reason: &str, secs: i64) -> Condition {
        new("Ready", status, reason, "", Some(1), at(secs))
    }

    #[test]
    fn set_keeps_last_transition_time_when_status_is_unchanged() {
        let mut list = vec![ready("True", "ManagedClusterReady", 100)];
        let changed = set(&mut list, ready("True", "StillReady", 200));
        assert!(changed, "the reason changed");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].reason, "StillReady");
        assert_eq!(list[0].last_transition_time, at(100));
    }

    #[test]
    fn set_moves_last_transition_time_when_status_changes() {
        let mut list = vec![ready("True", "ManagedClusterReady", 100)];
        assert!(set(
            &mut list,
            ready("Unknown", "ClusterStatusUnknown", 200)
        ));
        assert_eq!(list[0].status, "Unknown");
        assert_eq!(list[0].last_transition_time, at(200));
    }

    #[test]
    fn set_reports_no_change_for_an_identical_condition_written_later() {
        let mut list = vec![ready("True", "ManagedClusterReady", 100)];
        assert!(!set(&mut list, ready("True", "ManagedClusterReady", 300)));
        assert_eq!(list[0].last_transition_time, at(100));
    }

    #[test]
    fn set_appends_a_new_type_and_get_finds_each_by_type() {
        let mut list = vec![ready("True", "ManagedClusterReady", 100)];
        assert!(set(
            &mut list,
            new(
                "ClusterInit",
                "False",
                "ClusterInitWaiting",
                "",
                None,
                at(150)
            )
        ));
        assert_eq!(list.len(), 2);
        let cases = [
            ("Ready", Some("True")),
            ("ClusterInit", Some("False")),
            ("Missing", None),
        ];
        for (type_, want) in cases {
            assert_eq!(status(&list, type_), want, "{type_}");
            assert_eq!(
                get(&list, type_).map(|c| c.type_.as_str()),
                want.map(|_| type_)
            );
        }
        assert!(is_true(&list, "Ready"));
        assert!(!is_true(&list, "ClusterInit"));
    }

    #[test]
    fn remove_drops_only_the_named_type() {
        let mut list = vec![
            ready("True", "ManagedClusterReady", 100),
            new("ClusterInit", "True", "ClusterInitDone", "", None, at(100)),
        ];
        assert!(remove(&mut list, "Ready"));
        assert!(!remove(&mut list, "Ready"));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].type_, "ClusterInit");
    }
}
