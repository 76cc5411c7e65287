//! How big one Envoy's share of a key is: the pure arithmetic of an assignment.
//!
//! The Envoys holding a key split it by demand: Envoy `i`, with demand `dᵢ` of `D` in
//! all, gets `wᵢ = dᵢ / D` of the key's refill (its rate, less what the key owes, paid
//! back within one TTL) and of what the key has free now. That becomes Envoy's token
//! bucket: `tokens_per_fill` per whole-second `fill_interval` (Envoy 1.40 drops
//! fractions of a second: a sub-second interval would refill without limit), at most
//! `max_tokens`. Every number is rounded down, so the shares never add up to more than
//! the key has; a bucket holds at least one fill (Envoy refuses everything otherwise),
//! which is the only rounding up, at most one fill per Envoy.

use crate::limit::Quota;

/// A key's state as a check without charge reports it, after the last usage was charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyState {
    /// The quota the key is decided on (an override's, when it has one).
    pub quota: Quota,
    /// A calendar quota: nothing refills within the window.
    pub calendar: bool,
    /// Units the key admits now.
    pub free: u64,
    /// Nanoseconds until the key has its whole burst again.
    pub until_full_ns: u64,
}

impl KeyState {
    /// Units used beyond the key's bound, repaid out of the next TTL's refill. Envoys
    /// report every few seconds and a report is charged at once, so a key used at its
    /// rate reads up to one report interval ahead: that much is not debt.
    pub fn owed(&self) -> u64 {
        let bound = self.quota.tolerance_ns().saturating_add(REPORT_INTERVAL_NS);
        self.until_full_ns.saturating_sub(bound) / self.quota.interval_ns()
    }

    /// What the key refills over the next `ttl_s` seconds, in units a second: its rate
    /// less what it owes (repaid within them).
    pub fn refill_per_s(&self, ttl_s: u64) -> f64 {
        let ttl = ttl_s.max(1) as f64;
        (self.rate_per_s() * ttl - self.owed() as f64).max(0.0) / ttl
    }

    /// The key's refill in units a second (0 for a calendar quota).
    pub fn rate_per_s(&self) -> f64 {
        if self.calendar {
            0.0
        } else {
            1e9 / self.quota.interval_ns() as f64
        }
    }
}

/// How often Envoy 1.40 reports, whatever its filter says.
pub const REPORT_INTERVAL_NS: u64 = 5_000_000_000;

/// What an Envoy is told for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// A token bucket: at most `max_tokens`, `tokens_per_fill` more every `fill_s` seconds.
    Bucket {
        max_tokens: u32,
        tokens_per_fill: u32,
        fill_s: u64,
    },
    AllowAll,
    DenyAll,
}

impl Assignment {
    /// The most Envoy's bucket holds at once under it (0 for a blanket rule: `DENY_ALL`
    /// holds nothing, and `ALLOW_ALL` is no share of the key).
    pub fn tokens(&self) -> u64 {
        match *self {
            Assignment::Bucket { max_tokens, .. } => u64::from(max_tokens),
            Assignment::AllowAll | Assignment::DenyAll => 0,
        }
    }

    /// The most Envoy can admit under this assignment within `ttl_s` seconds of getting
    /// it (a bucket starts at most full and refills whole fills).
    pub fn most(&self, ttl_s: u64) -> Option<u64> {
        match *self {
            Assignment::Bucket {
                max_tokens,
                tokens_per_fill,
                fill_s,
            } => Some(u64::from(max_tokens) + u64::from(tokens_per_fill) * (ttl_s / fill_s.max(1))),
            Assignment::AllowAll => None,
            Assignment::DenyAll => Some(0),
        }
    }
}

impl Assignment {
    /// This share as Envoy can tell it from `told`, the last it was told: Envoy 1.40
    /// tells a changed token bucket by `max_tokens`, `tokens_per_fill` and the fill
    /// interval's nanos only (its seconds are not compared), so a share that changes only
    /// its whole-second interval (1 per 10 s, then 1 per 20 s) would keep the old, faster
    /// bucket. Such a share is told doubled (2 per 40 s: the same rate; a bucket of at
    /// least the fill, as every bucket holds), and a share whose doubled form was told is
    /// kept as told, not flipped back and forth.
    pub fn told_apart_from(self, told: Option<Assignment>) -> Assignment {
        let Assignment::Bucket {
            max_tokens,
            tokens_per_fill,
            fill_s,
        } = self
        else {
            return self;
        };
        let Some(Assignment::Bucket {
            max_tokens: told_max,
            tokens_per_fill: told_per_fill,
            fill_s: told_fill_s,
        }) = told
        else {
            return self;
        };
        let per_fill = tokens_per_fill.saturating_mul(2);
        let doubled = Assignment::Bucket {
            max_tokens: max_tokens.max(per_fill),
            tokens_per_fill: per_fill,
            fill_s: fill_s.saturating_mul(2),
        };
        let alike = (max_tokens, tokens_per_fill) == (told_max, told_per_fill);
        match told == Some(doubled) || (alike && fill_s != told_fill_s) {
            true => doubled,
            false => self,
        }
    }
}

