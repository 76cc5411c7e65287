//! How many lines the logs may write: `access_log_rate` a second, split in shares — one
//! per data-plane worker, kept by its thread with no shared write, and one for the rate
//! limit service's calls, which run on the main runtime's threads.

use std::cell::Cell;

use crate::config::Config;
use crate::metrics::Metrics;

/// One worker thread's line budget: tokens in thousandths of a line, refilled at its
/// share of `access_log_rate`, at most one second's worth.
#[derive(Clone, Copy)]
struct Budget {
    milli_lines: u64,
    at_ns: u64,
    dropped: u64,
}

impl Budget {
    /// Thousandths of a line earned since the last look, at `rate` lines a second.
    fn earned(&self, now: u64, rate: u64) -> u128 {
        u128::from(now.saturating_sub(self.at_ns)) * u128::from(rate) / 1_000_000
    }
}

thread_local! {
    static BUDGET: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// One share of `access_log_rate` lines a second: each data-plane worker has one, and the
/// rate limit service, when configured, one more (see [`take_service_line`]).
pub fn per_worker(config: &Config) -> u64 {
    let shares = config.server.workers.max(1) as u64 + u64::from(config.rls.is_some());
    u64::from(config.server.access_log_rate).div_ceil(shares)
}

/// Takes one line from this thread's budget at `now`; when it has none, counts a drop.
/// Drops are added to the metric when the budget has lines again.
pub fn take_line(config: &Config, metrics: &Metrics, now: u64) -> bool {
    take_line_of(per_worker(config), metrics, now)
}

/// [`take_line`], at `share` ([`per_worker`]) lines a second.
pub fn take_line_of(share: u64, metrics: &Metrics, now: u64) -> bool {
    let (budget, written) = spend(BUDGET.get(), share, metrics, now);
    BUDGET.set(Some(budget));
    written
}

/// The rate limit service's lines: its calls run on the main runtime's threads (one per
/// core), not the data plane's workers, and a share each would let its callers write a
/// share per core. So they hold one share between them (one per gateway), behind a lock
/// taken only for a line the mode keeps, for the few instructions of [`spend`].
#[derive(Default)]
pub struct ServiceLines(parking_lot::Mutex<Option<Budget>>);

/// Takes one line from the rate limit service's budget at `now` (see [`take_line`]).
pub fn take_service_line(
    lines: &ServiceLines,
    (config, metrics): (&Config, &Metrics),
    now: u64,
) -> bool {
    let mut held = lines.0.lock();
    let (budget, written) = spend(*held, per_worker(config), metrics, now);
    *held = Some(budget);
    written
}

/// One line from `budget` (full when new) at `rate` lines a second: the budget after,
/// and whether the line is written.
fn spend(budget: Option<Budget>, rate: u64, metrics: &Metrics, now: u64) -> (Budget, bool) {
    let full = rate * 1_000;
    let mut b = budget.unwrap_or(Budget {
        milli_lines: full,
        at_ns: now,
        dropped: 0,
    });
    let earned = b.earned(now, rate);
    if earned > 0 {
        b.milli_lines = (u128::from(b.milli_lines) + earned).min(u128::from(full)) as u64;
        b.at_ns = now;
    }
    let written = b.milli_lines >= 1_000;
    if written {
        b.milli_lines -= 1_000;
        if b.dropped > 0 {
            metrics.access_log_dropped.inc_by(b.dropped);
            b.dropped = 0;
        }
    } else {
        b.dropped += 1;
    }
    (b, written)
}

/// Whether this worker has a line to spend now (nothing taken): a refusal's key parts
/// are worth composing only for a line that will be written.
pub fn has_line(config: &Config, now: u64) -> bool {
    config.server.access_log.enabled()
        && BUDGET
            .get()
            .is_none_or(|b| u128::from(b.milli_lines) + b.earned(now, per_worker(config)) >= 1_000)
}
