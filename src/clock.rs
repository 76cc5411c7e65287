//! The time every decision is made at: everything the limiter decides or keeps takes `now`
//! as integer nanoseconds from a [`Clock`], so it can be driven by a fake clock in tests.
//! Timers that only bound waiting (I/O deadlines, idle ages) read the runtime's clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of monotonic nanoseconds since an arbitrary, fixed origin.
pub trait Clock: Send + Sync + 'static {
    fn now_ns(&self) -> u64;

    /// Wall-clock milliseconds since the Unix epoch, for what outlives the process or
    /// crosses gateways (a runtime override's expiry). Never used to decide a limit.
    fn wall_ms(&self) -> u64;

    /// Unix nanoseconds at the monotonic instant `now_ns`, on one fixed mapping for the
    /// process's life (taken at start), so that what is computed from it (a calendar
    /// window's end on the monotonic timeline) never moves when the wall clock is stepped.
    fn unix_ns_at(&self, now_ns: u64) -> u64;

    /// The monotonic instant of Unix nanoseconds `unix_ns` (the inverse mapping).
    fn mono_ns_at(&self, unix_ns: u64) -> u64 {
        let offset = self.unix_ns_at(0);
        unix_ns.saturating_sub(offset)
    }
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
    /// Unix nanoseconds at monotonic 0.
    unix_at_zero: u64,
}

const ORIGIN_OFFSET_NS: u64 = 3_600 * 1_000_000_000;

impl MonotonicClock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        let mut this = Self {
            clock,
            origin,
            unix_at_zero: 0,
        };
        this.unix_at_zero = this
            .wall_ms()
            .saturating_mul(1_000_000)
            .saturating_sub(this.now_ns());
        this
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

    #[allow(clippy::disallowed_methods)] // the one wall-clock reading
    fn wall_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn unix_ns_at(&self, now_ns: u64) -> u64 {
        self.unix_at_zero.saturating_add(now_ns)
    }
}

/// Unix nanoseconds as RFC 3339 in UTC, to the second (`2026-12-02T00:00:00Z`).
pub fn rfc3339(unix_ns: u64) -> String {
    let secs = i64::try_from(unix_ns / 1_000_000_000).unwrap_or(i64::MAX);
    jiff::Timestamp::from_second(secs).map_or_else(|_| String::new(), |t| t.to_string())
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

/// The fake clock's wall time: 2026-01-01T00:00:00Z at `now_ns` 0, moving with it.
const FAKE_EPOCH_MS: u64 = 1_767_225_600_000;

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn wall_ms(&self) -> u64 {
        FAKE_EPOCH_MS + self.now_ns() / 1_000_000
    }

    fn unix_ns_at(&self, now_ns: u64) -> u64 {
        (FAKE_EPOCH_MS * 1_000_000).saturating_add(now_ns)
    }
}

/// A current-thread runtime whose tokio time is paused: tests move it with
/// `tokio::time::advance`, or it jumps ahead whenever every task is waiting on a timer.
#[cfg(test)]
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}
