//! Forwarding: routing, upstream failures, passive health, streaming, headers, WebSocket.

use std::time::{Duration, Instant};

use crate::support::*;

/// Everything goes to `api` under a limit no test reaches.
fn open_route() -> Fixture {
    Fixture::new()
        .policy("ip", "ip", 1000, "1s", 1000)
        .route("api", "/", "api", &["ip"])
}

/// [`open_route`] with more settings for the `api` upstream.
fn single(upstream_extra: &str) -> String {
    open_route().upstream("api", upstream_extra).build()
}

#[tokio::test]
async fn unmatched_requests_get_404_json() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .route_raw(
            r#"
            name = "v1"
            path = "/v1/"
            upstream = "api"
            methods = ["GET"]
            "#,
        )
        .route_raw(
            r#"
            name = "host"
            path = "/"
            host = "api.example.com"
            upstream = "api"
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let r = get(&gw.url("/v2/x"), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "no_route");
    assert_eq!(get(&gw.url("/v1/x"), &[]).await.status, 200);
    assert_eq!(
        send(&http1(), "POST", &gw.url("/v1/x"), &[], b"")
            .await
            .status,
        404,
        "method does not match"
    );
    assert_eq!(
        get(&gw.url("/other"), &[("host", "API.example.com:8443")])
            .await
            .status,
        200,
        "host matches, port ignored"
    );
    assert_eq!(up.requests(), 2);
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_a_hung_one_504() {
    let dead = dead_port().await;
    let gw = TestGateway::start(
        &single(r#"connect_timeout = "1s""#),
        &format!("http://{dead}"),
    )
    .await;
    let r = get(&gw.url("/"), &[]).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"], "upstream_unavailable");

    let up = Upstream::start().await;
    let gw = TestGateway::start(&single(r#"timeout = "1s""#), &up.url()).await;
    let r = get(&gw.url("/slow"), &[]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"], "upstream_timeout");
}

/// Asserts that a request started at `started` was cut at its 2 s upstream timeout: not
/// before, and not long after (a generous margin for a busy machine).
fn cut_at_its_2s_timeout(started: Instant) {
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(20),
        "cut after {waited:?}"
    );
}

/// A client connection keeps its response-deadline timer between requests, due at the
/// earlier request's deadline: a later request still in flight then is given its own full
/// timeout, and one that outlasts it is cut at it, not before.
#[tokio::test]
async fn each_request_on_a_kept_alive_connection_gets_its_full_upstream_timeout() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&single(r#"timeout = "2s""#), &up.url()).await;
    let client = http1();
    // The first request keeps the upstream 1.5 s, so the kept timer is due 0.5 s after it
    // is answered; the second (1 s upstream) starts right then, so it is in flight when
    // that timer fires. (On a machine too busy to start it within 0.5 s the scenario did
    // not happen: tried again.)
    let mut spanned = false;
    for _ in 0..3 {
        let started = Instant::now();
        let r = send(
            &client,
            "GET",
            &gw.url("/a"),
            &[("x-delay-ms", "1500")],
            b"",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let second_at = started.elapsed();
        let r = send(&client, "GET", &gw.url("/delay"), &[], b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        if second_at < Duration::from_millis(1900)
            && started.elapsed() > Duration::from_millis(2100)
        {
            spanned = true;
            break;
        }
    }
    assert!(
        spanned,
        "the second request never straddled the first one's deadline"
    );
    let started = Instant::now();
    let r = send(&client, "GET", &gw.url("/slow"), &[], b"").await;
    assert_eq!(r.status, 504, "{}", r.text());
    cut_at_its_2s_timeout(started);
}

/// HTTP/2 streams in flight at once on one connection share its kept timer in turns:
/// each is still cut at its own deadline, and none before.
#[tokio::test]
async fn http2_streams_at_once_each_get_their_full_upstream_timeout() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&single(r#"timeout = "2s""#), &up.url()).await;
    let client = http2();
    assert_eq!(
        send(&client, "GET", &gw.url("/a"), &[], b"").await.status,
        200
    );
    let (slow_url, delay_url) = (gw.url("/slow"), gw.url("/delay"));
    let started = Instant::now();
    let (slow, delayed) = tokio::join!(
        send(&client, "GET", &slow_url, &[], b""),
        send(&client, "GET", &delay_url, &[], b""),
    );
    assert_eq!(slow.status, 504, "{}", slow.text());
    assert_eq!(delayed.status, 200, "{}", delayed.text());
    cut_at_its_2s_timeout(started);
    assert_eq!(up.requests(), 3);
}

#[tokio::test]
async fn one_dead_target_of_two_fails_no_request() {
    let up = Upstream::start().await;
    let dead = dead_port().await;
    let toml = open_route()
        .upstream_raw(
            "api",
            format!(r#"targets = ["http://{dead}", "{{upstream}}"]"#),
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    for i in 0..20 {
        let r = get(&gw.url(&format!("/n{i}")), &[]).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    assert_eq!(up.requests(), 20);
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_and_forwarding_headers_set() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&single(""), &up.url()).await;
    let r = get(
        &gw.url("/h?q=1"),
        &[
            ("connection", "keep-alive, x-private"),
            ("x-private", "secret"),
            ("keep-alive", "timeout=5"),
            ("te", "gzip"),
            ("proxy-authorization", "Basic abc"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-custom", "kept"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "upstream saw /h?q=1 with 0 body bytes");
    let h = up.last_headers();
    for gone in ["x-private", "keep-alive", "te", "proxy-authorization"] {
        assert!(h.get(gone).is_none(), "{gone} must not be forwarded: {h:?}");
    }
    assert_eq!(h["x-custom"], "kept");
    // `TE: trailers` alone is passed on (the gateway relays trailers), whatever came with it.
    let r = get(&gw.url("/h"), &[("te", "gzip, Trailers;q=0.5")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(up.last_headers()["te"], "trailers");
    assert_eq!(h["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["host"], gw.addr.to_string(), "the original Host is kept");
    assert_eq!(h["x-forwarded-host"], gw.addr.to_string());
}

#[tokio::test]
async fn bodies_stream_both_ways() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&single(""), &up.url()).await;
    // 64 MiB up, in 1 MiB frames, through a channel body: never one buffer on our side.
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(2);
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(hyper::body::Frame::data(b)), rx))
    });
    let body = http_body_util::StreamBody::new(Box::pin(frames));
    let sender = tokio::spawn(async move {
        let chunk = bytes::Bytes::from(vec![7u8; 1 << 20]);
        for _ in 0..64 {
            if tx.send(chunk.clone()).await.is_err() {
                break;
            }
        }
    });
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let req = http::Request::post(gw.url("/upload"))
        .body(body)
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(120), client.request(req))
        .await
        .expect("in time")
        .expect("response");
    assert_eq!(resp.status(), 200);
    let text = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&text),
        format!("upstream saw /upload with {} body bytes", 64 << 20)
    );
    sender.await.expect("sender");

    // 8 MiB down.
    let r = get(&gw.url("/big"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 8 << 20);
}

#[tokio::test]
async fn websocket_is_limited_then_tunnelled() {
    let (ws_addr, _task) = websocket_echo().await;
    let toml = Fixture::new()
        .upstream("ws", "")
        .policy("conn", "ip", 1, "1m", 1)
        .route("ws", "/ws", "ws", &["conn"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{ws_addr}")).await;
    let (mut ws, resp) = websocket_through(gw.addr, "/ws").await;
    assert_eq!(resp.status(), 101);
    assert_eq!(resp.headers()["x-ratelimit-remaining"], "0");
    for text in ["hello", "through", "tollgate"] {
        let message = tokio_tungstenite::tungstenite::Message::text(text);
        let echo = echoed(&mut ws, message).await;
        assert_eq!(echo.into_text().expect("text").as_str(), text);
    }
    // The second upgrade from the same client is over the limit.
    let second = tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.addr)).await;
    match second {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 429),
        other => panic!("expected 429, got {other:?}"),
    }
}

#[tokio::test]
async fn x_forwarded_for_is_believed_only_from_trusted_peers() {
    let up = Upstream::start().await;
    let per_ip = Fixture::new()
        .policy("ip", "ip", 1, "1m", 1)
        .route("api", "/", "api", &["ip"]);
    let trusted = per_ip
        .clone()
        .server(r#"trusted_proxies = ["127.0.0.1/32"]"#)
        .build();
    let gw = TestGateway::start(&trusted, &up.url()).await;
    assert_eq!(
        get(&gw.url("/"), &[("x-forwarded-for", "198.51.100.1")])
            .await
            .status,
        200
    );
    assert_eq!(
        get(&gw.url("/"), &[("x-forwarded-for", "198.51.100.2")])
            .await
            .status,
        200,
        "another client behind the proxy"
    );
    assert_eq!(
        get(
            &gw.url("/"),
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.1")]
        )
        .await
        .status,
        429,
        "right-most untrusted hop wins; a spoofed left entry is ignored"
    );

    let gw = TestGateway::start(&per_ip.build(), &up.url()).await;
    assert_eq!(
        get(&gw.url("/"), &[("x-forwarded-for", "198.51.100.1")])
            .await
            .status,
        200
    );
    assert_eq!(
        get(&gw.url("/"), &[("x-forwarded-for", "198.51.100.2")])
            .await
            .status,
        429,
        "an untrusted peer cannot pick its address"
    );
}
