//! A decided charge rendered as what Envoy applies: the typed outcome first (a store that
//! could not answer, a shadow policy, an unchecked key are blanket rules), then the key's
//! state split by the bucket's weight as a token bucket of whole-second fills.

use super::holders::Weight;
use super::proto::{
    Action, BlanketRule, BucketAction, BucketId, QuotaAssignmentAction, RateLimitStrategy,
    Strategy, TokenBucket,
};
use super::share::{self, Assignment, KeyState};
use super::together::Turn;
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
                fill_interval: Some(seconds(fill_s)),
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
        action: Some(quota_assignment(Some(seconds(ttl_s)), strategy)),
    }
}

/// The action that assigns `strategy` for `ttl`.
fn quota_assignment(ttl: Option<prost_types::Duration>, strategy: Strategy) -> Action {
    Action::QuotaAssignment(QuotaAssignmentAction {
        assignment_time_to_live: ttl,
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    })
}

/// Writes `action` as one `bucket_action` of a response (field 1), after a `DENY_ALL`
/// for the same bucket when `full` and it is a token bucket: that starts the bucket full
/// at its size. Envoy 1.40 starts a bucket that changed from one token bucket to another
/// at the old one's fill ratio, one that comes from a blanket rule full, and applies a
/// response's actions in order before its workers see them. A share sized on what the
/// key has left after a report's charge is already net of what that Envoy spent: the
/// ratio would take it off a second time (a monthly quota locked out at three quarters),
/// and a reset's whole key would start at a drained bucket's ratio, 0. `full` only for
/// answers to a report (its usage just charged) and admin changes: a re-size because
/// another Envoy joined keeps the ratio, so a client joining and leaving cannot hand the
/// others fresh buckets over usage not yet reported. The `DENY_ALL` is written from the
/// token bucket's own id, not a copy of it.
pub fn encode_action(action: &BucketAction, full: bool, buf: &mut Vec<u8>) {
    use prost::encoding::{encode_key, encode_varint, message, WireType};
    if let (true, Some(Action::QuotaAssignment(q)), Some(id)) =
        (full, &action.action, &action.bucket_id)
    {
        if let Some(RateLimitStrategy {
            strategy: Some(Strategy::TokenBucket(_)),
        }) = &q.rate_limit_strategy
        {
            let deny = quota_assignment(
                q.assignment_time_to_live,
                Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            );
            let len = message::encoded_len(1, id) + deny.encoded_len();
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
            message::encode(1, id, buf);
            deny.encode(buf);
        }
    }
    message::encode(1, action, buf);
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
        Ok(key) => share::share(&room_left(key, weight), (weight.mine, weight.all), ttl_s),
        Err(blanket) => blanket,
    }
}

/// `key` with what is free cut so that this holder's part of it (`weight`) leaves the
/// tokens the other holders were told room: a share starts full (`encode_action`), and
/// theirs hold up to what they were told while their spending since is not yet charged.
/// Without it two Envoys on a calendar quota admitted 342 of 300: each started full on
/// what was free at its own report, the other's bucket untouched.
fn room_left(mut key: KeyState, weight: Weight) -> KeyState {
    if weight.others_told == 0 {
        return key;
    }
    let part = share::part(weight.mine, weight.all);
    let room = key.free.saturating_sub(weight.others_told) as f64;
    let free = if part > 0.0 {
        (room / part).floor()
    } else {
        0.0
    };
    key.free = key.free.min(free.min(u64::MAX as f64) as u64);
    key
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
    (ttl_s, turn): (u64, &mut Turn),
) -> Vec<Assignment> {
    match blanket(admission, mode) {
        Ok(key) => split_key(&room_left(key, weight), (weight, demands), (ttl_s, turn)),
        Err(blanket) => vec![blanket; demands.len()],
    }
}

/// The stream's `weight` among `key`'s holders split between its buckets by their
/// `demands` (an idle one's counted as a thousandth). A part below one token now and one
/// a second (of the key's refill, its debt repaid) is not rounded up to a token: rounded
/// up, forty idle siblings of a 20-token key held forty. The small parts of the buckets
/// asking for something are pooled and given to one of them ([`pool_the_few_asking`]);
/// the idle ones are refused. When every part is so small, one bucket has the stream's
/// whole share, as a lone bucket would. Which one is `turn`'s: the one that had it this
/// assignment period, asking or not, else one asking for anything (of all, when none
/// is) by the period, so siblings of a slow key are never all refused, nor one of them
/// for good, and a client flipping made-up siblings cannot move it at every report.
pub fn split_key(
    key: &KeyState,
    (weight, demands): (Weight, &[f64]),
    (ttl_s, turn): (u64, &mut Turn),
) -> Vec<Assignment> {
    let stream = share::part(weight.mine, weight.all);
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
    // The bucket that had the share this period keeps it, asking or not.
    let holder = turn.holder.filter(|&h| h < demands.len());
    let chosen = turn.pick(&turns, holder);
    (0..demands.len())
        .map(|i| match Some(i) == chosen {
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

/// Gives the buckets that ask for something but whose parts are too small for a token
/// (a rarely used path beside a busy one) their parts pooled, to one of them at a time,
/// raised to one token now or one a second out of the largest part when it can spare
/// that and stay a token itself. Refused outright, a tenant's quiet endpoint was refused
/// for as long as a busy sibling asked, with the key far from its limit; a token each
/// instead, siblings a client makes up (one a path) would hold a token each beyond the
/// key. The one that had the pool this period (`turn`) keeps it, asking or not, its own
/// part a token or not: chosen again from those asking at each report, the pool (and a
/// bucket starting full) followed a client flipping made-up siblings between asking and
/// idle, or spiking one's demand for a report.
fn pool_the_few_asking(room: Room, parts: &mut [f64], demands: &[f64], turn: &mut Turn) {
    let asking: Vec<usize> = (0..parts.len())
        .filter(|&i| demands[i] > 0.0 && room.under_a_token(parts[i]))
        .collect();
    let holder = turn.holder.filter(|&h| h < parts.len());
    // Nobody quiet asking, or the holder's own part a token this report (its demand
    // spiked): nothing pooled, the turn kept for the period all the same.
    if asking.is_empty() || holder.is_some_and(|h| !room.under_a_token(parts[h])) {
        return;
    }
    let mut pooled = asking.clone();
    pooled.extend(holder.filter(|h| !asking.contains(h)));
    let pool: f64 = pooled.iter().map(|&i| parts[i]).sum();
    // The least part that is a token now or one a second (a hair over, against rounding).
    let token = (1.0 + 1e-9) / room.free.max(room.refill);
    let raise = (token - pool).max(0.0);
    let largest = (0..parts.len()).fold(0, |l, i| if parts[i] > parts[l] { i } else { l });
    if room.under_a_token(parts[largest] - raise) {
        return;
    }
    let Some(chosen) = turn.pick(&asking, holder) else {
        return;
    };
    parts[largest] -= raise;
    for &i in &pooled {
        parts[i] = 0.0;
    }
    parts[chosen] = pool + raise;
}

fn seconds(s: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(s).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
