//! What a fleet on Redis keeps of resets and quota windows: a reset through one gateway
//! ends the other's remembered refusals within about a second (rate and quota keys), or
//! says the fleet was not told; a quota switched to a rate by reload starts its keys
//! idle. (The scripts themselves, run alone: `redis_scripts.rs`.)

use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test]
async fn a_reset_through_one_gateway_admits_the_key_on_every_gateway_within_a_second() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(redis.store_toml())
        .policy("hourly", "header:x-key", 1, "1h", 1)
        .policy_raw(
            "daily",
            "key = \"header:x-key\"\nquota = 1\nwindow = \"day\"\n",
        )
        .route("rate", "/rate", "api", &["hourly"])
        .route("quota", "/quota", "api", &["daily"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    a.wait_for_store_with("/rate", "x-key", "warm-up-a").await;
    b.wait_for_store_with("/rate", "x-key", "warm-up-b").await;
    for (path, policy) in [("/rate", "hourly"), ("/quota", "daily")] {
        for h2 in [false, true] {
            let key = format!("{policy}-{h2}");
            let client = move || if h2 { http2() } else { http1() };
            let call = |gw: &TestGateway| {
                let (url, key) = (gw.url(path), key.clone());
                async move {
                    send(&client(), "GET", &url, &[("x-key", &key)], b"")
                        .await
                        .status
                }
            };
            assert_eq!(call(&a).await, 200);
            // Gateway b learns the refusal from Redis and remembers it.
            assert_eq!(call(&b).await, 429);
            assert_eq!(call(&b).await, 429);
            let reset_url = a.admin_url(&format!("/admin/reset/{policy}/{key}"));
            let reset = send(&http1(), "POST", &reset_url, &[], b"").await;
            assert_eq!(reset.status, 200, "{}", reset.text());
            assert_eq!(reset.json()["fleet"], "told", "{}", reset.text());
            let started = Instant::now();
            let mut admitted = false;
            while !admitted && started.elapsed() < Duration::from_secs(10) {
                admitted = call(&b).await == 200;
                if !admitted {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            assert!(admitted, "{policy}: gateway b admits the reset key");
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{policy}: within about a second of the reset, not at the end of the wait: {:?}",
                started.elapsed()
            );
        }
    }
}

/// A reset the other gateways could not be told of (here Redis refuses this gateway the
/// fleet's overrides keys) still resets the key, and says the fleet was not told.
#[tokio::test]
async fn a_reset_the_fleet_was_not_told_of_says_so() {
    let redis = RedisServer::start();
    // Every key but the fleet's overrides (`tg:{overrides}:…`).
    redis.cli(&["ACL", "SETUSER", "gw", "on", ">pw", "~tg:{[^o]*", "+@all"]);
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(redis_store(&format!(
            "\"redis://gw:pw@127.0.0.1:{}\"",
            redis.port
        )))
        .policy("hourly", "header:x-key", 1, "1h", 1)
        .route("rate", "/rate", "api", &["hourly"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/rate", "x-key", "warm-up").await;
    let call = || async {
        send(&http1(), "GET", &gw.url("/rate"), &[("x-key", "k")], b"")
            .await
            .status
    };
    assert_eq!(call().await, 200);
    assert_eq!(call().await, 429);
    let reset_url = gw.admin_url("/admin/reset/hourly/k");
    let reset = send(&http1(), "POST", &reset_url, &[], b"").await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    let answer = reset.json();
    assert_eq!(answer["status"], "reset", "{answer}");
    assert_eq!(answer["fleet"], "not_told", "{answer}");
    let detail = answer["fleet_detail"].as_str().unwrap_or_default();
    let why = detail.to_ascii_lowercase();
    assert!(
        why.contains("were not told") && why.contains("noperm"),
        "{answer}"
    );
    assert_eq!(call().await, 200, "the key itself is reset");
}

/// A quota's TAT lies weeks ahead (its window's end plus the units used): read by a rate
/// after a reload made the policy one, it owed the rest of the month, so every key of the
/// policy was refused until then. A quota writes it marked (seconds zero-padded to 12
/// digits, the same number to every reader) and a rate reads a marked TAT as idle.
#[tokio::test]
async fn a_quota_switched_to_a_rate_on_redis_starts_its_keys_idle() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis.store_toml();
    let plan = |lines: &str| {
        Fixture::new()
            .store(&store)
            .policy_raw("plan", format!("key = \"header:x-key\"\n{lines}\n"))
            .route("api", "/", "api", &["plan"])
            .build()
    };
    let gw = TestGateway::start_real_clock(&plan("quota = 2\nwindow = \"month\""), &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    let call = |client: HttpClient| {
        let url = gw.url("/");
        async move { send(&client, "GET", &url, &[("x-key", "acme")], b"").await }
    };
    assert_eq!(call(http1()).await.status, 200);
    assert_eq!(call(http2()).await.status, 200);
    let used_up = call(http1()).await;
    assert_eq!(used_up.status, 429, "the month's quota of 2 is used");
    assert!(used_up.num("retry-after") > 3_600, "the month's end is far");
    let marked = redis
        .cli(&["KEYS", "*"])
        .lines()
        .map(|k| redis.cli(&["GET", k.trim()]).trim().to_owned())
        .filter(|v| v.starts_with("00") && v.len() == 22)
        .count();
    assert_eq!(marked, 2, "both keys' quota TATs are marked");

    gw.rewrite(&plan("limit = 5\nperiod = \"1h\"\nburst = 5"), &up.url());
    let reload = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let state = get(&gw.admin_url("/admin/limits/plan/acme"), &[])
        .await
        .json();
    assert_eq!(state["remaining"], 5, "idle under the rate: {state}");
    for client in [http1(), http2()] {
        let r = call(client).await;
        assert_eq!(r.status, 200, "the rate admits the key: {}", r.text());
    }
    let state = get(&gw.admin_url("/admin/limits/plan/acme"), &[])
        .await
        .json();
    assert_eq!(state["remaining"], 3, "{state}");
}

/// A 429 from Redis describes a calendar quota it did not refuse as the request left it:
/// 9 of 10 left, whole again at its reset — as on the memory store. It read `r=0;t=0`
/// (the local window end on Redis's timeline), telling a client its quota was spent and
/// reset now. Over HTTP/1.1 and HTTP/2, each store.
#[tokio::test]
async fn a_refusal_on_redis_describes_a_quota_it_did_not_refuse() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let fixture = |f: Fixture| {
        f.policy("hourly", "header:x-key", 1, "1h", 1)
            .policy_raw(
                "daily",
                "key = \"header:x-key\"\nquota = 10\nwindow = \"day\"\n",
            )
            .route("both", "/both", "api", &["hourly", "daily"])
    };
    for toml in [
        fixture(Fixture::new().store(redis.store_toml())),
        fixture(Fixture::new()),
    ] {
        let gw = TestGateway::start_real_clock(&toml.build(), &up.url()).await;
        gw.wait_for_store_with("/both", "x-key", "warm-up").await;
        for (client, key) in [(http1(), "one"), (http2(), "two")] {
            let headers = [("x-key", key)];
            let first = send(&client, "GET", &gw.url("/both"), &headers, b"").await;
            assert_eq!(first.status, 200);
            let refused = send(&client, "GET", &gw.url("/both"), &headers, b"").await;
            assert_eq!(refused.status, 429);
            let list = refused.header("ratelimit").expect("RateLimit").to_owned();
            let daily = list.split(", ").nth(1).expect("the quota's item");
            let t: u64 = daily
                .strip_prefix("\"daily\";r=9;t=")
                .unwrap_or_else(|| panic!("9 of 10 left: {list}"))
                .parse()
                .expect("t");
            assert!(
                (1..=25 * 3600).contains(&t),
                "until the day's reset: {list}"
            );
        }
    }
}
