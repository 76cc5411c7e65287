//! What refused and waiting requests cost a Redis-backed fleet: refused ones nothing (a
//! remembered refusal or full key answers them), waiting ones about a call a second per
//! key, however many wait.

use std::time::{Duration, Instant};

use super::bounds::open;
use crate::support::*;

fn on_redis(redis: &RedisServer) -> Fixture {
    Fixture::new().store(format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    ))
}

/// `n` GETs of `url` as `key`, half over HTTP/1.1 and half over HTTP/2, 8 at a time: how
/// many were refused.
async fn flood(url: &str, key: &str, n: usize) -> usize {
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (url, key) = (url.to_owned(), key.to_owned());
        tasks.push(tokio::spawn(async move {
            let client = if worker % 2 == 0 { http1() } else { http2() };
            let mut refused = 0;
            for _ in 0..n / 8 {
                let got = send(&client, "GET", &url, &[("x-api-key", &key)], b"").await;
                refused += usize::from(got.status == 429);
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("flood");
    }
    refused
}

/// A concurrency key found full is remembered so: a flood of requests on it is refused
/// without a call each. (Before: 501,834 refusals cost 502,107 script calls.)
#[tokio::test]
async fn a_flood_on_a_full_concurrency_key_costs_almost_no_calls() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = on_redis(&redis)
        .policy_raw("one", "key = \"header:x-api-key\"\nmax_in_flight = 1\n")
        .route("api", "/", "api", &["one"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/v1/echo", "x-api-key", "warm-up")
        .await;
    let url = gw.url("/v1/slow");
    let holder = tokio::spawn(async move { get(&url, &[("x-api-key", "busy")]).await });
    assert!(eventually(Duration::from_secs(10), || up.requests() >= 2).await);
    let monitor = redis.monitor();
    let started = Instant::now();
    let refused = flood(&gw.url("/v1/echo"), "busy", 400).await;
    assert_eq!(refused, 400, "every one refused: the slot is taken");
    // The first requests of the 8 flooding clients may each ask before the key is
    // remembered full; then about one a second, when the memory runs out.
    let calls = monitor.decision_calls();
    let seconds = started.elapsed().as_secs() + 1;
    assert!(
        calls as f64 <= 0.1 * 400.0 && calls <= 8 + 2 * seconds,
        "{calls} calls for 400 refusals in {seconds} s"
    );
    holder.abort();
}

/// On a route with a rate tier and a concurrency tier, a key the rate tier refuses costs
/// no call: the refusal is known before any slot is taken. (Before: 2 calls a request.)
#[tokio::test]
async fn a_refused_key_on_a_mixed_route_costs_no_calls() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = on_redis(&redis)
        .policy("rate", "header:x-api-key", 1, "1h", 1)
        .policy_raw("slots", "key = \"header:x-api-key\"\nmax_in_flight = 5\n")
        .route("api", "/", "api", &["slots", "rate"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/v1/echo", "x-api-key", "warm-up")
        .await;
    let h = [("x-api-key", "mallory")];
    assert_eq!(get(&gw.url("/v1/echo"), &h).await.status, 200);
    assert_eq!(get(&gw.url("/v1/echo"), &h).await.status, 429);
    let monitor = redis.monitor();
    let refused = flood(&gw.url("/v1/echo"), "mallory", 400).await;
    assert_eq!(refused, 400);
    let calls = monitor.decision_calls();
    assert!(calls <= 40, "{calls} calls for 400 refusals");
}

/// Requests waiting for slots of full keys poll Redis ever less often: after the first
/// seconds, about one call a second per key, however long they wait. (Before: every
/// 50 ms — 100 waiters on 100 keys cost 1,976 calls a second.)
#[tokio::test]
async fn waiters_cost_about_a_call_a_second_per_key() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = on_redis(&redis)
        .policy_raw(
            "one",
            // A long lease: its holder refreshes every 20 s, outside the window measured.
            "key = \"header:x-api-key\"\nmax_in_flight = 1\nmax_delay = \"20s\"\nlease_ttl = \"60s\"\n",
        )
        .route("api", "/", "api", &["one"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/v1/echo", "x-api-key", "warm-up")
        .await;
    const KEYS: usize = 10;
    let mut tasks = Vec::new();
    for k in 0..KEYS {
        let key = format!("k{k}");
        let url = gw.url("/v1/slow");
        let holder_key = key.clone();
        tasks.push(tokio::spawn(async move {
            get(&url, &[("x-api-key", &holder_key)]).await
        }));
        for _ in 0..5 {
            let (url, key) = (gw.url("/v1/echo"), key.clone());
            tasks.push(tokio::spawn(async move {
                get(&url, &[("x-api-key", &key)]).await
            }));
        }
    }
    assert!(eventually(Duration::from_secs(10), || up.requests() > KEYS).await);
    // Past the first backoff steps (50 ms … 800 ms): measure 4 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let monitor = redis.monitor();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = monitor.decision_calls();
    let per_key_per_s = calls as f64 / KEYS as f64 / started.elapsed().as_secs_f64();
    assert!(
        per_key_per_s <= 1.2,
        "{calls} calls in {:?}: {per_key_per_s:.2} a second per key",
        started.elapsed()
    );
    for t in tasks {
        t.abort();
    }
}

#[tokio::test]
async fn a_refused_flood_against_redis_costs_no_round_trips_and_honest_clients_pass() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = open()
        .store(format!(
            r#"
            backend = "redis"
            url = "{}"
            timeout = "500ms"
            on_error = "allow"
            "#,
            redis.url()
        ))
        .policy("user", "header:x-user", 1, "1h", 2)
        .route("api", "/api", "api", &["user"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mallory = [("x-user", "mallory")];
    let charged = Instant::now();
    for _ in 0..2 {
        assert_eq!(get(&gw.url("/api"), &mallory).await.status, 200);
    }
    assert_eq!(get(&gw.url("/api"), &mallory).await.status, 429);
    let monitor = redis.monitor();
    const FLOOD: usize = 400;
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let url = gw.url("/api");
        tasks.push(tokio::spawn(async move {
            let client = if worker % 2 == 0 { http1() } else { http2() };
            let mut refused = 0;
            for _ in 0..FLOOD / 16 {
                let got = send(&client, "GET", &url, &[("x-user", "mallory")], b"").await;
                refused += usize::from(got.status == 429);
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("flood task");
    }
    assert_eq!(refused, FLOOD, "every flooded request refused");
    let calls = monitor.decision_calls();
    assert_eq!(
        calls, 0,
        "{calls} Redis calls for {FLOOD} requests refused from the refusal cache"
    );
    for user in ["alice", "bob", "carol"] {
        let got = get(&gw.url("/api"), &[("x-user", user)]).await;
        assert_eq!(got.status, 200, "honest {user}");
    }
    let got = get(&gw.url("/api"), &mallory).await;
    assert_eq!(got.status, 429);
    // Two admissions put the TAT 2 h ahead of the first (τ = 2 h): a third is admitted
    // 1 h after the first, whole seconds rounded up.
    let since_charged = charged.elapsed().as_secs();
    let wait: u64 = got.num("retry-after");
    assert!(
        (3599 - since_charged..=3600).contains(&wait),
        "the exact wait, from Redis's TAT: {wait} s, {since_charged} s after the first"
    );
}
