//! A leased key's slice when a request or the key's state goes. A client that hangs up
//! while its request fetches the key's next slice: the slice Redis granted goes into the
//! table all the same, and the key's other clients are served from it (were it lost,
//! every hang-up would burn up to a quarter of the key's burst in Redis for the price of
//! one request). An admin reset of the key: the gateway's slice goes with it.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::lease::{four_requests_into_a_slice, metric_of};
use crate::support::*;

const TENANT: [(&str, &str); 1] = [("x-tenant-id", "acme")];

/// What the key has left in Redis, as the admin API reads it (only while Redis takes
/// commands: a paused one holds the read back too).
async fn remaining(gw: &TestGateway) -> u64 {
    let state = get(&gw.admin_url("/admin/limits/hot/acme"), &[]).await;
    let left = state.json()["remaining"].as_u64();
    left.unwrap_or_else(|| panic!("{} {}", state.status, state.text()))
}

async fn slices_granted(gw: &TestGateway) -> f64 {
    let text = get(&gw.admin_url("/metrics"), &[]).await.text();
    metric_of(&text, "tollgate_lease_calls_total{result=\"granted\"}")
}

/// Clients Redis holds back (paused writes), as `INFO clients` counts them.
fn blocked_clients(redis: &RedisServer) -> u64 {
    let info = redis.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no blocked_clients in {info}"))
}

/// A request of tenant `acme`, sent and given up once Redis holds its call back.
enum HangUp {
    /// The HTTP/2 stream reset (the connection closed with it).
    Http2,
    /// An HTTP/1.1 connection closed by a raw client.
    Http1,
}

async fn send_then_hang_up(gw: &TestGateway, redis: &RedisServer, how: HangUp) {
    let held_back = || async { blocked_clients(redis) >= 1 };
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    match how {
        HangUp::Http2 => {
            let (h2, conn) = h2::client::handshake(tcp).await.expect("h2");
            let connection = tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut h2 = h2.ready().await.expect("ready");
            let req = http::Request::get("http://x/")
                .header(TENANT[0].0, TENANT[0].1)
                .body(())
                .expect("request");
            let (response, _) = h2.send_request(req, true).expect("send");
            assert!(
                eventually_async(Duration::from_secs(20), held_back).await,
                "the slice fetch reached Redis"
            );
            drop(response);
            drop(h2);
            connection.abort();
        }
        HangUp::Http1 => {
            let mut tcp = tcp;
            tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-tenant-id: acme\r\n\r\n")
                .await
                .expect("write");
            assert!(
                eventually_async(Duration::from_secs(20), held_back).await,
                "the slice fetch reached Redis"
            );
            drop(tcp);
        }
    }
}

async fn a_slice_fetched_for_a_client_gone_serves_the_next(how: HangUp) {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // 4 requests: 1 decided in Redis, then a slice of 25 (T = 1 s, burst 100, the fake
    // clock standing still: nothing refills, no slice goes idle).
    let (gw, _) = four_requests_into_a_slice(&redis, &up).await;
    for _ in 0..22 {
        assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    }
    assert_eq!(
        remaining(&gw).await,
        74,
        "the slice used up, nothing more asked"
    );
    let granted = slices_granted(&gw).await;
    // Writes held back: the next request's fetch waits in Redis while its client goes.
    assert_eq!(
        redis.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]).trim(),
        "OK"
    );
    send_then_hang_up(&gw, &redis, how).await;
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]).trim(), "OK");
    let landed = eventually_async(Duration::from_secs(20), || async {
        slices_granted(&gw).await > granted
    })
    .await;
    assert!(landed, "the fetch completed after the client left");
    assert_eq!(remaining(&gw).await, 49, "a slice of 25 charged");
    // Its units serve the key's next requests without another call: 25 when the gateway
    // saw the hang-up before the slice came (the gone request's unit went back into it),
    // 24 when the slice came first (the request took its unit and went upstream, its
    // client gone a moment later). Either way none is lost.
    for i in 0..24 {
        assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200, "request {i}");
    }
    assert_eq!(
        slices_granted(&gw).await,
        granted + 1.0,
        "no second slice was fetched"
    );
    assert_eq!(remaining(&gw).await, 49, "nothing charged beyond the slice");
}

#[tokio::test]
async fn a_slice_fetched_for_an_http2_client_gone_serves_the_next() {
    a_slice_fetched_for_a_client_gone_serves_the_next(HangUp::Http2).await;
}

#[tokio::test]
async fn a_slice_fetched_for_an_http1_client_gone_serves_the_next() {
    a_slice_fetched_for_a_client_gone_serves_the_next(HangUp::Http1).await;
}

/// An admin reset of a leased key leaves this gateway's slices unusable: their units came
/// from the state forgotten (the reset key's), and spent after the reset they would come
/// on top of the fresh burst. (Every gateway of the fleet does the same when it sees the
/// overrides' version move, within about a second.)
#[tokio::test]
async fn a_reset_leaves_the_gateways_slices_unusable() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (gw, _) = four_requests_into_a_slice(&redis, &up).await;
    let reset = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/hot/acme"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    assert_eq!(remaining(&gw).await, 100, "the key forgotten in Redis");
    assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    let left = remaining(&gw).await;
    assert!(
        left < 100,
        "the request after the reset is charged in Redis (a new slice), not served from the old one: {left}"
    );
}

/// A reload while Redis holds every call (writes paused) gives slices back within one
/// bound, however many there are: each give-back waits out the store's timeout (twice),
/// and a hundred of them one after another held the reload — and every reload queued
/// behind it — for 40 s. What is not given back in time expires.
#[tokio::test]
async fn a_reload_with_redis_holding_every_call_is_not_held_a_timeout_per_slice() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = super::lease::leased(&redis, "limit = 1\nperiod = \"1s\"\nburst = 100\n")
        .build()
        .replace("timeout = \"5s\"", "timeout = \"200ms\"");
    assert!(toml.contains("timeout = \"200ms\""), "{toml}");
    let gw = TestGateway::start(&toml, &up.url()).await;
    // Two requests a tenant: the first decided in Redis, the second takes a slice.
    for k in 0..100 {
        let tenant = format!("tenant-{k}");
        for _ in 0..2 {
            let r = get(&gw.url("/"), &[("x-tenant-id", &tenant)]).await;
            assert_eq!(r.status, 200, "{tenant}");
        }
    }
    assert!(slices_granted(&gw).await >= 100.0, "a slice a tenant");
    assert_eq!(
        redis.cli(&["CLIENT", "PAUSE", "60000", "WRITE"]).trim(),
        "OK"
    );
    let started = std::time::Instant::now();
    let reloaded = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    let took = started.elapsed();
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]).trim(), "OK");
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    // The bound is 5 s (four timeouts of 200 ms are less); a timeout per slice is 40 s.
    assert!(took < Duration::from_secs(25), "the reload took {took:?}");
}
