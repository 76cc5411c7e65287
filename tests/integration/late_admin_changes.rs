//! An admin change Redis does not take in time is answered `503` — and stays unmade when
//! the frozen Redis resumes and runs what was queued: an override set, an override
//! removed and a key reset, each run late, change nothing (the operator was told they
//! failed; a key reset later, unasked, would be a fresh burst nobody meant to give). So
//! does a request answered `503`: it is not charged. Late means any time after the
//! gateway answered, also within a second timeout of it.

use std::time::Duration;

use super::admin::{delete, put_json};
use super::faults::tenant_of_four;
use crate::support::*;

const TENANT: [(&str, &str); 1] = [("x-tenant-id", "spent")];

/// What Redis holds of the fleet's overrides: how many are set.
fn overrides_in_redis(redis: &RedisServer) -> usize {
    let all = redis.cli(&["HKEYS", "tg:{overrides}:v2"]);
    all.lines()
        .filter(|f| !f.is_empty() && !f.starts_with('#'))
        .count()
}

/// Freezes `redis` while `change` is sent (it must be answered 503), and resumes it
/// `thaw` after the answer; then waits until the gateway is ready again.
async fn frozen_while<F, Fut>(
    (redis, gw): (&RedisServer, &TestGateway),
    (what, thaw): (&str, Duration),
    change: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Got>,
{
    redis.pause();
    let answered = change().await;
    assert_eq!(answered.status, 503, "{what}: {}", answered.text());
    assert_eq!(answered.json()["error"], "store_unavailable", "{what}");
    tokio::time::sleep(thaw).await;
    redis.resume();
    let ready = eventually_async(Duration::from_secs(10), || async {
        get(&gw.admin_url("/readyz"), &[]).await.status == 200
    })
    .await;
    assert!(ready, "{what}: the gateway is ready again");
}

/// A gateway on `redis` whose tenant `spent` used its four, and to which Redis answers
/// a reset (it has the reset script from now on: one it lacked would be asked for by
/// name, refused, and never sent whole by a gateway that gave up on the call).
async fn spent_tenant(redis: &RedisServer) -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let toml = tenant_of_four(redis);
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "other").await;
    for _ in 0..4 {
        assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    }
    assert_eq!(get(&gw.url("/"), &TENANT).await.status, 429, "spent");
    let warm = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/tenant/other"),
        &[],
        b"",
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.text());
    (up, gw)
}

#[tokio::test]
async fn admin_changes_answered_503_stay_unmade_when_redis_resumes() {
    let redis = RedisServer::start();
    let (_up, gw) = spent_tenant(&redis).await;
    let kept = gw.admin_url("/admin/overrides/tenant/kept");
    let set = put_json(&kept, None, br#"{"burst": 9}"#).await;
    assert_eq!(set.status, 200, "{}", set.text());
    assert_eq!(overrides_in_redis(&redis), 1);

    // Well past twice the store timeout (300 ms): the queued script is late when it runs.
    let long = Duration::from_millis(1000);
    let late = gw.admin_url("/admin/overrides/tenant/late");
    frozen_while((&redis, &gw), ("a PUT", long), || {
        put_json(&late, None, br#"{"burst": 3}"#)
    })
    .await;
    // Redis ran the script when it resumed, before it answered the readiness probe.
    assert_eq!(overrides_in_redis(&redis), 1, "the late PUT set nothing");
    frozen_while((&redis, &gw), ("a DELETE", long), || delete(&kept)).await;
    assert_eq!(
        overrides_in_redis(&redis),
        1,
        "the late DELETE removed nothing"
    );
    let reset = gw.admin_url("/admin/reset/tenant/spent");
    frozen_while((&redis, &gw), ("a reset", long), || {
        let client = http1();
        async move { send(&client, "POST", &reset, &[], b"").await }
    })
    .await;
    // Read from Redis (a request would be refused from this gateway's memory of it).
    let state = get(&gw.admin_url("/admin/limits/tenant/spent"), &[])
        .await
        .json();
    assert_eq!(
        state["remaining"], 0,
        "the late reset reset nothing: {state}"
    );
    // Nor did the gateways' reading of the fleet's changes bring one back (read each
    // second: a change made would be here by now).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let keys: Vec<&str> = (listed["overrides"].as_array().expect("a list").iter())
        .filter_map(|o| o["key"][0].as_str())
        .collect();
    assert_eq!(keys, ["kept"], "{listed}");
}

/// Redis resumed 150 ms after the gateway answered `503`: the queued scripts run about
/// one and a half store timeouts (300 ms) after they were sent, within twice it — and
/// change nothing, as the answers said: neither the reset, nor the override, nor the
/// request's charge.
#[tokio::test]
async fn what_redis_runs_just_after_the_timeout_changes_nothing() {
    let redis = RedisServer::start();
    let (_up, gw) = spent_tenant(&redis).await;
    let thaw = Duration::from_millis(150);

    // First, so that Redis is called (three failures in a row open the breaker).
    let fresh = [("x-tenant-id", "fresh")];
    let root = gw.url("/");
    frozen_while((&redis, &gw), ("a request", thaw), || get(&root, &fresh)).await;

    let reset = gw.admin_url("/admin/reset/tenant/spent");
    frozen_while((&redis, &gw), ("a reset", thaw), || {
        let client = http1();
        async move { send(&client, "POST", &reset, &[], b"").await }
    })
    .await;
    let late = gw.admin_url("/admin/overrides/tenant/late");
    frozen_while((&redis, &gw), ("a PUT", thaw), || {
        put_json(&late, None, br#"{"burst": 3}"#)
    })
    .await;

    let limits = |key: &'static str| {
        let url = gw.admin_url(&format!("/admin/limits/tenant/{key}"));
        async move { get(&url, &[]).await.json() }
    };
    let spent = limits("spent").await;
    assert_eq!(
        spent["remaining"], 0,
        "the reset answered 503 reset nothing: {spent}"
    );
    assert_eq!(
        overrides_in_redis(&redis),
        0,
        "the PUT answered 503 set nothing"
    );
    let fresh = limits("fresh").await;
    assert_eq!(
        fresh["remaining"], 4,
        "the request answered 503 was not charged: {fresh}"
    );
}
