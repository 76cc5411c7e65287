//! Which requests get a span: parent-based, then by ratio. A caller's sampled
//! `traceparent` is always followed and an unsampled one never; a request without one
//! (or with an invalid one) starts a trace, sampled when its new trace id falls under
//! the ratio (OpenTelemetry's `TraceIdRatioBased`: the id's last 8 bytes against
//! ratio × 2⁶⁴, so every service at one ratio samples the same traces). Ids come from a
//! per-thread generator seeded from the system's source: no system call per request.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::context::TraceParent;
use crate::limit::gcra::NANOS_PER_SEC;
use crate::limit::Quota;

/// The sampling ratio as a bound on a trace id's last 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio(u64);

impl Ratio {
    /// `ratio` in [0, 1]; values outside are clamped.
    pub fn new(ratio: f64) -> Self {
        let r = ratio.clamp(0.0, 1.0);
        Self(if r >= 1.0 {
            u64::MAX
        } else {
            (r * 2f64.powi(64)) as u64
        })
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

/// A sampled request's trace: its trace id, its own span, and the caller's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampled {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
}

/// Whether to record this request, given the caller's context.
pub fn sample(parent: Option<TraceParent>, ratio: Ratio) -> Option<Sampled> {
    match parent {
        Some(p) if p.sampled => Some(Sampled {
            trace_id: p.trace_id,
            span_id: span_id(),
            parent_id: Some(p.parent_id),
        }),
        Some(_) => None,
        None if ratio.is_zero() => None,
        None => {
            let trace_id = trace_id();
            let low = u64::from_be_bytes(trace_id[8..].try_into().unwrap_or_default());
            (ratio.0 == u64::MAX || low < ratio.0).then(|| Sampled {
                trace_id,
                span_id: span_id(),
                parent_id: None,
            })
        }
    }
}

/// The bound on sampled requests a second, for the whole gateway: one GCRA TAT that only
/// sampled requests touch (an unsampled request never reads it). Kept across reloads;
/// the rate is read from the config in effect at each take. Within it, what callers ask
/// for (a sampled `traceparent`, which any client can send, and Envoy passes on to the
/// rate limit and quota services) has half of the bound at most: a client marking every
/// request sampled cannot take the whole of it from the ratio's picks.
#[derive(Debug, Default)]
pub struct Budget {
    tat: AtomicU64,
    clients: AtomicU64,
}

impl Budget {
    /// Whether one more sampled request fits `per_second` (a second's worth at once) at
    /// the clock reading `now_ns`; `by_client`: sampled because its caller asked, which
    /// must fit half of `per_second` too.
    pub fn take(&self, per_second: u64, now_ns: u64, by_client: bool) -> bool {
        if by_client && !take_from(&self.clients, (per_second / 2).max(1), now_ns) {
            return false;
        }
        take_from(&self.tat, per_second, now_ns)
    }
}

/// One unit of `tat`'s bucket of `per_second` (a second's worth at once), if it has one;
/// a rate past what a TAT represents is no bound.
fn take_from(tat: &AtomicU64, per_second: u64, now_ns: u64) -> bool {
    let Ok(quota) = Quota::new(per_second, NANOS_PER_SEC, per_second) else {
        return true;
    };
    let mut current = tat.load(Ordering::Relaxed);
    loop {
        let decision = quota.decide(current, now_ns, 1, 0);
        if !decision.admitted {
            return false;
        }
        match tat.compare_exchange_weak(current, decision.tat, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

thread_local! {
    static STATE: Cell<u64> = Cell::new(u64::from_le_bytes(crate::random::bytes::<8>()));
}

/// wyrand: fast, and good enough for ids that only have to be unlikely to collide.
fn next() -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0xa076_1d64_78bd_642f);
        s.set(x);
        let t = u128::from(x) * u128::from(x ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    })
}

pub fn span_id() -> [u8; 8] {
    loop {
        let id = next();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

pub fn trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&next().to_be_bytes());
    id[8..].copy_from_slice(&span_id());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(sampled: bool) -> TraceParent {
        TraceParent {
            trace_id: [7; 16],
            parent_id: [9; 8],
            sampled,
        }
    }

    #[test]
    fn the_caller_decides_when_it_says() {
        let followed = sample(Some(parent(true)), Ratio::new(0.0)).expect("followed");
        assert_eq!(followed.trace_id, [7; 16]);
        assert_eq!(followed.parent_id, Some([9; 8]));
        assert_ne!(followed.span_id, [9; 8]);
        assert_eq!(sample(Some(parent(false)), Ratio::new(1.0)), None);
    }

    #[test]
    fn the_budget_admits_a_second_s_worth_then_the_rate() {
        let budget = Budget::default();
        let now = 10 * NANOS_PER_SEC;
        let taken = (0..250).filter(|_| budget.take(100, now, false)).count();
        assert_eq!(taken, 100, "a second's worth at once");
        assert!(
            !budget.take(100, now + NANOS_PER_SEC / 200, false),
            "5 ms later: none yet"
        );
        assert!(
            budget.take(100, now + NANOS_PER_SEC / 100, false),
            "10 ms later: one"
        );
        assert!(!budget.take(100, now + NANOS_PER_SEC / 100, false));
        let later = now + 3 * NANOS_PER_SEC;
        assert_eq!(
            (0..250).filter(|_| budget.take(100, later, false)).count(),
            100
        );
        assert!(
            Budget::default().take(u64::MAX, now, true),
            "no bound past a TAT's rate"
        );
    }

    #[test]
    fn clients_asking_take_half_the_budget_the_rest_is_kept_for_the_others() {
        let budget = Budget::default();
        let now = 10 * NANOS_PER_SEC;
        let asked = (0..250).filter(|_| budget.take(100, now, true)).count();
        assert_eq!(asked, 50, "half a second's worth for what clients ask");
        let others = (0..250).filter(|_| budget.take(100, now, false)).count();
        assert_eq!(others, 50, "the other half kept");
        assert!(
            Budget::default().take(1, now, true),
            "a bound of one leaves clients one"
        );
    }

    #[test]
    fn without_a_caller_the_ratio_decides() {
        assert_eq!(sample(None, Ratio::new(0.0)), None);
        assert!(sample(None, Ratio::new(1.0)).is_some_and(|s| s.parent_id.is_none()));
        let hits = (0..100_000)
            .filter(|_| sample(None, Ratio::new(0.25)).is_some())
            .count();
        assert!((23_000..27_000).contains(&hits), "{hits}");
    }
}
