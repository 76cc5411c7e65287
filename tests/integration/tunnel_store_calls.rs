//! A tunnel metered on Redis calls the store for the units its bytes need, none ahead (an
//! idle tunnel holds nothing): a client writing a byte at a time made Redis work a call
//! for each byte of budget. A way that just called the store now reads again only 10 ms
//! later, and then all that came meanwhile. Raw sockets: a WebSocket library would
//! frame and buffer the writes. HTTP/1.1 only: an HTTP/2 request does not upgrade.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::tunnel_raw::{open_with, tunnel_upstream, After};
use crate::support::*;

#[tokio::test]
async fn a_tunnel_written_a_byte_at_a_time_calls_redis_at_most_a_hundred_times_a_second() {
    let redis = RedisServer::start();
    let (up, sunk) = tunnel_upstream(After::Sink).await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"5s\"\n",
        redis.url()
    );
    let toml = Fixture::new()
        .upstream("ws", "")
        .policy_raw(
            "bytes",
            "key = \"ip\"\nlimit = 1000000\nperiod = \"1h\"\nburst = 1000000\nreserve = 1\nsettle = \"request_bytes\"\nsettle_unit = 1\nmax_debt = 0\n",
        )
        .route("ws", "/t", "ws", &["bytes"])
        .store(store)
        .build();
    let gw = TestGateway::start_real_clock(&toml, &format!("http://{up}")).await;
    let (mut s, _) = open_with(gw.addr, "").await;
    let before = redis.script_calls();
    let started = Instant::now();
    const BYTES: u64 = 400;
    for _ in 0..BYTES {
        s.write_all(b"x").await.expect("write");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let all_came = eventually(Duration::from_secs(30), || {
        sunk.bytes.load(Ordering::Relaxed) == BYTES
    })
    .await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let calls = redis.script_calls() - before;
    assert!(
        all_came,
        "{} of {BYTES} bytes came",
        sunk.bytes.load(Ordering::Relaxed)
    );
    // One call per 10 ms of the writing at most, and a few to spare.
    assert!(
        calls <= elapsed_ms / 10 + 10,
        "{calls} script calls for {BYTES} bytes in {elapsed_ms} ms"
    );
}
