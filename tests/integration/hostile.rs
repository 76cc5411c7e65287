//! Hostile traffic and failures: smuggling attempts, malformed and oversized requests,
//! slowloris, races on one key, upstreams that break mid-body, a config file that vanishes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// Everything goes to `api`; a client naming an `x-key` gets 10 requests at once, then
/// one an hour; one without is not limited.
fn config() -> Fixture {
    Fixture::new()
        .policy_raw(
            "key",
            r#"
            key = "header:x-key"
            limit = 1
            period = "1h"
            burst = 10
            missing = "skip"
            "#,
        )
        .route("api", "/", "api", &["key"])
}

/// Writes raw bytes, returns the first response line and whether the server then closed.
async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> (String, bool) {
    let (text, closed) = crate::support::raw(addr, bytes).await;
    (text.lines().next().unwrap_or("").to_owned(), closed)
}

#[tokio::test]
async fn smuggling_attempts_are_refused_or_reframed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;

    // CL.TE: Transfer-Encoding wins (RFC 9112 §6.3): the body is the empty chunked one,
    // forwarded re-framed as chunked without the Content-Length; the connection is closed
    // after the answer, and the "smuggled" request after the body is never executed.
    let cl_te = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let (answer, closed) = crate::support::raw(gw.addr, cl_te).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(
        answer.ends_with("\r\n\r\nupstream saw /a with 0 body bytes"),
        "one answer, to /a with its empty chunked body: {answer}"
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{answer}"
    );
    assert!(
        closed,
        "the connection is closed after an ambiguous message"
    );
    let forwarded = up.last_headers();
    assert_eq!(forwarded["transfer-encoding"], "chunked", "{forwarded:?}");
    assert!(forwarded.get("content-length").is_none(), "{forwarded:?}");

    let differing =
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!";
    let (line, closed) = raw(gw.addr, differing).await;
    assert!(line.starts_with("HTTP/1.1 400"), "{line}");
    assert!(closed);

    let bad_chunk = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nhello\r\n0\r\n\r\n";
    let (answer, closed) = crate::support::raw(gw.addr, bad_chunk).await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(
        answer.ends_with("{\"error\":\"bad_request_body\"}"),
        "{answer}"
    );
    assert!(closed);

    let te_not_chunked_last =
        b"POST /d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n";
    let (line, closed) = raw(gw.addr, te_not_chunked_last).await;
    assert!(line.starts_with("HTTP/1.1 400"), "{line}");
    assert!(closed);

    // Every connection above was closed by the gateway after its answer: nothing more
    // can reach the upstream from them.
    assert_eq!(
        up.targets(),
        ["/a"],
        "only the re-framed CL.TE request and nothing else may reach the upstream"
    );
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_4xx_and_the_gateway_stays_up() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(
        &config().server("max_header_bytes = 16384").build(),
        &up.url(),
    )
    .await;
    assert!(raw(gw.addr, b"GARBAGE\r\n\r\n")
        .await
        .0
        .starts_with("HTTP/1.1 400"));
    assert!(
        raw(gw.addr, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            .await
            .0
            .starts_with("HTTP/1.1 400"),
        "TLS on a plaintext port"
    );
    let mut huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    assert!(raw(gw.addr, &huge).await.0.starts_with("HTTP/1.1 431"));
    let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..300 {
        many.extend_from_slice(format!("X-H{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert!(raw(gw.addr, &many).await.0.starts_with("HTTP/1.1 431"));
    assert_eq!(up.requests(), 0);
    assert_eq!(
        get(&gw.url("/fine"), &[]).await.status,
        200,
        "still serving"
    );
}

#[tokio::test]
async fn slowloris_connections_do_not_delay_a_normal_request() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(
        &config().server(r#"header_read_timeout = "6s""#).build(),
        &up.url(),
    )
    .await;
    let addr = gw.addr;
    // Connection attempts made, successful or not.
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut slow = Vec::new();
    for _ in 0..200 {
        slow.push(slowloris(addr, attempts.clone()));
    }
    // And connections that never send a byte.
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(silent_connection(addr, attempts.clone()));
    }
    // Every slow and silent connection is made before the normal request.
    assert!(
        eventually(Duration::from_secs(20), || attempts.load(Ordering::SeqCst)
            == 220)
        .await,
        "connections attempted: {} of 220",
        attempts.load(Ordering::SeqCst)
    );
    let started = Instant::now();
    let r = get(&gw.url("/normal"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(
        // Were it queued behind the slow ones, it would wait for their 6 s timeout.
        started.elapsed() < Duration::from_secs(4),
        "a normal request is served at once: {:?}",
        started.elapsed()
    );
    let mut cut = 0;
    for task in slow {
        if let Ok(Some(after)) = task.await {
            assert!(
                after < Duration::from_secs(15),
                "cut after the header timeout, not later: {after:?}"
            );
            cut += 1;
        }
    }
    assert_eq!(cut, 200, "the server closed the slow connections");
    for task in silent {
        let closed_after = task.await.ok().flatten();
        assert!(
            closed_after.is_some_and(|t| t < Duration::from_secs(20)),
            "a silent connection is closed: {closed_after:?}"
        );
    }
}

/// A connection that sends a request head a byte every 100 ms, counted in `attempts` once
/// tried: how long it lasted when the server cut it, `None` if it was never cut (or never
/// connected).
fn slowloris(
    addr: std::net::SocketAddr,
    attempts: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        let connected = TcpStream::connect(addr).await;
        attempts.fetch_add(1, Ordering::SeqCst);
        let Ok(mut s) = connected else {
            return None;
        };
        let started = Instant::now();
        for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "
            .iter()
            .chain(std::iter::repeat(&b'a'))
            .take(200)
        {
            if s.write_all(&[*b]).await.is_err() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    })
}

/// A connection that never sends a byte, counted in `attempts` once tried: how long until
/// the server closed it, `None` if it did not within 25 s (or it never connected).
fn silent_connection(
    addr: std::net::SocketAddr,
    attempts: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        let connected = TcpStream::connect(addr).await;
        attempts.fetch_add(1, Ordering::SeqCst);
        let mut s = connected.ok()?;
        let started = Instant::now();
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_secs(25), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => Some(started.elapsed()),
            _ => None,
        }
    })
}

