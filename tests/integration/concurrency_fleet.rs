//! Concurrency caps beyond one process and one config: on a fleet's Redis two gateways
//! share the slots exactly, a killed gateway's slots return within `lease_ttl`, keys in
//! different Cluster hash slots, a Redis outage decided by `on_error` as for rate tiers;
//! and slots held across a reload that lowers the cap.

use std::time::Duration;

use super::concurrency::{capped, slots, GatedUpstream, WAIT};
use crate::support::*;

/// A gateway on Redis (`url_toml`: a string or a list of cluster seeds) with the `cap`
/// concurrency policy on `/`.
fn capped_on_redis(url_toml: &str, max: u32, extra: &str) -> String {
    Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = {url_toml}\ntimeout = \"5s\"\non_error = \"deny\"\n"
        ))
        .policy_raw(
            "cap",
            format!("key = \"header:x-key\"\nmax_in_flight = {max}\n{extra}"),
        )
        .route("all", "/", "api", &["cap"])
        .build()
}

#[tokio::test]
async fn two_gateways_on_redis_share_the_slots_exactly() {
    let redis = RedisServer::start();
    let up = GatedUpstream::start().await;
    let toml = capped_on_redis(&format!("\"{}\"", redis.url()), 4, "");
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut requests = Vec::new();
    for i in 0..6 {
        let url = if i % 2 == 0 { a.url("/a") } else { b.url("/b") };
        requests.push(tokio::spawn(async move {
            send(&http1(), "GET", &url, &[("x-key", "k")], b"")
                .await
                .status
        }));
    }
    assert!(
        eventually(WAIT, || up.arrived().len() == 4).await,
        "four requests through the fleet: {:?}",
        up.arrived()
    );
    assert_eq!(
        slots(&a, "k").await.0,
        4,
        "both gateways see the fleet's slots"
    );
    assert_eq!(slots(&b, "k").await.0, 4);
    up.release();
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.expect("request"));
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    assert_eq!(up.arrived().len(), 4);
    assert!(
        eventually_async(WAIT, || async { slots(&a, "k").await.0 == 0 }).await,
        "every lease given back"
    );
}

#[tokio::test]
async fn a_killed_gateways_slots_return_within_lease_ttl() {
    let redis = RedisServer::start();
    let up = GatedUpstream::start().await;
    let toml = capped_on_redis(&format!("\"{}\"", redis.url()), 1, "lease_ttl = \"2s\"");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml.replace("{upstream}", &up.url())).expect("write");
    let mut doomed = Process::run(&path);
    let url = format!("http://{}/held", doomed.addr);
    let held = tokio::spawn(async move {
        let _ = send(&http1(), "GET", &url, &[("x-key", "k")], b"").await;
    });
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    let other = TestGateway::start_real_clock(&toml, &up.url()).await;
    assert_eq!(slots(&other, "k").await.0, 1, "the slot is held in Redis");
    assert_eq!(
        get(&other.url("/refused"), &[("x-key", "k")]).await.status,
        429
    );
    doomed.signal("KILL");
    let _ = doomed.wait_exit(Duration::from_secs(20));
    held.abort();
    let killed = std::time::Instant::now();
    assert!(
        eventually_async(WAIT, || async { slots(&other, "k").await.0 == 0 }).await,
        "the dead gateway's lease expires"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(2) + Duration::from_secs(8),
        "within lease_ttl plus a margin: {:?}",
        killed.elapsed()
    );
    up.release();
    assert_eq!(
        get(&other.url("/after"), &[("x-key", "k")]).await.status,
        200
    );
}

/// Redis restarts (its keys gone) while a request holds a slot: the lease's next refresh
/// takes it again, so the fleet still counts the request in flight (the set had stayed
/// empty, and every request after was let in while it ran).
#[tokio::test]
async fn a_slot_redis_lost_is_taken_again_by_its_refresh() {
    let mut redis = RedisServer::start();
    let up = GatedUpstream::start().await;
    let toml = capped_on_redis(&format!("\"{}\"", redis.url()), 1, "lease_ttl = \"3s\"");
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let url = gw.url("/held");
    let held = tokio::spawn(async move {
        send(&http1(), "GET", &url, &[("x-key", "k")], b"")
            .await
            .status
    });
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    assert_eq!(slots(&gw, "k").await.0, 1, "the slot is held in Redis");
    gw.sees_restart_of(&mut redis).await;
    assert!(
        eventually_async(WAIT, || async { slots(&gw, "k").await.0 == 1 }).await,
        "the refresh (a third of lease_ttl) takes the lease again"
    );
    let second = get(&gw.url("/refused"), &[("x-key", "k")]).await;
    assert_eq!(
        second.status, 429,
        "the request in flight still holds the slot"
    );
    up.release();
    assert_eq!(held.await.expect("request"), 200);
}

