//! Redis loses its data (a restart without persistence) while a gateway holds a slice: the
//! slice was carved from state that is gone, and spent on top of the fresh burst Redis
//! then grants, the fleet would admit a burst more than the limit. Once the loss is seen,
//! the slice serves nothing more: the next request is decided in Redis.

use std::time::Duration;

use crate::lease::{four_requests_into_a_slice, metric_of};
use crate::support::*;

#[tokio::test]
async fn a_slice_held_when_redis_lost_its_data_serves_nothing_more() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let (gw, _) = four_requests_into_a_slice(&redis, &up).await;
    let metrics = gw.admin_url("/metrics");
    // The slice keeper (every 100 ms) counts what is held.
    let held_reads = |units: f64| {
        let metrics = metrics.clone();
        eventually_async(Duration::from_secs(20), move || {
            let metrics = metrics.clone();
            async move {
                let text = get(&metrics, &[]).await.text();
                metric_of(&text, "tollgate_lease_units_held") == units
            }
        })
    };
    assert!(held_reads(22.0).await, "22 units held");
    gw.sees_restart_of(&mut redis).await;
    // Its next turn finds the loss: nothing is held.
    let nothing_held = held_reads(0.0).await;
    assert!(nothing_held, "the slice serves nothing after the loss");
    // The next request is decided in Redis, whose fresh key then holds its charge.
    let r = get(&gw.url("/"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(r.status, 200);
    let state = get(&gw.admin_url("/admin/limits/hot/acme"), &[])
        .await
        .json();
    let remaining = state["remaining"].as_u64().expect("remaining");
    assert!(
        remaining < 100,
        "the request was charged in Redis, not from the old slice: {state}"
    );
}
