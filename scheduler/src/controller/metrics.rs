//! The scheduler's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error's stable label ([`crate::Error::label`]).
    pub error: String,
}

/// Metrics of the scheduler's reconcile loop.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconcile failures by error.
    pub errors: Family<ErrorLabels, Counter>,
    /// Time to schedule, render and write one Subscription, in seconds.
    pub schedule_duration: Histogram,
    /// Subscription triggers waiting to be picked up by the reconcile loop.
    pub queue_depth: Gauge,
    /// Descriptions written (created or changed).
    pub descriptions_written: Counter,
    /// Descriptions deleted.
    pub descriptions_deleted: Counter,
    /// Feed kinds watched (one shared watch each), released when no Subscription names them.
    pub feed_watches: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            schedule_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            queue_depth: Gauge::default(),
            descriptions_written: Counter::default(),
            descriptions_deleted: Counter::default(),
            feed_watches: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Registers the metrics under the `scheduler` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("atoll_scheduler");
        r.register(
            "reconciles",
            "Subscription reconciles run",
            self.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Subscription reconcile failures by error",
            self.errors.clone(),
        );
        r.register(
            "schedule_duration_seconds",
            "Time to schedule, render and write one Subscription",
            self.schedule_duration.clone(),
        );
        r.register(
            "queue_depth",
            "Subscription triggers waiting for the reconcile loop",
            self.queue_depth.clone(),
        );
        r.register(
            "descriptions_written",
            "Descriptions created or changed",
            self.descriptions_written.clone(),
        );
        r.register(
            "descriptions_deleted",
            "Descriptions deleted",
            self.descriptions_deleted.clone(),
        );
        r.register(
            "feed_watches",
            "Feed kinds watched, one shared watch each",
            self.feed_watches.clone(),
        );
    }
}
