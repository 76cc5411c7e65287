//! The Redis and Redis Cluster store, against real `redis-server` processes.

use std::time::{Duration, Instant};

use crate::support::*;

/// A gateway whose store is Redis at `url_toml` (a TOML string or list of strings), with
/// one route, `api` on `/`, under `policies`.
pub(super) fn on_redis(url_toml: &str, on_error: &str, policies: &[&str]) -> Fixture {
    Fixture::new()
        .store(format!(
            r#"
            backend = "redis"
            url = {url_toml}
            timeout = "300ms"
            on_error = "{on_error}"
            "#
        ))
        .route("api", "/", "api", policies)
}

#[tokio::test]
async fn two_gateways_share_one_limit_exactly() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let url = format!("\"{}\"", redis.url());
    let toml = on_redis(&url, "deny", &["tenant"])
        .policy("tenant", "header:x-tenant-id", 1, "1h", 5)
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let started = Instant::now();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let r = get(&gw.url("/"), &[("x-tenant-id", "acme")]).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 429, 429, 429, 429, 429, 429],
        "one burst across the fleet, not one per gateway"
    );
    assert_eq!(up.requests(), 5);
    // The key is stored under a fixed digest with an expiry equal to its time until idle.
    let keys = redis.cli(&["KEYS", "tg:*"]);
    let tenant_keys: Vec<&str> = keys
        .lines()
        .map(str::trim)
        .filter(|k| k.contains("}:tenant:"))
        .collect();
    let [key] = tenant_keys[..] else {
        panic!("one key of the tenant policy: {keys}");
    };
    let key = key.to_owned();
    assert!(key.starts_with("tg:{"), "{key}");
    // Without a key_secret, the fleet keeps the one its keys are named with in Redis.
    let secret = redis.cli(&["GET", "tg:{secret}"]);
    assert_eq!(secret.trim().len(), 64, "a random secret: {secret}");
    assert!(
        !key.contains("acme"),
        "raw header values never become Redis keys"
    );
    let ttl: u64 = redis.cli(&["PTTL", &key]).trim().parse().expect("ttl");
    // Five admissions put the TAT 5 h after the first; the key lives until then.
    let since_first = started.elapsed().as_millis() as u64;
    assert!(
        (5 * 3_600_000 - since_first - 2..=5 * 3_600_000).contains(&ttl),
        "expiry = time until idle (5 h), {since_first} ms after the first: {ttl}"
    );
}

#[tokio::test]
async fn answers_match_the_memory_backend() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let tiers = |f: Fixture| {
        f.policy("tenant", "header:x-tenant-id", 1, "1h", 3)
            .policy_raw(
                "user",
                r#"
            key = ["header:x-tenant-id", "header:x-user-id"]
            limit = 1
            period = "2h"
            burst = 2
            "#,
            )
    };
    let url = format!("\"{}\"", redis.url());
    let remote_toml = tiers(on_redis(&url, "deny", &["tenant", "user"])).build();
    let remote = TestGateway::start_real_clock(&remote_toml, &up.url()).await;
    let local_toml = tiers(Fixture::new().route("api", "/", "api", &["tenant", "user"])).build();
    let local = TestGateway::start_real_clock(&local_toml, &up.url()).await;
    let sequence = [
        ("t", "a"),
        ("t", "a"),
        ("t", "a"),
        ("t", "b"),
        ("t", "b"),
        ("u", "a"),
    ];
    let started = Instant::now();
    for (tenant, user) in sequence {
        let h = [("x-tenant-id", tenant), ("x-user-id", user)];
        let m = get(&local.url("/"), &h).await;
        let r = get(&remote.url("/"), &h).await;
        assert_eq!(m.status, r.status, "{tenant}/{user}");
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "ratelimit-policy",
            "retry-after",
            "content-type",
        ] {
            assert_eq!(m.header(name), r.header(name), "{name} for {tenant}/{user}");
        }
        if m.status == 429 {
            let (mb, rb) = (m.json(), r.json());
            assert_eq!(mb["policy"], rb["policy"]);
            let (mw, rw) = (
                mb["retry_after_ms"].as_u64().unwrap_or(0),
                rb["retry_after_ms"].as_u64().unwrap_or(0),
            );
            // Each pair of keys was charged, and is asked now, a moment apart on the two
            // gateways; the waits differ by no more than that, and the rounding up to 1 ms.
            let apart = started.elapsed().as_millis() as u64 + 1;
            assert!(
                mw.abs_diff(rw) <= apart + 1,
                "exact waits agree to the time between the requests ({apart} ms): {mw} vs {rw}"
            );
        }
    }
}

