//! The rate-limit headers on every response from a limited route: `X-RateLimit-*` from
//! the reported tier, the IETF draft's `RateLimit-Policy` / `RateLimit` lists, and their
//! constant parts built once per config load.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use crate::config::policy_item;
use crate::limit::Quota;

pub(super) static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub(super) static X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
pub(super) static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
pub(super) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub(super) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Header values of the numbers most responses carry (remaining, reset, Retry-After up to
/// a little over an hour), made once: handing one out is a copy of a static reference, not
/// an allocation per response.
const CACHED_NUMBERS: u64 = 4096;

pub(super) fn number(n: u64) -> HeaderValue {
    static CACHE: std::sync::OnceLock<Box<[HeaderValue]>> = std::sync::OnceLock::new();
    if n >= CACHED_NUMBERS {
        return HeaderValue::from(n);
    }
    let cache = CACHE.get_or_init(|| {
        (0..CACHED_NUMBERS)
            .map(|i| HeaderValue::from_static(Box::leak(i.to_string().into_boxed_str())))
            .collect()
    });
    cache[n as usize].clone()
}

/// Appends `n` in decimal: the hot path writes its numbers without `core::fmt`.
fn push_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Header values that depend only on a policy's numbers: built once per config load.
#[derive(Debug, Clone)]
pub struct PolicyHeaders {
    pub limit: HeaderValue,
    pub policy: HeaderValue,
}

/// A header value from bytes the gateway wrote (names are validated by the config).
fn value_of(bytes: Vec<u8>) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(Bytes::from(bytes)).ok()
}

/// The same, empty in the case the config's name rules rule out (bytes that are no
/// header value).
pub(super) fn value_or_empty(bytes: Vec<u8>) -> HeaderValue {
    value_of(bytes).unwrap_or_else(|| HeaderValue::from_static(""))
}

impl PolicyHeaders {
    /// A rate tier's on `quota` (a calendar quota's window: `window_s`), which need not
    /// be its policy's own.
    pub fn new(name: &str, quota: &Quota, window_s: Option<u64>) -> Self {
        let mut policy = Vec::with_capacity(name.len() + 24);
        policy_item(&mut policy, name, quota, window_s);
        Self::of(quota.burst(), policy)
    }

    /// A concurrency tier's capped at `max` (a key's override).
    pub fn concurrency(name: &str, max: u32) -> Self {
        Self::of(u64::from(max), crate::config::concurrency_item(name, max))
    }

    /// A policy's on its own numbers, whatever its kind.
    pub fn of_policy(policy: &crate::config::Policy) -> Self {
        let (limit, item) = policy.kind.header_item(&policy.name);
        Self::of(limit, item)
    }

    fn of(limit: u64, policy: Vec<u8>) -> Self {
        Self {
            limit: number(limit),
            policy: value_or_empty(policy),
        }
    }
}

/// A route's constant header value, built once per config load: the whole
/// `RateLimit-Policy` list for the usual case where every enforcing rate tier decided on
/// its policy's own quota (no override, none skipped). Each policy's own values are its
/// [`PolicyAnswer`].
#[derive(Debug, Clone)]
pub struct RouteHeaders {
    /// The joined `RateLimit-Policy` of every enforcing rate policy, in route order, and
    /// how many items it has.
    pub rate_list: Option<(usize, HeaderValue)>,
}

/// What an answer says of one policy of a route, made once per config version: its
/// constant header values, the start of its plain 429 body and the body's `limit` word.
#[derive(Debug, Clone)]
pub struct PolicyAnswer {
    pub headers: PolicyHeaders,
    /// The start of the plain 429 body a refusal by this policy gets, up to its wait (see
    /// `refusal::body_start`).
    pub refusal_body: Box<[u8]>,
    /// The body's `limit` (`"concurrency"`, `"quota"`; none for a rate).
    pub limit_kind: Option<&'static str>,
}

