//! A settle admitted under a calendar a reload has since changed: the key's usage under the
//! new calendar stays (the settle finds another calendar's TAT and leaves it), on the
//! memory store and on Redis. A client holding requests open across the reload gets no
//! fresh quota from their settles.

use std::time::Duration;

use crate::support::*;

/// 3 units a `window`, 1 reserved a request, settled from the answer's
/// `x-usage-tokens`.
fn plan(store: &str, window: &str) -> String {
    Fixture::new()
        .server("workers = 1")
        .store(store)
        .policy_raw(
            "plan",
            format!("key = \"header:x-key\"\nquota = 3\n{window}\nreserve = 1\nsettle = \"response_header:x-usage-tokens\"\n"),
        )
        .route("api", "/", "api", &["plan"])
        .build()
}

/// A call that uses `units`, answered `delay_ms` late.
async fn call(gw: &TestGateway, client: &HttpClient, units: u64, delay_ms: u64) -> Got {
    let (units, delay) = (units.to_string(), delay_ms.to_string());
    let headers = [
        ("x-key", "acme"),
        ("x-usage", units.as_str()),
        ("x-delay-ms", delay.as_str()),
    ];
    send(client, "GET", &gw.url("/v1/usage"), &headers, b"").await
}

/// A call held open under the month's calendar settles (using 3, 2 past its reserve) after
/// a reload made the window a day and the day's 3 are used: the key stays used up.
async fn a_held_settle_leaves_the_new_calendars_usage(
    gw: &TestGateway,
    up: &Upstream,
    (store, month): (&str, &str),
) {
    let seen = up.requests();
    let held = {
        let client = http1();
        let url = gw.url("/v1/usage");
        tokio::spawn(async move {
            let headers = [("x-key", "acme"), ("x-usage", "3"), ("x-delay-ms", "3000")];
            send(&client, "GET", &url, &headers, b"").await
        })
    };
    let reached = eventually(Duration::from_secs(30), || up.requests() > seen).await;
    assert!(reached, "the held call reached the upstream");
    gw.rewrite(&plan(store, "window = \"day\""), &up.url());
    let answer = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let report = answer.json()["report"]["warnings"].to_string();
    assert!(report.contains("calendar changed"), "{month}: {report}");
    for client in [http1(), http2(), http1()] {
        assert_eq!(call(gw, &client, 1, 0).await.status, 200, "the day's 3");
    }
    assert_eq!(call(gw, &http2(), 1, 0).await.status, 429);
    let settled = held.await.expect("the held call");
    assert_eq!(settled.status, 200, "admitted on its reserve");
    for client in [http1(), http2()] {
        let after = call(gw, &client, 1, 0).await;
        assert_eq!(after.status, 429, "the day's usage was kept");
    }
}

#[tokio::test]
async fn a_settle_across_a_calendar_change_keeps_the_new_usage_in_memory() {
    let up = Upstream::start().await;
    let store = "backend = \"memory\"";
    let gw = TestGateway::start(&plan(store, "window = \"month\""), &up.url()).await;
    a_held_settle_leaves_the_new_calendars_usage(&gw, &up, (store, "month")).await;
}

#[tokio::test]
async fn a_settle_across_a_calendar_change_keeps_the_new_usage_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis.store_toml();
    // A month that does not end at the coming midnight (else both calendars share it).
    let midnight = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .tomorrow()
        .and_then(|d| d.start_of_day())
        .expect("tomorrow");
    let anchor = if midnight.day() == 2 { 3 } else { 2 };
    let month = format!("window = \"month\"\nanchor = {anchor}");
    let gw = TestGateway::start_real_clock(&plan(&store, &month), &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    a_held_settle_leaves_the_new_calendars_usage(&gw, &up, (&store, &month)).await;
}

/// A call that uses nothing, held open `ms` through `gw` (its whole reserve is refunded
/// when it settles, `min_cost = 0`), once it has reached the upstream.
async fn held_call(gw: &TestGateway, up: &Upstream, ms: u64) -> tokio::task::JoinHandle<Got> {
    let seen = up.requests();
    let held = {
        let (client, url, delay) = (http1(), gw.url("/v1/usage"), ms.to_string());
        tokio::spawn(async move {
            let headers = [("x-key", "acme"), ("x-usage", "0"), ("x-delay-ms", &delay)];
            send(&client, "GET", &url, &headers, b"").await
        })
    };
    let reached = eventually(Duration::from_secs(30), || up.requests() > seen).await;
    assert!(reached, "the held call reached the upstream");
    held
}

async fn reset(gw: &TestGateway, key: &str) {
    let url = gw.admin_url(&format!("/admin/reset/plan/{key}"));
    let reset = send(&http1(), "POST", &url, &[], b"").await;
    assert_eq!(reset.status, 200, "{}", reset.text());
}

