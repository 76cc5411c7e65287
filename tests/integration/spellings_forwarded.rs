//! The X-Forwarded-* headers the gateway sets, spelled by a client with `_` for a `-`
//! (`X_Forwarded_For`): Django under ASGI and WSGI servers read such a name as the header
//! and join its value after the gateway's, so the upstream would take the client's word
//! for its address or scheme. None of those spellings reaches the upstream, over a raw
//! HTTP/1.1 socket and HTTP/2; the gateway's own headers do.

use super::spellings::{h2_get, start};
use crate::support::*;

const SPELLINGS: [&str; 4] = [
    "x_forwarded_for",
    "x-forwarded_for",
    "x_forwarded_proto",
    "x_forwarded-host",
];

fn assert_none_spelled(seen: &http::HeaderMap, how: &str) {
    for name in SPELLINGS {
        assert!(
            seen.get(name).is_none(),
            "{how}: {name} reached the upstream: {seen:?}"
        );
    }
    let chain = seen.get("x-forwarded-for").and_then(|v| v.to_str().ok());
    assert_eq!(chain, Some("1.1.1.1, 127.0.0.1"), "{how}");
    assert_eq!(seen["x-forwarded-proto"], "http", "{how}");
}

#[tokio::test]
async fn underscore_spellings_of_the_forwarded_headers_never_reach_the_upstream() {
    let (up, gw) = start().await;
    let (answer, _) = raw(
        gw.addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.1.1.1\r\nX_Forwarded_For: 6.6.6.6\r\nX-Forwarded_For: 6.6.6.7\r\nX_Forwarded_Proto: https\r\nX_Forwarded-Host: evil.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert_none_spelled(&up.last_headers(), "HTTP/1.1");
    let headers: Vec<(&str, &[u8])> = [("x-forwarded-for", &b"1.1.1.1"[..])]
        .into_iter()
        .chain(SPELLINGS.iter().map(|n| (*n, &b"6.6.6.6"[..])))
        .collect();
    let (status, body) = h2_get(gw.addr, "x", "/", &headers).await;
    assert_eq!(status, 200, "{body}");
    assert_none_spelled(&up.last_headers(), "HTTP/2");
}

/// Names for another host or path than the routed one: RFC 7239's `Forwarded` (Rack 3
/// and Spring's forwarded filter read its `host=` before X-Forwarded-Host) and the
/// rewrite headers older Symfony, Laminas and IIS apps serve instead of the path. A
/// client sending them to the unlimited catch-all would have the upstream serve
/// `api.example.com` or `/v1/search`, both limited: none reaches the upstream, over a
/// raw HTTP/1.1 socket and HTTP/2.
#[tokio::test]
async fn another_host_or_path_named_by_the_client_never_reaches_the_upstream() {
    const NAMED: [(&str, &[u8]); 3] = [
        ("forwarded", b"for=6.6.6.6;host=api.example.com;proto=https"),
        ("x-original-url", b"/v1/search"),
        ("x-rewrite-url", b"/v1/search"),
    ];
    let assert_none = |seen: &http::HeaderMap, how: &str| {
        for (name, _) in NAMED {
            assert!(
                seen.get(name).is_none(),
                "{how}: {name} reached it: {seen:?}"
            );
        }
        assert_eq!(seen["x-forwarded-host"], "www.example.com", "{how}");
    };
    let (up, gw) = start().await;
    let (answer, _) = raw(
        gw.addr,
        b"GET /public HTTP/1.1\r\nHost: www.example.com\r\nForwarded: for=6.6.6.6;host=api.example.com;proto=https\r\nX-Original-URL: /v1/search\r\nX-Rewrite-URL: /v1/search\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert_none(&up.last_headers(), "HTTP/1.1");
    let (status, body) = h2_get(gw.addr, "www.example.com", "/public", &NAMED).await;
    assert_eq!(status, 200, "{body}");
    assert_none(&up.last_headers(), "HTTP/2");
}

/// A request that names no host: HTTP/1.1 is answered 400 `missing_host` (RFC 9112
/// §3.2); HTTP/1.0, served on the routes that name no host, never passes the client's own
/// X-Forwarded-Host on (an upstream trusting it would serve `api.example.com`, limited).
#[tokio::test]
async fn a_request_without_a_host_cannot_name_one_upstream() {
    let (up, gw) = start().await;
    let (answer, _) = raw(
        gw.addr,
        b"GET /v1/echo HTTP/1.1\r\nX-Forwarded-Host: api.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(answer.contains("\"missing_host\""), "{answer}");
    assert_eq!(up.requests(), 0, "nothing forwarded");
    let (answer, _) = raw(
        gw.addr,
        b"GET /v1/echo HTTP/1.0\r\nX-Forwarded-Host: api.example.com\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let seen = up.last_headers();
    assert!(seen.get("x-forwarded-host").is_none(), "{seen:?}");
}
