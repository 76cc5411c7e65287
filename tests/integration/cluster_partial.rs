//! A Cluster in part unavailable: with one master down, under `on_error = "allow"`, a
//! request whose keys live on the masters still up is decided by them, whatever another
//! of its keys does — a client that steers one key onto the dead master (it can tell:
//! that key's state is not answered) does not skip the tiers the healthy masters hold;
//! and a debt settled while its key's slot migrates is charged.

use std::time::Duration;

use crate::support::*;

/// A tenant tier of 3 an hour and a wide tier keyed by a header the client picks (leased
/// with `sync`: `"lease"`).
fn config(cluster: &RedisCluster, sync: &str) -> String {
    Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = {}\ntimeout = \"1s\"\non_error = \"allow\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n",
            cluster.urls_toml()
        ))
        .policy("tenant", "header:x-tenant-id", 1, "1h", 3)
        .policy_raw(
            "probe",
            format!("key = \"header:x-probe\"\nlimit = 1000\nperiod = \"1s\"\nburst = 1000\nsync = \"{sync}\"\n"),
        )
        // The client's key first: its group is asked before the tenant's.
        .route("api", "/", "api", &["probe", "tenant"])
        .build()
}

/// The first of `prefix0`, `prefix1`, … whose `policy` key the admin API reads with
/// `status` (200: on a master up; 503: on the one down).
async fn key_answered(gw: &TestGateway, policy: &str, prefix: &str, status: u16) -> String {
    for i in 0..200 {
        let key = format!("{prefix}{i}");
        let state = get(&gw.admin_url(&format!("/admin/limits/{policy}/{key}")), &[]).await;
        if state.status == status {
            return key;
        }
    }
    panic!("no {policy} key answered {status}");
}

#[tokio::test]
async fn a_key_on_a_dead_master_does_not_skip_the_tiers_the_others_hold() {
    a_key_on_a_dead_master_skips_no_tier("exact").await;
}

/// The same with the client's tier leased: its slice fetch from the dead master fails
/// alone, as an exact tier's call does (it had let the request through unchecked, the
/// tenant's tier never asked).
#[tokio::test]
async fn a_leased_key_on_a_dead_master_does_not_skip_the_tiers_the_others_hold() {
    a_key_on_a_dead_master_skips_no_tier("lease").await;
}

async fn a_key_on_a_dead_master_skips_no_tier(sync: &str) {
    let mut cluster = RedisCluster::start_with(&["--cluster-require-full-coverage", "no"]);
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config(&cluster, sync), &up.url()).await;
    gw.wait_for_store("/", "warm-up").await;
    cluster.nodes[2].kill();
    let gone = eventually_async(Duration::from_secs(30), || async {
        let state = get(&gw.admin_url("/admin/limits/tenant/probe-node"), &[]).await;
        state.status == 200 || state.status == 503
    })
    .await;
    assert!(gone, "the admin API answers");
    let healthy = key_answered(&gw, "probe", "up", 200).await;
    let dead = key_answered(&gw, "probe", "down", 503).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        // A tenant whose key is on a master up: its state is read.
        let tenant = key_answered(&gw, "tenant", &format!("t{i}-"), 200).await;
        for _ in 0..2 {
            let h = [
                ("x-tenant-id", tenant.as_str()),
                ("x-probe", healthy.as_str()),
            ];
            assert_eq!(send(client, "GET", &gw.url("/"), &h, b"").await.status, 200);
        }
        // The last unit is let through (the probe key unchecked) and charged; then the
        // tenant's spent tier refuses, not the dead master's `allow`.
        let h = [("x-tenant-id", tenant.as_str()), ("x-probe", dead.as_str())];
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(send(client, "GET", &gw.url("/"), &h, b"").await.status);
        }
        assert_eq!(statuses, [200, 429, 429], "{tenant}");
    }
    // A request whose only failing key is on the dead master is let through, as
    // `on_error = "allow"` says, and charged where it could be.
    let fresh = key_answered(&gw, "tenant", "fresh-", 200).await;
    let h = [("x-tenant-id", fresh.as_str()), ("x-probe", dead.as_str())];
    assert_eq!(
        send(&http1(), "GET", &gw.url("/"), &h, b"").await.status,
        200
    );
    let state = get(&gw.admin_url(&format!("/admin/limits/tenant/{fresh}")), &[]).await;
    assert_eq!(state.json()["remaining"], 2, "{}", state.text());
}

