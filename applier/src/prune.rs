//! The prune safety limit: after a snapshot, the agent removes the objects of Descriptions the
//! hub no longer has. A snapshot that would remove more than a set share of what the agent owns
//! is more likely a mistake (a parent restored from an old backup, a cluster re-registered into
//! another namespace, a namespace emptied by hand) than an intent, so that prune is held until
//! someone confirms it on the ManagedCluster in the parent.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// How many Description names a hold lists (the count says how many there are).
pub const MAX_LISTED: usize = 10;

/// What a prune after a snapshot would remove.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrunePlan {
    /// Owner keys of the Descriptions to remove, with how many objects each would delete (none
    /// for a Description whose deletion policy is `Orphan`).
    pub stale: BTreeMap<String, usize>,
    /// Objects the agent owns in all, the stale ones included.
    pub owned_objects: usize,
    /// Of the objects to delete, those applied for an earlier registration of the cluster
    /// (another dedicated namespace) that no Description of this one took over.
    pub earlier_registration_objects: usize,
}

impl PrunePlan {
    /// Objects the prune would delete.
    pub fn objects(&self) -> usize {
        self.stale.values().sum()
    }

    /// An id for this set of Descriptions: the same set gives the same id, whatever the order.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        for key in self.stale.keys() {
            h.update(key.as_bytes());
            h.update([0]);
        }
        h.finalize()
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A prune the agent holds back, waiting for confirmation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneHold {
    /// [`PrunePlan::id`].
    pub id: String,
    /// The first [`MAX_LISTED`] Descriptions it would remove.
    pub descriptions: Vec<String>,
    /// How many Descriptions it would remove.
    pub description_count: usize,
    /// Objects it would delete.
    pub objects: usize,
    /// Objects the agent owns.
    pub owned_objects: usize,
    /// The limit, percent of the owned objects.
    pub max_percent: u32,
    /// Objects of an earlier registration it would delete: such a prune always waits.
    pub earlier_registration_objects: usize,
}

/// Whether `plan` must wait: it deletes more than `max_percent` of the owned objects, or any
/// object of an earlier registration (the new one may not have been given its Descriptions
/// yet), and `confirmed` (the ManagedCluster's confirm annotation, empty when absent) is not
/// its id. A limit of 100 or more never holds.
pub fn hold(plan: &PrunePlan, max_percent: u32, confirmed: &str) -> Option<PruneHold> {
    let objects = plan.objects();
    if objects == 0 || max_percent >= 100 {
        return None;
    }
    // objects / owned > max / 100, in integers.
    let over = (objects as u128) * 100 > (plan.owned_objects as u128) * u128::from(max_percent);
    let id = plan.id();
    if !(over || plan.earlier_registration_objects > 0) || confirmed == id {
        return None;
    }
    Some(PruneHold {
        descriptions: plan.stale.keys().take(MAX_LISTED).cloned().collect(),
        description_count: plan.stale.len(),
        objects,
        owned_objects: plan.owned_objects,
        max_percent,
        earlier_registration_objects: plan.earlier_registration_objects,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(stale: &[(&str, usize)], owned: usize) -> PrunePlan {
        PrunePlan {
            stale: stale.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
            owned_objects: owned,
            earlier_registration_objects: 0,
        }
    }

    #[test]
    fn a_prune_over_the_share_is_held_until_its_id_is_confirmed() {
        let cases = [
            // (stale, owned, max %, confirmed?, held?)
            (vec![], 10, 50, false, false),
            (vec![("c.a", 5)], 10, 50, false, false),
            (vec![("c.a", 6)], 10, 50, false, true),
            (vec![("c.a", 6)], 10, 50, true, false),
            (vec![("c.a", 1)], 1, 50, false, true),
            (vec![("c.a", 1)], 1, 100, false, false),
            (vec![("c.a", 1)], 100, 0, false, true),
            (vec![("c.a", 0)], 0, 0, false, false),
        ];
        for (stale, owned, max, confirm, held) in cases {
            let p = plan(&stale, owned);
            let confirmed = if confirm { p.id() } else { String::new() };
            let got = hold(&p, max, &confirmed);
            assert_eq!(got.is_some(), held, "{stale:?} of {owned}, max {max}%");
        }
    }

    #[test]
    fn a_prune_of_an_earlier_registrations_objects_always_waits_unless_the_limit_is_off() {
        let p = PrunePlan {
            earlier_registration_objects: 1,
            ..plan(&[("old.a", 1)], 100)
        };
        let h = hold(&p, 50, "").unwrap();
        assert_eq!(h.earlier_registration_objects, 1);
        assert!(hold(&p, 50, &p.id()).is_none(), "confirmed");
        assert!(hold(&p, 100, "").is_none(), "limit off");
    }

    #[test]
    fn a_confirmation_covers_only_the_set_it_was_given_for() {
        let first = plan(&[("c.a", 3), ("c.b", 3)], 6);
        let second = plan(&[("c.a", 3), ("c.b", 3), ("c.c", 1)], 7);
        assert_ne!(first.id(), second.id());
        assert!(hold(&first, 50, &first.id()).is_none());
        assert!(hold(&second, 50, &first.id()).is_some());
    }

    #[test]
    fn a_hold_lists_at_most_ten_descriptions_and_counts_all() {
        let stale: Vec<(String, usize)> = (0..25).map(|i| (format!("c.d{i:02}"), 1)).collect();
        let p = PrunePlan {
            stale: stale.into_iter().collect(),
            owned_objects: 25,
            earlier_registration_objects: 0,
        };
        let h = hold(&p, 50, "").unwrap();
        assert_eq!(h.descriptions.len(), MAX_LISTED);
        assert_eq!(
            (h.description_count, h.objects, h.owned_objects),
            (25, 25, 25)
        );
        assert_eq!(h.id.len(), 12);
    }
}
