//! The generic cell rate algorithm, pure: integer nanoseconds in, a [`Decision`] out.
//! No clock, no storage; every operation saturates so no `u64` input can overflow.

use std::num::NonZeroU64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The numbers of one limit: emission interval `T` and tolerance `τ = burst · T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    t: NonZeroU64,
    tau: u64,
    burst: u64,
}

/// Why a quota cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("limit must be at least 1")]
    ZeroLimit,
    #[error("burst must be at least 1")]
    ZeroBurst,
    #[error(
        "period / limit is below 1 ns: the rate is too high to represent (at most 1e9 per second)"
    )]
    IntervalTooSmall,
    #[error("burst × (period / limit) overflows 584 years: lower burst or period")]
    ToleranceOverflow,
}

impl Quota {
    /// `limit` requests per `period_ns` on average, at most `burst` at once from idle.
    pub fn new(limit: u64, period_ns: u64, burst: u64) -> Result<Self, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        let t = NonZeroU64::new(period_ns / limit).ok_or(QuotaError::IntervalTooSmall)?;
        let tau = burst
            .checked_mul(t.get())
            .ok_or(QuotaError::ToleranceOverflow)?;
        Ok(Self { t, tau, burst })
    }

    /// One `n`-th of this quota: the rate divided by `n` and the burst too (rounded up,
    /// at least 1), what each of `n` gateways may admit on its own so that together they
    /// admit no more than the whole.
    pub fn share(&self, n: u64) -> Self {
        if n <= 1 {
            return *self;
        }
        let t = self
            .t
            .saturating_mul(NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN));
        let burst = self.burst.div_ceil(n).max(1);
        Self {
            t,
            tau: burst.saturating_mul(t.get()),
            burst,
        }
    }

    /// Emission interval `T` in nanoseconds.
    pub fn interval_ns(&self) -> u64 {
        self.t.get()
    }

    /// Tolerance `τ` in nanoseconds.
    pub fn tolerance_ns(&self) -> u64 {
        self.tau
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// How many cost-1 requests would pass at `now` given `tat` (no delay allowed).
    pub fn remaining(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now);
        self.tau.saturating_sub(debt) / self.t.get()
    }

    /// Decides a request of `cost` units at `now` against the stored `tat`.
    ///
    /// `max_delay_ns > 0` admits requests that fit within `τ + max_delay` and
    /// reports how long to hold them (nginx's `burst` without `nodelay`).
    pub fn decide(&self, tat: u64, now: u64, cost: u64, max_delay_ns: u64) -> Decision {
        let increment = cost.saturating_mul(self.t.get());
        let new_tat = tat.max(now).saturating_add(increment);
        let ahead = new_tat - now; // new_tat ≥ now by construction
        let allowance = self.tau.saturating_add(max_delay_ns);
        if ahead <= allowance {
            Decision {
                admitted: true,
                tat: new_tat,
                remaining: self.remaining(new_tat, now),
                wait_ns: 0,
                delay_ns: ahead.saturating_sub(self.tau),
                until_idle_ns: ahead,
            }
        } else {
            // Earliest t with max(tat, t) + increment − t ≤ allowance. When the cost
            // alone exceeds the allowance no t exists: the wait is unbounded.
            let wait_ns = if increment > allowance {
                u64::MAX
            } else {
                ahead - allowance
            };
            Decision {
                admitted: false,
                tat,
                remaining: self.remaining(tat, now),
                wait_ns,
                delay_ns: 0,
                until_idle_ns: tat.saturating_sub(now),
            }
        }
    }
}

/// The answer for one (quota, key) at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    /// The TAT to keep: the new one when admitted, the unchanged one when denied.
    pub tat: u64,
    /// Cost-1 requests that would still be admitted right now, without delay.
    pub remaining: u64,
    /// On denial: exact nanoseconds until this request would be admitted. 0 when admitted.
    pub wait_ns: u64,
    /// On admission with `max_delay`: nanoseconds to hold the request before forwarding.
    pub delay_ns: u64,
    /// Nanoseconds until the key is idle again (its full burst available).
    pub until_idle_ns: u64,
}

#[cfg(test)]
mod share_tests {
    use super::*;

    #[test]
    fn a_share_is_the_nth_of_the_rate_and_the_burst() {
        let q = Quota::new(100, 1_000_000_000, 10).unwrap();
        let s = q.share(3);
        assert_eq!(s.interval_ns(), 3 * q.interval_ns());
        assert_eq!(s.burst(), 4, "rounded up");
        assert_eq!(s.tolerance_ns(), 4 * s.interval_ns());
        assert_eq!(q.share(1), q);
        assert_eq!(q.share(0), q);
        assert_eq!(q.share(1000).burst(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = NANOS_PER_SEC;

    fn q(limit: u64, period: u64, burst: u64) -> Quota {
        Quota::new(limit, period, burst).expect("valid quota")
    }

    /// Runs `(now, cost) -> admitted` steps from idle and returns the final TAT.
    fn run(quota: &Quota, steps: &[(u64, u64, bool)]) -> u64 {
        let mut tat = 0;
        for (i, &(now, cost, expected)) in steps.iter().enumerate() {
            let d = quota.decide(tat, now, cost, 0);
            assert_eq!(d.admitted, expected, "step {i}: now={now} cost={cost}");
            tat = d.tat;
        }
        tat
    }

    #[test]
    fn quota_numbers() {
        let quota = q(1000, 3600 * S, 60);
        assert_eq!(quota.interval_ns(), 3_600_000_000);
        assert_eq!(quota.tolerance_ns(), 216_000_000_000);
        assert_eq!(Quota::new(0, S, 1), Err(QuotaError::ZeroLimit));
        assert_eq!(Quota::new(1, S, 0), Err(QuotaError::ZeroBurst));
        assert_eq!(Quota::new(2, 1, 1), Err(QuotaError::IntervalTooSmall));
        assert_eq!(
            Quota::new(1, u64::MAX, 2),
            Err(QuotaError::ToleranceOverflow)
        );
    }

    #[test]
    fn burst_from_idle_then_rate() {
        // 100 per minute, burst 10: T = 600 ms, τ = 6 s.
        let quota = q(100, 60 * S, 10);
        let now = 10 * S;
        let mut tat = 0;
        for i in 0..10 {
            let d = quota.decide(tat, now, 1, 0);
            assert!(d.admitted, "request {i} of the burst");
            assert_eq!(d.remaining, 9 - i);
            tat = d.tat;
        }
        let denied = quota.decide(tat, now, 1, 0);
        assert!(!denied.admitted);
        assert_eq!(denied.tat, tat, "a denial leaves the TAT alone");
        assert_eq!(denied.wait_ns, 600 * MS);
        assert!(!quota.decide(tat, now + 600 * MS - 1, 1, 0).admitted);
        assert!(quota.decide(tat, now + 600 * MS, 1, 0).admitted);
    }

    #[test]
    fn seed_walkthrough_t600_tau1800() {
        // T = 600 ms, τ = 1800 ms: three at once from idle, then one per 600 ms.
        let quota = q(1, 600 * MS, 3);
        let t0 = 100 * S;
        run(
            &quota,
            &[
                (t0, 1, true),
                (t0, 1, true),
                (t0, 1, true),
                (t0, 1, false),
                (t0 + 599 * MS, 1, false),
                (t0 + 600 * MS, 1, true),
                (t0 + 600 * MS, 1, false),
                (t0 + 3000 * MS, 1, true),
                (t0 + 3000 * MS, 1, true),
                (t0 + 3000 * MS, 1, true),
                (t0 + 3000 * MS, 1, false),
            ],
        );
    }

    #[test]
    fn thousand_per_hour_burst_sixty() {
        let quota = q(1000, 3600 * S, 60);
        let now = 1000 * S;
        let mut tat = 0;
        for _ in 0..60 {
            tat = quota.decide(tat, now, 1, 0).tat;
        }
        let d = quota.decide(tat, now, 1, 0);
        assert!(!d.admitted);
        assert_eq!(d.wait_ns, 3_600_000_000, "one emission interval: 3.6 s");
        assert_eq!(d.until_idle_ns, 216 * S);
    }

    #[test]
    fn burst_one_is_strict_spacing() {
        let quota = q(10, S, 1);
        run(
            &quota,
            &[
                (S, 1, true),
                (S, 1, false),
                (S + 99 * MS, 1, false),
                (S + 100 * MS, 1, true),
            ],
        );
    }

    #[test]
    fn cost_equal_to_burst_needs_an_idle_key() {
        let quota = q(10, S, 5);
        let d = quota.decide(0, S, 5, 0);
        assert!(d.admitted);
        assert_eq!(d.remaining, 0);
        let again = quota.decide(d.tat, S, 5, 0);
        assert!(!again.admitted);
        assert_eq!(again.wait_ns, 500 * MS, "wait until fully idle");
    }

    #[test]
    fn cost_above_burst_never_admits() {
        let quota = q(10, S, 5);
        let d = quota.decide(0, S, 6, 0);
        assert!(!d.admitted);
        assert_eq!(d.wait_ns, u64::MAX);
    }

    #[test]
    fn huge_and_tiny_periods_do_not_overflow() {
        let huge = q(1, u64::MAX / 4, 3);
        let d = huge.decide(u64::MAX - 5, u64::MAX - 10, u64::MAX, u64::MAX);
        assert!(!d.admitted || d.tat == u64::MAX);
        let tiny = q(1_000_000_000, S, 1);
        assert_eq!(tiny.interval_ns(), 1);
        let d = tiny.decide(0, u64::MAX, 1, 0);
        assert!(d.admitted);
        for (tat, now, cost, delay) in [
            (u64::MAX, 0, u64::MAX, u64::MAX),
            (0, 0, 0, 0),
            (u64::MAX, u64::MAX, 1, 0),
        ] {
            let _ = huge.decide(tat, now, cost, delay);
            let _ = tiny.decide(tat, now, cost, delay);
        }
    }

    #[test]
    fn max_delay_admits_and_reports_the_hold() {
        // T = 100 ms, τ = 200 ms, hold up to 300 ms.
        let quota = q(10, S, 2);
        let now = 5 * S;
        let mut tat = 0;
        let mut delays = Vec::new();
        loop {
            let d = quota.decide(tat, now, 1, 300 * MS);
            if !d.admitted {
                assert_eq!(d.wait_ns, 100 * MS);
                break;
            }
            delays.push(d.delay_ns / MS);
            tat = d.tat;
        }
        assert_eq!(delays, vec![0, 0, 100, 200, 300]);
    }
}