#[tokio::test]
async fn many_connections_racing_one_key_admit_exactly_the_burst() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config().build(), &up.url()).await;
    let url = gw.url("/race");
    let results = futures_util::future::join_all((0..60).map(|_| {
        let url = url.clone();
        async move { get(&url, &[("x-key", "hot")]).await.status.as_u16() }
    }))
    .await;
    assert_eq!(results.iter().filter(|&&s| s == 200).count(), 10);
    assert_eq!(results.iter().filter(|&&s| s == 429).count(), 50);
    assert_eq!(up.requests(), 10);
}

#[tokio::test]
async fn an_upstream_breaking_mid_body_cuts_only_that_response() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;
    let client = http1();
    let req = http::Request::get(gw.url("/reset"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("req");
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("headers in time")
        .expect("headers");
    assert_eq!(resp.status(), 200, "headers were already on their way");
    let body = tokio::time::timeout(
        Duration::from_secs(10),
        http_body_util::BodyExt::collect(resp.into_body()),
    )
    .await
    .expect("body ends in time");
    assert!(
        body.is_err(),
        "the client sees a broken body, not a silently short one"
    );
    assert_eq!(
        get(&gw.url("/after"), &[]).await.status,
        200,
        "the gateway carries on"
    );
}

#[tokio::test]
async fn connections_are_not_leaked() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config().build(), &up.url()).await;
    for _ in 0..20 {
        let _ = raw(
            gw.addr,
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
    }
    let _ = raw(gw.addr, b"GARBAGE\r\n\r\n").await;
    let metrics = gw.admin_url("/metrics");
    assert!(
        metric_reaches(
            Duration::from_secs(10),
            &metrics,
            "tollgate_open_connections",
            0.0
        )
        .await,
        "connections still open: {}",
        metric(
            &get(&metrics, &[]).await.text(),
            "tollgate_open_connections"
        )
    );
}

#[tokio::test]
async fn a_vanished_or_unreadable_config_keeps_the_old_one_serving() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config().build(), &up.url()).await;
    std::fs::remove_file(gw.config_path()).expect("remove");
    let err = gw.gw().reload().await.expect_err("no file");
    assert!(err.to_string().contains("cannot read"), "{err}");
    assert_eq!(get(&gw.url("/"), &[]).await.status, 200);
    std::fs::create_dir(gw.config_path()).expect("a directory where the file was");
    assert!(gw.gw().reload().await.is_err());
    assert_eq!(get(&gw.url("/"), &[]).await.status, 200);
}

/// Through the real binary: a client that connects and never sends a byte is cut at
/// `header_read_timeout`, so silent sockets cannot pile up to `max_connections`.
#[tokio::test]
async fn the_binary_closes_silent_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let toml = Fixture::new()
        .server(r#"header_read_timeout = "2s""#)
        .route("api", "/", "api", &[])
        .build_for("http://127.0.0.1:9");
    std::fs::write(&path, toml).expect("write");
    let gw = Process::run(&path);
    let mut silent = TcpStream::connect(gw.addr).await.expect("connect");
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(15), silent.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the server closed the silent connection: {read:?}"
    );
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(10),
        "closed at the header timeout: {after:?}"
    );
}

#[tokio::test]
async fn a_client_silent_mid_body_gets_408() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(
        &config().server(r#"body_read_timeout = "1s""#).build(),
        &up.url(),
    )
    .await;
    let started = Instant::now();
    let (line, closed) = raw(
        gw.addr,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b",
    )
    .await;
    assert!(line.starts_with("HTTP/1.1 408"), "{line}");
    assert!(closed, "the connection is closed after a body timeout");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut after about 1 s: {:?}",
        started.elapsed()
    );
    assert_eq!(get(&gw.url("/after"), &[]).await.status, 200);
}
