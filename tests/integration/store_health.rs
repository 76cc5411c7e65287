//! Store health you can see: with Redis down, the binary says at once where and why, the
//! metric names the cause, `/readyz` says why it is not ready and `/admin/stats` shows the
//! store's address, breaker and last error — never its password, and from the first
//! request also when the fleet's key secret could never be read; with Sentinel, how many
//! Sentinels answer (none: still ready, said once); a Redis out of memory named so, and
//! which gateway drew the fleet's secret.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_redis_that_cannot_be_reached_is_named_with_its_cause() {
    let up = Upstream::start().await;
    // Nothing listens on this port; the URL carries a password that must never show.
    let port = free_port();
    let (_dir, gw) = gateway_on(unreachable_redis(port), &up);
    let address = format!("127.0.0.1:{port}");
    check_start_log(&gw, &address).await;

    // Requests take on_error (deny): 503, and the metric says why.
    let url = format!("http://{}/", gw.addr);
    for _ in 0..5 {
        assert_eq!(get(&url, &[("x-k", "a")]).await.status, 503);
    }
    let admin = gw.admin.expect("admin");
    let metrics = metrics_naming_the_cause(admin).await;
    let why = readyz_saying_why(admin, &address).await;
    let stats = stats_showing_the_store(admin, &address).await;

    // The password appears nowhere an operator looks.
    let config = get(&format!("http://{admin}/admin/config"), &[])
        .await
        .text();
    for (what, text) in [
        ("log", gw.log()),
        ("metrics", metrics),
        ("readyz", why),
        ("stats", stats.to_string()),
        ("config", config),
    ] {
        assert!(
            !text.contains("hunter2-secret"),
            "{what} shows the password: {text}"
        );
    }
}

/// The `[store]` of a Redis on `port`, where nothing listens, with a password.
fn unreachable_redis(port: u16) -> String {
    format!(
        "backend = \"redis\"\nurl = \"redis://:hunter2-secret@127.0.0.1:{port}\"\ntimeout = \"100ms\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n"
    )
}

/// The binary on `store` (its `[store]` table's body): one `tenant` tier, 10 a second,
/// keyed by `x-k` on every path.
pub(super) fn gateway_on(store: String, up: &Upstream) -> (tempfile::TempDir, Process) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = Fixture::new()
        .store(store)
        .policy("tenant", "header:x-k", 10, "1s", 10)
        .route("api", "/", "api", &["tenant"])
        .build_for(&up.url());
    std::fs::write(&path, text).expect("write");
    (dir, Process::run(&path))
}

/// The binary says at once that Redis cannot be reached, where and why.
async fn check_start_log(gw: &Process, address: &str) {
    assert!(
        eventually(Duration::from_secs(10), || gw
            .log()
            .contains("Redis cannot be reached at start"))
        .await,
        "{}",
        gw.log()
    );
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains("Redis cannot be reached at start"))
        .expect("the line");
    assert!(
        line.contains(address) && line.contains("cause=\"connection_refused\""),
        "{line}"
    );
}

/// The metrics, which name the cause of the store errors.
async fn metrics_naming_the_cause(admin: SocketAddr) -> String {
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await.text();
    assert!(
        metrics.contains("cause=\"connection_refused\""),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("store_errors"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    metrics
}

/// `/readyz`'s 503 body, which says why it is not ready.
async fn readyz_saying_why(admin: SocketAddr, address: &str) -> String {
    let ready = get(&format!("http://{admin}/readyz"), &[]).await;
    assert_eq!(ready.status, 503);
    let why = ready.text();
    assert!(
        why.contains(address) && why.contains("connection_refused") && why.contains("breaker open"),
        "{why}"
    );
    why
}

/// The store's part of `/admin/stats`.
pub(super) async fn store_stats(admin: SocketAddr) -> serde_json::Value {
    get(&format!("http://{admin}/admin/stats"), &[])
        .await
        .json()["store"]
        .clone()
}

/// `/admin/stats`, which shows the store's address, breaker and last error.
async fn stats_showing_the_store(admin: SocketAddr, address: &str) -> serde_json::Value {
    let stats = get(&format!("http://{admin}/admin/stats"), &[])
        .await
        .json();
    let store = &stats["store"];
    assert_eq!(store["backend"], "redis");
    assert_eq!(store["address"], address);
    assert_eq!(store["breaker"], "open");
    assert_eq!(store["ready"], false);
    assert_eq!(store["last_error"]["cause"], "connection_refused");
    assert!(
        store["failed_calls"].as_u64().expect("a count") >= 3,
        "{store}"
    );
    stats
}

/// With every Sentinel gone the master still serves (ready), and the store's state says
/// that none answers, so a failover could not be followed; said in the log once.
#[tokio::test]
async fn sentinels_that_stopped_answering_are_shown_while_the_master_serves() {
    let mut set = SentinelSet::start();
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nsentinels = {}\nmaster = \"{MASTER}\"\ntimeout = \"100ms\"",
        set.urls_toml()
    );
    let (_dir, gw) = gateway_on(store, &up);
    let admin = gw.admin.expect("admin");
    let stats = || store_stats(admin);
    let all = eventually_async(Duration::from_secs(30), || async {
        stats().await["sentinels"] == serde_json::json!({"answering": 3, "of": 3})
    })
    .await;
    assert!(all, "{}", stats().await);
    set.stop_sentinels();
    let none = eventually_async(Duration::from_secs(30), || async {
        stats().await["sentinels"]["answering"] == 0
    })
    .await;
    let store = stats().await;
    assert!(none, "{store}");
    assert_eq!(store["ready"], true, "the master still serves: {store}");
    assert_eq!(
        get(&format!("http://{admin}/readyz"), &[]).await.status,
        200
    );
    let said = eventually(Duration::from_secs(5), || {
        gw.log().contains("no Redis Sentinel answers")
    })
    .await;
    assert!(said, "{}", gw.log());
    let log = gw.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("no Redis Sentinel answers"));
    assert_eq!(lines.count(), 1, "said once: {log}");
}

