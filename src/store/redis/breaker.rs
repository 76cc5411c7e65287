//! A circuit breaker for the remote store: after a few consecutive failures requests stop
//! waiting on the store for a while and take the `on_error` path at once.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Consecutive failures that open the breaker.
pub const TRIP_AFTER: u32 = 3;
/// How long it stays open before one request (or the background probe) tries again.
pub const OPEN_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Breaker {
    failures: AtomicU32,
    /// Clock nanoseconds until which calls are refused; 0 when closed.
    open_until: AtomicU64,
}

impl Breaker {
    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    /// Whether a call may go to the store now. When the open period has passed, exactly
    /// one caller is let through as a probe (and the period is extended for the rest).
    pub fn allow(&self, now_ns: u64) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        if now_ns < until {
            return false;
        }
        let next = now_ns.saturating_add(OPEN_FOR.as_nanos() as u64);
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn success(&self) {
        self.failures.store(0, Ordering::Release);
        self.open_until.store(0, Ordering::Release);
    }

    /// Records a failure; returns true when this one opened the breaker.
    pub fn failure(&self, now_ns: u64) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures >= TRIP_AFTER && self.open_until.load(Ordering::Acquire) == 0 {
            let until = now_ns.saturating_add(OPEN_FOR.as_nanos() as u64).max(1);
            return self
                .open_until
                .compare_exchange(0, until, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_once() {
        let b = Breaker::default();
        let s = 1_000_000_000;
        assert!(!b.failure(s));
        assert!(!b.failure(s));
        assert!(b.allow(s));
        assert!(b.failure(s), "third failure opens");
        assert!(!b.allow(s + 1));
        assert!(b.allow(2 * s), "one probe after the open period");
        assert!(!b.allow(2 * s), "only one");
        b.success();
        assert!(b.allow(2 * s) && !b.is_open());
    }
}
