//! The fleet under Redis faults, through real Redis processes (a Sentinel failover:
//! `failover.rs`): a restart is seen, a call that runs after its
//! request was answered charges nothing, `on_error = "local"` enforces a share, a dead
//! Cluster master costs only its own slots, `replica_ack` waits for the replicas, and a
//! gateway killed with a leased slice loses at most that slice.
//! (bench/faults.sh measures the bound over longer runs.)

use std::time::Duration;

use super::lease::leased;
use crate::support::*;

const SECRET: &str = "the-fleet-secret-for-fault-tests";

pub(super) fn store(backend: &str, extra: &str) -> String {
    format!(
        "backend = \"redis\"\n{backend}\ntimeout = \"300ms\"\nkey_secret = \"{SECRET}\"\n{extra}"
    )
}

/// One route limited per `x-tenant-id`, 4 an hour, on `redis` under `on_error = "deny"`.
pub(super) fn tenant_of_four(redis: &RedisServer) -> String {
    Fixture::new()
        .store(store(
            &format!("url = \"{}\"", redis.url()),
            "on_error = \"deny\"",
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 4)
        .route("api", "/", "api", &["tenant"])
        .build()
}

/// A Redis restarted empty is a data-loss event: seen, counted and shown; the fleet's
/// secret the gateways use is stored again.
#[tokio::test]
async fn a_redis_restart_is_seen_and_counted() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n",
            redis.url()
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 5)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "acme").await;
    // Counted, and the fleet's secret stored again (the upkeep had read the node before:
    // its next turn compares what it reads then with that).
    gw.sees_restart_of(&mut redis).await;
    let stats = get(&gw.admin_url("/admin/stats"), &[]).await.json();
    assert_eq!(stats["store_events"][0]["kind"], "restart", "{stats}");
}

/// Requests sent to a frozen Redis are answered per on_error when it does not answer in
/// time; when it thaws and runs their scripts, they charge nothing.
#[tokio::test]
async fn a_decision_that_runs_after_its_request_was_answered_charges_nothing() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = tenant_of_four(&redis);
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    gw.wait_for_store("/", "acme").await; // one of the key's 4 used
    redis.pause();
    let url = gw.url("/");
    let frozen: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { get(&url, &[("x-tenant-id", "acme")]).await.status })
        })
        .collect();
    for f in frozen {
        assert_eq!(
            f.await.unwrap(),
            503,
            "answered per on_error while Redis is frozen"
        );
    }
    // Well past twice the store timeout: the queued scripts are late when they run.
    tokio::time::sleep(Duration::from_millis(900)).await;
    redis.resume();
    let back = eventually_async(Duration::from_secs(10), || async {
        get(&gw.admin_url("/readyz"), &[]).await.status == 200
    })
    .await;
    assert!(back);
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(get(&url, &h).await.status.as_u16());
        }
        v
    };
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "the three answered 503 were not charged"
    );
}

