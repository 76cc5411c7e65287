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
///
/// `weight` is the stream's among the key's holders, split evenly between its `buckets` of
/// the key. A bucket one of several is refused while its part
/// of what is free is below one token: a share is at least a token, and siblings each
/// rounded up would hand out one token each beyond the key (thousands, to a client whose
/// every address Envoy buckets apart).
pub fn decided(
    admission: &Admission,
    mode: crate::limit::Mode,
    (weight, buckets): (Weight, usize),
    ttl_s: u64,
) -> Assignment {
    if admission.outcome() == Outcome::StoreUnavailable {
        return Assignment::DenyAll;
    }
    if admission.unchecked() || mode == crate::limit::Mode::Shadow {
        return Assignment::AllowAll;
    }
    let Some((report, _)) = admission.policy_reports().next() else {
        // No rate tier decided (a key that cannot be taken): nothing is shared out.
        return Assignment::DenyAll;
    };
    let key = KeyState {
        quota: report.quota,
        calendar: report.window_s.is_some(),
        free: report.remaining,
        until_full_ns: report.until_full_ns,
    };
    if buckets <= 1 {
        return share::share(&key, (weight.mine, weight.all), ttl_s);
    }
    // The stream's part, split evenly: divided after the stream's weight is taken, so
    // five idle siblings have a fifth each (4 of 20), not 0.1999… (3 of 20).
    let stream = if weight.all > 0.0 {
        (weight.mine / weight.all).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let part = stream / buckets as f64;
    if (key.free as f64 * part) < 1.0 {
        return Assignment::DenyAll;
    }
    share::share(&key, (part, 1.0), ttl_s)
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
