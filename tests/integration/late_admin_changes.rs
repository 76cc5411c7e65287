//! An admin change Redis does not take in time is answered `503` — and stays unmade when
//! the frozen Redis resumes and runs what was queued: an override set, an override
//! removed and a key reset, each run late, change nothing (the operator was told they
//! failed; a key reset later, unasked, would be a fresh burst nobody meant to give).

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

/// Freezes `redis` while `change` is sent (it must be answered 503), and resumes it once
/// the change's deadline has passed; then waits until the gateway is ready again.
async fn frozen_while<F, Fut>(redis: &RedisServer, gw: &TestGateway, what: &str, change: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Got>,
{
    redis.pause();
    let answered = change().await;
    assert_eq!(answered.status, 503, "{what}: {}", answered.text());
    assert_eq!(answered.json()["error"], "store_unavailable", "{what}");
    // Well past twice the store timeout (300 ms): the queued script is late when it runs.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    redis.resume();
    let ready = eventually_async(Duration::from_secs(10), || async {
        get(&gw.admin_url("/readyz"), &[]).await.status == 200
    })
    .await;
    assert!(ready, "{what}: the gateway is ready again");
}

#[tokio::test]
async fn admin_changes_answered_503_stay_unmade_when_redis_resumes() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = tenant_of_four(&redis);
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "other").await;
    let kept = gw.admin_url("/admin/overrides/tenant/kept");
    let set = put_json(&kept, None, br#"{"burst": 9}"#).await;
    assert_eq!(set.status, 200, "{}", set.text());
    for _ in 0..4 {
        assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    }
    assert_eq!(get(&gw.url("/"), &TENANT).await.status, 429, "spent");
    assert_eq!(overrides_in_redis(&redis), 1);
    // Redis has the reset script from now on (one it lacked would be asked for by name,
    // refused, and never sent whole by a gateway that gave up on the call).
    let warm = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/tenant/other"),
        &[],
        b"",
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.text());

    let late = gw.admin_url("/admin/overrides/tenant/late");
    frozen_while(&redis, &gw, "a PUT", || {
        put_json(&late, None, br#"{"burst": 3}"#)
    })
    .await;
    // Redis ran the script when it resumed, before it answered the readiness probe.
    assert_eq!(overrides_in_redis(&redis), 1, "the late PUT set nothing");
    frozen_while(&redis, &gw, "a DELETE", || delete(&kept)).await;
    assert_eq!(
        overrides_in_redis(&redis),
        1,
        "the late DELETE removed nothing"
    );
    let reset = gw.admin_url("/admin/reset/tenant/spent");
    frozen_while(&redis, &gw, "a reset", || {
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
