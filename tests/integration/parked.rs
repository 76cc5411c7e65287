//! Requests parked by the hundred: what each costs the gateway while it waits (in a
//! concurrency queue), the gateway-wide bound on requests in flight, and a request held by
//! `max_delay` until its turn.

use std::time::{Duration, Instant};

use crate::support::*;

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Opens `conns` HTTP/2 connections of `per` streams each, every one a GET as `key` that
/// stays unanswered; returns the connections (keep them to keep the streams).
async fn park(
    addr: std::net::SocketAddr,
    conns: usize,
    per: usize,
    key: &str,
) -> Vec<(
    h2::client::SendRequest<bytes::Bytes>,
    Vec<h2::client::ResponseFuture>,
)> {
    let mut out = Vec::new();
    for _ in 0..conns {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (client, conn) = h2::client::handshake(tcp).await.expect("h2");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.expect("ready");
        let mut streams = Vec::new();
        for _ in 0..per {
            let req = http::Request::get("http://x/v1/echo")
                .header("x-api-key", key)
                .body(())
                .expect("request");
            let (resp, _) = client.send_request(req, true).expect("send");
            streams.push(resp);
            client = client.ready().await.expect("ready");
        }
        out.push((client, streams));
    }
    out
}

/// 1,000 requests waiting for a concurrency slot over 10 HTTP/2 connections cost the
/// gateway at most 32 KiB each. (Before: about 106 KiB each.)
#[tokio::test]
async fn a_parked_request_costs_little_memory() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let toml = Fixture::new()
        .server("workers = 1\nmax_streams = 100\n")
        .policy_raw(
            "one",
            "key = \"header:x-api-key\"\nmax_in_flight = 1\nmax_delay = \"60s\"\n",
        )
        .route("api", "/", "api", &["one"])
        .build_for(&up.url());
    std::fs::write(&path, toml).expect("write");
    let gw = Process::run(&path);
    let pid = gw.child.id();
    // Each key's one slot held by a request the upstream answers only after 30 s.
    let mut holders = Vec::new();
    for key in ["warm", "parked"] {
        let url = format!("http://{}/v1/slow", gw.addr);
        holders.push(tokio::spawn(async move {
            get(&url, &[("x-api-key", key)]).await
        }));
    }
    assert!(eventually(Duration::from_secs(10), || up.requests() == 2).await);
    let admin = gw.admin.expect("admin");
    let waiting = |key: &'static str, n: u64| async move {
        let url = format!("http://{admin}/admin/limits/one/{key}");
        eventually_async(Duration::from_secs(30), || async {
            get(&url, &[]).await.json()["waiting"].as_u64() == Some(n)
        })
        .await
    };
    // Warm the allocator and the connection machinery with a first round.
    let warm = park(gw.addr, 2, 100, "warm").await;
    assert!(waiting("warm", 200).await, "the warm-up streams wait");
    let before = rss_kib(pid);
    let parked = park(gw.addr, 10, 100, "parked").await;
    assert!(waiting("parked", 1000).await, "1,000 more wait");
    // Memory settles once every stream is parked.
    let mut after = rss_kib(pid);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = after.max(rss_kib(pid));
    }
    let per = (after.saturating_sub(before)) / 1000;
    eprintln!("1,000 parked requests: RSS {before} -> {after} KiB, {per} KiB each");
    assert!(per <= 32, "{per} KiB per parked request");
    drop((parked, warm, holders));
}

/// Past `[server] max_requests` a request is answered 503 `overloaded` at once, counted,
/// over HTTP/1.1 and HTTP/2; a held request ending frees its place. (Before: no
/// gateway-wide bound — 10,000 connections × 100 streams allowed.)
#[tokio::test]
async fn requests_past_max_requests_are_refused_and_counted() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .server("workers = 1\nmax_requests = 20\n")
        .route("api", "/", "api", &[])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    // 20 requests held by an upstream that answers in 3 s.
    let mut held = Vec::new();
    for _ in 0..20 {
        let url = gw.url("/v1/echo");
        held.push(tokio::spawn(async move {
            get(&url, &[("x-delay-ms", "3000")]).await.status.as_u16()
        }));
    }
    assert!(eventually(Duration::from_secs(10), || up.requests() == 20).await);
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &gw.url("/v1/echo"), &[], b"").await;
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.json()["error"], "overloaded");
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(metric(&metrics, "tollgate_requests_overloaded_total"), 2.0);
    for h in held {
        assert_eq!(h.await.expect("task"), 200);
    }
    assert_eq!(
        get(&gw.url("/v1/echo"), &[]).await.status,
        200,
        "places freed"
    );
}

/// `max_delay` holds a request the limiter would refuse now but admit within it, then
/// forwards it; past it, the refusal is immediate.
#[tokio::test]
async fn max_delay_holds_then_forwards() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "smooth",
            r#"
            key = "ip"
            limit = 1
            period = "1s"
            burst = 1
            max_delay = "2s"
            "#,
        )
        .route("api", "/", "api", &["smooth"])
        .build();
    // The fake clock stands still, so the limiter's holds are exact (none, 1 s, 2 s) and
    // a fourth request would need 3 s; the holds themselves take real time.
    let gw = TestGateway::start(&toml, &up.url()).await;
    let admitted = r#"tollgate_decisions_total{route="api",policy="smooth",outcome="admitted"}"#;
    let metrics_url = gw.admin_url("/metrics");
    let mut held = Vec::new();
    for n in 1..=3 {
        let url = gw.url(&format!("/{n}"));
        held.push(tokio::spawn(async move {
            let started = Instant::now();
            let status = get(&url, &[]).await.status.as_u16();
            (status, started.elapsed())
        }));
        // One after the other: the next is sent once this one has been admitted.
        let decided = metric_reaches(
            Duration::from_secs(20),
            &metrics_url,
            admitted,
            f64::from(n),
        )
        .await;
        assert!(decided, "request {n} admitted");
    }
    let started = Instant::now();
    let d = get(&gw.url("/4"), &[]).await;
    let d_took = started.elapsed();
    assert_eq!(d.status, 429, "a fourth would wait 3 s > max_delay");
    assert_eq!(
        d.json()["retry_after_ms"],
        1000,
        "admitted within max_delay one interval later"
    );
    assert!(
        d_took < Duration::from_millis(1500),
        "the refusal is immediate, not held: {d_took:?}"
    );
    let mut took = Vec::new();
    for (n, task) in held.into_iter().enumerate() {
        let (status, elapsed) = task.await.expect("request task");
        assert_eq!(status, 200, "request {}", n + 1);
        took.push(elapsed);
    }
    // The second and third were held one and two intervals.
    assert!(took[1] >= Duration::from_secs(1), "held: {took:?}");
    assert!(took[2] >= Duration::from_secs(2), "held: {took:?}");
    assert_eq!(up.requests(), 3);
}

/// A bound written as large as TOML holds (`i64::MAX`) is no bound, not a start that
/// panics: `max_connections` and `max_requests` past what a semaphore counts are
/// clamped, and requests and rate limit calls are served.
#[tokio::test]
async fn the_largest_bounds_toml_holds_start_and_serve() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .server("max_connections = 9223372036854775807\nmax_requests = 9223372036854775807\n")
        .policy("tenant", "header:x-tenant", 10, "1s", 10)
        .route("api", "/", "api", &[])
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &gw.url("/v1/echo"), &[], b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let call = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(&[("tenant", "acme")])],
        hits_addend: 1,
    };
    assert_eq!(rls.call(call).await.expect("answered").overall_code, OK);
}
