//! What a fleet on Redis keeps of resets and quota windows: a reset through one gateway
//! ends the other's remembered refusals within about a second (rate and quota keys), or
//! says the fleet was not told, and the Redis scripts themselves, run by a real Redis,
//! never refund a reservation into a later window nor read another calendar's TAT as
//! usage; a quota switched to a rate by reload starts its keys idle.

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

/// The server's clock in Unix seconds, as the scripts read it.
fn redis_now(redis: &RedisServer) -> i64 {
    let time = redis.cli(&["TIME"]);
    time.lines()
        .next()
        .expect("seconds")
        .trim()
        .parse()
        .expect("seconds")
}

/// settle.lua on `key` charged at `charged_us` (server µs): `op` ("debt" or "refund") of
/// `ns`, `room` to refund, in `window`, the debt bound just below another calendar's. Its
/// reply, the debt after and whether the reset marker held a refund, as "debt held".
fn settle_at(
    redis: &RedisServer,
    key: &str,
    (op, ns, room): (&str, &str, &str),
    window: &str,
    charged_us: &str,
) -> String {
    // As the gateway loads it: the shared start (tat.lua) before it.
    let settle = [
        include_str!("../../src/store/rate/tat.lua"),
        include_str!("../../src/store/rate/settle.lua"),
    ]
    .concat();
    let marker = format!("{key}:reset");
    let args = [
        "EVAL",
        &settle,
        "2",
        key,
        &marker,
        op,
        ns,
        room,
        "899999999999",
        window,
        charged_us,
    ];
    let reply = redis.cli(&args);
    reply.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`settle_at`] with no charge time: the debt alone, no marker held.
fn settle_on(redis: &RedisServer, key: &str, op: (&str, &str, &str), window: &str) -> String {
    let reply = settle_at(redis, key, op, window, "0");
    reply.strip_suffix(" 0").expect("not held").to_owned()
}

#[tokio::test]
async fn settle_lua_refunds_nothing_into_a_later_window() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    // A day that ended 100 s ago; the key has used 80 units of the day running now.
    let end = now - 100;
    let (start, next) = (end - 86_400, end + 86_400);
    let window = format!("{start}:{end}:{next}");
    redis.cli(&["SET", "quota-key", &format!("{next}:000000080")]);
    let after = settle_on(&redis, "quota-key", ("refund", "49", "50"), &window);
    assert_eq!(
        after, "80",
        "a reservation of the day that ended gives nothing back"
    );
    assert_eq!(
        redis.cli(&["GET", "quota-key"]).trim(),
        format!("{next}:000000080")
    );
    // Within its own window, the same refund is given.
    let own = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    redis.cli(&["SET", "own-key", &format!("{}:000000080", now + 86_390)]);
    assert_eq!(
        settle_on(&redis, "own-key", ("refund", "49", "50"), &own),
        "31"
    );
    // A debt of a day that ended before yesterday ended: today's usage is left as it is.
    let (old_end, old_next) = (now - 86_500, now - 100);
    let long_gone = format!("{}:{old_end}:{old_next}", old_end - 86_400);
    let today = format!("{}:000000080", now + 86_300);
    redis.cli(&["SET", "today-key", &today]);
    assert_eq!(
        settle_on(&redis, "today-key", ("debt", "40", "0"), &long_gone),
        "0"
    );
    assert_eq!(redis.cli(&["GET", "today-key"]).trim(), today);
}

