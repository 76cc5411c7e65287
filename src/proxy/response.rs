//! Responses the gateway writes itself (429, 4xx, 502/504) and the rate-limit headers
//! that go on every response from a limited route.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, RETRY_AFTER, VARY};
use http::{HeaderMap, Response, StatusCode};

use http_body_util::{BodyExt, Full};

use crate::limit::gcra::NANOS_PER_SEC;
use crate::limit::{Quota, Verdict};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A JSON error answer: `{"error": kind, …extra}`.
pub fn json_error(
    status: StatusCode,
    kind: &str,
    extra: &[(&str, serde_json::Value)],
) -> Response<Body> {
    let mut body = serde_json::Map::with_capacity(1 + extra.len());
    body.insert("error".to_owned(), kind.into());
    for (k, v) in extra {
        body.insert((*k).to_owned(), v.clone());
    }
    let text = serde_json::Value::Object(body).to_string();
    let mut resp = Response::new(full(text));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Whole seconds, rounded up.
pub fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_SEC)
}

/// Whole milliseconds, rounded up.
pub fn ceil_millis(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

/// Header values of the numbers most responses carry (remaining, reset, Retry-After up to
/// a little over an hour), made once: handing one out is a copy of a static reference, not
/// an allocation per response.
const CACHED_NUMBERS: u64 = 4096;

fn number(n: u64) -> HeaderValue {
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

/// A rate tier's `RateLimit-Policy` item: `"<policy>";q=<burst>;w=<τ in whole seconds>`.
fn policy_item(out: &mut Vec<u8>, name: &str, quota: &Quota) {
    let window = ceil_secs(quota.tolerance_ns()).max(1);
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\";q=");
    push_number(out, quota.burst());
    out.extend_from_slice(b";w=");
    push_number(out, window);
}

/// A header value from bytes the gateway wrote (names are validated by the config).
fn value_of(bytes: Vec<u8>) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(Bytes::from(bytes)).ok()
}

impl PolicyHeaders {
    pub fn new(name: &str, quota: &Quota) -> Self {
        let mut policy = Vec::with_capacity(name.len() + 24);
        policy_item(&mut policy, name, quota);
        Self::of(quota.burst(), policy)
    }

    /// A concurrency cap's `RateLimit-Policy` item: its quota is requests in flight.
    pub fn concurrency(name: &str, max_in_flight: u32) -> Self {
        let policy = format!("\"{name}\";q={max_in_flight};qu=\"concurrent-requests\"");
        Self::of(u64::from(max_in_flight), policy.into_bytes())
    }

    fn of(limit: u64, policy: Vec<u8>) -> Self {
        Self {
            limit: number(limit),
            policy: value_of(policy).unwrap_or_else(|| HeaderValue::from_static("")),
        }
    }
}

/// One route's constant header values, built once per config load: each policy's, and
/// the whole `RateLimit-Policy` list for the usual case where every enforcing rate tier
/// decided on its policy's own quota (no override, none skipped).
#[derive(Debug, Clone)]
pub struct RouteHeaders {
    /// By tier position.
    pub policies: Box<[PolicyHeaders]>,
    /// The joined `RateLimit-Policy` of every enforcing rate policy, in route order, and
    /// how many items it has.
    pub rate_list: Option<(usize, HeaderValue)>,
}

