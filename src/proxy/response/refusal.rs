//! The 429 the gateway answers for a refused request, built one way whatever refused it:
//! the refusal's header names hashed and placed once, the map cloned per 429 with the
//! values set in place, and the body of `refusal_body`.

use std::sync::LazyLock;

use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER, VARY};
use http::{HeaderMap, Response, StatusCode};

use super::headers::{
    concurrency_headers, number, PolicyAnswer, PolicyHeaders, RouteHeaders, TierItem, RATELIMIT,
    RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use super::rate_values::RateLimitValues;
use super::refusal_body::Refused;
use crate::json::rpc::RequestId;
use crate::reply::{ceil_millis, ceil_secs, full, Body};

impl Refused<'_> {
    /// The 429: this body, `Retry-After: retry_after_s`, `Vary: Accept` (the body's form
    /// depends on it) and, for a rate refusal, the rate-limit headers `limits` has.
    fn response(&self, retry_after_s: u64, limits: Option<RateLimitValues>) -> Response<Body> {
        let (body, content_type) = self.body();
        let base = [
            content_type,
            HeaderValue::from_static("accept"),
            number(retry_after_s),
        ];
        let headers = match limits {
            Some(limits) => {
                let mut headers = RATE_REFUSAL_HEADERS.clone();
                let values = base.into_iter().chain([
                    limits.limit,
                    limits.remaining,
                    limits.reset,
                    limits.policy,
                    limits.current,
                ]);
                for ((_, slot), value) in headers.iter_mut().zip(values) {
                    *slot = value;
                }
                headers
            }
            None => {
                let mut headers = REFUSAL_HEADERS.clone();
                for ((_, slot), value) in headers.iter_mut().zip(base) {
                    *slot = value;
                }
                headers
            }
        };
        let mut resp = Response::new(full(body));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        *resp.headers_mut() = headers;
        resp
    }
}

/// The names every 429 carries, in the order [`Refused::response`] sets their values.
fn refusal_names() -> [http::HeaderName; 3] {
    [CONTENT_TYPE, VARY, RETRY_AFTER]
}

/// A header map with `names`, values empty, and room for `spare` more.
fn placed(names: impl IntoIterator<Item = http::HeaderName>, spare: usize) -> HeaderMap {
    let names: Vec<_> = names.into_iter().collect();
    let mut headers = HeaderMap::with_capacity(names.len() + spare);
    for name in names {
        headers.insert(name, HeaderValue::from_static(""));
    }
    headers
}

/// Every 429's own headers (a concurrency refusal appends its items to these).
static REFUSAL_HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| placed(refusal_names(), 4));

/// A rate refusal's headers: every 429's and the five rate-limit headers.
static RATE_REFUSAL_HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| {
    let rate = [
        X_RATELIMIT_LIMIT.clone(),
        X_RATELIMIT_REMAINING.clone(),
        X_RATELIMIT_RESET.clone(),
        RATELIMIT_POLICY.clone(),
        RATELIMIT.clone(),
    ];
    placed(refusal_names().into_iter().chain(rate), 2)
});

