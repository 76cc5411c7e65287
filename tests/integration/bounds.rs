//! One client cannot exhaust the gateway: slow readers, stalled HTTP/2 streams, idle
//! connections and tunnels are closed after their timeouts; memory per stalled response
//! is bounded; a full store forgets no debt; a full upstream pool answers 503. (Refused
//! floods against Redis: `store_calls.rs`; a config beyond the open-file limit: `config.rs`.)

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// The upstream `api` behind one unlimited route, `open` on `/`.
pub(super) fn open() -> Fixture {
    Fixture::new().route("open", "/", "api", &[])
}

#[tokio::test]
async fn a_debt_survives_a_flood_of_fresh_keys_into_another_policy() {
    let up = Upstream::start().await;
    let toml = open()
        .store("max_keys = 16")
        .policy("strict", "header:x-user", 1, "1h", 1)
        .policy("junk", "header:x-junk", 1, "24h", 1)
        .route("strict", "/strict", "api", &["strict"])
        .route("junk", "/junk", "api", &["junk"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let eve = [("x-user", "eve")];
    assert_eq!(get(&gw.url("/strict"), &eve).await.status, 200);
    assert_eq!(get(&gw.url("/strict"), &eve).await.status, 429);
    let client = http1();
    let mut admitted = 0;
    for i in 0..1000 {
        let junk = format!("k{i}");
        let got = send(&client, "GET", &gw.url("/junk"), &[("x-junk", &junk)], b"").await;
        admitted += usize::from(got.status == 200);
    }
    assert_eq!(
        get(&gw.url("/strict"), &eve).await.status,
        429,
        "the debt was not forgiven"
    );
    // Each junk key either has a slot of its own (at most the 15 of 16 that eve's key
    // leaves), where its burst of 1 is admitted, or is decided on the policy's one overflow
    // key, which admits once and then owes a day.
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let overflow = metric(
        &metrics,
        "tollgate_decisions_total{route=\"junk\",policy=\"junk\",outcome=\"overflow\"}",
    );
    assert!(
        (2..=16).contains(&admitted),
        "fresh keys past the store's room share one overflow limiter: {admitted} admitted"
    );
    let own_slots = admitted - 1;
    assert_eq!(
        overflow,
        (1000 - own_slots) as f64,
        "every key without a slot was decided on the overflow key: {metrics}"
    );
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn slow_readers_hold_bounded_memory_and_are_cut_after_send_timeout() {
    slow_readers_hold_bounded_memory("").await;
}

/// The same readers, their responses streamed from an HTTP/2 upstream: all 64 share
/// one upstream connection, each stalled on its own stream's window.
#[tokio::test]
async fn slow_readers_of_an_http2_upstream_hold_bounded_memory() {
    slow_readers_hold_bounded_memory("protocol = \"h2c\"").await;
}

/// 64 HTTP/1.1 clients that stop reading an 8 MiB response: at most 256 KiB of gateway
/// memory each, and cut after `send_timeout`. `upstream`: lines for the upstream.
async fn slow_readers_hold_bounded_memory(upstream: &str) {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let toml = open()
        .upstream("api", upstream)
        .server(
            r#"
            send_timeout = "3s"
            workers = 1
            "#,
        )
        .build_for(&up.url());
    std::fs::write(&path, toml).expect("write");
    let gw = Process::run(&path);
    // Warm up allocator pools with one whole response.
    let warm = get(&format!("http://{}/big", gw.addr), &[]).await;
    assert_eq!(warm.body.len(), 8 << 20);
    let before = rss_kib(gw.child.id());
    let warmed = up.requests();
    const READERS: usize = 64;
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut s = TcpStream::connect(gw.addr).await.expect("connect");
        s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        readers.push(s);
    }
    let admin = gw.admin.expect("admin");
    let metrics_url = format!("http://{admin}/metrics");
    // Wait until every reader's response has started (all 64 requests reached the
    // upstream) and stalled (the gateway's memory stopped growing for a second).
    let pid = gw.child.id();
    let mut peak = rss_kib(pid);
    let started = eventually(Duration::from_secs(30), || {
        peak = peak.max(rss_kib(pid));
        up.requests() == warmed + READERS
    })
    .await;
    assert!(
        started,
        "every reader's request reached the upstream: {} of {READERS}",
        up.requests() - warmed
    );
    let peak = settled_peak(pid, peak).await;
    let per_reader = peak.saturating_sub(before) / READERS as u64;
    eprintln!("{READERS} stalled responses: RSS {before} -> {peak} KiB, {per_reader} KiB each");
    assert!(
        per_reader <= 256,
        "{per_reader} KiB per stalled response (before {before} KiB, peak {peak} KiB)"
    );
    // Cut after send_timeout: the gateway's connections drop to none.
    let closed = metric_reaches(
        Duration::from_secs(30),
        &metrics_url,
        "tollgate_open_connections",
        0.0,
    );
    assert!(closed.await, "slow readers were closed");
    // What a reader gets is truncated: the gateway gave up on it.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let s = &mut readers[0];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        total += n;
    }
    assert!(total < 8 << 20, "read {total} bytes");
}

/// The highest RSS of `pid` (from `peak`) once it has not grown for a second (30 s at most).
async fn settled_peak(pid: u32, mut peak: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut still = 0;
    while still < 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let rss = rss_kib(pid);
        if rss > peak {
            (peak, still) = (rss, 0);
        } else {
            still += 1;
        }
    }
    peak
}