/// A key reset (reset.lua) at or after a charge holds its refund; one reset before it
/// does not. A debt is charged whatever the marker says.
#[tokio::test]
async fn settle_lua_refunds_nothing_after_a_reset_of_its_key() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let now = redis_now(&redis);
    let own = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    // A key reset (reset.lua) at or after the charge refunds nothing; one reset before
    // the charge does. The marker holds the server's µs as digits.
    let reset = &[tat, include_str!("../../src/store/rate/reset.lua")].concat();
    let used = format!("{}:000000080", now + 86_390);
    redis.cli(&["SET", "reset-key", &used]);
    redis.cli(&["EVAL", reset, "2", "reset-key", "reset-key:reset", "60000"]);
    assert_eq!(redis.cli(&["EXISTS", "reset-key"]).trim(), "0", "forgotten");
    let marker: u64 = redis
        .cli(&["GET", "reset-key:reset"])
        .trim()
        .parse()
        .expect("µs digits");
    assert!(marker / 1_000_000 >= now as u64, "{marker}");
    let ttl: u64 = redis
        .cli(&["PTTL", "reset-key:reset"])
        .trim()
        .parse()
        .expect("ms");
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    for (charged, after) in [(marker - 1, "80 1"), (marker, "80 1"), (marker + 1, "31 0")] {
        redis.cli(&["SET", "reset-key", &used]);
        let refund = ("refund", "49", "50");
        let got = settle_at(&redis, "reset-key", refund, &own, &charged.to_string());
        assert_eq!(got, after, "charged at {charged}, reset at {marker}");
    }
    // Nothing to give back (a settle at what was charged) holds nothing.
    redis.cli(&["SET", "reset-key", &used]);
    assert_eq!(
        settle_at(&redis, "reset-key", ("refund", "0", "0"), &own, "0"),
        "80 0"
    );
    // A debt is charged whatever the marker says.
    let debt = ("debt", "9", "0");
    assert_eq!(settle_at(&redis, "reset-key", debt, &own, "0"), "89 0");
    // Given its one-time key, a refund sent twice (a Cluster client's retry after a
    // dropped connection) is given once.
    redis.cli(&["DEL", "reset-key:reset"]);
    redis.cli(&["SET", "reset-key", &used]);
    let settle = [tat, include_str!("../../src/store/rate/settle.lua")].concat();
    let refund_once = [
        "EVAL",
        &settle,
        "3",
        "reset-key",
        "reset-key:reset",
        "reset-key:once:1",
        "refund",
        "49",
        "50",
        "899999999999",
        &own,
        "0",
        "10000",
    ];
    let replies: Vec<String> = (0..2)
        .map(|_| {
            redis
                .cli(&refund_once)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(replies, ["31 0", "31 0"], "refunded once");
    // A hold of 0 leaves no marker.
    redis.cli(&["EVAL", reset, "2", "plain-key", "plain-key:reset", "0"]);
    assert_eq!(redis.cli(&["EXISTS", "plain-key:reset"]).trim(), "0");
}

/// rollback.lua takes a Cluster group's charge back, unless the key was reset since the
/// charge, or the key moved on after the calendar window the charge went into ended.
#[tokio::test]
async fn rollback_lua_takes_a_charge_back_unless_reset_since_or_its_window_ended() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    let marker = now as u64 * 1_000_000;
    let rollback = include_str!("../../src/store/rate/rollback.lua");
    let later = format!("{}:000000090", now + 86_390);
    for (marker_at, after) in [(marker - 1, "85"), (marker + 1, "90")] {
        redis.cli(&["SET", "rolled-key", &later]);
        redis.cli(&["SET", "rolled-key:reset", &marker_at.to_string()]);
        // Our charge wrote 85 (5 ns); someone moved the key to 90 since.
        let written = format!("{}:000000085", now + 86_390);
        let args = [
            "EVAL",
            rollback,
            "2",
            "rolled-key",
            "rolled-key:reset",
            &written,
            "",
            "1000",
            "5",
            &marker.to_string(),
            "0",
        ];
        assert_eq!(redis.cli(&args).trim(), "1");
        let stamp = redis.cli(&["GET", "rolled-key"]).trim().to_owned();
        assert_eq!(
            stamp.rsplit(':').next(),
            Some(&format!("0000000{after}")[..]),
            "{stamp}"
        );
    }
    // A quota's charge in a window that has ended since: the key, moved by the next
    // window's requests, holds none of it and is left as it is; in the window still
    // running, the charge is taken back.
    redis.cli(&["DEL", "rolled-key:reset"]);
    for (window_end, after) in [(now - 10, "90"), (now + 3_600, "85")] {
        redis.cli(&["SET", "rolled-key", &later]);
        let written = format!("{}:000000085", now + 86_390);
        let end = window_end.to_string();
        let args = [
            "EVAL",
            rollback,
            "2",
            "rolled-key",
            "rolled-key:reset",
            &written,
            "",
            "1000",
            "5",
            &marker.to_string(),
            &end,
        ];
        assert_eq!(redis.cli(&args).trim(), "1");
        let stamp = redis.cli(&["GET", "rolled-key"]).trim().to_owned();
        assert_eq!(
            stamp.rsplit(':').next(),
            Some(&format!("0000000{after}")[..]),
            "window ending at {window_end}: {stamp}"
        );
    }
    // Given its one-time key, a rollback sent twice (a Cluster client's retry after a
    // dropped connection) takes the charge back once.
    redis.cli(&["SET", "rolled-key", &later]);
    let written = format!("{}:000000085", now + 86_390);
    let marker_arg = marker.to_string();
    let twice = [
        "EVAL",
        rollback,
        "3",
        "rolled-key",
        "rolled-key:reset",
        "rolled-key:once:1",
        &written,
        "",
        "1000",
        "5",
        &marker_arg,
        "0",
        "10000",
    ];
    for _ in 0..2 {
        assert_eq!(redis.cli(&twice).trim(), "1");
    }
    let stamp = redis.cli(&["GET", "rolled-key"]).trim().to_owned();
    assert_eq!(stamp.rsplit(':').next(), Some("000000085"), "{stamp}");
}

/// gcra.lua reads a TAT written under another calendar as no usage of this one.
#[tokio::test]
async fn gcra_lua_reads_another_calendars_tat_as_no_usage() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let gcra = &[tat, include_str!("../../src/store/rate/gcra.lua")].concat();
    let now = redis_now(&redis);
    // A TAT written under a monthly calendar, read by a daily one: 20 days past the
    // day's end is no usage of the day, so a quota of 3 admits.
    let day = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    let month_tat = format!("{}:000000002", now + 86_390 + 20 * 86_400);
    redis.cli(&["SET", "switched-key", &month_tat]);
    let reply = redis.cli(&[
        "EVAL",
        gcra,
        "1",
        "switched-key",
        "1",
        "3",
        "0",
        "0",
        "1",
        &day,
    ]);
    let admitted = reply.lines().nth(2).map(str::trim);
    assert_eq!(admitted, Some("1"), "admitted: {reply}");
    let stored = redis.cli(&["GET", "switched-key"]);
    assert_eq!(
        stored.trim(),
        format!("{:012}:000000001", now + 86_390),
        "the day's first unit, from the day's end, with a quota's mark"
    );
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
