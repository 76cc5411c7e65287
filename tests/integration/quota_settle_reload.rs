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
    let ready = eventually_async(Duration::from_secs(30), || async {
        send(&http1(), "GET", &gw.url("/"), &[("x-key", "warm-up")], b"")
            .await
            .status
            == 200
    })
    .await;
    assert!(ready, "the store answers");
    a_held_settle_leaves_the_new_calendars_usage(&gw, &up, (&store, &month)).await;
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
    let seen = up.requests();
    let held = {
        let (client, url) = (http1(), gw.url("/v1/usage"));
        tokio::spawn(async move {
            let headers = [("x-key", "acme"), ("x-usage", "0"), ("x-delay-ms", "3000")];
            send(&client, "GET", &url, &headers, b"").await
        })
    };
    let reached = eventually(Duration::from_secs(30), || up.requests() > seen).await;
    assert!(reached, "the held call reached the upstream");
    let reset = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/plan/acme"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    for client in [http1(), http2(), http1()] {
        assert_eq!(
            call(&gw, &client, 1, 0).await.status,
            200,
            "3 after the reset"
        );
    }
    assert_eq!(call(&gw, &http2(), 1, 0).await.status, 429);
    assert_eq!(held.await.expect("the held call").status, 200);
    for client in [http1(), http2()] {
        assert_eq!(call(&gw, &client, 1, 0).await.status, 429, "no refund");
    }
}
