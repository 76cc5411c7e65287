//! No spelling of a request dodges its limits: paths and hosts that an ordinary upstream
//! treats as the same are limited as the same, over HTTP/1.1 and HTTP/2, or refused with
//! 400; and the upstream receives what was matched. Key sources and HTTP's edges:
//! `spellings_keys.rs`.

use std::time::Duration;

use http::{HeaderValue, Request};
use tokio::net::TcpStream;

use crate::support::*;

/// Every tier allows 2 at once and then 1 an hour, so under the fake clock a spent key
/// stays spent for the whole test.
pub(super) fn config() -> Fixture {
    let mut f = Fixture::new().server(r#"trusted_proxies = ["127.0.0.1/32"]"#);
    for (name, key) in [
        ("search", r#""route""#),
        ("hosted", r#""route""#),
        ("apikey", r#""header:x-api-key""#),
        ("bearer", r#""jwt:sub""#),
        ("q", r#""query:key""#),
        ("sid", r#""cookie:sid""#),
        ("sessid", r#""cookie:s_id""#),
        ("client", r#""ip""#),
        ("pair", r#"["header:x-a", "header:x-b"]"#),
    ] {
        f = f.policy_raw(
            name,
            format!(
                r#"
                key = {key}
                limit = 1
                period = "1h"
                burst = 2
                missing = "skip"
                "#
            ),
        );
    }
    f.route("search", "/v1/search", "api", &["search"])
        .route_raw(
            r#"
            name = "hosted"
            host = "api.example.com"
            path = "/"
            upstream = "api"
            policies = ["hosted"]
            "#,
        )
        .route("apikey", "/k/header", "api", &["apikey"])
        .route("bearer", "/k/jwt", "api", &["bearer"])
        .route("query", "/k/query", "api", &["q"])
        .route("cookie", "/k/cookie", "api", &["sid"])
        .route("phpcookie", "/k/phpcookie", "api", &["sessid"])
        .route("ip", "/k/ip", "api", &["client"])
        .route("pair", "/k/pair", "api", &["pair"])
        .route_raw(
            r#"
            name = "get-limited"
            path = "/v1/get-limited"
            methods = ["GET"]
            upstream = "api"
            policies = ["search"]
            "#,
        )
        .route_raw(
            r#"
            name = "get-only"
            path = "/get-only"
            methods = ["GET"]
            upstream = "api"
            "#,
        )
        .route("open", "/", "api", &[])
}

pub(super) async fn start() -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;
    (up, gw)
}

pub(super) async fn status(client: &HttpClient, url: &str, headers: &[(&str, &str)]) -> u16 {
    send(client, "GET", url, headers, b"").await.status.as_u16()
}

/// Spends the 2-request burst of whatever `url` + `headers` is keyed by.
pub(super) async fn spend(gw: &TestGateway, path: &str, headers: &[(&str, &str)]) {
    for _ in 0..2 {
        assert_eq!(
            status(&http1(), &gw.url(path), headers).await,
            200,
            "{path}"
        );
    }
    assert_eq!(
        status(&http1(), &gw.url(path), headers).await,
        429,
        "{path} spent"
    );
}

#[tokio::test]
async fn path_spellings_are_limited_as_the_route_over_http1_and_http2() {
    let (up, gw) = start().await;
    spend(&gw, "/v1/search", &[]).await;
    let spellings = [
        "/v1//search",
        "//v1/search",
        "/v1/./search",
        "/v1/x/../search",
        "/v1/%73earch",
        "/v1/%73%65%61%72%63%68",
        "/%76%31/search",
        "/v1/%2e/search",
        "/v1/%2E%2E/v1/search",
        "/v1/search/.",
        "/x/..//v1/.//search?q=1",
        "/v1/searchable",
    ];
    let before = up.requests();
    for client in [http1(), http2()] {
        for path in spellings {
            assert_eq!(status(&client, &gw.url(path), &[]).await, 429, "{path}");
        }
    }
    assert_eq!(up.requests(), before, "no spelling reached the upstream");
    // Not the limited route: a shorter prefix, and another segment.
    assert_eq!(status(&http1(), &gw.url("/v1/searc"), &[]).await, 200);
    assert_eq!(
        status(&http2(), &gw.url("/v1/other/search"), &[]).await,
        200
    );
}

#[tokio::test]
async fn refused_paths_get_400_with_a_reason_and_never_reach_the_upstream() {
    let (up, gw) = start().await;
    let cases: [(&[u8], &str); 10] = [
        // A Java servlet container strips `;…` and then climbs: /v1/search there.
        (b"/x/..;/v1/search", "dot_segment_with_params"),
        (b"/.;/v1/search", "dot_segment_with_params"),
        (b"/x/%2e%2e;a=b/v1/search", "dot_segment_with_params"),
        (b"/v1%2Fsearch", "encoded_slash"),
        (b"/v1%2fsearch", "encoded_slash"),
        (b"/v1\\search", "backslash_in_path"),
        (b"/v1%5Csearch", "backslash_in_path"),
        (b"/../v1/search", "path_above_root"),
        (b"/a/%2e%2e/%2e%2e/v1/search", "path_above_root"),
        (b"/v1/%zz", "bad_path_encoding"),
    ];
    for (path, code) in cases {
        let mut req = b"GET ".to_vec();
        req.extend_from_slice(path);
        req.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (answer, _) = raw(gw.addr, &req).await;
        assert_eq!(
            raw_status(&answer),
            400,
            "{}: {answer}",
            String::from_utf8_lossy(path)
        );
        assert!(answer.contains(code), "{code}: {answer}");
        // The same `:path` over HTTP/2, sent as written by a raw client.
        if let Ok(path) = std::str::from_utf8(path).map(|p| p.replace('\\', "%5C")) {
            let (status, body) = h2_get(gw.addr, "x", &path, &[]).await;
            assert_eq!((status, body.contains(code)), (400, true), "{path}: {body}");
        }
    }
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn the_upstream_receives_the_normalised_path_and_the_query_intact() {
    let (_up, gw) = start().await;
    for client in [http1(), http2()] {
        let got = send(
            &client,
            "GET",
            &gw.url("/a/./b//c/%7euser/x/..?q=a%2Fb&r=%2e%2e/x"),
            &[],
            b"",
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(
            got.text(),
            "upstream saw /a/b/c/~user/?q=a%2Fb&r=%2e%2e/x with 0 body bytes"
        );
    }
}

#[tokio::test]
async fn host_spellings_are_limited_as_the_host_route() {
    let (up, gw) = start().await;
    spend(&gw, "/x", &[("host", "api.example.com")]).await;
    for host in [
        "API.Example.COM",
        "api.example.com.",
        "api.example.com:8080",
        "Api.Example.Com.:1",
    ] {
        assert_eq!(
            status(&http1(), &gw.url("/x"), &[("host", host)]).await,
            429,
            "{host}"
        );
        let (s, _) = h2_get(gw.addr, host, "/x", &[]).await;
        assert_eq!(s, 429, "HTTP/2 :authority {host}");
    }
    // `Connection: host` must not strip the host that was routed.
    let h = [("host", "api.example.com"), ("connection", "host")];
    assert_eq!(status(&http1(), &gw.url("/x"), &h).await, 429);
    // Absolute-form: the target's host is routed, whatever Host says ...
    let (answer, _) = raw(
        gw.addr,
        b"GET http://api.example.com/x HTTP/1.1\r\nHost: other.invalid\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 429, "{answer}");
    // ... and forwarded as Host, so the upstream never sees the limited host unlimited.
    let (answer, _) = raw(
        gw.addr,
        b"GET http://other.invalid/zz HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert_eq!(up.last_headers()["host"], "other.invalid");
    // Two Host headers, or junk in one: refused.
    for head in [
        &b"GET /x HTTP/1.1\r\nHost: other.invalid\r\nHost: api.example.com\r\nConnection: close\r\n\r\n"[..],
        b"GET /x HTTP/1.1\r\nHost: user@api.example.com\r\nConnection: close\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: api.example.com/x\r\nConnection: close\r\n\r\n",
    ] {
        let (answer, _) = raw(gw.addr, head).await;
        assert_eq!(raw_status(&answer), 400, "{answer}");
    }
}

/// One HTTP/2 request with raw header control (the `h2` crate, no hyper in between).
pub(super) async fn h2_get(
    addr: std::net::SocketAddr,
    authority: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> (u16, String) {
    let mut req = Request::builder().uri(format!("http://{authority}{path}"));
    for (k, v) in headers {
        req = req.header(*k, HeaderValue::from_bytes(v).expect("value"));
    }
    h2_send(addr, req.body(()).expect("request")).await
}

/// `req` alone on a raw HTTP/2 connection (the `h2` crate: any method, scheme or target
/// it can encode): the answer's status and body.
pub(super) async fn h2_send(addr: std::net::SocketAddr, req: Request<()>) -> (u16, String) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let (resp, _) = client.send_request(req, true).expect("send");
    let resp = tokio::time::timeout(Duration::from_secs(30), resp)
        .await
        .expect("answer in time")
        .expect("response");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

#[tokio::test]
async fn http2_host_must_agree_with_the_authority_and_carry_no_whitespace() {
    let (up, gw) = start().await;
    spend(&gw, "/x", &[("host", "api.example.com")]).await;
    let (s, body) = h2_get(
        gw.addr,
        "other.invalid",
        "/x",
        &[("host", b"api.example.com")],
    )
    .await;
    assert_eq!((s, body.contains("host_mismatch")), (400, true), "{body}");
    let (s, body) = h2_get(
        gw.addr,
        "api.example.com",
        "/x",
        &[("host", b" api.example.com")],
    )
    .await;
    assert_eq!(s, 400, "{body}");
    let (s, _) = h2_get(
        gw.addr,
        "API.example.com",
        "/x",
        &[("host", b"api.example.COM")],
    )
    .await;
    assert_eq!(s, 429, "same host, other case: limited");
    let before = up.requests();
    let (s, _) = h2_get(gw.addr, "api.example.com.", "/x", &[]).await;
    assert_eq!(s, 429, "trailing dot");
    assert_eq!(up.requests(), before);
}

#[tokio::test]
async fn with_ignore_path_case_a_path_in_another_case_is_limited_as_the_route() {
    let up = Upstream::start().await;
    let toml = config().server("ignore_path_case = true").build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    spend(&gw, "/v1/search", &[]).await;
    for client in [http1(), http2()] {
        for path in ["/V1/SEARCH", "/v1/Search", "/V1/search?q=x"] {
            assert_eq!(status(&client, &gw.url(path), &[]).await, 429, "{path}");
        }
    }
    // Routed without case, forwarded with it: the upstream matches as it likes.
    assert_eq!(status(&http1(), &gw.url("/Other"), &[]).await, 200);
    assert_eq!(up.targets().last().map(String::as_str), Some("/Other"));
    // Without the setting, the catch-all serves it (the documented risk).
    let (_up2, plain) = start().await;
    spend(&plain, "/v1/search", &[]).await;
    assert_eq!(status(&http1(), &plain.url("/V1/Search"), &[]).await, 200);
    // A route written with capitals could never match: a config error.
    let text = config()
        .server("ignore_path_case = true")
        .route("caps", "/V2/Search", "api", &[])
        .build();
    let err = crate::config::errors_of(&text);
    assert!(
        err.contains("route path `/V2/Search` has upper-case letters"),
        "{err}"
    );
    assert!(err.contains("write path = \"/v2/search\""), "{err}");
}

/// A method in lower case (`get`: an extension method to HTTP, the same method to Django,
/// Werkzeug or Symfony, which upper-case it) is routed, keyed and forwarded as `GET`: it
/// does not slip past a route limited to GET into an unlimited catch-all. Over a raw
/// HTTP/1.1 socket and a raw HTTP/2 stream.
#[tokio::test]
async fn a_method_in_lower_case_is_limited_as_the_upper_case_one() {
    let (up, gw) = start().await;
    spend(&gw, "/v1/get-limited", &[]).await;
    let before = up.requests();
    for method in ["get", "Get"] {
        let head = format!("{method} /v1/get-limited HTTP/1.1\r\nHost: x\r\n\r\n");
        let (answer, _) = raw(gw.addr, head.as_bytes()).await;
        assert_eq!(raw_status(&answer), 429, "{method}: {answer}");
    }
    let req = Request::builder()
        .method("get")
        .uri(format!("http://{}/v1/get-limited", gw.addr))
        .body(())
        .expect("request");
    assert_eq!(h2_send(gw.addr, req).await.0, 429, ":method get");
    assert_eq!(up.requests(), before, "none reached the upstream");
}
