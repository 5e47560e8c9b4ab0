//! The applier's Prometheus metrics. They are plain values handed to the applier, never
//! globals, so many appliers can share a process (the hub's Push mode runs one per cluster).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set with one `result` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome (`Success`/`Failure`, or an error label).
    pub result: String,
}

/// Counts one outcome in a family.
pub fn count(family: &Family<ResultLabel, Counter>, result: &str) {
    family
        .get_or_create(&ResultLabel {
            result: result.to_owned(),
        })
        .inc();
}

/// Counters and histograms of one applier.
#[derive(Debug)]
pub struct Metrics {
    /// Description applies by phase, or `unchanged` when one delivered again as applied was
    /// left in place.
    pub applies: Family<ResultLabel, Counter>,
    /// How long applying a Description took, seconds.
    pub apply_seconds: Histogram,
    /// Objects re-applied by drift repair, by outcome (`repaired`, `failed`).
    pub drift_repairs: Family<ResultLabel, Counter>,
    /// Description deletions by outcome (`confirmed`, `pending`).
    pub deletions: Family<ResultLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            applies: Family::default(),
            apply_seconds: Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]),
            drift_repairs: Family::default(),
            deletions: Family::default(),
        }
    }
}

impl Metrics {
    /// New metrics registered in `registry` (the agent passes its `atoll_agent` sub-registry).
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        registry.register("applies", "Description applies by phase", m.applies.clone());
        registry.register(
            "apply_seconds",
            "How long applying a Description took",
            m.apply_seconds.clone(),
        );
        registry.register(
            "drift_repairs",
            "Objects re-applied by drift repair, by outcome",
            m.drift_repairs.clone(),
        );
        registry.register(
            "deletions",
            "Description deletions by outcome",
            m.deletions.clone(),
        );
        m
    }
}
