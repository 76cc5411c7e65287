//! No spelling of a key source, a header or an edge of HTTP dodges its limits: padded and
//! oddly spaced values are one key, a source given twice charges every value, a query
//! name as Rack, qs or PHP reads it and a percent-encoded cookie are the key,
//! X-Forwarded-For lines are one list, HEAD is GET, only the asked-for upgrade is tunnelled,
//! an HTTP/1.0 upstream does not downgrade the client, stalled prefaces and slowloris
//! connections are cut, and a route path written in another spelling is a config error.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::spellings::{config, h2_get, spend, start, status};
use crate::support::*;

#[tokio::test]
async fn header_values_padded_with_whitespace_are_one_key_over_http2() {
    let (_up, gw) = start().await;
    spend(&gw, "/k/header", &[("x-api-key", "k")]).await;
    for padded in [&b" k"[..], b"k\t", b"\t k  "] {
        let (s, _) = h2_get(gw.addr, "x", "/k/header", &[("x-api-key", padded)]).await;
        assert_eq!(s, 429, "{padded:?}");
    }
    for padded in [" k", "k\t"] {
        let h = [("x-api-key", padded)];
        assert_eq!(status(&http2(), &gw.url("/k/header"), &h).await, 429);
    }
}

pub(super) fn bearer(sub: &str) -> String {
    use base64::Engine;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{{\"sub\":\"{sub}\"}}").as_bytes());
    format!("h.{payload}.sig")
}

#[tokio::test]
async fn bearer_tokens_with_odd_spacing_or_in_the_query_are_still_keyed() {
    let (_up, gw) = start().await;
    let token = bearer("alice");
    spend(
        &gw,
        "/k/jwt",
        &[("authorization", &format!("Bearer {token}"))],
    )
    .await;
    for client in [http1(), http2()] {
        for auth in [
            format!("Bearer\t{token}"),
            format!("bearer      {token}"),
            format!("Bearer \t {token} "),
        ] {
            let h = [("authorization", auth.as_str())];
            assert_eq!(
                status(&client, &gw.url("/k/jwt"), &h).await,
                429,
                "{auth:?}"
            );
        }
        // RFC 6750's query parameter, which passport-http-bearer reads: the same subject.
        let url = gw.url(&format!("/k/jwt?access_token={token}"));
        assert_eq!(status(&client, &url, &[]).await, 429, "?access_token=");
    }
}

