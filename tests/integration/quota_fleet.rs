//! Calendar quotas shared by a fleet on Redis: two gateways count one quota, its key
//! expires with its window in the quota's zone, and a quota rides in the rate tiers' one
//! script call.

use crate::support::*;

async fn call(client: &HttpClient, gw: &TestGateway, key: &str) -> Got {
    send(client, "GET", &gw.url("/"), &[("x-key", key)], b"").await
}

/// On `cluster`, one route decided by a monthly quota of 100 per `x-key` (`zone`: its
/// `timezone` line, if any) and a rate of `burst` an hour for the whole route: keys in
/// two slots.
fn monthly_beside_endpoint(cluster: &RedisCluster, zone: &str, burst: u64) -> String {
    Fixture::new()
        .store(cluster.store_toml())
        .policy_raw(
            "monthly",
            format!("key = \"header:x-key\"\nquota = 100\nwindow = \"month\"\n{zone}"),
        )
        .policy("endpoint", "route", 1, "1h", burst)
        .route("api", "/", "api", &["monthly", "endpoint"])
        .build()
}

#[tokio::test]
async fn two_gateways_share_one_monthly_quota_on_redis_and_its_key_expires_with_the_month() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"deny\"",
        redis.url()
    );
    let toml = Fixture::new()
        .store(store)
        .policy_raw(
            "monthly",
            "key = \"header:x-key\"\nquota = 4\nwindow = \"month\"\ntimezone = \"Europe/Berlin\"\n",
        )
        .route("api", "/", "api", &["monthly"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    a.wait_for_store_with("/", "x-key", "warm-up-a").await;
    b.wait_for_store_with("/", "x-key", "warm-up-b").await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let client = if i % 4 < 2 { http1() } else { http2() };
        statuses.push(call(&client, gw, "acme").await.status.as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 429, 429, 429, 429],
        "one quota, two gateways"
    );
    let state = get(&b.admin_url("/admin/limits/monthly/acme"), &[])
        .await
        .json();
    assert_eq!(
        (state["used"].as_u64(), state["left"].as_u64()),
        (Some(4), Some(0)),
        "{state}"
    );
    // The key expires when the month ends in Berlin (its usage is worth nothing after).
    let keys = redis.cli(&["KEYS", "tg:*"]);
    let key = keys
        .lines()
        .map(str::trim)
        .find(|k| k.contains("}:monthly:"))
        .unwrap_or_else(|| panic!("a key of the monthly policy: {keys}"));
    let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().expect("ttl");
    let now = jiff::Zoned::now().with_time_zone(jiff::tz::TimeZone::get("Europe/Berlin").unwrap());
    let next_month = now
        .first_of_month()
        .and_then(|d| d.checked_add(jiff::Span::new().months(1)))
        .and_then(|d| d.start_of_day())
        .expect("next month");
    let until = now.duration_until(&next_month).as_millis() as i64;
    assert!(
        (until - 60_000..=until + 1_000).contains(&ttl),
        "expires at the month's end ({until} ms away): {ttl}"
    );
    assert_eq!(state["resets_at"], next_month.timestamp().to_string());
}

/// A route of a quota and two rate tiers costs one Redis script call an admitted request;
/// once the quota is used up, its refusals are answered from what the gateway remembers.
#[tokio::test]
async fn a_quota_rides_in_the_rate_tiers_one_redis_call() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"",
            redis.url()
        ))
        .policy_raw(
            "monthly",
            "key = \"header:x-key\"\nquota = 20\nwindow = \"month\"\n",
        )
        .policy("tenant", "header:x-key", 1000, "1s", 1000)
        .policy("client", "ip", 1000, "1s", 1000)
        .route("api", "/", "api", &["tenant", "monthly", "client"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    let monitor = redis.monitor();
    let mut admitted = 0;
    for i in 0..30 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        admitted += usize::from(call(&client, &gw, "acme").await.status == 200);
    }
    assert_eq!(admitted, 20, "the quota");
    assert_eq!(
        monitor.decision_calls(),
        20,
        "one call an admitted request, none for the refusals after"
    );
}

/// On a Redis Cluster a quota and a tier in another slot are decided together: when the
/// other slot refuses, the quota's slot is rolled back, so a refused request uses none of
/// the quota.
#[tokio::test]
async fn on_a_cluster_a_refusal_in_another_slot_gives_the_quota_back() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let toml = monthly_beside_endpoint(&cluster, "timezone = \"Asia/Tokyo\"\n", 3);
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let client = if i % 4 < 2 { http1() } else { http2() };
        let r = past_503(std::time::Duration::from_secs(10), || {
            call(&client, gw, "acme")
        })
        .await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    let state = get(&a.admin_url("/admin/limits/monthly/acme"), &[])
        .await
        .json();
    assert_eq!(
        (state["used"].as_u64(), state["left"].as_u64()),
        (Some(3), Some(97)),
        "{state}"
    );
}