/// The fill interval of a share that refills less than once a second and more than this
/// rarely; slower still is no refill within the assignment at all.
const SLOWEST_FILL_S: u64 = 3_600;

/// Envoy `i`'s share of `key` for the next `ttl_s` seconds, `mine` of `all` demand (any
/// unit, each at least [`MIN_DEMAND`] by the caller).
pub fn share(key: &KeyState, (mine, all): (f64, f64), ttl_s: u64) -> Assignment {
    let weight = part(mine, all);
    let rate = key.refill_per_s(ttl_s) * weight;
    let burst = (key.free as f64 * weight).floor();
    let (tokens_per_fill, fill_s) = if rate >= 1.0 {
        (rate.floor().min(f64::from(u32::MAX)) as u32, 1)
    } else if rate * SLOWEST_FILL_S as f64 >= 1.0 {
        (1, (1.0 / rate).ceil() as u64)
    } else if burst >= 1.0 {
        // Nothing refills within reach: the bucket is what is free now, and one token
        // an hour (Envoy needs a fill; counted in `most`).
        (1, SLOWEST_FILL_S)
    } else {
        return Assignment::DenyAll;
    };
    let max_tokens = burst
        .min(f64::from(u32::MAX))
        .max(f64::from(tokens_per_fill)) as u32;
    Assignment::Bucket {
        max_tokens,
        tokens_per_fill,
        fill_s,
    }
}