/// Each of `cases` (a path and its headers) is refused, over HTTP/1.1 and HTTP/2.
pub(super) async fn refused_everywhere(gw: &TestGateway, cases: &[(&str, Vec<(&str, &str)>)]) {
    for client in [http1(), http2()] {
        for (path, headers) in cases {
            assert_eq!(
                status(&client, &gw.url(path), headers).await,
                429,
                "{path} {headers:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_key_source_given_twice_charges_every_value() {
    let (_up, gw) = start().await;
    spend(&gw, "/k/query?key=a", &[]).await;
    spend(&gw, "/k/header", &[("x-api-key", "a")]).await;
    spend(&gw, "/k/cookie", &[("cookie", "sid=a")]).await;
    refused_everywhere(
        &gw,
        &[
            ("/k/query?key=b&key=a", vec![]),
            ("/k/query?key=a&key=b", vec![]),
            ("/k/query?k%65y=a&key=", vec![]),
            ("/k/header", vec![("x-api-key", ""), ("x-api-key", "a")]),
            ("/k/header", vec![("x-api-key", "b"), ("x-api-key", "a")]),
            ("/k/cookie", vec![("cookie", "sid=b; sid=a")]),
            (
                "/k/cookie",
                vec![("cookie", "sid=b"), ("cookie", "sid= \"a\"")],
            ),
        ],
    )
    .await;
    // Denied requests left no trace: `b` was never charged.
    let got = get(&gw.url("/k/query?key=b"), &[]).await;
    assert_eq!(
        (got.status.as_u16(), got.num("x-ratelimit-remaining")),
        (200, 1)
    );
    // Both values of an admitted request are charged: `c` and `d` each spend one.
    assert_eq!(
        status(&http1(), &gw.url("/k/query?key=c&key=d"), &[]).await,
        200
    );
    let got = get(&gw.url("/k/query?key=d"), &[]).await;
    assert_eq!(
        (got.status.as_u16(), got.num("x-ratelimit-remaining")),
        (200, 0)
    );
}

#[tokio::test]
async fn query_names_cookie_values_and_header_names_as_frameworks_read_them_are_the_key() {
    let (_up, gw) = start().await;
    spend(&gw, "/k/query?key=a", &[]).await;
    spend(&gw, "/k/cookie", &[("cookie", "sid=a b")]).await;
    spend(&gw, "/k/header", &[("x-api-key", "a")]).await;
    refused_everywhere(
        &gw,
        &[
            // Rails, Express (qs) and PHP read each of these as `key=a`.
            ("/k/query?key[]=a", vec![]),
            ("/k/query?key%5B0%5D=a", vec![]),
            ("/k/query?[key]=a", vec![]),
            ("/k/query?x=1;key=a", vec![]),
            // Puma and Django under ASGI read `x_api_key` as `x-api-key`.
            ("/k/header", vec![("x_api_key", "a")]),
            // Express, Rack and PHP decode a cookie's value.
            ("/k/cookie", vec![("cookie", "sid=%61%20b")]),
            ("/k/cookie", vec![("cookie", "sid=a+b")]),
        ],
    )
    .await;
}

#[tokio::test]
async fn more_than_four_distinct_values_are_refused() {
    let (up, gw) = start().await;
    let got = get(&gw.url("/k/query?key=1&key=2&key=3&key=4&key=5"), &[]).await;
    assert_eq!(got.status, 400);
    assert_eq!(got.json()["error"], "too_many_key_values");
    assert_eq!(got.json()["policy"], "q");
    // A composite key: 2 × 3 values would be 6 keys.
    let h = [
        ("x-a", "1"),
        ("x-a", "2"),
        ("x-b", "1"),
        ("x-b", "2"),
        ("x-b", "3"),
    ];
    assert_eq!(status(&http2(), &gw.url("/k/pair"), &h).await, 400);
    // 2 × 2 is within bounds.
    assert_eq!(status(&http1(), &gw.url("/k/pair"), &h[..4]).await, 200);
    assert_eq!(up.requests(), 1);
}

#[tokio::test]
async fn forwarded_for_lines_are_one_list() {
    let (up, gw) = start().await;
    spend(&gw, "/k/ip", &[("x-forwarded-for", "198.51.100.7")]).await;
    // The right-most untrusted entry is the client, across lines and past junk bytes.
    let (answer, _) = raw(
        gw.addr,
        b"GET /k/ip HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 1.1.1.1, \xff\xfe, 198.51.100.7\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 429, "{answer}");
    let h = [
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-for", "198.51.100.7"),
    ];
    assert_eq!(status(&http2(), &gw.url("/k/ip"), &h).await, 429);
    // A `Connection` option naming it (passed on by a front proxy that does not act on
    // it) does not erase it: the client stays the client, not the trusted proxy.
    let (answer, _) = raw(
        gw.addr,
        b"GET /k/ip HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.7\r\nConnection: x-forwarded-for, close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 429, "{answer}");
    // Forwarded: every line, in order, then the peer.
    assert_eq!(status(&http1(), &gw.url("/open"), &h).await, 200);
    assert_eq!(
        up.last_headers()["x-forwarded-for"],
        "6.6.6.6, 198.51.100.7, 127.0.0.1"
    );
}

/// A header some policy keys by stays when a `Connection` option names it, as
/// `X-Forwarded-For` does: a trusted front proxy that sets it (an authenticated user's
/// id) and passes the client's `Connection` on would otherwise see it stripped here, and
/// a `missing = "skip"` tier skipped. Gateway and upstream read the same request: the
/// kept header goes on, and any other header named there is gone for both. (HTTP/2 has
/// no `Connection`: RFC 9113 §8.2.2 makes a request carrying one malformed.)
#[tokio::test]
async fn a_key_header_named_in_connection_is_kept_for_the_gateway_and_the_upstream_alike() {
    let (up, gw) = start().await;
    let bearer = format!("Bearer {}", bearer("alice"));
    spend(&gw, "/k/header", &[("x-api-key", "k1")]).await;
    spend(&gw, "/k/jwt", &[("authorization", &bearer)]).await;
    spend(&gw, "/k/cookie", &[("cookie", "sid=s1")]).await;
    for (path, option, line) in [
        ("/k/header", "x-api-key", "X-API-Key: k1".to_owned()),
        (
            "/k/jwt",
            "Authorization",
            format!("Authorization: {bearer}"),
        ),
        ("/k/cookie", "cookie", "Cookie: sid=s1".to_owned()),
    ] {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\n{line}\r\nConnection: {option}, close\r\n\r\n"
        );
        let (answer, _) = raw(gw.addr, request.as_bytes()).await;
        assert_eq!(raw_status(&answer), 429, "{path}: {answer}");
    }
    let (answer, _) = raw(
        gw.addr,
        b"GET /open HTTP/1.1\r\nHost: x\r\nX-API-Key: k2\r\nX-Other: 1\r\nConnection: x-api-key, x-other, close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let forwarded = up.last_headers();
    assert_eq!(forwarded["x-api-key"], "k2");
    assert!(forwarded.get("x-other").is_none(), "{forwarded:?}");
}

#[tokio::test]
async fn head_matches_a_get_only_route() {
    let (up, gw) = start().await;
    let got = send(&http1(), "HEAD", &gw.url("/get-only"), &[], b"").await;
    assert_eq!(got.status, 200);
    assert_eq!(up.requests(), 1);
    let got = send(&http1(), "POST", &gw.url("/get-only/x"), &[], b"").await;
    assert_eq!(got.status, 200, "POST falls through to the open route");
}

/// Upstream that answers every request with `101` naming h2c, then keeps talking HTTP.
const SWITCH_TO_H2C: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

#[tokio::test]
async fn only_the_upgrade_the_client_asked_for_is_tunnelled() {
    let up = RawUpstream::start(SWITCH_TO_H2C, false).await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;
    for head in [
        &b"GET /open HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
        b"GET /open HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        b"GET /open HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
        b"GET /open HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade: h2c\r\n\r\n",
    ] {
        let (answer, _) = raw(gw.addr, head).await;
        assert_eq!(raw_status(&answer), 502, "{answer}");
        assert!(answer.contains("upstream_bad_upgrade"), "{answer}");
    }
    let heads = up.heads();
    assert_eq!(heads.len(), 4, "the upstream saw each attempt");
    for head in heads.iter().map(|h| h.to_ascii_lowercase()) {
        assert!(!head.contains("upgrade: h2c"), "{head}");
        assert!(!head.contains("http2-settings"), "{head}");
    }
}

#[tokio::test]
async fn an_http10_upstream_does_not_downgrade_the_client() {
    let up = RawUpstream::start(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true).await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;
    let mut s = TcpStream::connect(gw.addr).await.expect("connect");
    for round in 0..2 {
        s.write_all(b"GET /open HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write on the same connection");
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        while !buf.ends_with(b"\r\n\r\nok") {
            let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk))
                .await
                .expect("answer in time")
                .expect("read");
            assert!(
                n > 0,
                "round {round}: the gateway closed the client's connection"
            );
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 200"), "round {round}: {text}");
        assert!(
            !text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_stalled_http2_preface_is_cut_at_the_header_timeout() {
    let up = Upstream::start().await;
    let toml = config().server(r#"header_read_timeout = "2s""#).build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut s = TcpStream::connect(gw.addr).await.expect("connect");
    s.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before the timeout"
    );
}

#[tokio::test]
async fn healthz_answers_beside_300_slowloris_connections_on_the_admin_port() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config().build(), &up.url()).await;
    let admin = gw.admin.expect("admin listener");
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(admin).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .expect("write");
        held.push(s);
    }
    let started = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(2), get(&gw.admin_url("/healthz"), &[]))
        .await
        .expect("/healthz answered within 2 s");
    assert_eq!(got.status, 200, "after {:?}", started.elapsed());
    drop(held);
}

#[tokio::test]
async fn server_fields_turn_normalisation_off_or_decode_slashes() {
    let up = Upstream::start().await;
    let raw_paths = config()
        .server(
            r#"
            normalize_path = false
            merge_slashes = false
            escaped_slashes = "keep"
            allow_backslash = true
            "#,
        )
        .build();
    let gw = TestGateway::start(&raw_paths, &up.url()).await;
    spend(&gw, "/v1/search", &[]).await;
    // The documented risk: with normalisation off, a re-spelling is another route.
    let got = get(&gw.url("/v1//%73earch/%2F"), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text(),
        "upstream saw /v1//%73earch/%2F with 0 body bytes"
    );

    let decoding = config().server(r#"escaped_slashes = "decode""#).build();
    let gw = TestGateway::start(&decoding, &up.url()).await;
    spend(&gw, "/v1/search", &[]).await;
    assert_eq!(status(&http1(), &gw.url("/v1%2Fsearch"), &[]).await, 429);
    assert_eq!(
        status(&http1(), &gw.url("/x%2F..%2Fv1/search"), &[]).await,
        429
    );
}

#[test]
fn a_route_path_in_another_spelling_is_a_config_error() {
    let toml = config()
        .build()
        .replace("path = \"/v1/search\"", "path = \"/v1//%73earch\"");
    let err = tollgate::config::compile(std::path::Path::new("t.toml"), &toml)
        .expect_err("never-matching route refused")
        .to_string();
    assert!(err.contains("write path = \"/v1/search\""), "{err}");
    let toml = config()
        .build()
        .replace("path = \"/v1/search\"", "path = \"/v1%2Fsearch\"");
    let err = tollgate::config::compile(std::path::Path::new("t.toml"), &toml)
        .expect_err("refused spelling")
        .to_string();
    assert!(err.contains("encoded slash"), "{err}");
}
