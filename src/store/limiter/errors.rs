//! Failed store calls as counted: `tollgate_store_errors_total` by kind and cause.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::StoreLabels;
use crate::store::error::KINDS;
use crate::store::redis::health::CAUSES;

/// `tollgate_store_errors_total`, each series' handle resolved the first time it is
/// counted: a store failing every request (an outage under `on_error = "allow"`) costs no
/// label look-up, lock or allocation a request.
pub struct StoreErrors {
    family: Family<StoreLabels, Counter>,
    /// By kind, then cause ([`KINDS`], `health::CAUSES`).
    series: Vec<OnceLock<Counter>>,
}

impl StoreErrors {
    pub fn new(family: Family<StoreLabels, Counter>) -> Self {
        let n = KINDS.len() * CAUSES.len();
        Self {
            family,
            series: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Counts a failed call of `kind` for `cause`.
    pub fn inc(&self, kind: &'static str, cause: &'static str) {
        let labels = || StoreLabels {
            backend: "redis",
            kind,
            cause,
        };
        let k = KINDS.iter().position(|k| *k == kind);
        let c = CAUSES.iter().position(|c| *c == cause);
        let at = k
            .zip(c)
            .and_then(|(k, c)| self.series.get(k * CAUSES.len() + c));
        match at {
            Some(series) => {
                series
                    .get_or_init(|| self.family.get_or_create(&labels()).clone())
                    .inc();
            }
            None => {
                self.family.get_or_create(&labels()).inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_and_cause_counts_on_its_own_series() {
        let family = Family::<StoreLabels, Counter>::default();
        let errors = StoreErrors::new(family.clone());
        for _ in 0..3 {
            errors.inc("timeout", "connection_refused");
        }
        errors.inc("calendar_skew", "clock_skew");
        errors.inc("a kind no list has", "other");
        let count = |kind, cause| {
            family
                .get_or_create(&StoreLabels {
                    backend: "redis",
                    kind,
                    cause,
                })
                .get()
        };
        assert_eq!(count("timeout", "connection_refused"), 3);
        assert_eq!(count("calendar_skew", "clock_skew"), 1);
        assert_eq!(
            count("a kind no list has", "other"),
            1,
            "counted all the same"
        );
        assert_eq!(count("timeout", "timed_out"), 0);
    }
}
