//! The hub's Prometheus metrics (one sub-registry `atoll_hub`).

use crate::Error;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label set carrying one `result` or `error` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome.
    pub result: String,
}

/// Counters and gauges of the hub.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Agent streams open now.
    pub streams: Gauge,
    /// Messages sent to agents.
    pub messages_sent: Counter,
    /// Description reports by outcome (`written`, `superseded` by a newer report on the same
    /// Description before it was written, `retried` after a failed write, `denied`, `stale`,
    /// `older_stream`, `oversized`).
    pub reports: Family<ResultLabel, Counter>,
    /// Refused handshakes by error label.
    pub handshakes_failed: Family<ResultLabel, Counter>,
    /// Failed operations by error label.
    pub errors: Family<ResultLabel, Counter>,
    /// Writes to the API server by kind (`managedcluster_status`, `description_status`,
    /// `subscription_status`, `finalizer`, `taint`).
    pub writes: Family<ResultLabel, Counter>,
    /// Agent messages out of sequence on their stream: `repeat` (dropped) or `gap` (the
    /// stream ended).
    pub out_of_sequence: Family<ResultLabel, Counter>,
    /// Agent heartbeats by outcome: `received`, `superseded` by the stream's next one while
    /// waiting to be written (its write is the newer one's), `written`, `failed`.
    pub heartbeats: Family<ResultLabel, Counter>,
}

impl Metrics {
    /// New metrics registered under `atoll_hub` in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("atoll_hub");
        r.register("agent_streams", "Agent streams open now", m.streams.clone());
        r.register(
            "messages_sent",
            "Messages sent to agents",
            m.messages_sent.clone(),
        );
        r.register(
            "reports",
            "Description reports by outcome",
            m.reports.clone(),
        );
        r.register(
            "handshakes_failed",
            "Refused handshakes by error",
            m.handshakes_failed.clone(),
        );
        r.register("errors", "Failed operations by error", m.errors.clone());
        r.register(
            "writes",
            "Writes to the parent API server by kind",
            m.writes.clone(),
        );
        r.register(
            "out_of_sequence",
            "Agent messages out of sequence on their stream, by kind",
            m.out_of_sequence.clone(),
        );
        r.register(
            "heartbeats",
            "Agent heartbeats by outcome",
            m.heartbeats.clone(),
        );
        m
    }

    /// Counts a heartbeat outcome.
    pub fn heartbeat(&self, result: &str) {
        self.heartbeats
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Counts a report outcome.
    pub fn report(&self, result: &str) {
        self.reports
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Counts a refused handshake.
    pub fn handshake_failed(&self, e: &Error) {
        self.handshake_refused(e.label());
    }

    /// Counts a handshake refused before any error of the crate's (`handshakes_full`,
    /// `hello_timeout`).
    pub fn handshake_refused(&self, label: &str) {
        self.handshakes_failed
            .get_or_create(&ResultLabel {
                result: label.into(),
            })
            .inc();
    }

    /// Counts a failed operation.
    pub fn error(&self, e: &Error) {
        self.errors
            .get_or_create(&ResultLabel {
                result: e.label().into(),
            })
            .inc();
    }

    /// Counts an agent message out of sequence (`repeat` or `gap`).
    pub fn out_of_sequence(&self, kind: &str) {
        self.out_of_sequence
            .get_or_create(&ResultLabel {
                result: kind.into(),
            })
            .inc();
    }

    /// Counts a write.
    pub fn write(&self, kind: &str) {
        self.writes
            .get_or_create(&ResultLabel {
                result: kind.into(),
            })
            .inc();
    }
}