impl RouteHeaders {
    pub fn new(route: &crate::config::Route) -> Self {
        use crate::config::PolicyKind;
        use crate::limit::Mode;
        let policies: Box<[PolicyHeaders]> = route
            .policies
            .iter()
            .map(|p| match &p.kind {
                PolicyKind::Rate(r) => PolicyHeaders::new(&p.name, &r.quota),
                PolicyKind::Concurrency(c) => PolicyHeaders::concurrency(&p.name, c.max_in_flight),
            })
            .collect();
        let mut list = Vec::new();
        let mut count = 0;
        for (policy, headers) in route.policies.iter().zip(&policies) {
            if policy.mode == Mode::Enforce && policy.rate().is_some() {
                if count > 0 {
                    list.extend_from_slice(b", ");
                }
                list.extend_from_slice(headers.policy.as_bytes());
                count += 1;
            }
        }
        let rate_list = (count > 0)
            .then(|| value_of(list))
            .flatten()
            .map(|v| (count, v));
        Self {
            policies,
            rate_list,
        }
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
}

/// Writes X-RateLimit-* (from the reported tier) and the IETF draft's RateLimit-Policy /
/// RateLimit lists, one item per enforcing rate tier in route order (`items`). `route`:
/// the route's constant values, used when every item is its policy's own.
pub fn rate_limit_headers(
    headers: &mut HeaderMap,
    r: &TierItem<'_>,
    items: &[TierItem<'_>],
    route: Option<&RouteHeaders>,
) {
    RateLimitValues::of(r, items, route).insert_into(headers);
}

/// The values of the rate-limit headers of one response (see [`rate_limit_headers`]).
/// The two lists are `None` only if their bytes were not a header value, which the
/// config's name rules rule out.
struct RateLimitValues {
    limit: HeaderValue,
    remaining: HeaderValue,
    reset: HeaderValue,
    policy: Option<HeaderValue>,
    current: Option<HeaderValue>,
}

impl RateLimitValues {
    fn of(r: &TierItem<'_>, items: &[TierItem<'_>], route: Option<&RouteHeaders>) -> Self {
        let built;
        let constant = match r.constant {
            Some(c) => c,
            None => {
                built = PolicyHeaders::new(r.policy, &r.quota);
                &built
            }
        };
        let all_constant = items.iter().all(|i| i.constant.is_some());
        let policy = match (items, route.and_then(|r| r.rate_list.as_ref())) {
            // Every enforcing tier, each on its own quota: the list built at config load.
            (_, Some((count, list))) if all_constant && *count == items.len() => Some(list.clone()),
            (
                [TierItem {
                    constant: Some(c), ..
                }],
                _,
            ) => Some(c.policy.clone()),
            _ => {
                let mut policies = Vec::with_capacity(items.len() * 32);
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        policies.extend_from_slice(b", ");
                    }
                    match item.constant {
                        Some(c) => policies.extend_from_slice(c.policy.as_bytes()),
                        None => policy_item(&mut policies, item.policy, &item.quota),
                    }
                }
                value_of(policies)
            }
        };
        let mut current = Vec::with_capacity(items.len() * 32);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                current.extend_from_slice(b", ");
            }
            current.push(b'"');
            current.extend_from_slice(item.policy.as_bytes());
            current.extend_from_slice(b"\";r=");
            push_number(&mut current, item.remaining);
            current.extend_from_slice(b";t=");
            push_number(&mut current, ceil_secs(item.until_full_ns));
        }
        Self {
            limit: constant.limit.clone(),
            remaining: number(r.remaining),
            reset: number(ceil_secs(r.until_full_ns)),
            policy,
            current: value_of(current),
        }
    }

    fn insert_into(self, headers: &mut HeaderMap) {
        headers.insert(X_RATELIMIT_LIMIT.clone(), self.limit);
        headers.insert(X_RATELIMIT_REMAINING.clone(), self.remaining);
        headers.insert(X_RATELIMIT_RESET.clone(), self.reset);
        if let Some(policy) = self.policy {
            headers.insert(RATELIMIT_POLICY.clone(), policy);
        }
        if let Some(current) = self.current {
            headers.insert(RATELIMIT.clone(), current);
        }
    }
}

/// The problem type of the IETF httpapi RateLimit draft (-11) for a refused quota
/// (RFC 9457 problem details), with its title.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";
const QUOTA_EXCEEDED_TITLE: &str =
    "Request cannot be satisfied as assigned quota has been exceeded";

/// The thousandths of a qvalue (`1`, `0.5`, `0.001`, `1.000`; RFC 9110 § 12.4.2), `None`
/// when it is not one.
fn qvalue(text: &[u8]) -> Option<u16> {
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &[][..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + fraction.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether the request's `Accept` asks for `application/problem+json` by name, with a
/// weight above 0 and not below that of `application/json` (when that is named too).
/// `*/*` and `application/*` do not count: a client that did not name the type gets
/// the plain JSON body it always got. Reads the header in place, allocating nothing.
pub fn wants_problem_json(headers: &HeaderMap) -> bool {
    // The highest weight each type is named with, in thousandths.
    let (mut problem, mut json) = (None::<u16>, None::<u16>);
    for value in headers.get_all(ACCEPT) {
        for range in value.as_bytes().split(|&b| b == b',') {
            let mut parts = range.split(|&b| b == b';');
            let media_type = parts.next().unwrap_or_default().trim_ascii();
            let slot = if media_type.eq_ignore_ascii_case(b"application/problem+json") {
                &mut problem
            } else if media_type.eq_ignore_ascii_case(b"application/json") {
                &mut json
            } else {
                continue;
            };
            let mut weight = Some(1000);
            for param in parts {
                let param = param.trim_ascii();
                if let Some(q) = param
                    .strip_prefix(b"q=")
                    .or_else(|| param.strip_prefix(b"Q="))
                {
                    weight = qvalue(q.trim_ascii());
                }
            }
            // A range with an unreadable weight is ignored.
            if let Some(w) = weight {
                *slot = Some(slot.map_or(w, |seen| seen.max(w)));
            }
        }
    }
    problem.is_some_and(|p| p > 0 && p >= json.unwrap_or(0))
}

/// What a 429's body says, in either of its forms.
struct Refused<'a> {
    policy: &'a str,
    /// `"concurrency"` for a concurrency cap's refusal.
    limit: Option<&'static str>,
    retry_after_ms: u64,
    /// `Some`: RFC 9457 problem details naming these policies as `violated-policies`.
    problem: Option<&'a [&'a str]>,
}

