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
