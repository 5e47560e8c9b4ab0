//! Filter and score steps as small traits, in the style of Clusternet's
//! `pkg/scheduler/framework` (Filter, Score + NormalizeScore).

use k8s_openapi::api::core::v1::Toleration;

use super::ClusterInfo;
use super::taints::{first_untolerated_hard_taint, untolerated_soft_taints};

/// Highest score a plugin may give after normalisation.
pub const MAX_SCORE: i64 = 100;

/// What a filter step sees of the Subscription.
#[derive(Debug, Clone, Copy)]
pub struct FilterInput<'a> {
    /// `spec.clusterTolerations`.
    pub tolerations: &'a [Toleration],
}

/// A filter step: keeps or rejects one cluster, giving the reason for a rejection.
pub trait Filter {
    /// Plugin name, used in reasons.
    fn name(&self) -> &'static str;
    /// `Ok(())` keeps the cluster; `Err(reason)` rejects it with a message for the user.
    fn filter(&self, input: &FilterInput<'_>, cluster: &ClusterInfo) -> Result<(), String>;
}

/// A score step: rates every feasible cluster, then normalises the rates to `0..=MAX_SCORE`.
pub trait Score {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// Multiplier applied after normalisation.
    fn weight(&self) -> i64;
    /// The raw score of one cluster.
    fn score(&self, input: &FilterInput<'_>, cluster: &ClusterInfo) -> i64;
    /// Maps raw scores to `0..=MAX_SCORE` in place.
    fn normalize(&self, scores: &mut [i64]);
}

/// Rejects clusters that are not Ready.
///
/// Clusternet filters them only through the `clusters.clusternet.io/unschedulable` taint, which
/// its controller manager adds minutes after the cluster went silent; atoll filters on the Ready
/// condition directly, so that a lost agent stream moves Dividing replicas at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Readiness;

impl Filter for Readiness {
    fn name(&self) -> &'static str {
        "Readiness"
    }

    fn filter(&self, _input: &FilterInput<'_>, cluster: &ClusterInfo) -> Result<(), String> {
        if cluster.ready {
            Ok(())
        } else {
            Err(
                "cluster is not Ready (its agent is not reporting); wait for it to reconnect"
                    .to_owned(),
            )
        }
    }
}

/// Kubernetes-style taint toleration: `NoSchedule`/`NoExecute` taints filter, untolerated
/// `PreferNoSchedule` taints lower the score (weight 3, as in Clusternet's default profile).
#[derive(Debug, Clone, Copy, Default)]
pub struct TaintToleration;

impl Filter for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }

    fn filter(&self, input: &FilterInput<'_>, cluster: &ClusterInfo) -> Result<(), String> {
        match first_untolerated_hard_taint(&cluster.taints, input.tolerations) {
            None => Ok(()),
            Some(taint) => Err(format!(
                "cluster has taint {{{}: {}}} ({}) that the subscription does not tolerate; add \
                 a matching spec.clusterTolerations entry",
                taint.key,
                taint.value.as_deref().unwrap_or(""),
                taint.effect
            )),
        }
    }
}

impl Score for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }

    fn weight(&self) -> i64 {
        3
    }

    fn score(&self, input: &FilterInput<'_>, cluster: &ClusterInfo) -> i64 {
        i64::try_from(untolerated_soft_taints(&cluster.taints, input.tolerations))
            .unwrap_or(i64::MAX)
    }

    /// Fewer untolerated soft taints is better: `100 - 100 * count / max` (all 100 when no
    /// cluster has any), as Clusternet's `NormalizeScore` with reverse = true.
    fn normalize(&self, scores: &mut [i64]) {
        let max = scores.iter().copied().max().unwrap_or(0);
        for s in scores.iter_mut() {
            *s = if max == 0 {
                MAX_SCORE
            } else {
                MAX_SCORE - MAX_SCORE * *s / max
            };
        }
    }
}

/// The default filter chain: readiness, then taints.
pub fn default_filters() -> Vec<Box<dyn Filter + Send + Sync>> {
    vec![Box::new(Readiness), Box::new(TaintToleration)]
}

/// The default score chain: taint toleration.
pub fn default_scores() -> Vec<Box<dyn Score + Send + Sync>> {
    vec![Box::new(TaintToleration)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_score_normalises_fewer_taints_higher() {
        let cases: Vec<(&str, Vec<i64>, Vec<i64>)> = vec![
            ("no soft taints anywhere", vec![0, 0], vec![100, 100]),
            ("one of two tainted", vec![0, 2], vec![100, 0]),
            ("graded", vec![1, 2, 4], vec![75, 50, 0]),
        ];
        for (name, mut raw, want) in cases {
            TaintToleration.normalize(&mut raw);
            assert_eq!(raw, want, "{name}");
        }
    }
}