#[tokio::test]
async fn cluster_tiers_across_slots_roll_back_and_share_across_gateways() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    // tenant and user share a hash tag (first key part); endpoint ("route") lands elsewhere.
    let toml = on_redis(
        &cluster.urls_toml(),
        "deny",
        &["tenant", "user", "endpoint"],
    )
    .policy("tenant", "header:x-tenant-id", 1, "1h", 10)
    .policy("endpoint", "route", 1, "1h", 3)
    .policy_raw(
        "user",
        r#"
            key = ["header:x-tenant-id", "header:x-user-id"]
            limit = 1
            period = "1h"
            burst = 10
            "#,
    )
    .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let (url, headers) = (gw.url("/"), [("x-tenant-id", "acme"), ("x-user-id", "bob")]);
        let r = past_503(Duration::from_secs(5), || get(&url, &headers)).await;
        statuses.push(r.status.as_u16());
        if r.status == 429 {
            assert_eq!(r.json()["policy"], "endpoint");
        }
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429, 429, 429, 429]);
    // The endpoint tier (another slot) denied five times; tenant and user kept only the
    // three admissions: the earlier slot was rolled back each time.
    for (path, expected) in [
        ("/admin/limits/tenant/acme", 7),
        ("/admin/limits/user/acme/bob", 7),
        ("/admin/limits/endpoint/api", 0),
    ] {
        let r = get(&a.admin_url(path), &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.json()["remaining"], expected, "{path}");
    }
}

#[tokio::test]
async fn outages_follow_on_error_fail_fast_and_recover() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let url = format!("\"{}\"", redis.url());
    let toml = |on_error: &str| {
        on_redis(&url, on_error, &["tenant"])
            .policy("tenant", "header:x-tenant-id", 1, "1h", 2)
            .build()
    };
    let allow = TestGateway::start_real_clock(&toml("allow"), &up.url()).await;
    let deny = TestGateway::start_real_clock(&toml("deny"), &up.url()).await;
    // Three gateways share this Redis; `fleet_size = 1` gives the local one the whole
    // limit (the fleet's share is tested in faults.rs).
    let local_toml = toml("local").replace(
        "on_error = \"local\"",
        "on_error = \"local\"\nfleet_size = 1",
    );
    assert!(local_toml.contains("fleet_size = 1"), "{local_toml}");
    let local = TestGateway::start_real_clock(&local_toml, &up.url()).await;
    let h = [("x-tenant-id", "t")];
    assert_eq!(
        get(&deny.url("/"), &h).await.status,
        200,
        "Redis up: decided by Redis"
    );

    // A hung Redis: nothing answers. Requests must not each wait out the timeout.
    redis.pause();
    let started = Instant::now();
    for _ in 0..20 {
        let r = get(&deny.url("/"), &h).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["error"], "store_unavailable");
    }
    let elapsed = started.elapsed();
    // Without the breaker twenty calls would take 20 × 300 ms = 6 s.
    assert!(
        elapsed < Duration::from_millis(3_000),
        "the breaker makes later requests fail fast: {elapsed:?}"
    );
    assert_eq!(
        get(&deny.admin_url("/readyz"), &[]).await.status,
        503,
        "readiness reflects the store"
    );
    for _ in 0..5 {
        assert_eq!(
            get(&allow.url("/"), &h).await.status,
            200,
            "on_error = allow forwards"
        );
    }
    let mut local_statuses = Vec::new();
    for _ in 0..4 {
        local_statuses.push(get(&local.url("/"), &h).await.status.as_u16());
    }
    assert_eq!(
        local_statuses,
        vec![200, 200, 429, 429],
        "on_error = local limits in process"
    );

    // Killed outright, then back: recovery without a gateway restart.
    redis.restart();
    check_recovered(&deny).await;
}

