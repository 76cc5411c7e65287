//! Calendar quotas through the gateway: the headers and the refusal over HTTP/1.1 and
//! HTTP/2, the reset at the window's end (the fake clock), the admin API's view, reset
//! and a runtime override that raises the quota, settling from the upstream's header
//! (memory and Redis), and a memory-backed restart that keeps every quota's usage and
//! every rate debt (fleets on Redis: `quota_fleet.rs`).

use crate::support::*;

/// The fake clock starts at 1000 s: 2026-01-01T00:16:40Z.
const TO_MIDNIGHT_S: u64 = 86_400 - 1_000;

fn daily(store: &str) -> String {
    Fixture::new()
        .server("workers = 1")
        .store(store)
        .policy_raw(
            "daily",
            "key = \"header:x-key\"\nquota = 3\nwindow = \"day\"\ntimezone = \"UTC\"\n",
        )
        .policy("rate", "header:x-rate", 1, "1h", 2)
        .route("api", "/", "api", &["daily"])
        .route("rated", "/rated", "api", &["rate"])
        .build()
}

async fn call(client: &HttpClient, gw: &TestGateway, key: &str) -> Got {
    send(client, "GET", &gw.url("/"), &[("x-key", key)], b"").await
}

#[tokio::test]
async fn a_daily_quota_over_http1_and_http2_resets_at_midnight() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&daily("backend = \"memory\""), &up.url()).await;
    for (client, key) in [(http1(), "one"), (http2(), "two")] {
        for left in [2, 1, 0] {
            let r = call(&client, &gw, key).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.header("ratelimit-policy"), Some("\"daily\";q=3;w=86400"));
            assert_eq!(
                r.header("ratelimit"),
                Some(format!("\"daily\";r={left};t={TO_MIDNIGHT_S}").as_str())
            );
            assert_eq!(r.num("x-ratelimit-limit"), 3);
        }
        let refused = call(&client, &gw, key).await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.num("retry-after"), TO_MIDNIGHT_S, "until the reset");
        let problem = send(
            &client,
            "GET",
            &gw.url("/"),
            &[("x-key", key), ("accept", "application/problem+json")],
            b"",
        )
        .await;
        assert_eq!(problem.status, 429);
        let body = problem.json();
        assert_eq!(
            body["violated-policies"],
            serde_json::json!(["daily"]),
            "{body}"
        );
        assert_eq!(body["limit"], "quota", "{body}");
        assert_eq!(refused.json()["limit"], "quota");
        assert_eq!(
            refused.json()["retry_after_ms"].as_u64(),
            Some(TO_MIDNIGHT_S * 1000)
        );
    }
    assert_eq!(up.requests(), 6, "only admitted requests went upstream");
    let state = get(&gw.admin_url("/admin/limits/daily/one"), &[])
        .await
        .json();
    assert_eq!(state["kind"], "quota", "{state}");
    assert_eq!(
        (state["used"].as_u64(), state["left"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(state["resets_at"], "2026-01-02T00:00:00Z");
    assert_eq!(state["window"], "day");

    // Midnight: a new window.
    gw.advance(TO_MIDNIGHT_S * S);
    assert_eq!(call(&http1(), &gw, "one").await.status, 200);
    let state = get(&gw.admin_url("/admin/limits/daily/one"), &[])
        .await
        .json();
    assert_eq!(state["used"], 1, "{state}");
    assert_eq!(state["resets_at"], "2026-01-03T00:00:00Z");
}

#[tokio::test]
async fn a_reset_and_a_raised_quota_unblock_at_once() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&daily("backend = \"memory\""), &up.url()).await;
    let client = http1();
    for _ in 0..3 {
        assert_eq!(call(&client, &gw, "k").await.status, 200);
    }
    assert_eq!(call(&client, &gw, "k").await.status, 429);
    // Raised to 5 mid-window: two more, the three used are kept.
    let put = send(
        &client,
        "PUT",
        &gw.admin_url("/admin/overrides/daily/k"),
        &[("content-type", "application/json")],
        br#"{"quota": 5}"#,
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let statuses: Vec<u16> = futures_statuses(&client, &gw, "k", 3).await;
    assert_eq!(statuses, [200, 200, 429]);
    // A reset forgets the usage.
    let reset = send(
        &client,
        "POST",
        &gw.admin_url("/admin/reset/daily/k"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    assert_eq!(call(&client, &gw, "k").await.status, 200);
    // Rate debts too; a concurrency key is not resettable; unknown policies are named.
    for _ in 0..2 {
        let r = send(&client, "GET", &gw.url("/rated"), &[("x-rate", "r")], b"").await;
        assert_eq!(r.status, 200);
    }
    let rated_url = gw.url("/rated");
    let rated = || send(&client, "GET", &rated_url, &[("x-rate", "r")], b"");
    assert_eq!(rated().await.status, 429);
    let reset = send(
        &client,
        "POST",
        &gw.admin_url("/admin/reset/rate/r"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200);
    assert_eq!(rated().await.status, 200);
    let unknown = send(
        &client,
        "POST",
        &gw.admin_url("/admin/reset/nope/r"),
        &[],
        b"",
    )
    .await;
    assert_eq!(unknown.status, 404);
    // A bad override is refused in the config's words.
    let bad = send(
        &client,
        "PUT",
        &gw.admin_url("/admin/overrides/daily/k"),
        &[("content-type", "application/json")],
        br#"{"limit": 5}"#,
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(bad.text().contains("quota"), "{}", bad.text());
}

async fn futures_statuses(client: &HttpClient, gw: &TestGateway, key: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(call(client, gw, key).await.status.as_u16());
    }
    out
}

#[tokio::test]
async fn a_restart_keeps_quota_usage_and_rate_debts_and_a_damaged_file_refuses_it() {
    let up = Upstream::start().await;
    let keep = tempfile::tempdir().expect("tempdir");
    let file = keep.path().join("state");
    let store = format!(
        "backend = \"memory\"\nstate_file = {:?}\nstate_interval = \"1h\"",
        file.display().to_string()
    );
    let toml = daily(&store);
    let mut first = TestGateway::start_real_clock(&toml, &up.url()).await;
    let client = http1();
    assert_eq!(call(&client, &first, "k").await.status, 200);
    assert_eq!(call(&client, &first, "k").await.status, 200);
    let rated = |gw: &TestGateway| {
        let url = gw.url("/rated");
        async move {
            send(&http2(), "GET", &url, &[("x-rate", "r")], b"")
                .await
                .status
        }
    };
    assert_eq!(rated(&first).await, 200);
    assert_eq!(rated(&first).await, 200);
    assert_eq!(rated(&first).await, 429, "the burst is spent");
    first.gateway.take().expect("running").shutdown().await;
    let written = std::fs::metadata(&file).expect("written at shutdown");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(written.permissions().mode() & 0o777, 0o600);

    let mut second = TestGateway::start_real_clock(&toml, &up.url()).await;
    assert_eq!(
        call(&client, &second, "k").await.status,
        200,
        "one unit was left"
    );
    assert_eq!(
        call(&client, &second, "k").await.status,
        429,
        "two were used before"
    );
    assert_eq!(rated(&second).await, 429, "the debt survived the restart");
    assert_eq!(call(&client, &second, "fresh").await.status, 200);
    // Stopped, not dropped: a dropped gateway shuts down in the background, and its last
    // write of the state file could land after the damage below and repair it.
    second.gateway.take().expect("running").shutdown().await;

    // A damaged file refuses the start, and `tollgate check` says so.
    let mut bytes = std::fs::read(&file).expect("state");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).expect("damage");
    let path = keep.path().join("tollgate.toml");
    std::fs::write(&path, toml.replace("{upstream}", &up.url())).expect("config");
    let refused = tollgate::gateway::Gateway::start_with(
        tollgate::config::load(&path).expect("valid"),
        std::sync::Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await;
    let message = refused.err().expect("refused").to_string();
    assert!(message.contains("damaged"), "{message}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("tollgate check runs");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("damaged"), "{text}");
}

#[tokio::test]
async fn check_warns_of_a_quota_that_a_restart_would_forget() {
    let toml = daily("backend = \"memory\"").replace("{upstream}", "http://127.0.0.1:9");
    let (passed, all) = check_text(&toml);
    assert!(passed, "{all}");
    assert!(all.contains("without a state_file"), "{all}");
}

/// A token quota per day, 10 reserved per request, settled from the upstream's
/// `x-usage-tokens` (the test upstream's `/v1/usage` sends back the request's `x-usage`).
fn tokens_per_day(store: &str) -> String {
    Fixture::new()
        .store(store)
        .policy_raw(
            "tokens",
            "key = \"header:x-key\"\nquota = 100\nwindow = \"day\"\nreserve = 10\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build()
}

async fn used(gw: &TestGateway, client: &HttpClient, usage: &str) -> Got {
    let headers = [("x-key", "acme"), ("x-usage", usage)];
    send(client, "GET", &gw.url("/v1/usage"), &headers, b"").await
}

#[tokio::test]
async fn a_quota_settles_from_the_upstreams_header_in_memory_and_on_redis() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tokens_per_day("backend = \"memory\""), &up.url()).await;
    let client = http2();
    // 10 reserved, 30 used: 20 more; 10 reserved, 2 used: 8 back (none of it expires).
    let r = used(&gw, &client, "30").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("ratelimit"),
        Some(format!("\"tokens\";r=70;t={TO_MIDNIGHT_S}").as_str())
    );
    let r = used(&gw, &client, "2").await;
    assert_eq!(r.num("x-ratelimit-remaining"), 68);
    let state = get(&gw.admin_url("/admin/limits/tokens/acme"), &[])
        .await
        .json();
    assert_eq!(state["used"], 32, "{state}");
    // Past the quota on what was reported: admitted on its reserve, then refused until
    // midnight.
    assert_eq!(used(&gw, &client, "500").await.status, 200);
    let refused = used(&gw, &client, "1").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.num("retry-after"), TO_MIDNIGHT_S);
    gw.advance(TO_MIDNIGHT_S * S);
    assert_eq!(used(&gw, &client, "1").await.status, 200, "a new day");

    let redis = RedisServer::start();
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"deny\"",
        redis.url()
    );
    let gw = TestGateway::start_real_clock(&tokens_per_day(&store), &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    let client = http1();
    assert_eq!(
        used(&gw, &client, "30").await.num("x-ratelimit-remaining"),
        70
    );
    assert_eq!(
        used(&gw, &client, "2").await.num("x-ratelimit-remaining"),
        68
    );
    let state = get(&gw.admin_url("/admin/limits/tokens/acme"), &[])
        .await
        .json();
    assert_eq!(
        (state["used"].as_u64(), state["left"].as_u64()),
        (Some(32), Some(68)),
        "{state}"
    );
}

#[tokio::test]
async fn a_reload_that_turns_a_quota_into_a_rate_says_what_its_keys_keep() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&daily("backend = \"memory\""), &up.url()).await;
    for status in [200, 200, 200, 429] {
        assert_eq!(call(&http1(), &gw, "k").await.status, status);
    }
    let as_rate = daily("backend = \"memory\"").replace(
        "quota = 3\nwindow = \"day\"\ntimezone = \"UTC\"\n",
        "limit = 3\nperiod = \"1h\"\nburst = 3\n",
    );
    assert!(as_rate.contains("limit = 3"), "{as_rate}");
    gw.rewrite(&as_rate, &up.url());
    let answer = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let warnings = answer.json()["report"]["warnings"].to_string();
    assert!(
        warnings.contains("policy `daily` changed between a rate and a calendar quota"),
        "{warnings}"
    );
    // And back: afresh too, as the warning says (it found the usage it left, 0 of 3).
    gw.rewrite(&daily("backend = \"memory\""), &up.url());
    let answer = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(call(&http1(), &gw, "k").await.status, 200, "a quota afresh");
}