/// A debt settled while its key's slot migrates to another node (a reshard: the slot
/// `MIGRATING` on its node, `IMPORTING` on the other) is charged: the call names the key
/// alone, which its node still holds. (Named with its reset marker too, which is not
/// there, it was refused `TRYAGAIN` and the client paid its reserve alone.)
#[tokio::test]
async fn a_debt_settled_while_its_slot_migrates_is_charged() {
    use super::settle::{hourly_tokens_on, remaining, used};
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let toml = hourly_tokens_on(format!(
            "backend = \"redis\"\nurl = {}\ntimeout = \"2s\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n",
            cluster.urls_toml()
        ));
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/v1/usage", "warm-up").await;
    let keys = |n: &RedisServer| -> Vec<String> {
        n.cli(&["KEYS", "*"]).lines().map(str::to_owned).collect()
    };
    let before: Vec<Vec<String>> = cluster.nodes.iter().map(keys).collect();
    assert_eq!(used(&gw, "20").await.num("x-ratelimit-remaining"), 80);
    let (source, key) = (cluster.nodes.iter().enumerate())
        .find_map(|(i, n)| {
            let new = keys(n).into_iter().find(|k| !before[i].contains(k))?;
            Some((i, new))
        })
        .expect("the tenant's key");
    let slot = cluster.nodes[source].cli(&["CLUSTER", "KEYSLOT", &key]);
    let slot = slot.trim();
    let target = (source + 1) % cluster.nodes.len();
    let id = |i: usize| cluster.nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_owned();
    let set = |i: usize, how: &[&str]| {
        let args = [&["CLUSTER", "SETSLOT", slot][..], how].concat();
        assert_eq!(cluster.nodes[i].cli(&args).trim(), "OK", "{args:?}");
    };
    set(target, &["IMPORTING", &id(source)]);
    set(source, &["MIGRATING", &id(target)]);
    // 10 reserved, 60 used: 50 owed, settled while the slot migrates.
    let r = used(&gw, "60").await;
    set(source, &["STABLE"]);
    set(target, &["STABLE"]);
    assert_eq!(r.status, 200);
    assert_eq!(r.num("x-ratelimit-remaining"), 20, "the debt settled");
    assert_eq!(remaining(&gw, "tokens").await, 20);
}

/// A Cluster that lost a master for good (no replica: `cluster_state:fail`, every node
/// answering `CLUSTERDOWN`): each request's failure is told as the cluster being down,
/// at once — not held the whole store timeout by the client's retries (whose default wait
/// outlasted it) and told as a timeout with its cause hidden.
#[tokio::test]
async fn a_cluster_that_is_down_is_told_so_by_each_request() {
    let mut cluster = RedisCluster::start();
    let up = Upstream::start().await;
    // A timeout under the client's default retry wait, which the old waits outlasted.
    let store = cluster
        .store_toml()
        .replace("timeout = \"2s\"", "timeout = \"1s\"");
    assert!(store.contains("timeout = \"1s\""), "{store}");
    let toml = Fixture::new()
        .store(store)
        .policy("tenant", "header:x-tenant-id", 1, "1h", 3)
        .route("api", "/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    assert_eq!(tenant(&gw, "t0").await, 200);
    cluster.nodes[2].kill();
    let down = eventually(Duration::from_secs(60), || {
        let info = cluster.nodes[0].cli(&["CLUSTER", "INFO"]);
        info.contains("cluster_state:fail")
    })
    .await;
    assert!(down, "the cluster never noticed its lost master");
    let clusterdown = || async {
        let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
        metrics.lines().any(|l| {
            l.starts_with("tollgate_store_errors_total{") && l.contains("cause=\"clusterdown\"")
        })
    };
    // Each key, whatever master it hashes to, meets CLUSTERDOWN.
    let mut i = 0;
    let told = eventually_async(Duration::from_secs(30), || {
        i += 1;
        let key = format!("t{i}");
        let gw = &gw;
        async move {
            assert_eq!(tenant(gw, &key).await, 503);
            clusterdown().await
        }
    })
    .await;
    let stats = get(&gw.admin_url("/admin/stats"), &[]).await.json();
    assert!(told, "{stats}");
    assert_eq!(
        stats["store"]["last_error"]["cause"], "clusterdown",
        "{stats}"
    );
}

/// A `GET /` as tenant `key`: its status.
async fn tenant(gw: &TestGateway, key: &str) -> http::StatusCode {
    get(&gw.url("/"), &[("x-tenant-id", key)]).await.status
}
