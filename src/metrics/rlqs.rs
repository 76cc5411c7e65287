//! The quota service's series: streams open, reports and bucket usages read, and the
//! actions sent by kind, each resolved once per process (no label look-up per report).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlqsActionLabels {
    pub action: &'static str,
}

pub struct RlqsFamilies {
    /// Envoys' streams open now.
    pub streams: Gauge,
    /// Bucket usages read (one per bucket per report).
    pub usages: Counter,
    /// Requests Envoys reported allowed, charged to their keys.
    pub allowed: Counter,
    /// Requests Envoys reported denied.
    pub denied: Counter,
    pub token_bucket: Counter,
    pub allow_all: Counter,
    pub deny_all: Counter,
    pub abandon: Counter,
    /// Usages of buckets no `[[rlqs.buckets]]` entry names.
    pub unmatched: Counter,
}

/// The most requests one report adds to the series: no Envoy admits four billion
/// requests of one bucket between two reports.
const MOST_IN_A_REPORT: u64 = u32::MAX as u64;

/// Adds what one report says, `n`, to `counter`: at most [`MOST_IN_A_REPORT`], and
/// stopping at `u64::MAX`. A count an Envoy reports is its word; one report of 2⁶⁴ − 1
/// requests wrapped the counter back to a few, which Prometheus reads as a reset (a
/// spike of 1.8 × 10¹⁹, then nothing), and added whole it would pin the series at its
/// top for good.
pub fn add_reported(counter: &Counter, n: u64) {
    use std::sync::atomic::Ordering;
    let n = n.min(MOST_IN_A_REPORT);
    let _always_some = counter
        .inner()
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_add(n))
        });
}

impl RlqsFamilies {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let streams = Gauge::default();
        registry.register(
            "rlqs_streams",
            "Envoy quota streams open now",
            streams.clone(),
        );
        let usages = Counter::default();
        registry.register(
            "rlqs_bucket_usages",
            "Bucket usages Envoys reported (one per bucket per report)",
            usages.clone(),
        );
        let allowed = Counter::default();
        registry.register(
            "rlqs_requests_allowed",
            "Requests Envoys reported allowed under their assignments, charged to the keys",
            allowed.clone(),
        );
        let denied = Counter::default();
        registry.register(
            "rlqs_requests_denied",
            "Requests Envoys reported denied under their assignments",
            denied.clone(),
        );
        let unmatched = Counter::default();
        registry.register(
            "rlqs_unmatched",
            "Bucket usages of buckets no [[rlqs.buckets]] entry names",
            unmatched.clone(),
        );
        let actions = Family::<RlqsActionLabels, Counter>::default();
        registry.register(
            "rlqs_actions",
            "Bucket actions sent by kind (token_bucket, allow_all, deny_all, abandon)",
            actions.clone(),
        );
        let action = |action| actions.get_or_create(&RlqsActionLabels { action }).clone();
        Self {
            streams,
            usages,
            allowed,
            denied,
            token_bucket: action("token_bucket"),
            allow_all: action("allow_all"),
            deny_all: action("deny_all"),
            abandon: action("abandon"),
            unmatched,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reported_count_is_bounded_and_never_wraps() {
        let counter = super::Counter::default();
        super::add_reported(&counter, 5);
        super::add_reported(&counter, u64::MAX);
        super::add_reported(&counter, 2);
        assert_eq!(counter.get(), 7 + super::MOST_IN_A_REPORT);
        counter.inc_by(u64::MAX - counter.get() - 1);
        super::add_reported(&counter, 5);
        assert_eq!(counter.get(), u64::MAX, "stops at the top");
    }
}
