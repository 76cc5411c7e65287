//! A decided call as Envoy reads it: one status per descriptor in order, the overall
//! code, the draft-11 `RateLimit` / `RateLimit-Policy` fields (and `Retry-After` when
//! over), and which policy and descriptor refused. Everything is read from the decision;
//! nothing is decided here.

use super::decide::{Decided, Matched};
use super::proto::{self, Code, DescriptorStatus, RateLimit, RateLimitResponse, Unit};
use crate::config::rls::{RefusalBody, Unmatched};
use crate::config::Policy;
use crate::config::Rls;
use crate::limit::calendar::Period;
use crate::limit::Quota;
use crate::proxy::response::{body_start, rate_limit_lists, Refused, TierItem};
use crate::store::{Counted, TierReport};

const SECOND_NS: u64 = 1_000_000_000;
const DAY_NS: u64 = 86_400 * SECOND_NS;
/// The units a rate is stated in, smallest first, with their length as
/// envoyproxy/ratelimit counts it (a month is 30 days, a year 365).
const UNITS: [(Unit, u64); 7] = [
    (Unit::Second, SECOND_NS),
    (Unit::Minute, 60 * SECOND_NS),
    (Unit::Hour, 3_600 * SECOND_NS),
    (Unit::Day, DAY_NS),
    (Unit::Week, 7 * DAY_NS),
    (Unit::Month, 30 * DAY_NS),
    (Unit::Year, 365 * DAY_NS),
];

/// `current_limit`'s `requests_per_unit` and `unit` for `policy` deciding on `quota`: a
/// calendar quota's units per its window; a rate's requests per the smallest unit that
/// states it exactly (10/s, 100/min, 7/h, a YAML's 10/month); a rate no unit states
/// exactly (7 per 11 s) per the smallest unit of a day or more holding at least one
/// request, rounded down (at least 1 per year).
pub fn stated(policy: &Policy, quota: &Quota) -> (u32, Unit) {
    let saturate = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    if let Some(calendar) = policy.rate().and_then(|r| r.calendar.as_ref()) {
        let unit = match calendar.calendar.period {
            Period::Day => Unit::Day,
            Period::Week(_) => Unit::Week,
            Period::Month(_) => Unit::Month,
        };
        return (saturate(quota.burst()), unit);
    }
    let t = quota.interval_ns().max(1);
    // The interval is the period over the limit rounded down to the nanosecond, so a
    // unit holding exactly `n` requests holds `n` intervals and less than `n` ns more.
    for (unit, length) in UNITS {
        let n = length / t;
        if n >= 1 && length - n * t < n {
            return (saturate(n), unit);
        }
    }
    let (unit, length) = UNITS[3..]
        .iter()
        .copied()
        .find(|(_, length)| length / t >= 1)
        .unwrap_or(UNITS[6]);
    (saturate((length / t).max(1)), unit)
}

/// The response for `decided` under `rls`: `retry_after_s` is the call's wait when over.
pub fn response(rls: &Rls, decided: &Decided) -> RateLimitResponse {
    let mut reports: [Option<(TierReport, Counted)>; crate::limit::MAX_DECISIONS] =
        [None; crate::limit::MAX_DECISIONS];
    let decisions = decided.admissions().flat_map(|a| a.policy_reports());
    for (report, counted) in decisions {
        if let Some(slot) = reports.get_mut(report.position) {
            *slot = Some((report, counted));
        }
    }
    let mut statuses = Vec::with_capacity(decided.matched.len());
    let mut over = false;
    let mut refusing = None;
    for (position, m) in decided.matched.iter().enumerate() {
        let status = match *m {
            Matched::Unmatched(Unmatched::Ok) => status(Code::Ok),
            Matched::Unmatched(Unmatched::OverLimit) => status(Code::OverLimit),
            Matched::Blocked(rule) => blocked_status(rls, rule),
            Matched::Rule(rule) => {
                let rule = rls.rules.get(rule);
                let policy = rule.and_then(|r| Some((r.limit_name(), r.policy.as_deref()?)));
                match (policy, reports[position]) {
                    (Some(policy), Some((report, counted))) => {
                        let code = match counted {
                            Counted::Denied => Code::OverLimit,
                            _ => Code::Ok,
                        };
                        rule_status(code, policy, &report)
                    }
                    // Unlimited: OK with all the room there is, as envoyproxy/ratelimit.
                    _ if rule.is_some_and(|r| r.policy.is_none() && r.blocked.is_none()) => {
                        DescriptorStatus {
                            limit_remaining: u32::MAX,
                            ..status(Code::Ok)
                        }
                    }
                    // Not decided: replaced by another limit of the call, or the store
                    // could not answer and on_error let it pass.
                    _ => status(Code::Ok),
                }
            }
        };
        if status.code == Code::OverLimit as i32 {
            over = true;
            refusing.get_or_insert(position);
        }
        statuses.push(status);
    }
    let mut response = RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        ..RateLimitResponse::default()
    };
    response.response_headers_to_add = headers(rls, decided, &reports, over);
    if let Some(position) = refusing {
        response.dynamic_metadata = Some(refused_by(rls, decided, position));
        if let Some((body, content_type)) = refusal_body(rls, decided, &response.statuses) {
            response.raw_body = body;
            response.response_headers_to_add.push(proto::HeaderValue {
                key: "content-type".to_owned(),
                value: content_type.to_owned(),
            });
        }
    }
    response
}

