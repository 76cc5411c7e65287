//! A decided charge rendered as what Envoy applies: the typed outcome first (a store that
//! could not answer, a shadow policy, an unchecked key are blanket rules), then the key's
//! state split by the bucket's weight as a token bucket, with the fill interval Envoy
//! compares.

use super::holders::Weight;
use super::proto::{
    Action, BlanketRule, BucketAction, BucketId, QuotaAssignmentAction, RateLimitStrategy,
    Strategy, TokenBucket,
};
use super::share::{self, Assignment, KeyState};
use crate::metrics::rlqs::RlqsFamilies;
use crate::store::{Admission, Outcome};

/// `assignment` as the action Envoy applies, for `ttl_s` seconds; counted.
pub fn action(
    metrics: &RlqsFamilies,
    id: &BucketId,
    assignment: Assignment,
    ttl_s: u64,
) -> BucketAction {
    let strategy = match assignment {
        Assignment::Bucket {
            max_tokens,
            tokens_per_fill,
            fill_s,
        } => {
            metrics.token_bucket.inc();
            Strategy::TokenBucket(TokenBucket {
                max_tokens,
                tokens_per_fill: Some(tokens_per_fill),
                fill_interval: Some(fill_interval(fill_s)),
            })
        }
        Assignment::AllowAll => {
            metrics.allow_all.inc();
            Strategy::BlanketRule(BlanketRule::AllowAll as i32)
        }
        Assignment::DenyAll => {
            metrics.deny_all.inc();
            Strategy::BlanketRule(BlanketRule::DenyAll as i32)
        }
    };
    BucketAction {
        bucket_id: Some(id.clone()),
        action: Some(Action::QuotaAssignment(QuotaAssignmentAction {
            assignment_time_to_live: Some(seconds(ttl_s)),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// The share a decided charge leaves this Envoy: the typed outcome first (a store that
/// could not answer is `on_error`'s blanket), then the key's state split by `weight`.
pub fn decided(
    admission: &Admission,
    mode: crate::limit::Mode,
    weight: Weight,
    ttl_s: u64,
) -> Assignment {
    match blanket(admission, mode) {
        Ok(key) => share::share(&key, (weight.mine, weight.all), ttl_s),
        Err(blanket) => blanket,
    }
}

/// The typed outcome's blanket rule, or the key's state to share out.
fn blanket(admission: &Admission, mode: crate::limit::Mode) -> Result<KeyState, Assignment> {
    if admission.outcome() == Outcome::StoreUnavailable {
        return Err(Assignment::DenyAll);
    }
    if admission.unchecked() || mode == crate::limit::Mode::Shadow {
        return Err(Assignment::AllowAll);
    }
    let Some((report, _)) = admission.policy_reports().next() else {
        // No rate tier decided (a key that cannot be taken): nothing is shared out.
        return Err(Assignment::DenyAll);
    };
    Ok(KeyState {
        quota: report.quota,
        calendar: report.window_s.is_some(),
        free: report.remaining,
        until_full_ns: report.until_full_ns,
    })
}

/// The shares of a stream's buckets of one key (`demands`, requests a second): the typed
/// outcome's blanket for each, or [`split_key`]'s shares.
pub fn split(
    admission: &Admission,
    mode: crate::limit::Mode,
    (weight, demands): (Weight, &[f64]),
    (ttl_s, turn): (u64, u64),
) -> Vec<Assignment> {
    match blanket(admission, mode) {
        Ok(key) => split_key(&key, (weight, demands), (ttl_s, turn)),
        Err(blanket) => vec![blanket; demands.len()],
    }
}

/// The stream's `weight` among `key`'s holders split between its buckets by their
/// `demands` (an idle one's counted as a thousandth). A part below one token now and one
/// a second (of the key's refill, its debt repaid) is not rounded up to a token: rounded
/// up, forty idle siblings of a 20-token key held forty. The small parts of the buckets
/// asking for something are pooled and given to one of them ([`pool_the_few_asking`]);
/// the idle ones are refused. When every part is so small, one of the buckets asking for
/// anything (of all, when none is) has the stream's whole share, as a lone bucket would.
/// Which one turns with `turn` (the assignment's period): siblings of a slow key are
/// never all refused, nor one of them for good.
pub fn split_key(
    key: &KeyState,
    (weight, demands): (Weight, &[f64]),
    (ttl_s, turn): (u64, u64),
) -> Vec<Assignment> {
    let stream = if weight.all > 0.0 {
        (weight.mine / weight.all).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let each = |d: f64| d.clamp(0.001, 1e9);
    let total: f64 = demands.iter().map(|&d| each(d)).sum();
    let mut parts: Vec<f64> = demands.iter().map(|&d| stream * each(d) / total).collect();
    let room = Room {
        free: key.free as f64,
        refill: key.refill_per_s(ttl_s),
    };
    if !parts.iter().all(|&p| room.under_a_token(p)) {
        pool_the_few_asking(room, &mut parts, demands, turn);
        return (parts.into_iter())
            .map(|part| match room.under_a_token(part) {
                true => Assignment::DenyAll,
                false => share::share(key, (part, 1.0), ttl_s),
            })
            .collect();
    }
    let asking: Vec<usize> = (0..demands.len()).filter(|&i| demands[i] > 0.0).collect();
    let turns: Vec<usize> = match asking.is_empty() {
        true => (0..demands.len()).collect(),
        false => asking,
    };
    let chosen = turns.get(by_turn(turns.len(), turn));
    (0..demands.len())
        .map(|i| match Some(&i) == chosen {
            true => share::share(key, (stream, 1.0), ttl_s),
            false => Assignment::DenyAll,
        })
        .collect()
}

/// What a key has to share out, against which a part is too small to hold a token: what
/// is free now and what it refills a second, its debt repaid (its rate would give a
/// part a token a second that the share then rounds up from less).
#[derive(Clone, Copy)]
struct Room {
    free: f64,
    refill: f64,
}

impl Room {
    /// Under one token now and one a second: refused rather than rounded up to a token.
    fn under_a_token(self, part: f64) -> bool {
        self.free * part < 1.0 && self.refill * part < 1.0
    }
}

/// Which of `len` takes the turn `turn` (every index in turn, `len` of them at least 1).
fn by_turn(len: usize, turn: u64) -> usize {
    usize::try_from(turn % len.max(1) as u64).unwrap_or(0)
}

/// Gives the buckets that ask for something but whose parts are too small for a token
/// (a rarely used path beside a busy one) their parts pooled, to one of them at a time
/// (turning with `turn`), raised to one token now or one a second out of the largest
/// part when it can spare that and stay a token itself. Refused outright, a tenant's
/// quiet endpoint was refused for as long as a busy sibling asked, with the key far from
/// its limit; a token each instead, siblings a client makes up (one a path) would hold a
/// token each beyond the key.
fn pool_the_few_asking(room: Room, parts: &mut [f64], demands: &[f64], turn: u64) {
    let asking: Vec<usize> = (0..parts.len())
        .filter(|&i| demands[i] > 0.0 && room.under_a_token(parts[i]))
        .collect();
    let Some(&chosen) = asking.get(by_turn(asking.len(), turn)) else {
        return;
    };
    // The least part that is a token now or one a second (a hair over, against rounding).
    let token = (1.0 + 1e-9) / room.free.max(room.refill);
    let pooled: f64 = asking.iter().map(|&i| parts[i]).sum();
    let raise = (token - pooled).max(0.0);
    let largest = (0..parts.len()).fold(0, |l, i| if parts[i] > parts[l] { i } else { l });
    if room.under_a_token(parts[largest] - raise) {
        return;
    }
    parts[largest] -= raise;
    for &i in &asking {
        parts[i] = 0.0;
    }
    parts[chosen] = pooled + raise;
}

/// A fill interval of `s` whole seconds, marked in its nanoseconds: Envoy's RLQS filter
/// tells a changed token bucket from an unchanged one by `max_tokens`, `tokens_per_fill`
/// and the interval's nanos only (its seconds are not compared), so a share that changes
/// only its interval (1 per 10 s, then 1 per 20 s) would keep the old, faster bucket.
/// Envoy counts the interval in whole seconds (it truncates), so `s` nanoseconds more
/// change nothing but that comparison.
fn fill_interval(s: u64) -> prost_types::Duration {
    prost_types::Duration {
        // Below a second for every interval a share has (at most a year of seconds).
        nanos: i32::try_from(s % 1_000_000_000).unwrap_or(0),
        ..seconds(s)
    }
}

fn seconds(s: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(s).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 a second, burst 20, `free` of it free.
    fn key(free: u64) -> KeyState {
        KeyState {
            quota: crate::limit::Quota::new(10, 1_000_000_000, 20).expect("quota"),
            calendar: false,
            free,
            until_full_ns: 0,
        }
    }

    fn whole() -> Weight {
        Weight {
            mine: 1.0,
            all: 1.0,
        }
    }

    fn tokens(split: &[Assignment]) -> (u64, u64) {
        split.iter().fold((0, 0), |(max, fill), a| match *a {
            Assignment::Bucket {
                max_tokens,
                tokens_per_fill,
                ..
            } => (
                max + u64::from(max_tokens),
                fill + u64::from(tokens_per_fill),
            ),
            _ => (max, fill),
        })
    }

    #[test]
    fn siblings_split_the_share_by_demand_and_never_hold_more_than_it() {
        for demands in [
            vec![1.0, 1.0],
            vec![9.0, 1.0, 0.0],
            vec![0.0; 5],
            vec![3.0; 7],
            vec![9.0, 0.05],
            vec![100.0, 0.2, 0.2, 0.0],
        ] {
            for free in [0, 1, 7, 20] {
                let split = split_key(&key(free), (whole(), &demands), (10, 0));
                let (max, fill) = tokens(&split);
                // What is free and one fill of the rate, at most.
                assert!(
                    max <= free.max(1) + 10 && fill <= 10 && per_s(&split) <= 10.0,
                    "{demands:?} {free}: {split:?}"
                );
            }
        }
        let busy = split_key(&key(20), (whole(), &[9.0, 1.0]), (10, 0));
        assert_eq!(busy[0], share::share(&key(20), (0.9, 1.0), 10));
        assert_eq!(busy[1], share::share(&key(20), (0.1, 1.0), 10));
    }

    #[test]
    fn parts_under_a_token_are_refused_and_those_asking_take_turns_when_all_are() {
        let forty = vec![0.0; 40];
        let split = split_key(&key(20), (whole(), &forty), (10, 3));
        let given: Vec<usize> = (0..40)
            .filter(|&i| split[i] != Assignment::DenyAll)
            .collect();
        assert_eq!(given, [3], "one, by turn");
        assert_eq!(split[3], share::share(&key(20), (1.0, 1.0), 10));
        let asking = [0.8, 0.6, 0.0];
        let slow = KeyState {
            quota: crate::limit::Quota::new(1, 60_000_000_000, 1).expect("quota"),
            ..key(0)
        };
        let winners: Vec<usize> = (0..4)
            .map(|turn| {
                let split = split_key(&slow, (whole(), &asking), (10, turn));
                let given: Vec<usize> = (0..3)
                    .filter(|&i| split[i] != Assignment::DenyAll)
                    .collect();
                assert_eq!(given.len(), 1, "{split:?}");
                given[0]
            })
            .collect();
        assert_eq!(
            winners,
            [0, 1, 0, 1],
            "those asking take turns; the idle one never"
        );
    }

    #[test]
    fn a_quiet_sibling_asking_beside_a_busy_one_has_a_token_out_of_the_busy_ones_part() {
        // Nine a second and one every twenty: the quiet part (under a token now and one a
        // second) was refused for as long as the busy sibling asked, the key full.
        let split = split_key(&key(20), (whole(), &[9.0, 0.05]), (10, 0));
        assert_eq!(
            split[1],
            share::share(&key(20), (0.05 * (1.0 + 1e-9), 1.0), 10)
        );
        assert!(
            matches!(split[1], Assignment::Bucket { max_tokens: 1, .. }),
            "{split:?}"
        );
        let busy = 9.0 / 9.05 - (0.05 * (1.0 + 1e-9) - 0.05 / 9.05);
        assert_eq!(split[0], share::share(&key(20), (busy, 1.0), 10));
        let (max, fill) = tokens(&split);
        assert!(max <= 20 && fill <= 10, "{split:?}");
    }

    #[test]
    fn quiet_siblings_asking_take_turns_at_one_pooled_token_and_idle_ones_never() {
        let demands = [9.0, 0.01, 0.01, 0.01, 0.0];
        let winners: Vec<usize> = (0..6)
            .map(|turn| {
                let split = split_key(&key(0), (whole(), &demands), (10, turn));
                assert_ne!(split[0], Assignment::DenyAll, "{split:?}");
                assert_eq!(split[4], Assignment::DenyAll, "{split:?}");
                let (_, fill) = tokens(&split);
                assert!(fill <= 10, "{split:?}");
                let given: Vec<usize> = (1..5)
                    .filter(|&i| split[i] != Assignment::DenyAll)
                    .collect();
                assert_eq!(given.len(), 1, "{split:?}");
                given[0]
            })
            .collect();
        assert_eq!(winners, [1, 2, 3, 1, 2, 3]);
    }

    /// What `split` refills a second, all buckets together.
    fn per_s(split: &[Assignment]) -> f64 {
        (split.iter())
            .map(|a| match *a {
                Assignment::Bucket {
                    tokens_per_fill,
                    fill_s,
                    ..
                } => f64::from(tokens_per_fill) / fill_s as f64,
                _ => 0.0,
            })
            .sum()
    }

    #[test]
    fn in_debt_a_part_is_small_against_what_the_key_refills_not_its_rate() {
        // 10 a second, owing 99 of the next 10 s's 100: it refills 0.1 a second. Against
        // its rate, the busy part (0.9 once it gave the pool a token's part) and the
        // pooled quiet one (0.1) were each a token a second, and both rounded up to a
        // bucket of a token with none free.
        let owing = KeyState {
            until_full_ns: 16_900_000_000,
            ..key(0)
        };
        assert_eq!(owing.owed(), 99);
        for turn in 0..2 {
            let split = split_key(&owing, (whole(), &[9.0, 0.05]), (10, turn));
            let given = split.iter().filter(|a| **a != Assignment::DenyAll).count();
            assert_eq!(given, 1, "one, by turn: {split:?}");
            assert!(per_s(&split) <= 0.1 + 1e-9, "{split:?}");
            assert!(tokens(&split).0 <= 1, "one fill's rounding: {split:?}");
        }
    }

    #[test]
    fn a_quiet_part_stays_refused_when_the_largest_cannot_spare_a_token() {
        // This Envoy holds 6 % of the key (others hold the rest): its busy part is one
        // token of 20 free, and a token for the quiet one would leave it under one.
        let weight = Weight {
            mine: 0.06,
            all: 1.0,
        };
        let split = split_key(&key(20), (weight, &[9.0, 0.05]), (10, 0));
        assert_eq!(split[1], Assignment::DenyAll, "{split:?}");
        assert_eq!(
            split[0],
            share::share(&key(20), (0.06 * 9.0 / 9.05, 1.0), 10)
        );
    }
}
