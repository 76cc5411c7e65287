//! A Redis clock that runs ahead of what the gateway learned (ntpd stepping it, a
//! failover to a node whose clock runs ahead): a call the gateway sent in time reads as
//! late to the script (which then decides nothing), and the gateway learns the clock
//! again from that reply, so decisions go on from the next call — not refused (or let
//! through) per `on_error` until a restart.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_redis_clock_ahead_of_what_was_learnt_is_learnt_again_and_decisions_go_on() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis
        .store_toml()
        .replace("timeout = \"2s\"", "timeout = \"200ms\"");
    assert!(store.contains("timeout = \"200ms\"") && store.contains("on_error = \"deny\""));
    let toml = Fixture::new()
        .store(store)
        .policy("tenant", "header:x-tenant", 100, "1m", 100)
        .route("api", "/api", "api", &["tenant"])
        .build();
    // The gateway's clock stands still (a fake one) while Redis's runs: to the gateway,
    // Redis's clock moves ahead of what it learned, as after a step.
    let gw = TestGateway::start(&toml, &up.url()).await;
    let decided = || async {
        get(&gw.url("/api"), &[("x-tenant", "acme")])
            .await
            .status
            .as_u16()
    };
    let first =
        eventually_async(Duration::from_secs(30), || async { decided().await == 200 }).await;
    assert!(first, "decided in Redis");
    // Far past the deadline margin (twice the 200 ms timeout), no call in between.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(decided().await);
    }
    assert_eq!(
        statuses[0], 503,
        "the call that finds the clock ahead decides nothing: {statuses:?}"
    );
    assert!(
        statuses[1..].iter().all(|&s| s == 200),
        "decided again from the next call on: {statuses:?}"
    );
}

/// A gateway whose wall clock is months off Redis's (the fake clock: 2026-01-01) names
/// calendar windows Redis's clock is not in: its quota requests are not decided (the
/// script would read the key's usage as another calendar's, none, and admit every one)
/// but answered per `on_error`, counted under the cause `clock_skew`; its rate tiers,
/// which need no calendar, are decided as ever.
#[tokio::test]
async fn a_gateway_whose_calendar_is_months_off_decides_no_quota() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(redis.store_toml())
        .policy_raw(
            "monthly",
            "key = \"header:x-tenant\"\nquota = 1\nwindow = \"month\"\n",
        )
        .policy("tenant", "header:x-tenant", 100, "1m", 100)
        .route("quota", "/quota", "api", &["monthly"])
        .route("rate", "/rate", "api", &["tenant"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let rate = eventually_async(Duration::from_secs(30), || async {
        get(&gw.url("/rate"), &[("x-tenant", "acme")]).await.status == 200
    })
    .await;
    assert!(rate, "a rate tier is decided in Redis");
    for _ in 0..3 {
        let r = get(&gw.url("/quota"), &[("x-tenant", "acme")]).await;
        assert_eq!(r.status, 503, "on_error = \"deny\": {}", r.text());
    }
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_store_errors_total")
                && l.contains("cause=\"clock_skew\"")),
        "{metrics}"
    );
}
