//! A client that hangs up between two Cluster groups of its request: the groups already
//! charged are given back, so a client cannot spend a shared tier (a route's) while its
//! own tier, in another slot, is never asked.

use std::time::Duration;

use crate::support::*;

/// The shared tier's keys left to spend, as the admin API reads them from Redis.
async fn shared_remaining(gw: &TestGateway) -> u64 {
    let state = get(&gw.admin_url("/admin/limits/everyone/api"), &[]).await;
    let remaining = state.json()["remaining"].as_u64();
    remaining.unwrap_or_else(|| panic!("{} {}", state.status, state.text()))
}

/// A client (an `x-client` value) whose own key lives on another node than the shared
/// key's, and that node; each one tried spends a unit of the shared tier.
async fn a_client_on_another_node(cluster: &RedisCluster, gw: &TestGateway) -> (String, usize) {
    // The node holding the shared key: the one its reset marker lands on.
    let reset = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/everyone/api"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    let shared_node = cluster
        .nodes
        .iter()
        .position(|n| n.cli(&["KEYS", "*:reset"]).contains(":reset"))
        .expect("a reset marker");
    assert_eq!(
        get(&gw.url("/api"), &[("x-client", "warm")]).await.status,
        200
    );
    for i in 0..30 {
        let client = format!("c{i}");
        let before = cluster.sizes();
        assert_eq!(
            get(&gw.url("/api"), &[("x-client", &client)]).await.status,
            200
        );
        let after = cluster.sizes();
        let grew = (0..after.len()).find(|&n| after[n] > before[n]);
        if let Some(node) = grew.filter(|&n| n != shared_node) {
            return (client, node);
        }
    }
    panic!("no client keyed on another node than the shared key's");
}

#[tokio::test]
async fn a_client_gone_between_two_groups_gives_back_what_the_first_charged() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let store = cluster.patient_store_toml();
    let toml = Fixture::new()
        .store(store)
        // One unit an hour: nothing spent comes back on its own while the test runs.
        .policy("everyone", "route", 1, "1h", 100)
        .policy("client", "header:x-client", 10, "1h", 10)
        .route("api", "/api", "api", &["everyone", "client"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let warm = eventually_async(Duration::from_secs(30), || async {
        get(&gw.url("/api"), &[("x-client", "warm")]).await.status == 200
    })
    .await;
    assert!(warm, "the gateway answers from the Cluster");
    let (client, client_node) = a_client_on_another_node(&cluster, &gw).await;
    cluster.load_rollback_everywhere();
    let before = shared_remaining(&gw).await;
    // Its node takes no writes for a while (reads and the Cluster's own traffic go on):
    // the request's second group waits on it, the first is charged.
    let paused = cluster.nodes[client_node].cli(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    assert_eq!(paused.trim(), "OK");
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let (h2, conn) = h2::client::handshake(tcp).await.expect("h2");
    let connection = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut h2 = h2.ready().await.expect("ready");
    let req = http::Request::get("http://x/api")
        .header("x-client", client.as_str())
        .body(())
        .expect("request");
    let (response, _) = h2.send_request(req, true).expect("send");
    let charged = eventually_async(Duration::from_secs(10), || async {
        shared_remaining(&gw).await < before
    })
    .await;
    assert!(charged, "the shared tier's group was charged");
    // The client resets its stream while the second group waits.
    drop(response);
    drop(h2);
    connection.abort();
    let given_back = eventually_async(Duration::from_secs(10), || async {
        shared_remaining(&gw).await == before
    })
    .await;
    cluster.nodes[client_node].cli(&["CLIENT", "UNPAUSE"]);
    assert!(
        given_back,
        "the shared tier's charge was given back: {} left of {before}",
        shared_remaining(&gw).await
    );
}