/// With `on_error = "local"`, a fleet of two enforces half of each limit per gateway
/// while Redis is down (N counted from the gateways' heartbeats in Redis).
#[tokio::test]
async fn on_error_local_enforces_each_gateways_share() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(store(
            &format!("url = \"{}\"", redis.url()),
            "on_error = \"local\"",
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 10)
        .route("api", "/", "api", &["tenant"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for gw in [&a, &b] {
        let counted = eventually_async(Duration::from_secs(20), || async {
            get(&gw.admin_url("/admin/stats"), &[]).await.json()["fleet_share"] == 2
        })
        .await;
        assert!(
            counted,
            "each gateway counts a fleet of two: {} {}",
            redis.cli(&["ZRANGE", "tg:{fleet}", "0", "-1", "WITHSCORES"]),
            get(&gw.admin_url("/admin/stats"), &[]).await.text()
        );
    }
    redis.kill();
    let mut admitted = 0;
    for gw in [&a, &b] {
        for _ in 0..10 {
            if get(&gw.url("/"), &[("x-tenant-id", "acme")]).await.status == 200 {
                admitted += 1;
            }
        }
    }
    assert_eq!(
        admitted, 10,
        "5 on each gateway: the fleet admits one burst, not two"
    );
}

/// The HMAC-SHA256 tag tollgate gives a key's first part under `secret`.
fn tag(secret: &str, part: &str) -> String {
    use ring::hmac;
    let root = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let keys = hmac::sign(&root, b"tollgate: redis keys, v1");
    let keys = hmac::Key::new(hmac::HMAC_SHA256, keys.as_ref());
    let mut input = vec![0u8];
    input.extend_from_slice(part.as_bytes());
    hmac::sign(&keys, &input).as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// With a Cluster master dead (no replica, full coverage off), only its slots' requests
/// fail: the others' breakers stay closed.
#[tokio::test]
async fn a_dead_cluster_master_costs_only_its_own_slots() {
    let mut cluster = RedisCluster::start_with(&["--cluster-require-full-coverage", "no"]);
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(store(
            &format!("url = {}", cluster.urls_toml()),
            "on_error = \"deny\"",
        ))
        .policy("tenant", "header:x-tenant-id", 1000, "1s", 1000)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "warm-up").await;
    // The first master holds slots 0..=5460; tenants of the other two masters' slots.
    let slot = |t: &str| crate::key_secret::slot(tag(SECRET, t).as_bytes());
    let healthy: Vec<String> = (0..)
        .map(|i| format!("tenant-{i}"))
        .filter(|t| slot(t) > 5460 + 256)
        .take(60)
        .collect();
    let doomed: Vec<String> = (0..)
        .map(|i| format!("tenant-{i}"))
        .filter(|t| slot(t) < 5460 - 256)
        .take(60)
        .collect();
    cluster.nodes[0].kill();
    let mut healthy_failed = 0;
    let mut doomed_failed = 0;
    for round in 0..5 {
        for t in &doomed {
            if get(&gw.url("/"), &[("x-tenant-id", t)]).await.status != 200 {
                doomed_failed += 1;
            }
        }
        for t in &healthy {
            if get(&gw.url("/"), &[("x-tenant-id", t)]).await.status != 200 {
                healthy_failed += 1;
            }
        }
        if round == 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    assert!(
        doomed_failed >= 250,
        "the dead master's slots fail: {doomed_failed}/300"
    );
    assert!(
        healthy_failed <= 15,
        "healthy slots keep answering: {healthy_failed}/300 failed"
    );
}

/// With `replica_ack = 1`, an admission counts once a replica has it: while the replica
/// is frozen, requests are refused per on_error (deny) and the gateway is told unready
/// (whatever the traffic), and they are admitted again when it answers.
#[tokio::test]
async fn replica_ack_waits_for_a_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    replica.cli(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]);
    let synced = eventually(Duration::from_secs(30), || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    })
    .await;
    assert!(synced);
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(store(
            &format!("url = \"{}\"", master.url()),
            "on_error = \"deny\"\nreplica_ack = 1",
        ))
        .policy("tenant", "header:x-tenant-id", 1000, "1s", 1000)
        .policy_raw("cap", "key = \"header:x-tenant-id\"\nmax_in_flight = 10\n")
        .route("slots", "/slots", "api", &["cap"])
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/", "acme").await;
    let readyz = gw.admin_url("/readyz");
    assert_eq!(get(&readyz, &[]).await.status, 200);
    replica.pause();
    let r = get(&gw.url("/"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(r.status, 503, "no replica acknowledged: {}", r.text());
    // A route of concurrency slots alone: its lease is what a fail-over must not lose.
    let r = get(&gw.url("/slots"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(
        r.status,
        503,
        "no replica acknowledged the slot: {}",
        r.text()
    );
    let unready = eventually_async(Duration::from_secs(20), || async {
        get(&readyz, &[]).await.status == 503
    })
    .await;
    let said = get(&readyz, &[]).await.text();
    replica.resume();
    assert!(unready, "told unready while no replica acknowledges");
    assert!(said.contains("no_replica_ack"), "{said}");
    let back = eventually_async(Duration::from_secs(20), || async {
        get(&gw.url("/"), &[("x-tenant-id", "acme")]).await.status == 200
            && get(&readyz, &[]).await.status == 200
    })
    .await;
    assert!(
        back,
        "admitted and ready again once the replica acknowledges"
    );
}

/// A gateway killed with a slice held loses at most that slice: what it admitted stays
/// charged, and no more than a slice's worth of units (a quarter of the burst) is lost.
#[tokio::test]
async fn a_killed_gateway_loses_at_most_its_slice() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // T = 1 s, 100 at once: nothing refills during the test.
    let fixture = leased(&redis, "limit = 1\nperiod = \"1s\"\nburst = 100\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, fixture.build_for(&up.url())).unwrap();
    let mut process = Process::run(&path);
    let url = format!("http://{}/", process.addr);
    for _ in 0..10 {
        assert_eq!(get(&url, &[("x-tenant-id", "acme")]).await.status, 200);
    }
    process.signal("KILL");
    let status = process.child.wait().expect("wait");
    assert!(!status.success(), "killed: {status}");
    let other = TestGateway::start_real_clock(&fixture.build(), &up.url()).await;
    let remaining = get(&other.admin_url("/admin/limits/hot/acme"), &[])
        .await
        .json()["remaining"]
        .as_u64()
        .expect("remaining");
    assert!(
        remaining <= 90,
        "the 10 admitted stay charged: {remaining} left"
    );
    let lost = 90 - remaining;
    assert!(
        lost <= 25,
        "at most a slice (a quarter of the burst) is lost: {lost}"
    );
}