/// `mine` of `all` demand as a part of the key, 0 to 1 (the whole when nobody asks).
pub fn part(mine: f64, all: f64) -> f64 {
    if all > 0.0 {
        (mine / all).clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// The least demand an Envoy counts with (requests a second): an idle holder keeps a
/// sliver, so its first requests are not all refused while its next report is awaited.
pub const MIN_DEMAND: f64 = 0.1;

/// A holder's demand: what its buckets of a key ask for together, in requests a second,
/// and at least the sliver an idle holder keeps (once for a stream, not once a bucket:
/// `together.rs`).
pub fn demand(requests_per_s: f64) -> f64 {
    requests_per_s.max(MIN_DEMAND)
}

/// What a report of `requests` (allowed and denied) over `elapsed_ns` (at least a second:
/// a bucket's first report comes at once) asked for, in requests a second. A report
/// already sums five seconds of traffic, so no more smoothing: a share follows demand
/// within one report.
pub fn requests_per_s(requests: u64, elapsed_ns: u64) -> f64 {
    let elapsed_s = (elapsed_ns as f64 / 1e9).max(1.0);
    requests as f64 / elapsed_s
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn key(limit: u64, period_s: u64, burst: u64, free: u64, until_full_s: u64) -> KeyState {
        KeyState {
            quota: Quota::new(limit, period_s * S, burst).expect("quota"),
            calendar: false,
            free,
            until_full_ns: until_full_s * S,
        }
    }

    fn bucket(max_tokens: u32, tokens_per_fill: u32, fill_s: u64) -> Assignment {
        Assignment::Bucket {
            max_tokens,
            tokens_per_fill,
            fill_s,
        }
    }

    /// What Envoy compares of two buckets (the interval's nanos are always 0).
    fn compared(a: Assignment) -> (u32, u32) {
        match a {
            Assignment::Bucket {
                max_tokens,
                tokens_per_fill,
                ..
            } => (max_tokens, tokens_per_fill),
            _ => (0, 0),
        }
    }

    #[test]
    fn a_share_changing_only_its_interval_is_told_at_the_same_rate_in_another_form() {
        let was = bucket(3, 1, 10);
        let slower = bucket(3, 1, 20).told_apart_from(Some(was));
        assert_eq!(slower, bucket(3, 2, 40));
        assert_ne!(compared(slower), compared(was), "Envoy sees it change");
        // Told doubled, the same share again is kept as told (no flip back).
        assert_eq!(bucket(3, 1, 20).told_apart_from(Some(slower)), slower);
        // A bucket of one token holds a fill of two.
        assert_eq!(
            bucket(1, 1, 20).told_apart_from(Some(bucket(1, 1, 10))),
            bucket(2, 2, 40)
        );
        // Anything else changed, or nothing: as it is.
        for (now, told) in [
            (bucket(4, 1, 20), Some(bucket(3, 1, 10))),
            (bucket(3, 1, 10), Some(bucket(3, 1, 10))),
            (bucket(3, 1, 10), None),
            (bucket(3, 1, 10), Some(Assignment::DenyAll)),
        ] {
            assert_eq!(now.told_apart_from(told), now, "{now:?} after {told:?}");
        }
        assert_eq!(
            Assignment::DenyAll.told_apart_from(Some(was)),
            Assignment::DenyAll
        );
    }

    #[test]
    fn two_equal_envoys_split_rate_and_burst_in_halves() {
        let k = key(100, 1, 100, 100, 0);
        let a = share(&k, (5.0, 10.0), 10);
        assert_eq!(
            a,
            Assignment::Bucket {
                max_tokens: 50,
                tokens_per_fill: 50,
                fill_s: 1
            }
        );
        // Both together: the key's own bound over a TTL (100 + 100·10).
        assert_eq!(a.most(10).map(|m| 2 * m), Some(1_100));
    }

    #[test]
    fn demand_weights_the_split_and_rounding_never_adds_up_to_more() {
        let k = key(10, 1, 20, 20, 0);
        let mut sum = (0, 0);
        for (mine, all) in [(1.0, 3.0), (2.0, 3.0)] {
            let Assignment::Bucket {
                max_tokens,
                tokens_per_fill,
                ..
            } = share(&k, (mine, all), 10)
            else {
                panic!("a bucket")
            };
            sum = (sum.0 + max_tokens, sum.1 + tokens_per_fill);
        }
        assert!(sum.0 <= 20 && sum.1 <= 10, "{sum:?}");
    }

    #[test]
    fn a_slow_rate_refills_over_whole_seconds() {
        // 10 a minute, a third of it: one every 18 s.
        let k = key(10, 60, 10, 10, 0);
        assert_eq!(
            share(&k, (1.0, 3.0), 10),
            Assignment::Bucket {
                max_tokens: 3,
                tokens_per_fill: 1,
                fill_s: 18
            }
        );
    }

    #[test]
    fn a_key_in_debt_pays_it_back_out_of_the_next_ttl() {
        // 10/s, burst 10, 10 s ahead: a report interval (5 s) and τ (1 s) are not debt,
        // the other 4 s are 40 units owed: 100 − 40 over 10 s.
        let k = key(10, 1, 10, 0, 10);
        assert_eq!(k.owed(), 40);
        assert_eq!(
            share(&k, (1.0, 1.0), 10),
            Assignment::Bucket {
                max_tokens: 6,
                tokens_per_fill: 6,
                fill_s: 1
            }
        );
        // Owing more than a TTL refills: nothing.
        let deep = key(10, 1, 10, 0, 200);
        assert_eq!(share(&deep, (1.0, 1.0), 10), Assignment::DenyAll);
    }

    #[test]
    fn a_calendar_quota_hands_out_what_is_left_and_refills_nothing() {
        let mut k = key(1_000, 30 * 86_400, 1_000, 400, 0);
        k.calendar = true;
        assert_eq!(
            share(&k, (1.0, 4.0), 10),
            Assignment::Bucket {
                max_tokens: 100,
                tokens_per_fill: 1,
                fill_s: SLOWEST_FILL_S
            }
        );
        k.free = 0;
        assert_eq!(share(&k, (1.0, 4.0), 10), Assignment::DenyAll);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// The contract's bound: what every Envoy holding a key may admit within a TTL
        /// together is what the key has free now and refills meanwhile, plus at most one
        /// fill (the rounding up a bucket needs) and one token per Envoy.
        #[test]
        fn the_shares_of_every_envoy_never_add_up_to_more_than_the_bound(
            (limit, period_s, burst) in (1u64..2_000, 1u64..7_200, 1u64..2_000),
            free_part in 0.0f64..=1.0,
            until_full_s in 0u64..100,
            demands in proptest::collection::vec(MIN_DEMAND..1_000.0f64, 1..9),
            ttl_s in 1u64..120,
        ) {
            let k = KeyState {
                quota: Quota::new(limit, period_s * S, burst).expect("quota"),
                calendar: false,
                free: (burst as f64 * free_part) as u64,
                until_full_ns: until_full_s * S,
            };
            let all: f64 = demands.iter().sum();
            let (mut most, mut fills) = (0u64, 0u64);
            for d in &demands {
                let a = share(&k, (*d, all), ttl_s);
                most += a.most(ttl_s).expect("a bucket or none");
                if let Assignment::Bucket { tokens_per_fill, .. } = a {
                    fills += u64::from(tokens_per_fill);
                }
            }
            let bound = k.free as f64 + k.refill_per_s(ttl_s) * ttl_s as f64;
            let envoys = demands.len() as u64;
            proptest::prop_assert!(
                most as f64 <= bound.floor() + (fills + envoys) as f64,
                "{most} > {bound} + {fills} + {envoys}"
            );
        }
    }

    #[test]
    fn demand_follows_requests() {
        assert_eq!(demand(requests_per_s(50, 5 * S)), 10.0);
        assert_eq!(demand(requests_per_s(0, 5 * S)), MIN_DEMAND);
        // A first report (time elapsed 0) counts over a second.
        assert_eq!(demand(requests_per_s(1, 0)), 1.0);
    }
}
