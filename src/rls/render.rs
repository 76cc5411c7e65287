//! A decided call as Envoy reads it: one status per descriptor in order, the overall
//! code, the draft-11 `RateLimit` / `RateLimit-Policy` fields (and `Retry-After` when
//! over), and which policy and descriptor refused. Everything is read from the decision;
//! nothing is decided here.

use super::decide::{Decided, Matched};
use super::proto::{self, Code, DescriptorStatus, RateLimit, RateLimitResponse, Unit};
use super::stated::{stated, UNITS};
use crate::config::rls::{RefusalBody, Unmatched};
use crate::config::Policy;
use crate::config::Rls;
use crate::limit::gcra::NANOS_PER_SEC as SECOND_NS;
use crate::proxy::response::{body_start, rate_limit_lists, Refused, TierItem};
use crate::store::{Counted, TierReport};

/// The response for `decided` under `rls`, with the call's wait (`Retry-After`, the
/// metadata's `retry_after_ms`) when over.
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
            Matched::Unmatched(Unmatched::Ok) | Matched::Empty => status(Code::Ok),
            Matched::Unmatched(Unmatched::OverLimit) => status(Code::OverLimit),
            Matched::Blocked(rule) => blocked_status(rls, rule),
            Matched::MissingKey(rule) => missing_key_status(rls, rule),
            Matched::Rule(rule) => {
                let rule = rls.rules.get(rule);
                let policy = rule.and_then(|r| Some((r.limit_name(), r.policy.as_deref()?)));
                match (policy, reports[position]) {
                    // Shadow: OK, and no limit Envoy would put in the client's
                    // `X-RateLimit-*` (a proxied answer's headers never show a shadow tier).
                    (Some((_, policy)), Some(_)) if policy.mode == crate::limit::Mode::Shadow => {
                        status(Code::Ok)
                    }
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
        Matched::Rule(r) | Matched::Blocked(r) | Matched::MissingKey(r)
            if s.code == Code::OverLimit as i32 =>
        {
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
    let refused = Refused {
        policy: first.limit_name(),
        start: &start,
        limit,
        retry_after_ms: crate::reply::ceil_millis(told_wait_ns(decided)),
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
    let length = rule.blocked.map_or(1, |(s, _)| s).saturating_mul(SECOND_NS);
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

/// A descriptor refused for lacking its key's value (`missing = "reject"`): over,
/// nothing left, its policy's limit stated so Envoy's `X-RateLimit-Limit` names it; no
/// reset, as there is no key whose wait would help.
fn missing_key_status(rls: &Rls, rule: usize) -> DescriptorStatus {
    let rule = rls.rules.get(rule);
    let limit = rule.and_then(|r| {
        // A shadow policy shows the client no limit (as `rule_status`'s callers).
        let policy = r
            .policy
            .as_deref()
            .filter(|p| p.mode != crate::limit::Mode::Shadow)?;
        let (requests_per_unit, unit) = stated(policy, &policy.rate()?.quota);
        Some(RateLimit {
            name: r.limit_name().to_owned(),
            requests_per_unit,
            unit: unit as i32,
        })
    });
    DescriptorStatus {
        current_limit: limit,
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

/// Whole seconds, rounded up: Envoy's `X-RateLimit-Reset` reads only `seconds`, so a
/// part-second said in `nanos` would tell a client to come back early (59 for 59.5, 0 for
/// a key full again within the second), where `RateLimit`'s `t=` and `Retry-After` say 60.
fn duration(ns: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(crate::reply::ceil_secs(ns)).unwrap_or(i64::MAX),
        nanos: 0,
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
    let enforcing: Vec<(std::borrow::Cow<'_, str>, &TierReport)> = decided
        .matched
        .iter()
        .zip(reports)
        .filter_map(|(m, report)| {
            let (Matched::Rule(rule), Some((report, _))) = (m, report) else {
                return None;
            };
            let rule = rls.rules.get(*rule)?;
            let policy = rule.policy.as_deref()?;
            (policy.mode == crate::limit::Mode::Enforce)
                .then(|| (header_safe(rule.limit_name()), report))
        })
        .collect();
    let items: Vec<TierItem<'_>> = enforcing
        .iter()
        .map(|(name, report)| TierItem {
            policy: name,
            quota: report.quota,
            constant: None,
            remaining: report.remaining,
            until_full_ns: report.until_full_ns,
            window_s: report.window_s,
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
    let wait_ns = told_wait_ns(decided);
    if over && wait_ns > 0 {
        out.push(proto::HeaderValue {
            key: "retry-after".to_owned(),
            value: crate::reply::ceil_secs(wait_ns).to_string(),
        });
    }
    out
}

/// The wait a refused call is told, in `Retry-After`, the body's `retry_after_ms`, the
/// access log and the span alike: the limiter's. A call refused whenever it comes — by
/// `on_unmatched`, a missing key's `reject` or a blocking limit (`requests_per_unit: 0`
/// is over in every unit), also beside a descriptor that would wait, or asking one
/// policy for more than its burst, alone or with other descriptors on the same key —
/// has none (0).
pub fn told_wait_ns(decided: &Decided) -> u64 {
    let never = decided.matched.iter().any(|m| {
        matches!(
            m,
            Matched::Unmatched(Unmatched::OverLimit) | Matched::MissingKey(_) | Matched::Blocked(_)
        )
    });
    match decided.admission.wait_ns() {
        0 => 0,
        _ if never => 0,
        u64::MAX => 0,
        _ if decided.over_a_burst_together() => 0,
        wait => wait,
    }
}

/// A limit's name as a structured field string can hold it: a YAML's `rate_limit.name`
/// may hold `"`, `\\` or characters beyond printable ASCII, which would make the
/// `RateLimit` fields no header at all (escaped, or `_`).
fn header_safe(name: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ';
    if name.chars().all(plain) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if plain(c) => out.push(c),
            _ => out.push('_'),
        }
    }
    std::borrow::Cow::Owned(out)
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
    #[test]
    fn a_name_no_header_could_hold_is_escaped_or_replaced() {
        assert_eq!(super::header_safe("edge.tenant_a"), "edge.tenant_a");
        assert_eq!(super::header_safe("a \"b\" \\c é"), "a \\\"b\\\" \\\\c _");
        let item = format!("\"{}\";r=1", super::header_safe("x\"é"));
        assert!(http::HeaderValue::from_str(&item).is_ok(), "{item}");
    }
}
