//! Settled costs across a fleet on Redis (round three): a refund clears remembered
//! refusals on every gateway, and a metered stream costs a call per chunk, not per frame.

use std::time::Duration;

use crate::support::*;

/// With Redis, a settle that refunds a key clears the refusal the settling gateway
/// remembered at once, and another gateway asks Redis again within a second. (Before:
/// refused for 2.5 s — up to τ — with the key idle in Redis.)
#[tokio::test]
async fn a_refund_clears_remembered_refusals_across_the_fleet() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // 10 at once, T = 6 min: nothing refills during the test.
    let toml = Fixture::new()
        .store(format!("backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n", redis.url()))
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 10\nperiod = \"1h\"\nburst = 10\nreserve = 10\nmin_cost = 0\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for (i, gw) in [&a, &b].into_iter().enumerate() {
        gw.wait_for_store("/v1/echo", &format!("warm-up-{i}")).await;
    }
    // The whole burst reserved by a request whose answer takes 2.5 s.
    let h = [
        ("x-tenant-id", "acme"),
        ("x-usage", "0"),
        ("x-delay-ms", "2500"),
    ];
    let url = a.url("/v1/usage");
    let seen = up.requests();
    let sent = std::time::Instant::now();
    let slow = tokio::spawn(async move { get(&url, &h).await });
    assert!(eventually(Duration::from_secs(10), || up.requests() > seen).await);
    let h = [("x-tenant-id", "acme"), ("x-usage", "0")];
    // Both gateways keep refusing (and remembering) until the answer comes. The answer
    // reaches the gateway (and refunds) before the client's task is seen finished: on a
    // busy machine a request may be admitted in between (never before the upstream's
    // 2.5 s): the loop ends there.
    while !slow.is_finished() {
        let (ra, rb) = (
            get(&a.url("/v1/usage"), &h).await.status,
            get(&b.url("/v1/usage"), &h).await.status,
        );
        if ra == 200 || rb == 200 {
            let held = sent.elapsed();
            assert!(
                held >= Duration::from_millis(2500),
                "admitted after {held:?}"
            );
            break;
        }
        assert_eq!(ra, 429);
        assert_eq!(rb, 429);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered = slow.await.expect("task");
    assert_eq!(answered.status, 200);
    // Used 0: all 10 refunded. The settling gateway admits at once.
    let refunded = eventually_async(Duration::from_secs(5), || async {
        get(&a.admin_url("/admin/limits/tokens/acme"), &[])
            .await
            .json()["remaining"]
            == 10
    });
    assert!(refunded.await, "the refund reached Redis");
    let refunded_at = std::time::Instant::now();
    assert_eq!(get(&a.url("/v1/usage"), &h).await.status, 200);
    // The other gateway within a second of its last refusal.
    let admitted_b = eventually_async(Duration::from_secs(5), || async {
        get(&b.url("/v1/usage"), &h).await.status == 200
    });
    assert!(admitted_b.await);
    assert!(
        refunded_at.elapsed() < Duration::from_millis(1500),
        "remembered for {:?} after the refund",
        refunded_at.elapsed()
    );
}

/// With Redis, a stream's bytes cost a bounded number of calls: one draw per chunk
/// (64 KiB, or an eighth of the burst when larger).
#[tokio::test]
async fn a_metered_download_costs_a_call_per_chunk() {
    const MIB: usize = 1 << 20;
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!("backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n", redis.url()))
        .policy_raw(
            "down",
            "key = \"header:x-tenant-id\"\nlimit = 1000000000\nperiod = \"1h\"\nburst = 100000000\nsettle = \"response_bytes\"\n",
        )
        .route("api", "/", "api", &["down"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/v1/echo", "warm-up").await;
    let monitor = redis.monitor();
    let rate_calls = || monitor.decision_calls();
    // A first download loads the draw and settle scripts (a first call of a script costs
    // two: EVALSHA, then EVAL), so what follows counts calls alone. Its settle is sent
    // after the response, so the count is read once it has stopped moving.
    let warm = get(&gw.url("/v1/bytes?n=300000"), &[("x-tenant-id", "warm-up")]).await;
    assert_eq!(warm.body.len(), 300_000);
    let quiet = Duration::from_secs(1);
    let calls = steady(quiet, Duration::from_secs(20), rate_calls).await;
    assert!(calls > 0, "the warm-up download called Redis");
    let r = get(
        &gw.url(&format!("/v1/bytes?n={}", 16 * MIB)),
        &[("x-tenant-id", "acme")],
    )
    .await;
    assert_eq!(r.body.len(), 16 * MIB);
    // burst / 8 = 12.5 MB: 16 MiB in two draws, plus admission and the final settle.
    let made = steady(quiet, Duration::from_secs(20), rate_calls).await - calls;
    assert!((3..=4).contains(&made), "{made} calls for 16 MiB");
}