/// Redis never answered and no `key_secret` is set, so no decision can even be asked:
/// each request fails as a call to Redis would — counted, toward the breaker, and once it
/// is open refused at once (`kind="breaker_open"`) — so `/admin/stats` and the metrics
/// are true from the first request, not only once the background probes catch up.
#[tokio::test]
async fn a_redis_never_answered_counts_each_request_and_opens_the_breaker() {
    let up = Upstream::start().await;
    let store = unreachable_redis(free_port())
        .replace("key_secret = \"a-fleet-secret-of-enough-bytes\"\n", "");
    assert!(!store.contains("key_secret"), "{store}");
    let (_dir, gw) = gateway_on(store, &up);
    let url = format!("http://{}/", gw.addr);
    for _ in 0..10 {
        assert_eq!(get(&url, &[("x-k", "a")]).await.status, 503);
    }
    let admin = gw.admin.expect("admin");
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await.text();
    let refused_at_once: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("tollgate_store_errors_total{") && l.contains("kind=\"breaker_open\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // At most three failures open it: seven of the ten at least were refused at once.
    assert!(refused_at_once >= 7.0, "{metrics}");
    let store = &store_stats(admin).await;
    assert_eq!(store["breaker"], "open", "{store}");
    assert_eq!(
        store["last_error"]["cause"], "connection_refused",
        "{store}"
    );
    assert!(
        store["failed_calls"].as_u64().expect("a count") >= 3,
        "{store}"
    );
}

/// Redis answers but the fleet's key secret in it is unusable: no decision can be asked,
/// and the breaker stays open (requests refused at once) while the probes' writes
/// succeed — not closed by each probe and opened by each third request, flapping the
/// log between "unreachable" and "reachable again".
#[tokio::test]
async fn an_unusable_secret_keeps_the_breaker_open_without_flapping() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "tg:{secret}", "not a secret"]);
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"100ms\"\n",
        redis.url()
    );
    let (_dir, gw) = gateway_on(store, &up);
    let url = format!("http://{}/", gw.addr);
    // Three seconds of requests: six upkeep turns, each probing the open breaker.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        assert_eq!(get(&url, &[("x-k", "a")]).await.status, 503);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = gw.log();
    assert!(log.contains("key secret in Redis is unusable"), "{log}");
    assert!(!log.contains("reachable again"), "{log}");
    let admin = gw.admin.expect("admin");
    let store = store_stats(admin).await;
    assert_eq!(store["breaker"], "open", "{store}");
}

/// A Redis at `maxmemory` under `noeviction` refuses the decisions' writes: the cause is
/// named `out_of_memory` (it read `script_error`, the refusal's message naming the script
/// that made the write), in the metric and in `/admin/stats`.
#[tokio::test]
async fn a_redis_out_of_memory_is_named_so() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n",
            redis.url()
        ))
        .policy("tenant", "header:x-k", 10, "1s", 10)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "warm").await;
    let filler = "x".repeat(30_000);
    for i in 0..50 {
        redis.cli(&["SET", &format!("filler{i}"), &filler]);
    }
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1mb"]);
    assert_eq!(get(&gw.url("/"), &[("x-k", "new")]).await.status, 503);
    let stats = get(&gw.admin_url("/admin/stats"), &[]).await.json();
    assert_eq!(
        stats["store"]["last_error"]["cause"], "out_of_memory",
        "{stats}"
    );
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(metrics.contains("cause=\"out_of_memory\""), "{metrics}");
}

/// With no `key_secret` configured, the first gateway on a fresh Redis says it drew the
/// fleet's secret and stored it, and the next one that it read it (both said "read").
#[tokio::test]
async fn the_gateway_that_draws_the_fleets_secret_says_so() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = format!("backend = \"redis\"\nurl = \"{}\"\n", redis.url());
    let (_first_dir, first) = gateway_on(store.clone(), &up);
    let drawn = "the fleet's key secret drawn by this gateway and stored in Redis";
    let said = eventually(Duration::from_secs(20), || first.log().contains(drawn)).await;
    assert!(said, "{}", first.log());
    let (_second_dir, second) = gateway_on(store, &up);
    let read = "the fleet's key secret read from Redis";
    let said = eventually(Duration::from_secs(20), || second.log().contains(read)).await;
    assert!(said, "{}", second.log());
    assert!(!first.log().contains(read), "{}", first.log());
    assert!(!second.log().contains(drawn), "{}", second.log());
}