impl Refused<'_> {
    /// The body and its content type. Policy names are restricted to [A-Za-z0-9_.:-] by
    /// config validation: no escaping needed.
    fn body(&self) -> (Vec<u8>, HeaderValue) {
        let mut body = Vec::with_capacity(
            80 + self.policy.len() + self.problem.map_or(0, |v| 200 + 24 * v.len()),
        );
        let content_type = match self.problem {
            None => {
                body.push(b'{');
                HeaderValue::from_static("application/json")
            }
            Some(violated) => {
                body.extend_from_slice(b"{\"type\":\"");
                body.extend_from_slice(QUOTA_EXCEEDED_TYPE.as_bytes());
                body.extend_from_slice(b"\",\"title\":\"");
                body.extend_from_slice(QUOTA_EXCEEDED_TITLE.as_bytes());
                body.extend_from_slice(b"\",\"status\":429,\"violated-policies\":[");
                for (i, name) in violated.iter().enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.push(b'"');
                    body.extend_from_slice(name.as_bytes());
                    body.push(b'"');
                }
                body.extend_from_slice(b"],");
                HeaderValue::from_static("application/problem+json")
            }
        };
        body.extend_from_slice(b"\"error\":\"rate_limited\",\"policy\":\"");
        body.extend_from_slice(self.policy.as_bytes());
        body.extend_from_slice(b"\",");
        if let Some(limit) = self.limit {
            body.extend_from_slice(b"\"limit\":\"");
            body.extend_from_slice(limit.as_bytes());
            body.extend_from_slice(b"\",");
        }
        body.extend_from_slice(b"\"retry_after_ms\":");
        push_number(&mut body, self.retry_after_ms);
        body.push(b'}');
        (body, content_type)
    }

    /// A 429 with this body, `Retry-After: retry_after_s`, `Vary: Accept` (the body's
    /// form depends on it) and the rate-limit headers `limits` has: the headers are
    /// [`REFUSAL_HEADERS`] with their values set in place, so no name is hashed per 429.
    fn rate_response(&self, retry_after_s: u64, limits: RateLimitValues) -> Response<Body> {
        let (policy, current) = match (limits.policy, limits.current) {
            (Some(policy), Some(current)) => (policy, current),
            // A list that was not a header value (never, by the config's name rules).
            (policy, current) => {
                let mut resp = self.response(retry_after_s);
                RateLimitValues {
                    policy,
                    current,
                    ..limits
                }
                .insert_into(resp.headers_mut());
                return resp;
            }
        };
        let (body, content_type) = self.body();
        let mut headers = REFUSAL_HEADERS.clone();
        let values = [
            content_type,
            HeaderValue::from_static("accept"),
            number(retry_after_s),
            limits.limit,
            limits.remaining,
            limits.reset,
            policy,
            current,
        ];
        for ((_, slot), value) in headers.iter_mut().zip(values) {
            *slot = value;
        }
        let mut resp = Response::new(full(body));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        *resp.headers_mut() = headers;
        resp
    }

    /// A 429 with this body, `Retry-After: retry_after_s` and `Vary: Accept` (the body's
    /// form depends on it).
    fn response(&self, retry_after_s: u64) -> Response<Body> {
        let (body, content_type) = self.body();
        let mut resp = Response::new(full(body));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let headers = resp.headers_mut();
        headers.reserve(9);
        headers.insert(CONTENT_TYPE, content_type);
        headers.insert(VARY, HeaderValue::from_static("accept"));
        headers.insert(RETRY_AFTER, number(retry_after_s));
        resp
    }
}