/// With Redis out and `on_error = "local"`, a quota is decided on this gateway's share of
/// it (1/fleet_size of its units), still counted in its window, not as a rate.
#[tokio::test]
async fn with_redis_out_a_gateway_spends_its_share_of_the_quota() {
    let dead = dead_port().await.port();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"redis://127.0.0.1:{dead}\"\ntimeout = \"100ms\"\non_error = \"local\"\nfleet_size = 2"
        ))
        .policy_raw(
            "daily",
            "key = \"header:x-key\"\nquota = 10\nwindow = \"day\"\n",
        )
        .route("api", "/", "api", &["daily"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut admitted = 0;
    for i in 0..12 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        admitted += usize::from(call(&client, &gw, "acme").await.status == 200);
        // Time passes: a quota's share does not refill (a 1-unit-a-nanosecond rate would).
        gw.advance(60 * S);
    }
    assert_eq!(admitted, 5, "half of the quota of 10");
}

/// A key whose quota is used up is remembered refused, as a rate key is: a flood of its
/// requests costs Redis about one call a second (the memory of a quota's refusal lasts a
/// second, since another gateway may reset or raise it), not one a request.
#[tokio::test]
async fn a_flood_on_a_used_up_quota_costs_almost_no_redis_calls() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"",
            redis.url()
        ))
        .policy_raw(
            "monthly",
            "key = \"header:x-key\"\nquota = 5\nwindow = \"month\"\n",
        )
        .route("api", "/", "api", &["monthly"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    for _ in 0..5 {
        assert_eq!(call(&http1(), &gw, "acme").await.status, 200);
    }
    let monitor = redis.monitor();
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let url = gw.url("/");
        tasks.push(tokio::spawn(async move {
            let client = if worker % 2 == 0 { http1() } else { http2() };
            let mut refused = 0;
            for _ in 0..50 {
                let got = send(&client, "GET", &url, &[("x-key", "acme")], b"").await;
                refused += usize::from(got.status == 429);
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("flood");
    }
    assert_eq!(refused, 400, "the quota is used up");
    let calls = monitor.decision_calls();
    let seconds = started.elapsed().as_secs() + 1;
    assert!(
        calls <= 8 + 2 * seconds,
        "{calls} calls for 400 refusals in about {seconds} s"
    );
    // The key's state is still Redis's: used 5 of 5.
    let state = get(&gw.admin_url("/admin/limits/monthly/acme"), &[])
        .await
        .json();
    assert_eq!(state["used"], 5, "{state}");
}

/// A quota key holding another calendar's TAT (the first charge after a window, anchor or
/// timezone change) is charged from nothing; when a tier in another slot then refuses, the
/// charge is rolled back too. The roll-back had measured the old TAT as usage far over the
/// quota, taken the tier for one that wrote nothing and left the refused request charged.
#[tokio::test]
async fn on_a_cluster_a_refusal_rolls_back_a_quota_charged_over_another_calendars_tat() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let toml = monthly_beside_endpoint(&cluster, "", 2);
    // `a` uses the endpoint's burst (and remembers it is used up); `b`, which does not,
    // asks the cluster.
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for client in [http1(), http2()] {
        let r = past_503(std::time::Duration::from_secs(10), || {
            call(&client, &a, "acme")
        })
        .await;
        assert_eq!(r.status, 200);
    }
    // The quota key's TAT moved 20 days past the month's end: another calendar's.
    let (node, key, value) = cluster
        .nodes
        .iter()
        .find_map(|n| {
            let keys = n.cli(&["KEYS", "*:monthly:*"]);
            let key = keys
                .lines()
                .map(str::trim)
                .find(|k| !k.is_empty())?
                .to_owned();
            let value = n.cli(&["GET", &key]).trim().to_owned();
            Some((n, key, value))
        })
        .expect("the quota key");
    let (seconds, nanos) = value.split_once(':').expect("s:ns");
    let seconds: u64 = seconds.parse().expect("seconds");
    let elsewhere = format!("{}:{nanos}", seconds + 20 * 86_400);
    node.cli(&["SET", &key, &elsewhere]);
    for client in [http1(), http2()] {
        let r = call(&client, &b, "acme").await;
        assert_eq!(r.status, 429, "the endpoint refuses: {}", r.text());
    }
    let stored = node.cli(&["GET", &key]);
    let stored_seconds: u64 = stored
        .trim()
        .split(':')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("s");
    assert_eq!(
        stored_seconds,
        seconds + 20 * 86_400,
        "the refused requests' charges were rolled back: {stored}"
    );
    let state = get(&b.admin_url("/admin/limits/monthly/acme"), &[])
        .await
        .json();
    assert_eq!(state["used"], 0, "{state}");
}