/// The 429 for a rate refusal that must wait `wait_ns`; `first_denier`: the policy the
/// body names and what an answer says of it. `problem`: answer as RFC 9457 problem
/// details naming these violated policies (see [`super::wants_problem_json`]); `rpc`:
/// answer the JSON-RPC request of this id with a JSON-RPC error.
pub fn too_many_requests(
    wait_ns: u64,
    first_denier: Option<(&str, &PolicyAnswer)>,
    reported: Option<&TierItem<'_>>,
    items: &[TierItem<'_>],
    route: &RouteHeaders,
    problem: Option<&[&str]>,
    rpc: Option<&RequestId>,
) -> Response<Body> {
    let answer = first_denier.map(|(_, answer)| answer);
    let refused = Refused {
        policy: first_denier.map_or("", |(name, _)| name),
        start: answer.map_or(&[][..], |p| &p.refusal_body[..]),
        limit: answer.and_then(|p| p.limit_kind),
        retry_after_ms: ceil_millis(wait_ns),
        problem,
        rpc,
    };
    let limits = reported.map(|r| RateLimitValues::of(r, items, Some(route)));
    refused.response(ceil_secs(wait_ns), limits)
}

/// The 429 for a request a concurrency policy refused: its slots were all taken (for
/// `max_delay`, when it could wait). The wait is unknowable, so `Retry-After` is the
/// policy's hint. `start`: the plain body's start (`refusal_body::body_start`). `problem`: answer as
/// RFC 9457 problem details; `rpc`: as a JSON-RPC error to the request of this id.
pub fn concurrency_refused(
    policy: &str,
    start: &[u8],
    retry_after: std::time::Duration,
    constant: &PolicyHeaders,
    (problem, rpc): (bool, Option<&RequestId>),
) -> Response<Body> {
    let hint_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
    let hint_ns = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
    let violated = [policy];
    let mut resp = Refused {
        policy,
        start,
        limit: Some("concurrency"),
        retry_after_ms: hint_ms,
        problem: problem.then_some(&violated[..]),
        rpc,
    }
    .response(ceil_secs(hint_ns).max(1), None);
    concurrency_headers(resp.headers_mut(), policy, constant, 0);
    resp
}

/// The 429 for a request whose route costs more than the burst a runtime override gives
/// its key of `policy`: no wait admits it, so it tells none (no `Retry-After`, as the rate
/// limit service tells none for a call over a burst); the body says why, in the form the
/// request asked for: RFC 9457 problem details (`problem`), a JSON-RPC error to the
/// request of this id (`rpc`), else the gateway's JSON error.
pub fn cost_above_burst(
    policy: &str,
    (problem, rpc): (bool, Option<&RequestId>),
) -> Response<Body> {
    let why = super::Answer::CostAboveBurst;
    let detail = "the route's cost is above the burst this key's override allows: no request of this route is admitted for the key until the override or the cost changes";
    let plain = serde_json::json!({"error": why.decision(), "policy": policy, "detail": detail});
    let (body, content_type) = match (rpc, problem) {
        (Some(id), _) => {
            let error = serde_json::json!({
                "jsonrpc": "2.0",
                "id": id.value(),
                "error": {
                    "code": super::refusal_body::JSON_RPC_RATE_LIMITED,
                    "message": format!("rate limited by {policy}"),
                    "data": plain,
                },
            });
            (error, "application/json")
        }
        (None, true) => {
            let mut body = serde_json::json!({
                "type": super::refusal_body::QUOTA_EXCEEDED_TYPE,
                "title": super::refusal_body::QUOTA_EXCEEDED_TITLE,
                "status": 429,
                "violated-policies": [policy],
            });
            if let (Some(all), Some(own)) = (body.as_object_mut(), plain.as_object()) {
                all.extend(own.clone());
            }
            (body, "application/problem+json")
        }
        (None, false) => (plain, "application/json"),
    };
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(VARY, HeaderValue::from_static("accept"));
    why.on(resp)
}

#[cfg(test)]
mod tests {
    use super::super::headers::tests::{tenant_item, user_item};
    use super::super::refusal_body::body_start;
    use super::*;

    /// A rate 429's headers, value by value, with nothing left over.
    #[test]
    fn a_rate_refusal_carries_every_header_once() {
        let (user, tenant) = (user_item(0), tenant_item());
        let violated = ["user"];
        for (problem, content_type) in [
            (None, "application/json"),
            (Some(&violated[..]), "application/problem+json"),
        ] {
            let start = body_start("user", None);
            let refused = Refused {
                policy: "user",
                start: &start,
                limit: None,
                retry_after_ms: 1234,
                problem,
                rpc: None,
            };
            let limits = RateLimitValues::of(&user, &[tenant, user], None);
            let resp = refused.response(2, Some(limits));
            assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
            let mut list: Vec<(String, String)> = resp
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().expect("text").to_owned()))
                .collect();
            list.sort();
            let expected = [
                ("content-type", content_type),
                ("ratelimit", "\"tenant\";r=19;t=3, \"user\";r=0;t=1"),
                ("ratelimit-policy", "\"tenant\";q=20;w=12, \"user\";q=5;w=1"),
                ("retry-after", "2"),
                ("vary", "accept"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1"),
            ];
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            assert_eq!(list, expected);
        }
    }

    #[test]
    fn a_concurrency_refusal_carries_its_item_and_no_rate_headers() {
        let constant = PolicyHeaders::concurrency("inflight", 3);
        let start = body_start("inflight", Some("concurrency"));
        let resp = concurrency_refused(
            "inflight",
            &start,
            std::time::Duration::from_millis(1500),
            &constant,
            (false, None),
        );
        let h = resp.headers();
        assert_eq!(h["retry-after"], "2");
        assert_eq!(
            h["ratelimit-policy"],
            "\"inflight\";q=3;qu=\"concurrent-requests\""
        );
        assert_eq!(h["ratelimit"], "\"inflight\";r=0");
        assert!(h.get("x-ratelimit-limit").is_none());
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn a_cost_above_the_burst_is_told_in_the_form_asked_and_with_no_wait() {
        let body = |resp: Response<Body>| {
            let (parts, body) = resp.into_parts();
            let bytes =
                futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))
                    .expect("a full body")
                    .expect("its bytes")
                    .to_bytes();
            let json: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
            (parts, json)
        };
        let (parts, plain) = body(cost_above_burst("tenant", (false, None)));
        assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            parts.headers.get(RETRY_AFTER).is_none(),
            "no wait admits it"
        );
        assert_eq!(parts.headers[VARY], "accept");
        assert_eq!(plain["error"], "cost_above_burst");
        assert_eq!(plain["policy"], "tenant");
        let (parts, problem) = body(cost_above_burst("tenant", (true, None)));
        assert_eq!(parts.headers[CONTENT_TYPE], "application/problem+json");
        assert_eq!(problem["violated-policies"], serde_json::json!(["tenant"]));
        assert_eq!(problem["error"], "cost_above_burst");
        let id = crate::json::rpc::request_id(br#"{"jsonrpc":"2.0","id":7,"method":"m"}"#);
        let (_, rpc) = body(cost_above_burst("tenant", (true, id.as_ref())));
        assert_eq!(rpc["id"], 7);
        assert_eq!(
            rpc["error"]["code"],
            super::super::refusal_body::JSON_RPC_RATE_LIMITED
        );
        assert_eq!(rpc["error"]["data"], plain);
    }
}
