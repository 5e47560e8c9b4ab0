//! The agent's Prometheus metrics (one sub-registry `atoll_agent`). Metrics are plain values
//! handed to the applier and the agent, never globals, so many agents can share a process.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set with one `result` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome (`Success`/`Failure`, or an error label).
    pub result: String,
}

/// Counters, gauges and histograms of one agent.
#[derive(Debug)]
pub struct Metrics {
    /// Description applies by phase.
    pub applies: Family<ResultLabel, Counter>,
    /// How long applying a Description took, seconds.
    pub apply_seconds: Histogram,
    /// Objects re-applied by drift repair, by outcome (`repaired`, `failed`).
    pub drift_repairs: Family<ResultLabel, Counter>,
    /// Description deletions by outcome (`confirmed`, `pending`).
    pub deletions: Family<ResultLabel, Counter>,
    /// 1 while a hub stream is established.
    pub connected: Gauge,
    /// Hub sessions (Welcomes received).
    pub sessions: Counter,
    /// Refused or failed connection attempts, by gRPC code or error label.
    pub connect_failures: Family<ResultLabel, Counter>,
    /// 1 while a prune after a snapshot is held back for confirmation.
    pub prune_held: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            applies: Family::default(),
            apply_seconds: Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]),
            drift_repairs: Family::default(),
            deletions: Family::default(),
            connected: Gauge::default(),
            sessions: Counter::default(),
            connect_failures: Family::default(),
            prune_held: Gauge::default(),
        }
    }
}

impl Metrics {
    /// New metrics registered under `atoll_agent` in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("atoll_agent");
        r.register("applies", "Description applies by phase", m.applies.clone());
        r.register(
            "prune_held",
            "1 while a prune after a snapshot is held back for confirmation",
            m.prune_held.clone(),
        );
        r.register(
            "apply_seconds",
            "How long applying a Description took",
            m.apply_seconds.clone(),
        );
        r.register(
            "drift_repairs",
            "Objects re-applied by drift repair, by outcome",
            m.drift_repairs.clone(),
        );
        r.register(
            "deletions",
            "Description deletions by outcome",
            m.deletions.clone(),
        );
        r.register(
            "hub_connected",
            "1 while a hub stream is established",
            m.connected.clone(),
        );
        r.register(
            "hub_sessions",
            "Hub sessions established",
            m.sessions.clone(),
        );
        r.register(
            "hub_connect_failures",
            "Refused or failed hub connection attempts",
            m.connect_failures.clone(),
        );
        m
    }

    /// Counts one outcome in a family.
    pub fn count(family: &Family<ResultLabel, Counter>, result: &str) {
        family
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_appear_in_the_text_output() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        Metrics::count(&m.applies, "Success");
        Metrics::count(&m.applies, "Success");
        m.connected.set(1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        assert!(
            text.contains("atoll_agent_applies_total{result=\"Success\"} 2"),
            "{text}"
        );
        assert!(text.contains("atoll_agent_hub_connected 1"), "{text}");
        assert!(text.contains("atoll_agent_apply_seconds_bucket"), "{text}");
    }
}