/// The gateway decides by Redis again, is ready, and counted the store's errors.
async fn check_recovered(deny: &TestGateway) {
    let recovered = eventually_async(Duration::from_secs(20), || async {
        get(&deny.url("/"), &[("x-tenant-id", "fresh")])
            .await
            .status
            == 200
    });
    if !recovered.await {
        let r = get(&deny.url("/"), &[("x-tenant-id", "fresh")]).await;
        panic!("did not recover: {} {}", r.status, r.text());
    }
    assert_eq!(get(&deny.admin_url("/readyz"), &[]).await.status, 200);
    let metrics = get(&deny.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics.contains("tollgate_store_errors_total{backend=\"redis\""),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_gateway_starts_while_redis_is_down() {
    let port = free_port();
    let up = Upstream::start().await;
    let url = format!("\"redis://tollgate:s3cret-pw@127.0.0.1:{port}\"");
    let toml = on_redis(&url, "deny", &["tenant"])
        .policy("tenant", "header:x-tenant-id", 1, "1h", 5)
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    assert_eq!(get(&gw.url("/"), &[("x-tenant-id", "a")]).await.status, 503);
    // Credentials never leave the process: not in /admin/config, not in the metrics.
    let config = get(&gw.admin_url("/admin/config"), &[]).await.text();
    assert!(
        config.contains("redis://tollgate:***@127.0.0.1"),
        "{config}"
    );
    assert!(!config.contains("s3cret-pw"));
    assert!(!get(&gw.admin_url("/metrics"), &[])
        .await
        .text()
        .contains("s3cret-pw"));
}

/// The `on_error = "local"` fallback store is swept like the memory store, so keys it
/// took while Redis was down do not stay forever.
#[tokio::test]
async fn the_local_fallback_store_is_swept() {
    let dead = dead_port().await;
    let up = Upstream::start().await;
    let url = format!("\"redis://{dead}\"");
    let toml = on_redis(&url, "local", &["tenant"])
        .policy("tenant", "header:x-tenant-id", 1, "3s", 1)
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    assert_eq!(
        get(&gw.url("/"), &[("x-tenant-id", "acme")]).await.status,
        200
    );
    let tracked = |text: String| {
        text.lines()
            .find(|l| l.starts_with("tollgate_keys_tracked "))
            .and_then(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
    };
    let seen = std::cell::RefCell::new(Vec::new());
    let metrics = gw.admin_url("/metrics");
    eventually_async(Duration::from_secs(30), || async {
        let n = tracked(get(&metrics, &[]).await.text());
        let mut seen = seen.borrow_mut();
        seen.push(n);
        seen.contains(&Some(1)) && n == Some(0)
    })
    .await;
    let seen = seen.into_inner();
    assert!(
        seen.contains(&Some(1)),
        "the fallback held the key: {seen:?}"
    );
    assert_eq!(
        seen.last(),
        Some(&Some(0)),
        "and dropped it once idle: {seen:?}"
    );
}

/// Redis Sentinel: the gateway finds the master through the Sentinels, and when the
/// master dies it follows the replica they promote; meanwhile `on_error` answers.
#[tokio::test]
async fn sentinel_failover_is_followed() {
    let mut set = SentinelSet::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nsentinels = {}\nmaster = \"{MASTER}\"\ntimeout = \"300ms\"\non_error = \"deny\"\n",
            set.urls_toml()
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 1000)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let url = gw.url("/");
    let h = [("x-tenant-id", "acme")];
    let found = eventually_async(Duration::from_secs(30), || async {
        get(&url, &h).await.status == 200
    })
    .await;
    assert!(found, "the gateway found the master through the Sentinels");
    let keys = set.master.cli(&["KEYS", "tg:*"]);
    assert!(
        keys.contains(":tenant:"),
        "the decision was written to the master: {keys}"
    );

    let old = set.master.port;
    set.master.kill();
    let statuses = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let followed = eventually_async(Duration::from_secs(60), || async {
        let status = get(&url, &h).await.status.as_u16();
        statuses.lock().unwrap().insert(status);
        status == 200
    })
    .await;
    let statuses = statuses.into_inner().unwrap();
    assert!(
        followed,
        "the gateway follows the promoted replica; saw {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| [200, 503].contains(s)),
        "the outage is answered per on_error (deny: 503): {statuses:?}"
    );
    // Every Sentinel learns of the promotion, some a moment after the others.
    let promoted = eventually(Duration::from_secs(30), || {
        set.master_port() == Some(set.replica.port)
    })
    .await;
    assert!(
        promoted,
        "the Sentinels promoted the replica (old master {old})"
    );
    let keys = set.replica.cli(&["KEYS", "tg:*"]);
    assert!(
        keys.contains(":tenant:"),
        "decisions now go to the new master: {keys}"
    );
}
