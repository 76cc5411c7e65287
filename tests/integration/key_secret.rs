//! Keyed Redis key names: a client that picks its key values cannot pick where they live
//! in a Redis Cluster, and a fleet shares one secret (configured, or kept in Redis).

use std::time::Duration;

use crate::support::*;

/// The Redis Cluster slot of `key` (CRC16/XMODEM of its hash tag, mod 16,384).
pub fn slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// The tag an unkeyed digest of the first part gave (the scheme before key secrets): what
/// an attacker who knows the code computes offline.
fn unkeyed_tag(part: &str) -> String {
    let mut input = vec![0u8];
    input.extend_from_slice(part.as_bytes());
    let d = ring::digest::digest(&ring::digest::SHA256, &input);
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn cluster_store(cluster: &RedisCluster, extra: &str) -> Fixture {
    Fixture::new().store(format!(
        "backend = \"redis\"\nurl = {}\ntimeout = \"2s\"\n{extra}",
        cluster.urls_toml()
    ))
}

/// 600 tenant ids chosen so that an unkeyed tag would put them all on the first master's
/// slots spread over the three masters like random ones.
#[tokio::test]
async fn crafted_tenant_ids_spread_over_the_masters() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let toml = cluster_store(&cluster, "")
        .policy("tenant", "header:x-tenant-id", 1, "1h", 5)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    // The first master holds slots 0..=5460 (redis-cli's even split of three).
    let crafted: Vec<String> = (0u64..)
        .map(|i| format!("tenant-{i}"))
        .filter(|id| slot(unkeyed_tag(id).as_bytes()) <= 5460)
        .take(600)
        .collect();
    let answered = eventually_async(Duration::from_secs(10), || async {
        get(&gw.url("/"), &[("x-tenant-id", "warm-up")])
            .await
            .status
            == 200
    })
    .await;
    assert!(answered, "the gateway reached the cluster");
    for id in &crafted {
        let r = get(&gw.url("/"), &[("x-tenant-id", id)]).await;
        assert_eq!(r.status, 200, "{id}");
    }
    let per_master: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| {
            n.cli(&["EVAL", "return #redis.call('KEYS', 'tg:*:tenant:*')", "0"])
                .trim()
                .parse()
                .expect("a count")
        })
        .collect();
    assert_eq!(per_master.iter().sum::<u64>(), 601, "{per_master:?}");
    // Random placement: 200 each, a standard deviation of ~11.5; the bound is 6 of them.
    assert!(
        per_master.iter().all(|&n| (130..=270).contains(&n)),
        "crafted ids spread like random ones: {per_master:?}"
    );
}

/// Two gateways with one configured secret share their limits; a gateway with another
/// secret names every key differently (it shares nothing with them), and no secret is
/// kept in Redis.
#[tokio::test]
async fn a_configured_secret_names_the_fleets_keys() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let with_secret = |secret: &str| {
        let file = dir.path().join(format!("{secret}.secret"));
        std::fs::write(&file, format!("{secret}\n")).unwrap();
        Fixture::new()
            .store(format!(
                "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\nkey_secret_file = \"{}\"\n",
                redis.url(),
                file.display()
            ))
            .policy("tenant", "header:x-tenant-id", 1, "1h", 2)
            .route("api", "/", "api", &["tenant"])
            .build()
    };
    let fleet = with_secret("the-fleet-secret-0001");
    let a = TestGateway::start_real_clock(&fleet, &up.url()).await;
    let b = TestGateway::start_real_clock(&fleet, &up.url()).await;
    let other =
        TestGateway::start_real_clock(&with_secret("not-the-fleet-secret"), &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    assert_eq!(get(&a.url("/"), &h).await.status, 200);
    assert_eq!(get(&b.url("/"), &h).await.status, 200);
    assert_eq!(
        get(&a.url("/"), &h).await.status,
        429,
        "one burst for the fleet"
    );
    assert_eq!(
        get(&other.url("/"), &h).await.status,
        200,
        "another secret, other keys"
    );
    assert_eq!(redis.cli(&["EXISTS", "tg:{secret}"]).trim(), "0");
    let keys = redis.cli(&["KEYS", "tg:*:tenant:*"]);
    assert_eq!(keys.lines().count(), 2, "{keys}");
}

/// Until a gateway has the fleet's secret it cannot name a key: with Redis down at start,
/// requests follow on_error and /readyz says not ready; once Redis answers, both recover.
#[tokio::test]
async fn a_gateway_without_the_secret_follows_on_error_until_redis_gives_it() {
    let mut redis = RedisServer::start();
    redis.kill();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"deny\"\n",
            redis.url()
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 5)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    assert_eq!(get(&gw.url("/"), &h).await.status, 503);
    assert_eq!(get(&gw.admin_url("/readyz"), &[]).await.status, 503);
    assert_eq!(up.requests(), 0);
    redis.restart();
    let ready = eventually_async(Duration::from_secs(20), || async {
        get(&gw.admin_url("/readyz"), &[]).await.status == 200
    })
    .await;
    assert!(ready, "ready once the secret is read");
    assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    assert_eq!(redis.cli(&["GET", "tg:{secret}"]).trim().len(), 64);
}
