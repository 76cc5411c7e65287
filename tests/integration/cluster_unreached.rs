//! A Redis Cluster the gateway has not reached: what the operator is told names why from
//! the first attempt, its breakers are all open (requests take `on_error` at once, told
//! by the attempt's cause), and all close once the Cluster answers.

use std::time::Duration;

use crate::store_health::{gateway_on, store_stats};
use crate::support::*;

/// Seed nodes that refuse every connection: the cause is told from the first attempt,
/// the breaker is open (as a single Redis's is), `/readyz` says so, and each request's
/// failure (HTTP/1.1 and HTTP/2) says the same cause, not "not connected yet".
#[tokio::test]
async fn a_cluster_never_answered_says_why_and_its_breakers_are_open() {
    let up = Upstream::start().await;
    let seeds: Vec<String> = (0..3)
        .map(|_| format!("\"redis://127.0.0.1:{}\"", free_port()))
        .collect();
    let store = format!(
        "backend = \"redis\"\nurl = [{}]\ntimeout = \"100ms\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n",
        seeds.join(", ")
    );
    let (_dir, gw) = gateway_on(store, &up);
    let admin = gw.admin.expect("admin");
    let told = eventually_async(Duration::from_secs(20), || async {
        let store = store_stats(admin).await;
        store["last_error"]["cause"] == "connection_refused" && store["breaker"] == "open"
    })
    .await;
    assert!(told, "{}", store_stats(admin).await);
    let store = store_stats(admin).await;
    assert_eq!(store["breaker"], "open", "{store}");
    assert_eq!(store["ready"], false, "{store}");
    let ready = get(&format!("http://{admin}/readyz"), &[]).await;
    assert_eq!(ready.status, 503);
    let why = ready.text();
    assert!(
        why.contains("connection_refused") && why.ends_with("breaker open\n"),
        "{why}"
    );

    let url = format!("http://{}/", gw.addr);
    for client in [http1(), http2(), http1(), http2(), http1()] {
        let r = send(&client, "GET", &url, &[("x-k", "a")], b"").await;
        assert_eq!(r.status, 503);
    }
    let store = store_stats(admin).await;
    assert_eq!(
        store["last_error"]["cause"], "connection_refused",
        "{store}"
    );
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await.text();
    let refused_at_once = metrics.lines().find(|l| {
        l.starts_with("tollgate_store_errors_total{")
            && l.contains("kind=\"breaker_open\"")
            && l.contains("cause=\"connection_refused\"")
    });
    assert!(
        refused_at_once.is_some_and(|l| l.ends_with(" 5")),
        "each request refused at once, told by its cause: {metrics}"
    );
    assert!(
        !metrics.contains("cause=\"not_connected\""),
        "every failure told by its cause: {metrics}"
    );
    assert!(
        metrics.contains("tollgate_store_breaker_open 1"),
        "{metrics}"
    );
}

/// A Cluster whose nodes do not answer while the gateway starts (held stopped): every
/// breaker open, the gateway not ready; once they answer, the connection is made, every
/// breaker closes and requests are decided in the Cluster.
#[tokio::test]
async fn a_cluster_reached_late_closes_its_breakers() {
    let cluster = RedisCluster::start();
    for node in &cluster.nodes {
        node.pause();
    }
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = {}\ntimeout = \"100ms\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n",
        cluster.urls_toml()
    );
    let (_dir, gw) = gateway_on(store, &up);
    let admin = gw.admin.expect("admin");
    let open = eventually_async(Duration::from_secs(30), || async {
        store_stats(admin).await["breaker"] == "open"
    })
    .await;
    let held = store_stats(admin).await;
    for node in &cluster.nodes {
        node.resume();
    }
    assert!(open, "{held}\n{}", gw.log());
    assert_eq!(held["ready"], false, "{held}");

    let ready = eventually_async(Duration::from_secs(30), || async {
        get(&format!("http://{admin}/readyz"), &[]).await.status == 200
    })
    .await;
    let store = store_stats(admin).await;
    assert!(ready, "{store}\n{}", gw.log());
    assert_eq!(store["breaker"], "closed", "{store}");
    let url = format!("http://{}/", gw.addr);
    for _ in 0..3 {
        assert_eq!(get(&url, &[("x-k", "late")]).await.status, 200);
    }
    assert!(
        cluster.sizes().iter().sum::<u64>() > 0,
        "the decisions' keys are in the Cluster"
    );
}