/// One HTTP/2 connection (the `h2` crate), whose flow-control windows the test controls.
async fn h2_connect(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

async fn h2_status(client: &mut h2::client::SendRequest<bytes::Bytes>, path: &str) -> u16 {
    let req = Request::get(format!("http://x{path}"))
        .body(())
        .expect("request");
    let (resp, _) = client.send_request(req, true).expect("send");
    let resp = tokio::time::timeout(Duration::from_secs(30), resp)
        .await
        .expect("in time")
        .expect("response");
    resp.status().as_u16()
}

#[tokio::test]
async fn a_stalled_http2_stream_is_reset_and_its_connection_lives_on() {
    let up = Upstream::start().await;
    let toml = open().server(r#"send_timeout = "2s""#).build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let (mut client, _conn) = h2_connect(gw.addr).await;
    let req = Request::get("http://x/big").body(()).expect("request");
    let (resp, _) = client.send_request(req, true).expect("send");
    let resp = resp.await.expect("headers");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    // Take what the initial window allows, and never release capacity.
    let started = Instant::now();
    let mut received = 0;
    let reset = loop {
        match tokio::time::timeout(Duration::from_secs(30), body.data()).await {
            Ok(Some(Ok(chunk))) => received += chunk.len(),
            Ok(Some(Err(e))) => break e,
            Ok(None) => panic!("the whole body arrived without window updates"),
            Err(_) => panic!("not reset within 30 s"),
        }
    };
    assert_eq!(reset.reason(), Some(h2::Reason::CANCEL), "{reset}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(received < 8 << 20);
    // Only the stream was reset: the connection still serves.
    assert_eq!(h2_status(&mut client, "/fine").await, 200);
}

#[tokio::test]
async fn idle_connections_are_closed_pings_notwithstanding() {
    let up = Upstream::start().await;
    let toml = open()
        .server(
            r#"
            idle_timeout = "2s"
            header_read_timeout = "30s"
            "#,
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    // HTTP/2: one request, then nothing but the client's automatic ping answers.
    let (mut client, conn) = h2_connect(gw.addr).await;
    assert_eq!(h2_status(&mut client, "/fine").await, 200);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), conn)
        .await
        .expect("the idle HTTP/2 connection is closed")
        .expect("connection task");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    // HTTP/1 keep-alive: closed between requests after idle_timeout.
    let mut s = TcpStream::connect(gw.addr).await.expect("connect");
    s.write_all(b"GET /fine HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(_)) => continue,
            Err(_) => break false,
        }
    };
    assert!(closed, "the idle keep-alive connection is closed");
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test]
async fn tunnels_count_against_max_connections_and_close_when_idle() {
    let (ws_addr, _task) = websocket_echo().await;
    // One worker: its accept loop holds a permit for the next connection, so 3 permits
    // leave room for one tunnel beside the connection that asks for the next.
    let toml = open()
        .server(
            r#"
            workers = 1
            max_connections = 3
            tunnel_idle_timeout = "2s"
            "#,
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &format!("http://{ws_addr}")).await;
    let url = format!("ws://{}/ws", gw.addr);
    let (mut first, _) = tokio_tungstenite::connect_async(&url)
        .await
        .expect("first tunnel");
    first
        .send(tokio_tungstenite::tungstenite::Message::text("hi"))
        .await
        .expect("send");
    assert!(matches!(first.next().await, Some(Ok(m)) if m.to_text().ok() == Some("hi")));
    // The first tunnel holds a connection; the second one's upgrade finds none left.
    match tokio_tungstenite::connect_async(&url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        other => panic!("expected 503, got {other:?}"),
    }
    // Silent for tunnel_idle_timeout: closed.
    let started = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(30), first.next())
        .await
        .expect("the idle tunnel is closed");
    assert!(!matches!(end, Some(Ok(ref m)) if m.is_text()), "{end:?}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    // Its slot is free again.
    let mut third = None;
    for _ in 0..50 {
        if let Ok((ws, _)) = tokio_tungstenite::connect_async(&url).await {
            third = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(third.is_some(), "a new tunnel once the idle one closed");
}

#[tokio::test]
async fn a_full_upstream_pool_answers_503_within_the_timeout() {
    let up = Upstream::start().await;
    let toml = open()
        .server("workers = 1")
        .upstream(
            "api",
            r#"
            max_connections = 1
            timeout = "20s"
            "#,
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let slow_url = gw.url("/slow");
    let holder = tokio::spawn(async move { get(&slow_url, &[]).await.status });
    assert!(
        eventually(Duration::from_secs(10), || up.requests() == 1).await,
        "the first request holds the only upstream connection"
    );
    let started = Instant::now();
    let got = get(&gw.url("/second"), &[]).await;
    assert_eq!(got.status, 503, "{}", got.text());
    assert_eq!(got.json()["error"], "upstream_busy");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(
        up.requests(),
        1,
        "the second request never reached the upstream"
    );
    holder.abort();
}

/// `body_read_timeout` measures the client's silence from when the gateway first reads
/// the body, not from when the request arrived: one that waits for an upstream connection
/// (the pool full for 3 s) and sent `Expect: 100-continue` — so it sends nothing until
/// asked — is told `100 Continue` and served, not cut 408 as a stalled upload.
#[tokio::test]
async fn a_body_waiting_for_an_upstream_connection_is_not_counted_as_silent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::start().await;
    let toml = open()
        .server("workers = 1\nbody_read_timeout = \"1s\"")
        .upstream("api", "max_connections = 1\ntimeout = \"20s\"")
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let held_url = gw.url("/held");
    let holder = tokio::spawn(async move { get(&held_url, &[("x-delay-ms", "3000")]).await });
    assert!(eventually(Duration::from_secs(10), || up.requests() == 1).await);
    let mut s = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let head = "POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n";
    s.write_all(head.as_bytes()).await.expect("head");
    let mut told = [0u8; 25];
    s.read_exact(&mut told).await.expect("an answer");
    assert_eq!(
        &told,
        b"HTTP/1.1 100 Continue\r\n\r\n",
        "{}",
        String::from_utf8_lossy(&told)
    );
    s.write_all(b"hello").await.expect("body");
    let mut answer = [0u8; 12];
    s.read_exact(&mut answer).await.expect("the answer");
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert_eq!(holder.await.expect("holder").status, 200);
}