/// The 429's body Envoy sends (`raw_body`) under `refusal_body`: a proxied refusal's, by
/// the first refusing descriptor's limit, naming every refusing one as violated.
fn refusal_body(
    rls: &Rls,
    decided: &Decided,
    statuses: &[DescriptorStatus],
) -> Option<(Vec<u8>, &'static str)> {
    let refused = |(m, s): (&Matched, &DescriptorStatus)| match m {
        Matched::Rule(r) | Matched::Blocked(r) if s.code == Code::OverLimit as i32 => {
            rls.rules.get(*r)
        }
        _ => None,
    };
    let violated: Vec<&crate::config::rls::RlsRule> = decided
        .matched
        .iter()
        .zip(statuses)
        .filter_map(refused)
        .collect();
    let first = violated.first()?;
    let names: Vec<&str> = violated.iter().map(|r| r.limit_name()).collect();
    let quota = first
        .policy
        .as_ref()
        .and_then(|p| p.rate()?.calendar.as_ref());
    let limit = quota.map(|_| "quota");
    let start = body_start(first.limit_name(), limit);
    let wait_ns = decided.admission.wait_ns();
    let refused = Refused {
        policy: first.limit_name(),
        start: &start,
        limit,
        retry_after_ms: crate::reply::ceil_millis(if wait_ns == u64::MAX { 0 } else { wait_ns }),
        problem: (rls.refusal_body == RefusalBody::ProblemJson).then_some(&names[..]),
        rpc: None,
    };
    match rls.refusal_body {
        RefusalBody::None => None,
        RefusalBody::Json => Some((refused.body().0, "application/json")),
        RefusalBody::ProblemJson => Some((refused.body().0, "application/problem+json")),
    }
}

/// A blocking rule's status (`requests_per_unit: 0`): over, nothing left, its stated
/// limit 0 per its unit, until its unit passes.
fn blocked_status(rls: &Rls, rule: usize) -> DescriptorStatus {
    let Some(rule) = rls.rules.get(rule) else {
        return status(Code::OverLimit);
    };
    let length = rule.blocked.unwrap_or(1).saturating_mul(SECOND_NS);
    let unit = UNITS
        .iter()
        .find(|(_, l)| *l == length)
        .map_or(Unit::Unknown, |(unit, _)| *unit);
    DescriptorStatus {
        current_limit: Some(RateLimit {
            name: rule.limit_name().to_owned(),
            requests_per_unit: 0,
            unit: unit as i32,
        }),
        duration_until_reset: Some(duration(length)),
        ..status(Code::OverLimit)
    }
}

fn status(code: Code) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        ..DescriptorStatus::default()
    }
}

/// A decided descriptor's status: `name` is its limit's, `policy` decided it.
fn rule_status(
    code: Code,
    (name, policy): (&str, &Policy),
    report: &TierReport,
) -> DescriptorStatus {
    let (requests_per_unit, unit) = stated(policy, &report.quota);
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: name.to_owned(),
            requests_per_unit,
            unit: unit as i32,
        }),
        // Over: nothing left for this call, as envoyproxy/ratelimit says it.
        limit_remaining: match code {
            Code::OverLimit => 0,
            _ => u32::try_from(report.remaining).unwrap_or(u32::MAX),
        },
        duration_until_reset: Some(duration(report.until_full_ns)),
    }
}

fn duration(ns: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ns / SECOND_NS).unwrap_or(i64::MAX),
        // Below 10⁹: fits.
        nanos: i32::try_from(ns % SECOND_NS).unwrap_or(0),
    }
}

