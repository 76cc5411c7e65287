//! Gateways whose wall clocks disagree share one fleet's state on Redis's clock: one
//! running months ahead neither drops the others from the fleet's membership (and counts
//! a fleet of one) nor deletes an override the others put before its time.

use std::time::Duration;

use tollgate::clock::Clock as _;

use super::admin::put_ok;
use super::admin_overrides_kept::tenant_on_redis;
use crate::support::*;

const DAY_NS: u64 = 86_400 * 1_000_000_000;

#[tokio::test]
async fn a_gateway_whose_clock_runs_ahead_counts_the_fleet_and_keeps_its_overrides() {
    let redis = RedisServer::start();
    let monitor = RedisMonitor::start(redis.port);
    let up = Upstream::start().await;
    let toml = tenant_on_redis(&redis);
    let right = TestGateway::start_real_clock(&toml, &up.url()).await;
    // The fake clock's wall time starts at 2026-01-01: moved on to 60 days past this
    // machine's (and Redis's) time, whatever the date the test runs on.
    let ahead = TestGateway::start(&toml, &up.url()).await;
    let real_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let behind_ns = real_ms.saturating_sub(ahead.clock.wall_ms()) * 1_000_000;
    ahead.advance(behind_ns + 60 * DAY_NS);
    // Both heartbeats on Redis's clock: scored within a minute of its time, each turn's
    // (a gateway's own clock scoring its own, the one ahead dropped the other's).
    let on_redis_clock = eventually(Duration::from_secs(30), || {
        let now_ms = redis_time_ms(&redis);
        let beats = redis.cli(&["ZRANGE", "tg:{fleet}", "0", "-1", "WITHSCORES"]);
        let scores: Vec<u64> = (beats.lines().skip(1).step_by(2))
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        scores.len() == 2 && scores.iter().all(|&s| s.abs_diff(now_ms) < 60_000)
    })
    .await;
    assert!(
        on_redis_clock,
        "{}",
        redis.cli(&["ZRANGE", "tg:{fleet}", "0", "-1", "WITHSCORES"])
    );
    for gw in [&right, &ahead] {
        let counted = eventually_async(Duration::from_secs(30), || async {
            get(&gw.admin_url("/admin/stats"), &[]).await.json()["fleet_share"] == 2
        })
        .await;
        assert!(
            counted,
            "each gateway counts a fleet of two: {}",
            redis.cli(&["ZRANGE", "tg:{fleet}", "0", "-1", "WITHSCORES"])
        );
    }
    // An hour's override put through the gateway whose clock is right: the one ahead
    // reads it as long expired and asks Redis to drop it; Redis's clock says it is not.
    put_ok(
        &right.admin_url("/admin/overrides/tenant/acme"),
        br#"{"burst": 10, "ttl": "1h"}"#,
    )
    .await;
    let asked = eventually(Duration::from_secs(30), || {
        monitor.script_calls_with("expire") > 0
    })
    .await;
    assert!(asked, "the gateway ahead asks Redis to drop the override");
    let fields = redis.cli(&["HKEYS", "tg:{overrides}:v2"]);
    assert!(
        fields
            .lines()
            .any(|f| !f.trim().starts_with('#') && !f.trim().is_empty()),
        "the override stays in Redis: {fields}"
    );
    let applied = get(&right.url("/"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(applied.header("x-ratelimit-limit"), Some("10"));
}

/// Redis's clock in ms.
fn redis_time_ms(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap_or(0));
    let (s, us) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    s * 1000 + us / 1000
}