/// Every gateway reads time zones from the database built into the binary: a zone the
/// host's files (`TZDIR`, `/usr/share/zoneinfo`) alone name is no zone. Read from the
/// host, two gateways of a fleet on different tzdata — or one whose `TZDIR` named
/// another zone `America/New_York` — kept different windows of one key on Redis, each
/// reading the other's usage as another calendar's: 30 of a quota of 10 admitted.
#[test]
fn time_zones_come_from_the_bundled_database_not_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zoneinfo");
    std::fs::create_dir_all(zones.join("Fake")).expect("mkdir");
    // A TZif file of UTC (version 1: no transitions, one type, "UTC"), which the host's
    // reader takes.
    let mut utc = b"TZif".to_vec();
    utc.extend_from_slice(&[0; 16]);
    for count in [0u32, 0, 0, 0, 1, 4] {
        utc.extend_from_slice(&count.to_be_bytes());
    }
    utc.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    utc.extend_from_slice(b"UTC\0");
    std::fs::write(zones.join("Fake/Zone"), utc).expect("write the zone");
    for zone in ["Fake/Zone", "localtime", "posixrules"] {
        let path = dir.path().join("tollgate.toml");
        let text = Fixture::new()
            .policy_raw(
                "daily",
                format!(
                    "key = \"header:x-key\"\nquota = 3\nwindow = \"day\"\ntimezone = \"{zone}\"\n"
                ),
            )
            .route("api", "/", "api", &["daily"])
            .build_for("http://127.0.0.1:9");
        std::fs::write(&path, text).expect("write");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["check", "--config"])
            .arg(&path)
            .env("TZDIR", &zones)
            .output()
            .expect("tollgate check runs");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{zone}: not a bundled zone");
        assert!(
            said.contains("is not a time zone") && said.contains(zone),
            "{zone}: {said}"
        );
    }
}
