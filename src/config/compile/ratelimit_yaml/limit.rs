//! One `rate_limit` of envoyproxy/ratelimit's YAML made a policy: its full key (the
//! name the service gives it), its unit in seconds, and the policy it decides with.

use super::YamlDescriptor;
use super::*;
use crate::config::rls::{RuleEntry, Value};

/// A limit's full key, as envoyproxy/ratelimit names it: the domain, then each entry's
/// key with its value (`key_value`, a wildcard as written: `key_prefix*`), joined by dots.
pub(super) fn full_key(domain: &str, path: &[RuleEntry]) -> String {
    std::iter::once(domain.to_owned())
        .chain(path.iter().map(|e| match &e.value {
            Value::Any => e.key.clone(),
            Value::Wildcard(p) | Value::SharedWildcard(p) => format!("{}_{}", e.key, p.written()),
            Value::Exact(v) => format!("{}_{v}", e.key),
        }))
        .collect::<Vec<_>>()
        .join(".")
}

/// A unit's length in seconds, as envoyproxy/ratelimit counts it (a month is 30 days, a
/// year 365).
pub(super) fn unit_seconds(unit: &str) -> Option<u64> {
    let unit = unit.to_ascii_lowercase();
    UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, s)| *s)
}

/// envoyproxy/ratelimit's units and their length in seconds (a month is 30 days, a
/// year 365, as there).
const UNITS: [(&str, u64); 7] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3_600),
    ("day", 86_400),
    ("week", 7 * 86_400),
    ("month", 30 * 86_400),
    ("year", 365 * 86_400),
];

/// The unit of a limit's period in seconds, as the YAML names it.
pub(in crate::config::compile) fn unit_name(seconds: u64) -> &'static str {
    UNITS
        .iter()
        .find(|(_, s)| *s == seconds)
        .map_or("period", |(name, _)| name)
}

/// A policy name from a limit's full key: the key itself when a policy name allows all its
/// characters; else those characters with the others as `_`, and a digest of the full
/// key after them. Full keys are unique, so names are, whatever order the file lists its
/// limits in: a reload adding `user_id` beside `user id` leaves `user id`'s buckets (the
/// name is part of each key's hash) with it, not with the newcomer.
fn policy_name(full_key: &str) -> String {
    let allowed = |c: char| matches!(c, 'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '.' | ':' | '-');
    if full_key.chars().all(allowed) {
        return full_key.to_owned();
    }
    let base: String = full_key
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    let digest = ring::digest::digest(&ring::digest::SHA256, full_key.as_bytes());
    let short: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{base}-{short}")
}

/// The policy of one limit: `requests_per_unit` per unit, the same burst, keyed by the
/// entries whose value is not fixed. Its name is unique among `names`.
pub(super) fn yaml_policy(
    (full_key, names): (&str, &mut HashSet<String>),
    path: &[RuleEntry],
    node: &YamlDescriptor,
    (requests, seconds): (u64, u64),
) -> Option<Policy> {
    let period = Duration::from_secs(seconds);
    let quota = Quota::new(requests, u64::try_from(period.as_nanos()).ok()?, requests).ok()?;
    let base = policy_name(full_key);
    let mut name = base.clone();
    let mut n = 1;
    while !names.insert(name.clone()) {
        n += 1;
        name = format!("{base}-{n}");
    }
    Some(Policy {
        name,
        key: path
            .iter()
            .filter(|e| !matches!(e.value, Value::Exact(_)))
            .map(|e| KeySource::Descriptor(e.key.clone()))
            .collect(),
        missing: Missing::Shared,
        mode: if node.shadow_mode {
            Mode::Shadow
        } else {
            Mode::Enforce
        },
        max_delay: Duration::ZERO,
        kind: PolicyKind::Rate(RateLimit {
            limit: requests,
            period,
            quota,
            overrides: Default::default(),
            settle: None,
            sync: Sync::Exact,
            calendar: None,
        }),
    })
}
