//! Redis loses the runtime overrides and the hash is made again before any gateway read
//! the loss (a change landed in the moment after it: a `PUT`, a reset's touch): the
//! fleet reads a whole hash under a lower count, or another epoch, without them. Each
//! gateway puts back what it held rather than following it and dropping every override.
//! And a Redis restarted from an older snapshot whose count a change bumps back to where
//! a gateway read: that gateway reads the hash whole after the restart, not "unchanged".

use std::time::Duration;

use super::admin::{put_json, put_ok};
use super::admin_overrides_kept::tenant_on_redis;
use crate::support::*;

#[tokio::test]
async fn a_hash_made_again_after_a_loss_gets_the_overrides_put_back() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = tenant_on_redis(&redis);
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    // Three changes: the hash's count reaches 3.
    for burst in [
        &br#"{"burst": 8}"#[..],
        br#"{"burst": 9}"#,
        br#"{"burst": 10}"#,
    ] {
        put_ok(&a.admin_url("/admin/overrides/tenant/acme"), burst).await;
    }
    let lists = |gw: &TestGateway| {
        let url = gw.admin_url("/admin/overrides");
        async move {
            let listed = get(&url, &[]).await.json();
            listed["overrides"]
                .as_array()
                .is_some_and(|l| l.iter().any(|o| o["key"][0] == "acme"))
        }
    };
    // The other gateway has read the last of them (its limit is the third's).
    let b_url = b.url("/");
    let followed = eventually_async(Duration::from_secs(20), || async {
        let r = get(&b_url, &[("x-tenant-id", "acme")]).await;
        r.header("x-ratelimit-limit") == Some("10")
    })
    .await;
    assert!(followed, "the other gateway follows the override");
    // Lost, then made again at once (one change: count 1) under the same epoch, holding
    // nothing.
    const REMADE: &str = "local epoch = redis.call('HGET', KEYS[1], '#epoch')
        redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
        redis.call('HSET', KEYS[1], '#epoch', epoch, '#version', 1)
        return 1";
    let hash = "tg:{overrides}:v2";
    let (puts, dels) = ("tg:{overrides}:v2:puts", "tg:{overrides}:v2:dels");
    redis.cli(&["EVAL", REMADE, "3", hash, puts, dels]);
    let put_back = eventually(Duration::from_secs(20), || {
        let fields = redis.cli(&["HKEYS", hash]);
        fields
            .lines()
            .any(|f| !f.trim().is_empty() && !f.trim().starts_with('#'))
    })
    .await;
    assert!(put_back, "a gateway puts the override back into Redis");
    for gw in [&a, &b] {
        assert!(
            eventually_async(Duration::from_secs(20), || lists(gw)).await,
            "each gateway holds it"
        );
        let r = get(&gw.url("/"), &[("x-tenant-id", "acme")]).await;
        assert_eq!(r.header("x-ratelimit-limit"), Some("10"));
    }
}

/// Lists, limits: the key `key` has its override's limit of 10 on `gw`.
async fn applies(gw: &TestGateway, key: &str) -> bool {
    let r = get(&gw.url("/"), &[("x-tenant-id", key)]).await;
    r.header("x-ratelimit-limit") == Some("10")
}

#[tokio::test]
async fn after_a_restart_from_an_older_snapshot_a_gateway_reads_the_overrides_whole() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = tenant_on_redis(&redis);
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    let put = |key: &str| {
        let url = a.admin_url(&format!("/admin/overrides/tenant/{key}"));
        async move { put_json(&url, None, br#"{"burst": 10}"#).await.status == 200 }
    };
    assert!(put("xray").await);
    assert!(eventually_async(Duration::from_secs(20), || applies(&b, "xray")).await);
    redis.cli(&["SAVE"]);
    assert!(put("yank").await);
    assert!(eventually_async(Duration::from_secs(20), || applies(&b, "yank")).await);
    // Back from the snapshot (count 1: `yank` lost), then a change at once: count 2
    // again, as `b` last read it.
    redis.restart();
    let zulu = eventually_async(Duration::from_secs(20), || put("zulu")).await;
    assert!(zulu, "the change lands once the gateway reconnects");
    assert!(
        eventually_async(Duration::from_secs(30), || applies(&b, "zulu")).await,
        "the other gateway reads the change the count hid"
    );
}