#[tokio::test]
async fn cluster_slots_for_keys_in_different_hash_slots() {
    let cluster = RedisCluster::start();
    let up = GatedUpstream::start().await;
    let toml = capped_on_redis(&cluster.urls_toml(), 1, "");
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    // The cluster connection is made in the background right after start.
    let limits = gw.admin_url("/admin/limits/cap/alpha");
    assert!(
        eventually_async(WAIT, || async { get(&limits, &[]).await.status == 200 }).await,
        "the gateway reaches the cluster"
    );
    let mut held = Vec::new();
    for key in ["alpha", "bravo", "charlie", "delta"] {
        let url = gw.url(&format!("/{key}"));
        held.push(tokio::spawn(async move {
            send(&http1(), "GET", &url, &[("x-key", key)], b"")
                .await
                .status
        }));
    }
    assert!(
        eventually(WAIT, || up.arrived().len() == 4).await,
        "one slot per key, each key on its own: {:?}",
        up.arrived()
    );
    for key in ["alpha", "bravo", "charlie", "delta"] {
        assert_eq!(get(&gw.url("/again"), &[("x-key", key)]).await.status, 429);
    }
    up.release();
    for h in held {
        assert_eq!(h.await.expect("request"), 200);
    }
}

#[tokio::test]
async fn with_redis_down_on_error_decides_as_for_rate_tiers() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let url = format!("\"{}\"", redis.url());
    let with = |on_error: &str| {
        capped_on_redis(&url, 1, "")
            .replace("on_error = \"deny\"", &format!("on_error = \"{on_error}\""))
    };
    let deny = TestGateway::start_real_clock(&with("deny"), &up.url()).await;
    let allow = TestGateway::start_real_clock(&with("allow"), &up.url()).await;
    let local = TestGateway::start_real_clock(&with("local"), &up.url()).await;
    assert_eq!(get(&deny.url("/up"), &[("x-key", "k")]).await.status, 200);
    redis.kill();
    let r = get(&deny.url("/down"), &[("x-key", "k")]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"], "store_unavailable");
    assert_eq!(
        get(&allow.url("/down"), &[("x-key", "k")]).await.status,
        200
    );
    assert_eq!(
        get(&local.url("/down"), &[("x-key", "k")]).await.status,
        200
    );
    let in_flight = || async {
        let text = get(&local.admin_url("/metrics"), &[]).await.text();
        metric(&text, "tollgate_in_flight{policy=\"cap\"}")
    };
    assert!(
        eventually_async(WAIT, || async { in_flight().await == 0.0 }).await,
        "the local fallback's slot was given back"
    );
}

#[tokio::test]
async fn held_slots_count_against_a_limit_lowered_by_reload() {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(3, ""), &up.url()).await;
    let mut held = Vec::new();
    for i in 0..2 {
        let url = gw.url(&format!("/held{i}"));
        held.push(tokio::spawn(async move {
            send(&http1(), "GET", &url, &[("x-key", "k")], b"")
                .await
                .status
        }));
    }
    assert!(eventually(WAIT, || up.arrived().len() == 2).await);
    gw.rewrite(&capped(2, ""), &up.url());
    gw.gw().reload().await.expect("reload");
    let r = get(&gw.url("/over"), &[("x-key", "k")]).await;
    assert_eq!(r.status, 429, "two held slots fill the lowered cap of 2");
    assert_eq!(
        slots(&gw, "k").await,
        (2, 0),
        "the reload kept the slots held"
    );
    up.release();
    for h in held {
        assert_eq!(h.await.expect("held"), 200);
    }
    assert_eq!(slots(&gw, "k").await, (0, 0));
    assert_eq!(get(&gw.url("/fits"), &[("x-key", "k")]).await.status, 200);
}
