//! `sync = "lease"`: gateways admit from slices of a key's capacity taken from Redis, and
//! the fleet never admits more than the exact GCRA bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;

/// A store at `redis` and a leased policy `hot` (and an exact `strict`) with `body`.
pub(super) fn leased(redis: &RedisServer, body: &str) -> Fixture {
    leased_on(&format!("\"{}\"", redis.url()), body)
}

/// The same on the store at `url_toml` (a TOML string, or a list for a Cluster). The store
/// timeout is generous: a busy machine can stall a call past half a second, and a give-back
/// lost that way would fail the tests that count what is held.
fn leased_on(url_toml: &str, body: &str) -> Fixture {
    Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = {url_toml}\ntimeout = \"5s\"\n"
        ))
        .policy_raw(
            "hot",
            format!("key = \"header:x-tenant-id\"\nsync = \"lease\"\n{body}"),
        )
        .route("api", "/", "api", &["hot"])
}

pub(super) fn metric_of(text: &str, series: &str) -> f64 {
    let v = metric(text, series);
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// Load from `clients` tasks spread over `gateways` for `run`: (admitted, requests, elapsed).
async fn load(
    gateways: &[&TestGateway],
    clients: usize,
    run: Duration,
) -> (usize, usize, Duration) {
    let admitted = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let url = gateways[c % gateways.len()].url("/");
            let (admitted, sent) = (admitted.clone(), sent.clone());
            tokio::spawn(async move {
                let client = http1();
                while started.elapsed() < run {
                    let r = send(&client, "GET", &url, &[("x-tenant-id", "acme")], b"").await;
                    sent.fetch_add(1, Ordering::SeqCst);
                    if r.status == 200 {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    let elapsed = started.elapsed();
    (
        admitted.load(Ordering::SeqCst),
        sent.load(Ordering::SeqCst),
        elapsed,
    )
}

#[tokio::test]
async fn three_gateways_never_admit_more_than_the_exact_bound() {
    let redis = RedisServer::start();
    under_the_bound(&format!("\"{}\"", redis.url())).await;
}

#[tokio::test]
async fn three_gateways_on_a_cluster_never_admit_more_than_the_exact_bound() {
    let cluster = RedisCluster::start();
    under_the_bound(&cluster.urls_toml()).await;
}

async fn under_the_bound(url_toml: &str) {
    let up = Upstream::start().await;
    // T = 20 ms, 20 at once.
    let toml = leased_on(url_toml, "limit = 50\nperiod = \"1s\"\nburst = 20\n").build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let c = TestGateway::start_real_clock(&toml, &up.url()).await;
    for gw in [&a, &b, &c] {
        gw.wait_for_store("/", "warm-up").await;
    }
    let warm_up = up.requests();
    let (admitted, sent, elapsed) = load(&[&a, &b, &c], 6, Duration::from_secs(3)).await;
    // Burst plus one unit per T over the run, plus one for where the run's edges fall.
    let bound = 20 + (elapsed.as_nanos() / 20_000_000) as usize + 1;
    assert!(
        admitted <= bound,
        "{admitted} admitted of {sent}, bound {bound}"
    );
    assert!(sent > bound, "the load exceeds the limit: {sent} sent");
    assert!(
        admitted * 2 >= bound,
        "leases do not starve the fleet: {admitted} of {bound}"
    );
    assert_eq!(
        up.requests() - warm_up,
        admitted,
        "every admitted request reached the upstream"
    );
}

/// 100 requests of tenant `acme` through a gateway leasing `body` whose (fake) clock moves
/// `step` after each: the Redis calls that granted slices, the units granted, the metrics.
async fn hundred_requests(redis: &RedisServer, body: &str, step: u64) -> (f64, f64, String) {
    let up = Upstream::start().await;
    let monitor = redis.monitor();
    let gw = TestGateway::start(&leased(redis, body).build(), &up.url()).await;
    // The gateway's first read of the fleet's overrides is whole, and a whole read makes
    // the slices held serve nothing more (a change may have come before it): landing
    // among the hundred, it would cost one more slice. Its reads come one a second, one
    // after the other, so once a second has reached Redis the first was followed.
    let followed = eventually(Duration::from_secs(30), || {
        monitor.script_calls_with("read") >= 2
    })
    .await;
    assert!(followed, "the gateway reads the fleet's overrides");
    for i in 0..100 {
        let r = get(&gw.url("/"), &[("x-tenant-id", "acme")]).await;
        assert_eq!(r.status, 200, "request {i}");
        gw.advance(step);
    }
    assert_eq!(up.requests(), 100);
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let calls = metric_of(&metrics, "tollgate_lease_calls_total{result=\"granted\"}");
    let units = metric_of(&metrics, "tollgate_lease_units_total{result=\"granted\"}");
    (calls, units, metrics)
}

#[tokio::test]
async fn a_hot_key_is_served_from_slices() {
    let redis = RedisServer::start();
    // 1000 a second, 200 at once. The gateway's clock stands still (the fake clock), so
    // no unit's slot begins during the test: how many requests a slice carries depends on
    // the sizing alone, not on how fast this machine is.
    let (calls, units, metrics) =
        hundred_requests(&redis, "limit = 1000\nperiod = \"1s\"\nburst = 200\n", 0).await;
    // The first request is decided in Redis like an exact tier (a cold key); then slices
    // of a quarter of the burst (50): 1 + 50 + 50 cover the 100 requests.
    assert_eq!(calls, 2.0, "{metrics}");
    assert_eq!(units, 100.0, "{metrics}");
}

#[tokio::test]
async fn a_key_served_slower_than_its_rate_is_still_served_from_slices() {
    let redis = RedisServer::start();
    // 10,000 a second (T = 0.1 ms), 10,000 at once, and a request every 1 ms of the
    // gateway's (fake) clock: a tenth of the key's rate. Slots one T apart from now would
    // begin before the requests meant to use them (nine in ten would expire); slices whose
    // slots begin ahead carry fifty requests each (a 50 ms window of this traffic).
    let body = "limit = 10000\nperiod = \"1s\"\nburst = 10000\n";
    let (calls, _, metrics) = hundred_requests(&redis, body, MS).await;
    // The first request decided in Redis, then slices of fifty.
    assert!(
        (2.0..=5.0).contains(&calls),
        "{calls} Redis calls for 100 requests (about 20 with slots starting at now): {metrics}"
    );
}

#[tokio::test]
async fn a_cold_leased_tier_rides_in_the_requests_one_call() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // `hot` (the tenant) warms up; `user` sees a new user every request. A key too cold
    // for a slice is decided in Redis like an exact tier, and the warm one rides in the
    // same call: one round trip a request, as with sync = "exact" (two before: a slice
    // fetch for each).
    let toml = leased(&redis, "limit = 1000\nperiod = \"1s\"\nburst = 1000\n")
        .policy_raw(
            "user",
            "key = [\"header:x-tenant-id\", \"header:x-user-id\"]\nsync = \"lease\"\nlimit = 10\nperiod = \"1s\"\nburst = 10\n",
        )
        .route("users", "/users", "api", &["hot", "user"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // The first request also connects (and the gateway reads the fleet's overrides).
    let warm = [("x-tenant-id", "other"), ("x-user-id", "u")];
    assert_eq!(get(&gw.url("/users"), &warm).await.status, 200);
    let monitor = redis.monitor();
    for i in 0..50 {
        let user = format!("u{i}");
        let r = get(
            &gw.url("/users"),
            &[("x-tenant-id", "acme"), ("x-user-id", user.as_str())],
        )
        .await;
        assert_eq!(r.status, 200, "request {i}");
        gw.advance(MS);
    }
    let calls = monitor.decision_calls();
    assert_eq!(calls, 50, "script calls for 50 requests: one per request");
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(
        metric_of(&metrics, "tollgate_lease_calls_total{result=\"granted\"}"),
        0.0,
        "no slice was fetched on the side: {metrics}"
    );
    assert_eq!(up.requests(), 51);
}

/// A gateway leasing `hot` on `redis` (T = 1 s, burst 100: nothing refills during a test,
/// so the key's state shows what is held) after 4 requests of tenant `acme`, and its
/// config. The gateway's clock is the fake one: requests take no time on it, so slices are
/// sized the same on any machine (1 unit decided in Redis, then a quarter of the burst:
/// 25), and a slice goes idle only when the test moves the clock.
pub(super) async fn four_requests_into_a_slice(
    redis: &RedisServer,
    up: &Upstream,
) -> (TestGateway, String) {
    let toml = leased(redis, "limit = 1\nperiod = \"1s\"\nburst = 100\n").build();
    (four_requests_under(&toml, up).await, toml)
}

/// The same under `toml`: [`leased`]'s `hot` at those numbers, with more besides.
pub(super) async fn four_requests_under(toml: &str, up: &Upstream) -> TestGateway {
    let gw = TestGateway::start(toml, &up.url()).await;
    for _ in 0..4 {
        assert_eq!(
            get(&gw.url("/"), &[("x-tenant-id", "acme")]).await.status,
            200
        );
    }
    let state = get(&gw.admin_url("/admin/limits/hot/acme"), &[])
        .await
        .json();
    assert_eq!(state["remaining"], 100 - 26, "4 used, 22 held");
    gw
}

#[tokio::test]
async fn idle_slices_and_shutdown_give_units_back() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (gw, toml) = four_requests_into_a_slice(&redis, &up).await;
    let h = [("x-tenant-id", "acme")];
    let admin = gw.admin_url("/admin/limits/hot/acme");
    let metrics = gw.admin_url("/metrics");
    let held = |text: &str| metric_of(text, "tollgate_lease_units_held");
    // Idle for a second: the slice goes back (but for the unit whose slot began).
    gw.advance(S);
    let back = eventually_async(Duration::from_secs(20), || async {
        let left = get(&admin, &[]).await.json()["remaining"]
            .as_u64()
            .unwrap_or(0);
        left >= 95
    })
    .await;
    let text = get(&metrics, &[]).await.text();
    assert!(
        back,
        "idle units given back: {}",
        get(&admin, &[]).await.text()
    );
    assert!(
        metric_of(&text, "tollgate_lease_calls_total{result=\"given_back\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(held(&text), 0.0);

    // A burst takes a slice again; shutting down gives it back at once.
    for _ in 0..8 {
        assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    }
    let before = get(&admin, &[]).await.json()["remaining"].as_u64().unwrap();
    let mut gw = gw;
    gw.gateway.take().expect("running").shutdown().await;
    let other = TestGateway::start_real_clock(&toml, &up.url()).await;
    let after = get(&other.admin_url("/admin/limits/hot/acme"), &[])
        .await
        .json()["remaining"]
        .as_u64()
        .unwrap();
    assert!(
        after >= before,
        "nothing more is held after shutdown: {before} then {after}"
    );
    assert!(
        after >= 100 - 12 - 1 - 1,
        "only what was used (and the unit that expired idle) stays charged: {after}"
    );
}

#[tokio::test]
async fn leased_and_exact_tiers_roll_back_together() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // T = 1 h: nothing refills. `hot` (leased) lets 20 through in all, in slices of 5.
    let toml = leased(&redis, "limit = 1\nperiod = \"1h\"\nburst = 20\n")
        .policy("strict", "header:x-tenant-id", 1, "1h", 1)
        .route("both", "/both", "api", &["hot", "strict"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    // A cold key is decided in Redis; the next request takes a slice of 5 (4 held).
    for _ in 0..2 {
        assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    }
    // `hot` admits from its slice and `strict` its one request; then `strict` refuses,
    // and every unit `hot` took for the refused requests goes back into the slice.
    assert_eq!(get(&gw.url("/both"), &h).await.status, 200);
    for _ in 0..6 {
        let denied = get(&gw.url("/both"), &h).await;
        assert_eq!(denied.status, 429);
        assert_eq!(denied.json()["policy"], "strict");
    }
    // 3 of 20 used: 17 left (fewer had the refused requests kept what they took).
    let mut statuses = Vec::new();
    for _ in 0..19 {
        statuses.push(get(&gw.url("/"), &h).await.status.as_u16());
    }
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(admitted, 17, "{statuses:?}");
    assert!(statuses[17..].iter().all(|&s| s == 429), "{statuses:?}");
}

#[tokio::test]
async fn lease_needs_redis_and_refuses_what_it_cannot_keep_exact() {
    for (body, says) in [
        (
            "sync = \"lease\"\nlimit = 1\nperiod = \"1s\"\nburst = 5\n",
            "needs the redis backend",
        ),
        (
            "sync = \"sometimes\"\nlimit = 1\nperiod = \"1s\"\nburst = 5\n",
            "sync",
        ),
    ] {
        let toml = Fixture::new()
            .policy_raw("p", format!("key = \"ip\"\n{body}"))
            .route("api", "/", "api", &["p"])
            .build_for("http://127.0.0.1:1");
        let e = tollgate::config::compile(std::path::Path::new("t.toml"), &toml)
            .expect_err(body)
            .to_string();
        assert!(e.contains(says), "{body}: {e}");
    }
    let redis = RedisServer::start();
    for (extra, says) in [
        ("max_delay = \"1s\"\n", "cannot be combined with max_delay"),
        (
            "mode = \"shadow\"\n",
            "cannot be combined with mode = \"shadow\"",
        ),
        (
            "reserve = 1\nsettle = \"response_bytes\"\n",
            "cannot be combined with settle",
        ),
    ] {
        let toml = leased(
            &redis,
            &format!("limit = 1\nperiod = \"1s\"\nburst = 5\n{extra}"),
        )
        .build_for("http://127.0.0.1:1");
        let e = tollgate::config::compile(std::path::Path::new("t.toml"), &toml)
            .expect_err(extra)
            .to_string();
        assert!(e.contains(says), "{extra}: {e}");
    }
}

#[tokio::test]
async fn a_reload_gives_every_slice_back() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (gw, _) = four_requests_into_a_slice(&redis, &up).await;
    let admin = gw.admin_url("/admin/limits/hot/acme");
    let remaining = |v: serde_json::Value| v["remaining"].as_u64().unwrap_or(0);
    let reloaded = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    assert_eq!(
        remaining(get(&admin, &[]).await.json()),
        96,
        "the 22 held went back with the reload: only the 4 used stay charged"
    );
}
