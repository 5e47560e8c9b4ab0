//! Replica arithmetic: Clusternet's static (weights) and dynamic (capacity) dividing, with
//! deterministic tie-breaks, and per-cluster capacity from allocatable resources.
//!
//! Every function takes clusters in binding order (`namespace/name` ascending), so "ties go to the
//! lower index" means "ties go to the binding name that sorts first".

use std::collections::BTreeMap;

/// Resource amounts in milli-units keyed by resource name (`cpu`, `memory`, `pods`, ...).
pub type Resources = BTreeMap<String, i64>;

/// Per-replica resource requests in milli-units (`cpu: 250` = 250m, `memory: 128Mi * 1000`).
pub type ResourceRequests = Resources;

/// Resource name of the pod count in allocatable.
pub const RESOURCE_PODS: &str = "pods";

/// Static dividing (Clusternet `plugins/defaultassigner/static.go`).
///
/// `r[c] = floor(weight[c] * desired / Σweight)`; the `desired - Σr` replicas left over go one
/// each to the clusters in order of weight descending, ties broken by index ascending (binding
/// name ascending). Clusternet uses an unstable sort there, so its ties are arbitrary; this tie-
/// break makes the result a pure function of the inputs. Each cluster ends within one replica of
/// its exact share, the counts sum to `desired`, and raising one cluster's weight never lowers its
/// count (its floor cannot drop, the other floors cannot rise, and its rank only improves).
///
/// Returns all zeros when `Σweight` is 0 or `desired` is not positive; callers reject that case
/// before (see [`crate::error::Error::DivideStatic`]). Negative weights count as 0.
pub fn divide_static(desired: i32, weights: &[i64]) -> Vec<i32> {
    let weights: Vec<i128> = weights.iter().map(|w| i128::from((*w).max(0))).collect();
    let sum: i128 = weights.iter().sum();
    let d = i128::from(desired.max(0));
    if sum == 0 || d == 0 {
        return vec![0; weights.len()];
    }
    let mut out: Vec<i128> = weights.iter().map(|w| w * d / sum).collect();
    let remain = d - out.iter().sum::<i128>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // stable sort: equal weights keep index (binding name) order
    order.sort_by(|a, b| weights[*b].cmp(&weights[*a]));
    for idx in order.into_iter().take(usize::try_from(remain).unwrap_or(0)) {
        out[idx] += 1;
    }
    out.into_iter()
        .map(|r| i32::try_from(r).unwrap_or(i32::MAX))
        .collect()
}

/// Clusternet's `divide(d, w)` (`plugins/defaultassigner/algorithm.go`), used by dynamic dividing.
///
/// When `Σw == 0` or `d > Σw` it returns `w` unchanged: every cluster is filled to its capacity
/// and the rest cannot be placed. Otherwise `r[i] = trunc(w[i] * d / Σw)` (toward zero, also for
/// negative `d`), and the `|d - Σr|` left over go (+1 for a positive remainder, -1 for a negative
/// one) to the clusters with the largest fractional part `|w[i]*d/Σw - r[i]|`, ties broken by
/// index ascending (Clusternet: unstable sort). The fractional parts share the denominator `Σw`,
/// so they are compared exactly as integers.
///
/// Negative capacities count as 0 (as negative weights in [`divide_static`]): with a negative
/// `Σw` the shares could leave the range of `i64`, and the counts would no longer sum to `d`.
pub fn divide(d: i64, w: &[i64]) -> Vec<i64> {
    let w: Vec<i64> = w.iter().map(|x| (*x).max(0)).collect();
    let sum: i128 = w.iter().map(|x| i128::from(*x)).sum();
    let d128 = i128::from(d);
    if sum == 0 || d128 > sum {
        return w;
    }
    let products: Vec<i128> = w.iter().map(|x| i128::from(*x) * d128).collect();
    let mut out: Vec<i128> = products.iter().map(|p| p / sum).collect();
    let remain = d128 - out.iter().sum::<i128>();
    // |w*d/sum - r| * sum = |w*d - r*sum| = |w*d mod sum|
    let frac: Vec<i128> = products.iter().map(|p| (p % sum).abs()).collect();
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|a, b| frac[*b].cmp(&frac[*a]));
    let step = remain.signum();
    for idx in order
        .into_iter()
        .take(usize::try_from(remain.unsigned_abs()).unwrap_or(usize::MAX))
    {
        out[idx] += step;
    }
    out.into_iter()
        .map(|r| i64::try_from(r).unwrap_or(if r < 0 { i64::MIN } else { i64::MAX }))
        .collect()
}

/// How many replicas of one feed fit into `allocatable`:
/// - with a per-replica request: the minimum over every requested resource (amount > 0) of
///   `floor(allocatable / request)`, a resource missing from allocatable counting as 0; when the
///   cluster reports allocatable `pods`, that caps the result too (one pod per replica);
/// - without a request (or only zero amounts): the allocatable pod count, or 0 when the cluster
///   does not report one (nothing tells how many replicas fit).
///
/// Like Clusternet's predictor, this uses allocatable, not allocatable minus running pods: the
/// agent reports allocatable only.
pub fn max_replicas(allocatable: &Resources, request: Option<&ResourceRequests>) -> i64 {
    ReplicaFit::new(request).max_replicas(allocatable)
}

/// A per-replica request prepared for [`max_replicas`] over many clusters (the positive amounts,
/// collected once).
#[derive(Debug, Clone, Default)]
pub struct ReplicaFit<'a> {
    amounts: Vec<(&'a str, i64)>,
}

