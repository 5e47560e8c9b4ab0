//! The agent's Prometheus metrics, in one sub-registry `atoll_agent`: the applier's (see
//! [`atoll_applier::metrics`]) and the hub connection's. Plain values, never globals, so many
//! agents can share a process.

use atoll_applier::metrics::ResultLabel;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// Gauges and counters of the agent's hub connection.
#[derive(Debug, Default)]
pub struct Metrics {
    /// 1 while a hub stream is established.
    pub connected: Gauge,
    /// Hub sessions (Welcomes received).
    pub sessions: Counter,
    /// Refused or failed connection attempts, by gRPC code or error label.
    pub connect_failures: Family<ResultLabel, Counter>,
    /// 1 while a prune after a snapshot is held back for confirmation.
    pub prune_held: Gauge,
}

impl Metrics {
    /// The agent's and its applier's metrics, registered under `atoll_agent` in `registry`.
    pub fn register(registry: &mut Registry) -> (Arc<Metrics>, Arc<atoll_applier::Metrics>) {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("atoll_agent");
        let applier = atoll_applier::Metrics::register(r);
        r.register(
            "prune_held",
            "1 while a prune after a snapshot is held back for confirmation",
            m.prune_held.clone(),
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
        (Arc::new(m), Arc::new(applier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_applier::metrics::count;

    #[test]
    fn registered_metrics_appear_in_the_text_output() {
        let mut registry = Registry::default();
        let (agent, applier) = Metrics::register(&mut registry);
        count(&applier.applies, "Success");
        count(&applier.applies, "Success");
        agent.connected.set(1);
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
