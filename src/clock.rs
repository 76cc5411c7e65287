//! The only place that reads time. Everything else takes `now` as integer nanoseconds,
//! so the limiter can be driven by a fake clock in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of monotonic nanoseconds since an arbitrary, fixed origin.
pub trait Clock: Send + Sync + 'static {
    fn now_ns(&self) -> u64;
}

/// Monotonic process clock. The origin sits one hour before start-up so that
/// `now` never comes near zero, which keeps "TAT ≤ now means idle" meaningful
/// for a fresh key (TAT 0).
///
/// Reads the TSC through `quanta` (a few ns, where the TSC is invariant; quanta falls back
/// to the OS monotonic clock where it is not): the limiter reads time on every request.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

const ORIGIN_OFFSET_NS: u64 = 3_600 * 1_000_000_000;

impl MonotonicClock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        self.clock
            .delta_as_nanos(self.origin, self.clock.raw())
            .saturating_add(ORIGIN_OFFSET_NS)
    }
}

/// A clock that only moves when told to. Shared handles see the same time.
#[derive(Debug, Clone, Default)]
pub struct FakeClock {
    now: Arc<AtomicU64>,
}

impl FakeClock {
    pub fn at(ns: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(ns)),
        }
    }

    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::SeqCst);
    }

    pub fn set(&self, ns: u64) {
        self.now.store(ns, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
