//! A usage report on a Redis Cluster whose descriptors live on two nodes: a caller that
//! resets its call after the first node charged its part (Envoy's own timeout does) still
//! pays for it. Usage already spent is never given back, as with a single Redis.

use std::time::Duration;

use crate::support::*;

const OK: i32 = 1;

fn report(tenants: &[(&str, u64)]) -> RlsRequest {
    RlsRequest {
        domain: "edge".into(),
        descriptors: tenants
            .iter()
            .map(|(t, hits)| descriptor_costing(&[("tenant", t)], *hits))
            .collect(),
        hits_addend: 0,
    }
}

/// What `tenant`'s key has left, as a check (cost 0) answers it.
async fn remaining(rls: &mut RlsClient, tenant: &str) -> u32 {
    let answer = rls.call(report(&[(tenant, 0)])).await.expect("check");
    answer.codes()[0].1
}

/// Two tenants whose keys live on two different nodes, and the second one's node.
async fn tenants_on_two_nodes(
    cluster: &RedisCluster,
    rls: &mut RlsClient,
) -> (String, String, usize) {
    let mut first: Option<(String, usize)> = None;
    for i in 0..60 {
        let tenant = format!("t{i}");
        let before = cluster.sizes();
        let answer = rls.call(report(&[(&tenant, 1)])).await.expect("report");
        assert_eq!(answer.overall_code, OK);
        let after = cluster.sizes();
        let Some(node) = (0..after.len()).find(|&n| after[n] > before[n]) else {
            continue;
        };
        match &first {
            None => first = Some((tenant, node)),
            Some((a, on)) if *on != node => return (a.clone(), tenant, node),
            Some(_) => {}
        }
    }
    panic!("no two tenants keyed on two nodes");
}

#[tokio::test]
async fn a_report_reset_between_two_nodes_stays_charged_on_the_first() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let store = cluster.patient_store_toml();
    let toml = Fixture::new()
        .store(store)
        .policy("tokens", "header:x-tenant", 1000, "1h", 1000)
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tokens\"\nreports = true\n",
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let addr = gw.rls.expect("rls");
    let answered = eventually_async(Duration::from_secs(30), || async move {
        let mut rls = RlsClient::connect(addr).await;
        rls.call(report(&[("warm", 0)]))
            .await
            .is_ok_and(|r| r.overall_code == OK)
    })
    .await;
    assert!(answered, "the rate limit service answers from the Cluster");
    let mut rls = RlsClient::connect(addr).await;
    let (a, b, b_node) = tenants_on_two_nodes(&cluster, &mut rls).await;
    cluster.load_rollback_everywhere();
    let before = remaining(&mut rls, &a).await;
    // The second tenant's node takes no writes: the report's second group waits there
    // after the first was charged.
    let paused = cluster.nodes[b_node].cli(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    assert_eq!(paused.trim(), "OK");
    let mut caller = RlsClient::connect(addr).await;
    let (a2, b2) = (a.clone(), b.clone());
    let call = tokio::spawn(async move { caller.call(report(&[(&a2, 100), (&b2, 100)])).await });
    let charged = eventually_async(Duration::from_secs(10), || {
        let (rls, a) = (RlsClient::connect(addr), a.clone());
        async move { remaining(&mut rls.await, &a).await < before }
    })
    .await;
    assert!(charged, "the first node's part of the report was charged");
    // The caller resets its call while the second group waits.
    call.abort();
    let _ = call.await;
    // A rollback runs at once (on a task of its own, to a node that takes writes): give
    // it a generous while to show, then look.
    let given_back = eventually_async(Duration::from_secs(5), || {
        let (rls, a) = (RlsClient::connect(addr), a.clone());
        async move { remaining(&mut rls.await, &a).await >= before }
    })
    .await;
    cluster.nodes[b_node].cli(&["CLIENT", "UNPAUSE"]);
    assert!(
        !given_back,
        "the report's first part stays charged: {} left of {before}",
        remaining(&mut rls, &a).await
    );
    // 100 charged; a unit comes back every 3.6 s on its own.
    let left = remaining(&mut rls, &a).await;
    assert!(before - left >= 95, "{left} left of {before}");
}