/// `RateLimit-Policy` and `RateLimit` over the enforcing policies decided (the same
/// values a proxied request's headers carry), and `Retry-After` when the call is over.
fn headers(
    rls: &Rls,
    decided: &Decided,
    reports: &[Option<(TierReport, Counted)>],
    over: bool,
) -> Vec<proto::HeaderValue> {
    let items: Vec<TierItem<'_>> = decided
        .matched
        .iter()
        .zip(reports)
        .filter_map(|(m, report)| {
            let (Matched::Rule(rule), Some((report, _))) = (m, report) else {
                return None;
            };
            let rule = rls.rules.get(*rule)?;
            let policy = rule.policy.as_deref()?;
            (policy.mode == crate::limit::Mode::Enforce).then_some(TierItem {
                policy: rule.limit_name(),
                quota: report.quota,
                constant: None,
                remaining: report.remaining,
                until_full_ns: report.until_full_ns,
                window_s: report.window_s,
            })
        })
        .collect();
    let mut out = Vec::new();
    if !items.is_empty() {
        let (policy, current) = rate_limit_lists(&items, None);
        for (name, value) in [("ratelimit-policy", policy), ("ratelimit", current)] {
            if let Ok(value) = value.to_str() {
                out.push(proto::HeaderValue {
                    key: name.to_owned(),
                    value: value.to_owned(),
                });
            }
        }
    }
    // The limiter's wait, or a blocking rule's unit (it is over until the unit passes,
    // as its `duration_until_reset` says); a call over only by `on_unmatched` has no
    // wait to tell.
    let blocked_ns = decided
        .matched
        .iter()
        .filter_map(|m| match m {
            Matched::Blocked(rule) => rls.rules.get(*rule)?.blocked,
            _ => None,
        })
        .max()
        .map_or(0, |s| s.saturating_mul(SECOND_NS));
    let wait_ns = match decided.admission.wait_ns() {
        u64::MAX => 0,
        wait => wait,
    }
    .max(blocked_ns);
    if over && wait_ns > 0 {
        out.push(proto::HeaderValue {
            key: "retry-after".to_owned(),
            value: crate::reply::ceil_secs(wait_ns).to_string(),
        });
    }
    out
}

/// `dynamic_metadata` of a refused call: the first refusing descriptor and its policy.
fn refused_by(rls: &Rls, decided: &Decided, position: usize) -> prost_types::Struct {
    use prost_types::value::Kind;
    let text = |s: &str| prost_types::Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    };
    let mut fields = std::collections::BTreeMap::new();
    #[allow(clippy::cast_precision_loss)] // at most 32
    fields.insert(
        "descriptor_index".to_owned(),
        prost_types::Value {
            kind: Some(Kind::NumberValue(position as f64)),
        },
    );
    let policy = decided
        .rule_at(position)
        .and_then(|rule| rls.rules.get(rule))
        .map(|r| r.limit_name());
    fields.insert("policy".to_owned(), text(policy.unwrap_or("")));
    fields.insert(
        "reason".to_owned(),
        text(if policy.is_some() {
            "rate_limited"
        } else {
            "unmatched"
        }),
    );
    prost_types::Struct { fields }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A rate policy of `limit` per `period`, as the config compiles it, and what
    /// `current_limit` states of it.
    fn stated_of(limit: u64, period: Duration) -> (u32, Unit) {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[policies.p]\nkey = \"header:x\"\nlimit = {limit}\nperiod = \"{}s\"\nburst = {limit}\n",
            period.as_secs()
        );
        let config = crate::config::compile(std::path::Path::new("t.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        let policy = config.policy("p").expect("policy p");
        let quota = policy.rate().expect("a rate").quota;
        stated(policy, &quota)
    }

    #[test]
    fn a_rate_is_stated_in_the_smallest_unit_that_holds_it_exactly() {
        let s = Duration::from_secs;
        let day = 86_400;
        let cases = [
            (10, s(1), (10, Unit::Second)),
            (100, s(60), (100, Unit::Minute)),
            (1, s(1), (1, Unit::Second)),
            // 7/h: the interval is rounded down to the nanosecond, the hour still holds 7.
            (7, s(3_600), (7, Unit::Hour)),
            (5, s(90), (200, Unit::Hour)),
            (2, s(day), (2, Unit::Day)),
            // envoyproxy/ratelimit's longer units: a week, a 30-day month, a 365-day year.
            (1, s(7 * day), (1, Unit::Week)),
            (10, s(30 * day), (10, Unit::Month)),
            (1_000, s(30 * day), (1_000, Unit::Month)),
            (3, s(365 * day), (3, Unit::Year)),
            // No unit holds 7 per 11 s exactly: per day, rounded down.
            (7, s(11), (54_981, Unit::Day)),
            (1, s(2 * day), (15, Unit::Month)),
            // Slower than one a day and no unit exact: the first unit holding one.
            (1, s(4 * day), (1, Unit::Week)),
            (1, s(400 * day), (1, Unit::Year)),
        ];
        for (limit, period, want) in cases {
            assert_eq!(stated_of(limit, period), want, "{limit} per {period:?}");
        }
    }
}