/// The held refunds `gw`'s metrics count.
async fn refunds_held(gw: &TestGateway) -> f64 {
    let text = get(&gw.admin_url("/metrics"), &[]).await.text();
    let series = "tollgate_settle_fallbacks_total{policy=\"plan\",result=\"reset\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// After a reset of `acme` and the held call's settle: the 3 units used since the reset
/// through `gw` stay used (no refund came out of them).
async fn used_up_since_the_reset(gw: &TestGateway, held: tokio::task::JoinHandle<Got>) {
    for client in [http1(), http2(), http1()] {
        assert_eq!(
            call(gw, &client, 1, 0).await.status,
            200,
            "3 after the reset"
        );
    }
    assert_eq!(call(gw, &http2(), 1, 0).await.status, 429);
    assert_eq!(held.await.expect("the held call").status, 200);
    for client in [http1(), http2()] {
        assert_eq!(call(gw, &client, 1, 0).await.status, 429, "no refund");
    }
}

/// A call held open across an admin reset of its key settles with nothing used: its
/// refund would come out of the usage after the reset, so nothing is given back, and the
/// key that used its 3 since the reset stays used up (memory store, one gateway).
#[tokio::test]
async fn a_refund_after_a_reset_gives_nothing_back() {
    let up = Upstream::start().await;
    // `min_cost = 0`: a call that used nothing is refunded its whole reserve.
    let toml = plan("backend = \"memory\"", "window = \"day\"\nmin_cost = 0");
    let gw = TestGateway::start(&toml, &up.url()).await;
    let held = held_call(&gw, &up, 3000).await;
    reset(&gw, "acme").await;
    used_up_since_the_reset(&gw, held).await;
    assert_eq!(refunds_held(&gw).await, 1.0, "the held refund is counted");
}

/// A reset of another key leaves a held call's refund alone: its reserve comes back, and
/// the key has its 3 after it (memory store).
#[tokio::test]
async fn a_reset_of_another_key_leaves_a_refund_alone() {
    let up = Upstream::start().await;
    let toml = plan("backend = \"memory\"", "window = \"day\"\nmin_cost = 0");
    let gw = TestGateway::start(&toml, &up.url()).await;
    let held = held_call(&gw, &up, 1000).await;
    reset(&gw, "zed").await;
    assert_eq!(held.await.expect("the held call").status, 200);
    for client in [http1(), http2(), http1()] {
        assert_eq!(call(&gw, &client, 1, 0).await.status, 200, "refunded");
    }
    assert_eq!(call(&gw, &http2(), 1, 0).await.status, 429);
    assert_eq!(refunds_held(&gw).await, 0.0);
}

/// Two gateways on one Redis: a call held open through `b` across a reset of its key
/// made through `a` gives nothing back when it settles, though an override set through
/// `a` at once moves the fleet's version with a change (the refund was given while `b`
/// inferred resets from a version that moved with none): the key's reset marker in
/// Redis refuses it, on whichever gateway the settle runs.
#[tokio::test]
async fn a_refund_after_a_reset_elsewhere_in_the_fleet_gives_nothing_back() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis.store_toml();
    let toml = plan(&store, "window = \"day\"\nmin_cost = 0");
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for gw in [&a, &b] {
        gw.wait_for_store_with("/", "x-key", "warm-up").await;
    }
    let held = held_call(&b, &up, 3000).await;
    reset(&a, "acme").await;
    let other = a.admin_url("/admin/overrides/plan/other");
    crate::admin::put_ok(&other, br#"{"quota": 5}"#).await;
    used_up_since_the_reset(&a, held).await;
    assert_eq!(call(&b, &http1(), 1, 0).await.status, 429, "on b too");
    assert_eq!(
        refunds_held(&b).await,
        1.0,
        "b, which settled it, counts it"
    );
}

/// A call held open while Redis restarts and loses every key settles with nothing used:
/// the key's usage after the restart is not its refund's (Redis kept no marker, its data
/// being gone), so once the gateway has seen the restart nothing is given back.
#[tokio::test]
async fn a_refund_after_redis_lost_its_keys_gives_nothing_back() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = plan(&redis.store_toml(), "window = \"day\"\nmin_cost = 0");
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store_with("/v1/usage", "x-key", "warm-up")
        .await;
    // Long enough to outlast the restart and the calls after it on a busy machine.
    let held = held_call(&gw, &up, 15_000).await;
    gw.sees_restart_of(&mut redis).await;
    assert!(!held.is_finished(), "the held call is still open");
    used_up_since_the_reset(&gw, held).await;
    assert_eq!(refunds_held(&gw).await, 1.0, "the held refund is counted");
}

/// A call admitted a second before midnight and settled after it charges the new day,
/// and its headers say so: whole again at the next midnight, a day away. They said the
/// old day's reset (`t=1`, counted from the admission), as if the usage were gone at
/// once. The memory store under the fake clock, over HTTP/1.1.
#[tokio::test]
async fn a_settle_after_the_windows_end_tells_the_new_windows_reset() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&plan("backend = \"memory\"", "window = \"day\""), &up.url()).await;
    // The fake clock starts at 00:16:40 UTC: to a second before midnight.
    gw.advance((86_400 - 1_000 - 1) * 1_000_000_000);
    let seen = up.requests();
    let held = {
        let (client, url) = (http1(), gw.url("/v1/usage"));
        tokio::spawn(async move {
            let headers = [("x-key", "late"), ("x-usage", "2"), ("x-delay-ms", "2000")];
            send(&client, "GET", &url, &headers, b"").await
        })
    };
    let reached = eventually(Duration::from_secs(30), || up.requests() > seen).await;
    assert!(reached, "the held call reached the upstream");
    gw.advance(2 * 1_000_000_000);
    let settled = held.await.expect("the held call");
    assert_eq!(settled.status, 200);
    let list = settled.header("ratelimit").expect("RateLimit").to_owned();
    let t: u64 = list
        .rsplit(";t=")
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a reset: {list}"));
    assert!(t > 86_000, "the new day's reset, a day away: {list}");
}