/// The 429 for a denied verdict; `first_denier` names the policy in the body. `problem`:
/// answer as RFC 9457 problem details naming these violated policies (see
/// [`wants_problem_json`]).
pub fn too_many_requests(
    verdict: &Verdict,
    first_denier: &str,
    reported: Option<&TierItem<'_>>,
    items: &[TierItem<'_>],
    route: &RouteHeaders,
    problem: Option<&[&str]>,
) -> Response<Body> {
    let wait = verdict.wait_ns;
    let refused = Refused {
        policy: first_denier,
        limit: None,
        retry_after_ms: ceil_millis(wait),
        problem,
    };
    match reported {
        Some(r) => {
            refused.rate_response(ceil_secs(wait), RateLimitValues::of(r, items, Some(route)))
        }
        None => refused.response(ceil_secs(wait)),
    }
}

/// The headers of a rate refusal, in the order [`Refused::rate_response`] sets their
/// values: the names hashed and placed once, the map cloned per 429.
static REFUSAL_HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
    let names = [
        CONTENT_TYPE,
        VARY,
        RETRY_AFTER,
        X_RATELIMIT_LIMIT.clone(),
        X_RATELIMIT_REMAINING.clone(),
        X_RATELIMIT_RESET.clone(),
        RATELIMIT_POLICY.clone(),
        RATELIMIT.clone(),
    ];
    let mut headers = HeaderMap::with_capacity(names.len() + 2);
    for name in names {
        headers.insert(name, HeaderValue::from_static(""));
    }
    headers
});

