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

/// The shares of a stream's buckets of one key (`demands`, as reported), the stream's
/// `weight` among the key's holders split by their demands (an idle one's counted as a
/// thousandth). A part below one token now and one a second is refused rather than
/// rounded up to a token: rounded up, forty idle siblings of a 20-token key held forty.
/// When every part is so small, the busiest bucket has the stream's whole share (as a
/// lone bucket would), so siblings of a slow key are never all refused for good.
pub fn split(
    admission: &Admission,
    mode: crate::limit::Mode,
    (weight, demands): (Weight, &[f64]),
    ttl_s: u64,
) -> Vec<Assignment> {
    let key = match blanket(admission, mode) {
        Ok(key) => key,
        Err(blanket) => return vec![blanket; demands.len()],
    };
    let stream = if weight.all > 0.0 {
        (weight.mine / weight.all).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let each = |d: f64| d.clamp(0.001, 1e9);
    let total: f64 = demands.iter().map(|&d| each(d)).sum();
    let parts: Vec<f64> = demands.iter().map(|&d| stream * each(d) / total).collect();
    let small = |part: f64| (key.free as f64 * part) < 1.0 && key.rate_per_s() * part < 1.0;
    if parts.iter().all(|&p| small(p)) {
        let busiest =
            (0..demands.len()).max_by(|&a, &b| each(demands[a]).total_cmp(&each(demands[b])));
        return (0..demands.len())
            .map(|i| match Some(i) == busiest {
                true => share::share(&key, (stream, 1.0), ttl_s),
                false => Assignment::DenyAll,
            })
            .collect();
    }
    parts
        .into_iter()
        .map(|part| match small(part) {
            true => Assignment::DenyAll,
            false => share::share(&key, (part, 1.0), ttl_s),
        })
        .collect()
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