impl PolicyAnswer {
    pub fn new(policy: &crate::config::Policy) -> Self {
        let limit_kind = policy.kind().body_word();
        Self {
            headers: PolicyHeaders::of_policy(policy),
            refusal_body: super::refusal_body::body_start(&policy.name, limit_kind),
            limit_kind,
        }
    }
}

impl RouteHeaders {
    /// `answers`: the route's policies' answers, by position.
    pub fn new<'a>(
        route: &crate::config::Route,
        answers: impl IntoIterator<Item = &'a PolicyAnswer>,
    ) -> Self {
        use crate::limit::Mode;
        let mut list = Vec::new();
        let mut count = 0;
        for (policy, answer) in route.policies.iter().zip(answers) {
            if policy.mode == Mode::Enforce && policy.rate().is_some() {
                if count > 0 {
                    list.extend_from_slice(b", ");
                }
                list.extend_from_slice(answer.headers.policy.as_bytes());
                count += 1;
            }
        }
        let rate_list = (count > 0)
            .then(|| value_of(list))
            .flatten()
            .map(|v| (count, v));
        Self { rate_list }
    }
}

/// One enforcing rate tier as the `RateLimit-Policy` / `RateLimit` lists show it. The
/// reported tier (the one `X-RateLimit-*` describe) is one too, with `remaining` the minimum
/// over every enforcing tier.
#[derive(Debug, Clone, Copy)]
pub struct TierItem<'a> {
    pub policy: &'a str,
    pub quota: Quota,
    /// The policy's constant header values, valid when `quota` is the policy's own.
    pub constant: Option<&'a PolicyHeaders>,
    /// Cost-1 requests this tier would admit right now.
    pub remaining: u64,
    /// Nanoseconds until this tier has its full burst again.
    pub until_full_ns: u64,
    /// A calendar quota's window length in seconds.
    pub window_s: Option<u64>,
}

/// Adds a concurrency tier to `RateLimit-Policy` and `RateLimit` (as list items after any
/// rate tier's): its quota is requests in flight, `r` the slots left free.
pub fn concurrency_headers(
    headers: &mut HeaderMap,
    policy: &str,
    constant: &PolicyHeaders,
    free: u32,
) {
    headers.append(RATELIMIT_POLICY.clone(), constant.policy.clone());
    let mut current = Vec::with_capacity(policy.len() + 16);
    current.push(b'"');
    current.extend_from_slice(policy.as_bytes());
    current.extend_from_slice(b"\";r=");
    push_number(&mut current, u64::from(free));
    if let Some(v) = value_of(current) {
        headers.append(RATELIMIT.clone(), v);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::limit::gcra::NANOS_PER_SEC;

    /// Tier `user`: 5 at once, 10 a second, full again in 0.3 s, `remaining` left.
    pub(in crate::proxy::response) fn user_item(remaining: u64) -> TierItem<'static> {
        TierItem {
            policy: "user",
            quota: Quota::new(10, NANOS_PER_SEC, 5).expect("valid"),
            constant: None,
            until_full_ns: 300_000_000,
            remaining,
            window_s: None,
        }
    }

    /// Tier `tenant`: 20 at once, 100 a minute, full again in 2.5 s, 19 left.
    pub(in crate::proxy::response) fn tenant_item() -> TierItem<'static> {
        TierItem {
            policy: "tenant",
            quota: Quota::new(100, 60 * NANOS_PER_SEC, 20).expect("valid"),
            constant: None,
            until_full_ns: 2_500_000_000,
            remaining: 19,
            window_s: None,
        }
    }

    /// A 429's headers set in place on the cloned [`REFUSAL_HEADERS`] are the ones the
    /// inserting path writes, value for value, with nothing left over.
    #[test]
    fn numbers_read_the_same_cached_or_not() {
        for n in [
            0,
            1,
            9,
            10,
            3600,
            CACHED_NUMBERS - 1,
            CACHED_NUMBERS,
            u64::MAX,
        ] {
            assert_eq!(number(n), n.to_string().as_str());
        }
    }
}