/// The 429 for a request a concurrency policy refused: its slots were all taken (for
/// `max_delay`, when it could wait). The wait is unknowable, so `Retry-After` is the
/// policy's hint. `problem`: answer as RFC 9457 problem details.
pub fn concurrency_refused(
    policy: &str,
    retry_after: std::time::Duration,
    constant: &PolicyHeaders,
    problem: bool,
) -> Response<Body> {
    let hint_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
    let hint_ns = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
    let violated = [policy];
    let mut resp = Refused {
        policy,
        limit: Some("concurrency"),
        retry_after_ms: hint_ms,
        problem: problem.then_some(&violated[..]),
    }
    .response(ceil_secs(hint_ns).max(1));
    concurrency_headers(resp.headers_mut(), policy, constant, 0);
    resp
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
mod tests {
    use super::*;

    #[test]
    fn rounding_is_up_and_exact_on_boundaries() {
        assert_eq!(ceil_secs(0), 0);
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(NANOS_PER_SEC), 1);
        assert_eq!(ceil_secs(NANOS_PER_SEC + 1), 2);
        assert_eq!(ceil_millis(600_000_000), 600);
        assert_eq!(ceil_millis(600_000_001), 601);
    }

    /// Tier `user`: 5 at once, 10 a second, full again in 0.3 s, `remaining` left.
    fn user_item(remaining: u64) -> TierItem<'static> {
        TierItem {
            policy: "user",
            quota: Quota::new(10, NANOS_PER_SEC, 5).expect("valid"),
            constant: None,
            until_full_ns: 300_000_000,
            remaining,
        }
    }

    /// Tier `tenant`: 20 at once, 100 a minute, full again in 2.5 s, 19 left.
    fn tenant_item() -> TierItem<'static> {
        TierItem {
            policy: "tenant",
            quota: Quota::new(100, 60 * NANOS_PER_SEC, 20).expect("valid"),
            constant: None,
            until_full_ns: 2_500_000_000,
            remaining: 19,
        }
    }

    #[test]
    fn headers_follow_the_contract() {
        let mut h = HeaderMap::new();
        let user = user_item(2);
        rate_limit_headers(&mut h, &user, &[user], None);
        assert_eq!(h["x-ratelimit-limit"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "2");
        assert_eq!(h["x-ratelimit-reset"], "1");
        assert_eq!(h["ratelimit-policy"], "\"user\";q=5;w=1");
        assert_eq!(h["ratelimit"], "\"user\";r=2;t=1");

        // One list item per enforcing tier, in route order.
        let tenant = tenant_item();
        let mut h = HeaderMap::new();
        rate_limit_headers(&mut h, &user, &[tenant, user], None);
        assert_eq!(
            h["ratelimit-policy"],
            "\"tenant\";q=20;w=12, \"user\";q=5;w=1"
        );
        assert_eq!(h["ratelimit"], "\"tenant\";r=19;t=3, \"user\";r=2;t=1");
        assert_eq!(
            h["x-ratelimit-remaining"], "2",
            "X-RateLimit-* stay one tier's"
        );
    }

    /// A 429's headers set in place on the cloned [`REFUSAL_HEADERS`] are the ones the
    /// inserting path writes, value for value, with nothing left over.
    #[test]
    fn a_refusal_built_in_place_has_the_headers_an_inserted_one_has() {
        let (user, tenant) = (user_item(0), tenant_item());
        let violated = ["user"];
        for problem in [None, Some(&violated[..])] {
            let refused = Refused {
                policy: "user",
                limit: None,
                retry_after_ms: 1234,
                problem,
            };
            let in_place =
                refused.rate_response(2, RateLimitValues::of(&user, &[tenant, user], None));
            let mut inserted = refused.response(2);
            rate_limit_headers(inserted.headers_mut(), &user, &[tenant, user], None);
            assert_eq!(in_place.status(), StatusCode::TOO_MANY_REQUESTS);
            let list = |h: &HeaderMap| {
                let mut l: Vec<(String, String)> = h
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().expect("text").to_owned()))
                    .collect();
                l.sort();
                l
            };
            assert_eq!(list(in_place.headers()), list(inserted.headers()));
            assert_eq!(in_place.headers().len(), 8);
            assert!(in_place.headers().iter().all(|(_, v)| !v.is_empty()));
        }
    }

    fn accept(values: &[&'static str]) -> bool {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(ACCEPT, HeaderValue::from_static(v));
        }
        wants_problem_json(&h)
    }

    #[test]
    fn qvalues_are_read_in_thousandths() {
        for (text, q) in [
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("0", Some(0)),
            ("0.000", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.001", Some(1)),
            ("1.001", None),
            ("2", None),
            ("0.0001", None),
            (".5", None),
            ("", None),
            ("0.x", None),
            ("-1", None),
        ] {
            assert_eq!(qvalue(text.as_bytes()), q, "{text:?}");
        }
    }

    #[test]
    fn problem_json_only_when_named_with_a_weight_above_zero() {
        for (values, wanted) in [
            (&[][..], false),
            (&["*/*"], false),
            (&["application/*"], false),
            (&["application/json"], false),
            (&["application/problem+jsonx"], false),
            (&["application/problem+json;q=0"], false),
            (&["application/problem+json; q=0.0"], false),
            (&["application/problem+json;q=oops"], false),
            (&["application/problem+json"], true),
            (&["  Application/Problem+JSON  "], true),
            (&["application/problem+json;charset=utf-8;Q=0.2"], true),
            (&["text/html", "application/problem+json;q=0.1"], true),
            // application/json preferred by weight: plain JSON.
            (&["application/json, application/problem+json;q=0.9"], false),
            (&["application/json;q=0.9, application/problem+json"], true),
            (&["application/json, application/problem+json"], true),
            // The highest weight a type is named with counts.
            (
                &["application/problem+json;q=0", "application/problem+json"],
                true,
            ),
        ] {
            assert_eq!(accept(values), wanted, "{values:?}");
        }
    }

    #[test]
    fn the_two_bodies_carry_the_same_fields() {
        let refused = |problem| Refused {
            policy: "user",
            limit: Some("concurrency"),
            retry_after_ms: 1500,
            problem,
        };
        let (plain, content_type) = refused(None).body();
        let plain = String::from_utf8(plain).expect("UTF-8");
        assert_eq!(content_type, "application/json");
        assert_eq!(
            plain,
            r#"{"error":"rate_limited","policy":"user","limit":"concurrency","retry_after_ms":1500}"#
        );
        let violated = ["user", "tenant"];
        let (problem, content_type) = refused(Some(&violated)).body();
        let problem = String::from_utf8(problem).expect("UTF-8");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(
            problem,
            format!(
                r#"{{"type":"{QUOTA_EXCEEDED_TYPE}","title":"{QUOTA_EXCEEDED_TITLE}","status":429,"violated-policies":["user","tenant"],"error":"rate_limited","policy":"user","limit":"concurrency","retry_after_ms":1500}}"#
            )
        );
        let parsed: serde_json::Value = serde_json::from_str(&problem).expect("JSON");
        assert_eq!(parsed["violated-policies"][1], "tenant");
    }

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
