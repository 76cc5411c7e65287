//! Property tests: GCRA and the tier evaluator against an independent reference model,
//! a token bucket kept in exact rational arithmetic. This module holds the model and the
//! quotas shared by the tests; `admission` checks single decisions (alone, in tiers,
//! across threads), `settle_and_lease` the charges that move after admission.

use num_bigint::BigInt;
use num_rational::BigRational;
use proptest::prelude::*;

use super::Quota;

mod admission;
mod settle_and_lease;

pub(crate) fn r(n: u64) -> BigRational {
    BigRational::from_integer(BigInt::from(n))
}

/// The obvious token bucket: `burst` tokens when idle, refilled at one token per `T`
/// nanoseconds, a request of cost `c` takes `c` tokens; `max_delay` lets the level go
/// down to `−max_delay / T`.
#[derive(Clone, Debug)]
pub(crate) struct Bucket {
    tokens: BigRational,
    last: u64,
    cap: BigRational,
    t: BigRational,
    floor: BigRational,
}

impl Bucket {
    pub(crate) fn new(q: &Quota, max_delay: u64, start: u64) -> Self {
        let t = r(q.interval_ns());
        Self {
            tokens: r(q.burst()),
            last: start,
            cap: r(q.burst()),
            floor: -(r(max_delay) / &t),
            t,
        }
    }

    pub(crate) fn refill(&mut self, now: u64) {
        if now > self.last {
            let refilled = &self.tokens + r(now - self.last) / &self.t;
            self.tokens = refilled.min(self.cap.clone());
            self.last = now;
        }
    }

    /// (admitted, exact wait in ns when denied) — the wait as a rational.
    pub(crate) fn offer(&mut self, now: u64, cost: u64) -> (bool, BigRational) {
        self.refill(now);
        let after = &self.tokens - r(cost);
        if after >= self.floor {
            (true, r(0))
        } else {
            ((false), (&self.floor - after) * &self.t)
        }
    }

    pub(crate) fn take(&mut self, cost: u64) {
        self.tokens -= r(cost);
    }
}

pub(crate) fn quota_strategy() -> impl Strategy<Value = (Quota, u64)> {
    (
        1u64..=1000,
        1_000_000u64..=3_600_000_000_000,
        1u64..=40,
        prop_oneof![Just(0u64), 1u64..=5_000_000_000],
    )
        .prop_filter_map("representable", |(limit, period, burst, max_delay)| {
            Quota::new(limit, period, burst)
                .ok()
                .map(|q| (q, max_delay))
        })
}
