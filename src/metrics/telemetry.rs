//! The exporter's series: spans sent, and spans dropped by why (the queue was full, the
//! collector failed or was too slow), resolved once per process.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub reason: &'static str,
}

pub struct TelemetryFamilies {
    pub exported: Counter,
    /// The queue to the exporter was full: the span was never queued.
    pub queue_full: Counter,
    /// The collector refused, failed or did not answer in time.
    pub export_failed: Counter,
    /// Sampled past `max_sampled_per_second`: no span was built.
    pub over_rate: Counter,
}

impl TelemetryFamilies {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let exported = Counter::default();
        registry.register(
            "telemetry_spans_exported",
            "Spans the OTLP collector accepted",
            exported.clone(),
        );
        let dropped = Family::<DroppedLabels, Counter>::default();
        registry.register(
            "telemetry_dropped",
            "Spans dropped: queue_full (the exporter's queue was full), export_failed (the collector failed or was too slow), over_rate (sampled past max_sampled_per_second: never built)",
            dropped.clone(),
        );
        let reason = |reason| dropped.get_or_create(&DroppedLabels { reason }).clone();
        Self {
            exported,
            queue_full: reason("queue_full"),
            export_failed: reason("export_failed"),
            over_rate: reason("over_rate"),
        }
    }
}