impl<'a> ReplicaFit<'a> {
    /// Prepares `request` (amounts of 0 or less are ignored).
    pub fn new(request: Option<&'a ResourceRequests>) -> Self {
        ReplicaFit {
            amounts: request
                .into_iter()
                .flatten()
                .filter(|(_, amount)| **amount > 0)
                .map(|(name, amount)| (name.as_str(), *amount))
                .collect(),
        }
    }

    /// See [`max_replicas`].
    pub fn max_replicas(&self, allocatable: &Resources) -> i64 {
        let pods = allocatable.get(RESOURCE_PODS).map(|p| (*p).max(0) / 1000);
        let mut limit: Option<i64> = None;
        for (resource, amount) in &self.amounts {
            let have = allocatable.get(*resource).copied().unwrap_or(0).max(0);
            let fit = have / amount;
            limit = Some(limit.map_or(fit, |l| l.min(fit)));
        }
        match (limit, pods) {
            (Some(l), Some(p)) => l.min(p),
            (Some(l), None) => l,
            (None, Some(p)) => p,
            (None, None) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_divide_matches_clusternet_arithmetic() {
        let cases: Vec<(&str, i32, Vec<i64>, Vec<i32>)> = vec![
            ("even split", 6, vec![1, 1, 1], vec![2, 2, 2]),
            ("remainder to heaviest", 7, vec![1, 2, 1], vec![2, 4, 1]),
            ("ties go to first binding", 4, vec![1, 1, 1], vec![2, 1, 1]),
            ("two leftovers on ties", 5, vec![1, 1, 1], vec![2, 2, 1]),
            ("zero weight gets zero", 5, vec![0, 1, 1], vec![0, 3, 2]),
            (
                "leftover to heavier, not nearest",
                10,
                vec![1, 3],
                vec![2, 8],
            ),
            ("zero desired", 0, vec![1, 2], vec![0, 0]),
            ("all zero weights", 5, vec![0, 0], vec![0, 0]),
            (
                "more clusters than replicas",
                2,
                vec![1, 1, 1, 1],
                vec![1, 1, 0, 0],
            ),
            ("heavier wins the leftover", 1, vec![1, 2, 1], vec![0, 1, 0]),
        ];
        for (name, d, w, want) in cases {
            assert_eq!(divide_static(d, &w), want, "{name}");
        }
    }

    #[test]
    fn dynamic_divide_matches_clusternet_examples() {
        let cases: Vec<(&str, i64, Vec<i64>, Vec<i64>)> = vec![
            ("capacity exactly used", 6, vec![1, 2, 2], vec![1, 2, 2]),
            (
                "more than capacity returns capacity",
                9,
                vec![1, 2, 2],
                vec![1, 2, 2],
            ),
            ("no capacity returns zeros", 3, vec![0, 0], vec![0, 0]),
            ("negative scale down", -6, vec![3, 6, 9], vec![-1, -2, -3]),
            (
                "negative with remainder",
                -2,
                vec![3, 6, 9],
                vec![0, -1, -1],
            ),
            ("largest fraction wins", 5, vec![10, 10, 10], vec![2, 2, 1]),
            ("proportional", 4, vec![10, 30], vec![1, 3]),
            ("fraction ordering", 3, vec![5, 3, 2], vec![1, 1, 1]),
        ];
        for (name, d, w, want) in cases {
            assert_eq!(divide(d, &w), want, "{name}");
        }
    }

    /// Found by the `dividing` fuzz target: with a negative capacity the sum of the capacities
    /// was negative, the shares overflowed `i64` and were saturated, and the counts no longer
    /// summed to the desired replicas. Negative capacities now count as 0.
    #[test]
    fn negative_capacities_count_as_zero() {
        let w = [
            -9_114_861_777_597_660_799,
            6_415_940_623_236_333_441,
            3_475_940_006_517_081,
        ];
        let d: i64 = -9_114_861_777_597_660_799;
        let r = divide(d, &w);
        let placed: i128 = r.iter().map(|x| i128::from(*x)).sum();
        assert_eq!(placed, i128::from(d), "{r:?}");
        assert_eq!(divide(i64::MAX, &w), vec![0, w[1], w[2]]);
        assert_eq!(divide(4, &[-3, 1, 1]), vec![0, 1, 1]);
        assert_eq!(divide(2, &[-3, 1, 1]), vec![0, 1, 1]);
    }

    #[test]
    fn capacity_is_the_scarcest_requested_resource() {
        let alloc: Resources = [
            ("cpu".to_owned(), 4_000),
            ("memory".to_owned(), 8 * 1024 * 1_000),
            ("pods".to_owned(), 110_000),
        ]
        .into();
        let req = |pairs: &[(&str, i64)]| -> ResourceRequests {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let cases: Vec<(&str, Resources, Option<ResourceRequests>, i64)> = vec![
            ("cpu bound", alloc.clone(), Some(req(&[("cpu", 500)])), 8),
            (
                "memory bound",
                alloc.clone(),
                Some(req(&[("cpu", 100), ("memory", 1024 * 1_000)])),
                8,
            ),
            ("pods cap", alloc.clone(), Some(req(&[("cpu", 1)])), 110),
            ("no request uses pods", alloc.clone(), None, 110),
            (
                "zero request uses pods",
                alloc.clone(),
                Some(req(&[("cpu", 0)])),
                110,
            ),
            (
                "missing resource fits nothing",
                alloc.clone(),
                Some(req(&[("nvidia.com/gpu", 1_000)])),
                0,
            ),
            ("no pods reported and no request", Resources::new(), None, 0),
            (
                "no pods reported with request",
                [("cpu".to_owned(), 2_000)].into(),
                Some(req(&[("cpu", 1_000)])),
                2,
            ),
        ];
        for (name, a, r, want) in cases {
            assert_eq!(max_replicas(&a, r.as_ref()), want, "{name}");
        }
    }
}
