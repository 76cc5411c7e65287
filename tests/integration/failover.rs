//! A Sentinel failover through real Redis and Sentinel processes: both gateways move to
//! the promoted replica within moments, while the old master still takes writes; after
//! the switch no decision reaches the old master, and a key driven at four times its rate
//! through both gateways stays within its bound plus one burst.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::faults::store;
use crate::support::*;

/// Two gateways on the Sentinel set `set`, their store reached.
async fn fleet(set: &SentinelSet, up: &Upstream) -> (TestGateway, TestGateway) {
    let toml = Fixture::new()
        .store(store(
            &format!("sentinels = {}\nmaster = \"{MASTER}\"", set.urls_toml()),
            "on_error = \"deny\"",
        ))
        .policy("tenant", "header:x-tenant-id", 50, "1s", 50)
        .route("api", "/", "api", &["tenant"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    a.wait_for_store("/", "warm-a").await;
    b.wait_for_store("/", "warm-b").await;
    (a, b)
}

/// Drives tenant `hot` through `url` at 100 requests a second until 8 s after `started`,
/// counting the admitted in `admitted`.
fn drive(url: String, started: Instant, admitted: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // 100 requests a second per gateway: four times the key's 50 a second.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while started.elapsed() < Duration::from_secs(8) {
            tick.tick().await;
            if get(&url, &[("x-tenant-id", "hot")]).await.status == 200 {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Waits until both gateways decide on `new` (a probe through each lands there) and none
/// on `old`. Script calls are counted by Redis (keys would not do: a fresh key's debt,
/// and so its key, expires within milliseconds).
async fn moved(gws: [&TestGateway; 2], old: &RedisServer, new: &RedisServer) -> bool {
    let mut probe = 0;
    eventually_async(Duration::from_secs(20), || {
        probe += 1;
        let urls = gws.map(|gw| gw.url("/"));
        let (old_calls, new_calls) = (old.script_calls(), new.script_calls());
        async move {
            for url in &urls {
                let _ = get(url, &[("x-tenant-id", &format!("probe-{probe}"))]).await;
            }
            old.script_calls() == old_calls && new.script_calls() >= new_calls + 2
        }
    })
    .await
}

#[tokio::test]
async fn a_sentinel_failover_moves_the_whole_fleet_at_once() {
    let set = SentinelSet::start();
    let up = Upstream::start().await;
    let (a, b) = fleet(&set, &up).await;
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let drivers = [a.url("/"), b.url("/")].map(|url| drive(url, started, admitted.clone()));
    // The key is being driven through both gateways before the failover.
    let flowing = eventually(Duration::from_secs(20), || {
        admitted.load(Ordering::Relaxed) >= 50
    });
    assert!(flowing.await, "traffic flows before the failover");
    let old = set.master_port().expect("a master");
    set.failover();
    let promoted = eventually(Duration::from_secs(20), || {
        set.master_port().is_some_and(|p| p != old)
    })
    .await;
    assert!(promoted, "the Sentinels promoted the replica");
    let (old_master, new_master) = if old == set.master.port {
        (&set.master, &set.replica)
    } else {
        (&set.replica, &set.master)
    };
    assert!(
        moved([&a, &b], old_master, new_master).await,
        "both gateways moved to the new master"
    );
    // A breaker the failover opened fails requests fast until its probe finds the new
    // master: wait for every one to close (on a busy machine that can take a while).
    for gw in [&a, &b] {
        let closed = metric_reaches(
            Duration::from_secs(20),
            &gw.admin_url("/metrics"),
            "tollgate_store_breaker_open",
            0.0,
        )
        .await;
        assert!(closed, "the breakers close on the new master");
    }
    let (before_old, before_new) = (old_master.script_calls(), new_master.script_calls());
    for i in 0..20 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let r = get(&gw.url("/"), &[("x-tenant-id", &format!("fresh-{i}"))]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let (after_old, after_new) = (old_master.script_calls(), new_master.script_calls());
    assert_eq!(
        after_old, before_old,
        "no decision reaches the replaced master"
    );
    assert!(
        after_new >= before_new + 20,
        "decisions on the new master: {before_new} -> {after_new} script calls"
    );
    for d in drivers {
        d.await.unwrap();
    }
    let bound = 50.0 + 50.0 * started.elapsed().as_secs_f64();
    let got = admitted.load(Ordering::Relaxed) as f64;
    assert!(
        got <= bound + 50.0,
        "{got} admitted, bound {bound:.0} + one burst"
    );
    for gw in [&a, &b] {
        let seen = eventually_async(Duration::from_secs(10), || async {
            let stats = get(&gw.admin_url("/admin/stats"), &[]).await.json();
            stats["store_events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["kind"] == "failover"))
        })
        .await;
        assert!(seen, "each gateway saw the failover");
    }
}
