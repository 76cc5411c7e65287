//! Failed store calls as counted: `tollgate_store_errors_total` by kind and cause.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::StoreLabels;
use crate::store::error::{StoreError, KINDS};
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

    /// Counts a failed call `e`, for `cause`.
    pub fn inc(&self, e: &StoreError, cause: &'static str) {
        let labels = || StoreLabels {
            backend: "redis",
            kind: e.kind(),
            cause,
        };
        let c = CAUSES.iter().position(|c| *c == cause);
        let at = c.and_then(|c| self.series.get(e.kind_index() * CAUSES.len() + c));
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
        let timeout = StoreError::Timeout(std::time::Duration::from_secs(1));
        for _ in 0..3 {
            errors.inc(&timeout, "connection_refused");
        }
        errors.inc(&StoreError::CalendarSkew, "clock_skew");
        errors.inc(&StoreError::Reply, "a cause no list has");
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
            count("reply", "a cause no list has"),
            1,
            "counted all the same"
        );
        assert_eq!(count("timeout", "timed_out"), 0);
    }
}
