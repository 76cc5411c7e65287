//! A 429 as RFC 9457 problem details (`application/problem+json`) for a client whose
//! `Accept` names that type, and today's JSON body for every other client, over HTTP/1.1
//! and HTTP/2.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use serde_json::{json, Value};
use tollgate::proxy::response::wants_problem_json;

use crate::support::*;

const PROBLEM_TYPE: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const PROBLEM: &str = "application/problem+json";

/// Two enforcing tiers that both refuse a second request (one per hour, burst 1), one
/// that does not, and a shadow tier that would: the violated policies are exactly the two.
fn two_refusing_tiers() -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .policy("endpoint", "route", 1000, "1s", 1000)
        .policy("user", "header:x-user", 1, "1h", 1)
        .policy_raw(
            "trial",
            r#"
            key = "header:x-user"
            limit = 1
            period = "1h"
            burst = 1
            mode = "shadow"
            "#,
        )
        .route("api", "/", "api", &["tenant", "endpoint", "trial", "user"])
        .build()
}

/// The problem members a problem body adds to the plain one, and the rest of it.
fn split_problem(mut body: Value) -> (Value, Value) {
    let object = body.as_object_mut().expect("a JSON object");
    let mut problem = serde_json::Map::new();
    for member in ["type", "title", "status", "violated-policies"] {
        if let Some(v) = object.remove(member) {
            problem.insert(member.to_owned(), v);
        }
    }
    (Value::Object(problem), body)
}

/// The keys of a client that both refusing tiers of [`two_refusing_tiers`] count.
const KEYS: [(&str, &str); 2] = [("x-tenant", "acme"), ("x-user", "ann")];

/// A request to `url` with [`KEYS`] and `accept`, which must be refused.
async fn refuse(protocol: &str, client: &HttpClient, url: &str, accept: Option<&str>) -> Got {
    let mut headers = KEYS.to_vec();
    headers.extend(accept.map(|a| ("accept", a)));
    let got = send(client, "GET", url, &headers, b"").await;
    assert_eq!(got.status, 429, "{protocol} Accept {accept:?}");
    got
}

/// Clients that do not name the type get today's body, byte for byte.
async fn check_today_for_the_rest(protocol: &str, client: &HttpClient, url: &str) {
    let today = r#"{"error":"rate_limited","policy":"tenant","retry_after_ms":3600000}"#;
    for accept in [
        None,
        Some("*/*"),
        Some("application/*"),
        Some("application/json"),
        Some("application/problem+json;q=0"),
        Some("application/json, application/problem+json;q=0.5"),
        Some("text/html, application/problem+json;q=0.000"),
    ] {
        let got = refuse(protocol, client, url, accept).await;
        assert_eq!(
            got.header("content-type"),
            Some("application/json"),
            "{protocol} Accept {accept:?}"
        );
        assert_eq!(got.text(), today, "{protocol} Accept {accept:?}");
    }
}

/// Each of `headers` is on the problem 429 `got`, with the value it has on the `plain` one
/// (`as_on` ends the message of a difference).
fn check_headers_as_on_plain(
    protocol: &str,
    got: &Got,
    plain: &Got,
    headers: &[&str],
    as_on: &str,
) {
    for header in headers {
        assert!(got.header(header).is_some(), "{protocol}: {header}");
        assert_eq!(
            got.header(header),
            plain.header(header),
            "{protocol}: {header}{as_on}"
        );
    }
}

/// The refused requests never reached the upstream: only the one admitted did.
fn check_one_request_upstream(protocol: &str, up: &Upstream) {
    assert_eq!(
        up.requests(),
        1,
        "{protocol}: no refused request went upstream"
    );
}

