//! A tunnel's bytes are metered as they pass, each way, as a body's are: at its key's
//! bound a tunnel waits for the key to refill (within `max_delay`) and is then closed,
//! so one WebSocket cannot move more than its `request_bytes` / `response_bytes` tiers
//! allow while it runs, nor run its key into a debt it pays only at its end. Raw sockets
//! on both sides (a client and an upstream that answer nothing on their own: a flood
//! and a sink), on the memory store and on Redis. HTTP/1.1 only: an HTTP/2 request
//! does not upgrade.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tunnel_raw::{open, tunnel_upstream, After};
use crate::support::*;

const KIB: u64 = 1024;
/// The most a test moves through a tunnel its tier does not close: ten times the burst.
const FLOOD: u64 = 1000 * KIB;

/// A route `/t` to `upstream` with one tier paid by `settle` bytes, a KiB a unit:
/// `burst` KiB, refilled at `limit` a `period`, no debt (a key's bound is its burst).
pub(super) fn tunnel_route(
    settle: &str,
    (limit, period, burst): (u64, &str, u64),
    extra: &str,
) -> Fixture {
    Fixture::new().upstream("ws", "").policy_raw(
        "bytes",
        format!("key = \"ip\"\nlimit = {limit}\nperiod = \"{period}\"\nburst = {burst}\nreserve = 1\nsettle = \"{settle}\"\nsettle_unit = 1024\nmax_debt = 0\n{extra}"),
    ).route("ws", "/t", "ws", &["bytes"])
}

/// Reads until the tunnel closes or `FLOOD` bytes came (then the tier did not close it).
pub(super) async fn download(s: &mut TcpStream, mut got: u64) -> (u64, bool) {
    let mut buf = vec![0u8; 64 * 1024];
    while got < FLOOD {
        match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (got, true),
            Ok(Ok(n)) => got += n as u64,
            Err(_) => return (got, false),
        }
    }
    (got, false)
}