#[tokio::test]
async fn a_rate_429_is_problem_details_when_asked_by_name() {
    for (protocol, client) in [("HTTP/1.1", http1()), ("HTTP/2", http2())] {
        let up = Upstream::start().await;
        // A fake clock that does not move: every refusal below has the same exact wait.
        let gw = TestGateway::start(&two_refusing_tiers(), &up.url()).await;
        let first = send(&client, "GET", &gw.url("/a"), &KEYS, b"").await;
        assert_eq!(first.status, 200, "{protocol}");
        let url = gw.url("/a");

        check_today_for_the_rest(protocol, &client, &url).await;
        let plain = refuse(protocol, &client, &url, None).await;

        for accept in [
            "application/problem+json",
            "Application/Problem+JSON",
            "text/html;q=0.9, application/problem+json; charset=utf-8; q=0.1",
            "application/json, application/problem+json",
            "*/*;q=0.8, application/problem+json",
        ] {
            let got = refuse(protocol, &client, &url, Some(accept)).await;
            assert_eq!(
                got.header("content-type"),
                Some(PROBLEM),
                "{protocol} Accept {accept:?}"
            );
            let (problem, rest) = split_problem(got.json());
            assert_eq!(
                problem,
                json!({
                    "type": PROBLEM_TYPE,
                    "title": "Request cannot be satisfied as assigned quota has been exceeded",
                    "status": 429,
                    "violated-policies": ["tenant", "user"],
                }),
                "{protocol} Accept {accept:?}: every enforcing tier that refused, in route order, never a shadow one"
            );
            assert_eq!(
                rest,
                plain.json(),
                "{protocol} Accept {accept:?}: the contract's fields, all of them, unchanged"
            );
            let headers = [
                "retry-after",
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
                "ratelimit-policy",
                "ratelimit",
            ];
            check_headers_as_on_plain(protocol, &got, &plain, &headers, " as on the plain 429");
            assert_eq!(got.header("vary"), Some("accept"));
        }
        assert_eq!(plain.header("vary"), Some("accept"));
        check_one_request_upstream(protocol, &up);
    }
}

/// One request at a time per `x-key`; a refused one is told to retry after 2 s.
fn one_slot() -> String {
    Fixture::new()
        .policy_raw(
            "inflight",
            r#"
            key = "header:x-key"
            max_in_flight = 1
            retry_after = "2s"
            "#,
        )
        .route("api", "/", "api", &["inflight"])
        .build()
}

#[tokio::test]
async fn a_concurrency_429_is_problem_details_when_asked_by_name() {
    for (protocol, client) in [("HTTP/1.1", http1()), ("HTTP/2", http2())] {
        let up = Upstream::start().await;
        let gw = TestGateway::start(&one_slot(), &up.url()).await;
        // `/slow` holds the only slot: the upstream answers it after 30 s.
        let holder = {
            let (client, url) = (client.clone(), gw.url("/slow"));
            tokio::spawn(async move { send(&client, "GET", &url, &[("x-key", "k")], b"").await })
        };
        assert!(
            eventually(Duration::from_secs(20), || up.requests() == 1).await,
            "{protocol}: the slot is taken"
        );

        let plain = send(
            &client,
            "GET",
            &gw.url("/b"),
            &[("x-key", "k"), ("accept", "*/*")],
            b"",
        )
        .await;
        assert_eq!(plain.status, 429, "{protocol}");
        assert_eq!(plain.header("content-type"), Some("application/json"));
        assert_eq!(
            plain.text(),
            r#"{"error":"rate_limited","policy":"inflight","limit":"concurrency","retry_after_ms":2000}"#,
            "{protocol}: today's body"
        );

        let got = send(
            &client,
            "GET",
            &gw.url("/b"),
            &[("x-key", "k"), ("accept", PROBLEM)],
            b"",
        )
        .await;
        assert_eq!(got.status, 429, "{protocol}");
        assert_eq!(got.header("content-type"), Some(PROBLEM), "{protocol}");
        assert_eq!(
            got.json(),
            json!({
                "type": PROBLEM_TYPE,
                "title": "Request cannot be satisfied as assigned quota has been exceeded",
                "status": 429,
                "violated-policies": ["inflight"],
                "error": "rate_limited",
                "policy": "inflight",
                "limit": "concurrency",
                "retry_after_ms": 2000,
            }),
            "{protocol}"
        );
        let headers = ["retry-after", "ratelimit-policy", "ratelimit"];
        check_headers_as_on_plain(protocol, &got, &plain, &headers, "");
        check_one_request_upstream(protocol, &up);
        holder.abort();
    }
}

#[test]
fn the_accept_check_allocates_nothing() {
    let values = [
        "application/problem+json",
        "text/html, application/xhtml+xml, application/xml;q=0.9, */*;q=0.8",
        "application/json;q=1.000, application/problem+json;q=0.5",
        "APPLICATION/PROBLEM+JSON; q=0.001",
        "application/problem+json;q=bogus",
    ];
    let mut headers = HeaderMap::new();
    for v in values {
        headers.append("accept", HeaderValue::from_static(v));
    }
    let (wanted, n) = allocations(|| wants_problem_json(&headers));
    assert!(wanted, "named at q=1, as application/json is");
    assert_eq!(n, 0, "allocations in the Accept check");
    for v in values {
        let one = HeaderMap::from_iter([(http::header::ACCEPT, HeaderValue::from_static(v))]);
        let (_, n) = allocations(|| wants_problem_json(&one));
        assert_eq!(n, 0, "allocations for Accept {v:?}");
    }
}