/// Writes `FLOOD` bytes (what the kernel's buffers take, once the gateway stops reading)
/// and reads: whether the gateway then closed the tunnel (within 30 s).
async fn upload(s: &mut TcpStream) -> bool {
    let chunk = vec![1u8; 16 * 1024];
    let mut sent = 0;
    while sent < FLOOD {
        match tokio::time::timeout(Duration::from_secs(5), s.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len() as u64,
            Ok(Err(_)) => return true,
            Err(_) => break, // the buffers are full: the gateway stopped reading
        }
    }
    let mut buf = [0u8; 1024];
    matches!(
        tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// The key's units left, as the admin API shows them.
async fn remaining(gw: &TestGateway) -> u64 {
    let state = get(&gw.admin_url("/admin/limits/bytes/127.0.0.1"), &[]).await;
    state.json()["remaining"].as_u64().expect("remaining")
}

#[tokio::test]
async fn a_tunnel_is_closed_when_its_response_bytes_run_out() {
    let (up, _) = tunnel_upstream(After::Flood).await;
    let toml = tunnel_route("response_bytes", (100, "1h", 100), "").build();
    let gw = TestGateway::start(&toml, &format!("http://{up}")).await;
    let (mut s, after_head) = open(gw.addr).await;
    let (got, closed) = download(&mut s, after_head).await;
    assert!(closed, "the tier closed the flood: {got} bytes came");
    assert!(got <= 100 * KIB, "no more than the burst came: {got}");
    assert!(
        got >= 50 * KIB,
        "the burst's bytes came before the close: {got}"
    );
    charged_for(&gw, got).await;
    // Counted as the tunnel's task ends, which may be after the client saw the close.
    let metrics = gw.admin_url("/metrics");
    let counted = "tollgate_tunnels_closed_total{result=\"budget\"} 1\n";
    let budget = eventually_async(Duration::from_secs(30), || async {
        get(&metrics, &[]).await.text().contains(counted)
    })
    .await;
    assert!(budget, "{}", get(&metrics, &[]).await.text());
}

#[tokio::test]
async fn a_tunnel_is_closed_when_its_request_bytes_run_out() {
    let (up, received) = tunnel_upstream(After::Sink).await;
    let toml = tunnel_route("request_bytes", (100, "1h", 100), "").build();
    let gw = TestGateway::start(&toml, &format!("http://{up}")).await;
    let (mut s, _) = open(gw.addr).await;
    let closed = upload(&mut s).await;
    let ended = eventually(Duration::from_secs(30), || {
        received.ended.load(Ordering::SeqCst)
    })
    .await;
    let arrived = received.bytes.load(Ordering::SeqCst);
    assert!(
        closed && ended,
        "the tier closed the upload: {arrived} bytes arrived"
    );
    assert!(
        arrived <= 100 * KIB,
        "no more than the burst arrived: {arrived}"
    );
    assert!(arrived >= 50 * KIB, "the burst's bytes arrived: {arrived}");
    charged_for(&gw, arrived).await;
}

/// Waits until the key's units left show `passed` bytes charged (a KiB a unit, of a
/// burst of 100).
async fn charged_for(gw: &TestGateway, passed: u64) {
    let units = passed.div_ceil(KIB);
    let settled = eventually_async(Duration::from_secs(30), || async {
        remaining(gw).await + units <= 100
    })
    .await;
    assert!(
        settled,
        "{units} units passed: {} left",
        remaining(gw).await
    );
}

/// On Redis, the draws are the store's calls: the same bound, across two tunnels of one
/// key through two gateways.
#[tokio::test]
async fn tunnels_through_two_gateways_on_redis_share_the_bound() {
    let redis = RedisServer::start();
    let (up, _) = tunnel_upstream(After::Flood).await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"5s\"\n",
        redis.url()
    );
    let toml = tunnel_route("response_bytes", (200, "1h", 200), "")
        .store(store)
        .build();
    let a = TestGateway::start(&toml, &format!("http://{up}")).await;
    let b = TestGateway::start(&toml, &format!("http://{up}")).await;
    let (mut sa, head_a) = open(a.addr).await;
    let (mut sb, head_b) = open(b.addr).await;
    let ((got_a, closed_a), (got_b, closed_b)) =
        tokio::join!(download(&mut sa, head_a), download(&mut sb, head_b));
    assert!(
        closed_a && closed_b,
        "both closed: {got_a} and {got_b} bytes came"
    );
    let got = got_a + got_b;
    assert!(got <= 200 * KIB, "together no more than the burst: {got}");
    assert!(got >= 100 * KIB, "the burst's bytes came: {got}");
}

/// At the bound a tunnel waits for its key to refill, within `max_delay`: it stays open
/// and moves what the rate refills, no more.
#[tokio::test]
async fn a_tunnel_at_its_bound_waits_for_the_refill() {
    let (up, _) = tunnel_upstream(After::Flood).await;
    // 20 KiB of burst, refilled at 50 KiB a second.
    let toml = tunnel_route("response_bytes", (50, "1s", 20), "max_delay = \"30s\"\n").build();
    let gw = TestGateway::start_real_clock(&toml, &format!("http://{up}")).await;
    let started = Instant::now();
    let (mut s, mut got) = open(gw.addr).await;
    let mut buf = vec![0u8; 64 * 1024];
    while started.elapsed() < Duration::from_secs(3) {
        let read = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await;
        let n = read
            .expect("the tunnel waits, it does not stall")
            .expect("open");
        assert!(
            n > 0,
            "the tunnel stays open at its bound: {got} bytes came"
        );
        got += n as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The admission reserved a unit; the chunk a draw takes ahead is at most the burst.
    let bound = (20.0 + 50.0 * elapsed + 20.0) * KIB as f64;
    assert!(
        (got as f64) <= bound,
        "{got} bytes in {elapsed:.1} s: no more than the rate refills ({bound:.0})"
    );
    assert!(
        got > 20 * KIB,
        "more than the burst came, as the key refilled: {got}"
    );
}

/// A tunnel draws only what its bytes need: units drawn a chunk ahead (as a body does)
/// were held for as long as the tunnel stayed open, and two idle WebSockets of a key
/// that had moved 4 KiB refused its plain requests for 18 minutes.
#[tokio::test]
async fn an_open_tunnel_holds_no_units_ahead_of_its_bytes() {
    let (up, _) = tunnel_upstream(After::Send(2000)).await;
    let toml = tunnel_route("response_bytes", (100, "1h", 100), "").build();
    let gw = TestGateway::start(&toml, &format!("http://{up}")).await;
    let (mut s, mut got) = open(gw.addr).await;
    let mut buf = [0u8; 4096];
    while got < 2000 {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("the bytes in time")
            .expect("open");
        assert!(n > 0, "the tunnel stays open");
        got += n as u64;
    }
    // The reserve and the 2 units the bytes took, while the tunnel is open.
    let left = remaining(&gw).await;
    assert!(left >= 97, "{left} left: units held ahead of the bytes");
    drop(s);
    // Both sides closed: counted as ended.
    let metrics = gw.admin_url("/metrics");
    let counted = "tollgate_tunnels_closed_total{result=\"ended\"} 1\n";
    let ended = eventually_async(Duration::from_secs(30), || async {
        get(&metrics, &[]).await.text().contains(counted)
    })
    .await;
    assert!(ended, "{}", get(&metrics, &[]).await.text());
}

/// A key whose whole bound is smaller than a read (10 KiB here, against 16 KiB reads)
/// still moves what it holds: a read is never larger than the bound, which a larger one
/// could never be paid from (the tunnel moved nothing, then closed).
#[tokio::test]
async fn a_key_whose_bound_is_under_a_read_still_moves_its_bytes() {
    let (up, _) = tunnel_upstream(After::Flood).await;
    let toml = Fixture::new()
        .upstream("ws", "")
        .policy_raw(
            "bytes",
            "key = \"ip\"\nlimit = 1\nperiod = \"1h\"\nburst = 5\nreserve = 1\nsettle = \"response_bytes\"\nsettle_unit = 1024\nmax_debt = 5\n",
        )
        .route("ws", "/t", "ws", &["bytes"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{up}")).await;
    let (mut s, after_head) = open(gw.addr).await;
    let (got, closed) = download(&mut s, after_head).await;
    assert!(closed, "closed at the bound: {got} bytes came");
    assert!(got >= 5 * KIB, "what the key holds came: {got}");
    assert!(got <= 10 * KIB, "no more than the bound: {got}");
}

/// A shadow tier never holds or cuts what it counts (`mode = "shadow"`): a tunnel or a
/// download through one passes whole, and the tier is charged what moved at the end.
#[tokio::test]
async fn a_shadow_bytes_tier_cuts_no_tunnel_and_no_body() {
    let (ws, _) = tunnel_upstream(After::Flood).await;
    let up = Upstream::start().await;
    let shadow = "key = \"ip\"\nlimit = 100\nperiod = \"1h\"\nburst = 100\nreserve = 1\nsettle = \"response_bytes\"\nsettle_unit = 1024\nmax_debt = 0\nmode = \"shadow\"\n";
    let toml = Fixture::new()
        .upstream_raw("ws", format!("targets = [\"http://{ws}\"]\n"))
        .policy_raw("bytes", shadow)
        .route("ws", "/t", "ws", &["bytes"])
        .route("down", "/down", "api", &["bytes"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let (mut s, after_head) = open(gw.addr).await;
    let (got, closed) = download(&mut s, after_head).await;
    assert!(
        !closed && got >= FLOOD,
        "the flood passed: {got} bytes, closed {closed}"
    );
    drop(s);
    // Charged at the end, at most what an enforcing tier could have been: its key's
    // bound (100 units of 36 s), not the ~1,000 KiB that passed (10 hours of debt).
    let admin = gw.admin_url("/admin/limits/bytes/127.0.0.1");
    let ahead = || async {
        get(&admin, &[]).await.json()["tat_ms"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let settled = eventually_async(Duration::from_secs(30), || async { ahead().await > 0.0 }).await;
    assert!(settled, "the shadow tier is charged what moved");
    let ahead_ms = ahead().await;
    assert!(
        ahead_ms <= 3_600_000.0,
        "charged past its bound: {ahead_ms} ms ahead"
    );
    for http2 in [false, true] {
        let client = if http2 {
            super::support::http2()
        } else {
            http1()
        };
        let url = gw.url("/down/bytes?n=400000");
        let r = send(&client, "GET", &url, &[], b"").await;
        assert_eq!(
            (r.status.as_u16(), r.body.len()),
            (200, 400_000),
            "http2 {http2}"
        );
    }
}

/// An HTTP/1.0 request's `Upgrade` is ignored (RFC 9110 §7.8): not asked of the upstream,
/// and a `101` it answers anyway is the upstream's mistake, not a tunnel.
#[tokio::test]
async fn an_http10_request_does_not_upgrade() {
    let (up, _) = tunnel_upstream(After::Flood).await;
    let toml = tunnel_route("response_bytes", (100, "1h", 100), "").build();
    let gw = TestGateway::start(&toml, &format!("http://{up}")).await;
    let head = "GET /t HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let (answer, _) = raw(gw.addr, head.as_bytes()).await;
    assert_eq!(raw_status(&answer), 502, "{answer}");
    assert!(answer.contains("upstream_bad_upgrade"), "{answer}");
}
