//! Two tollgate servers on one Redis answer quota streams of one key: a share starts
//! full, so each leaves room for the tokens the other server's streams were told (their
//! record in Redis, beside their demand); a stream that ends takes no room any more, on
//! the other servers as on its own. Without Envoy: the streams are a gRPC client's.

use std::time::Duration;

use super::rlqs::tenant;
use super::rlqs_envoy::monthly_config;
use crate::support::*;

/// The tokens of the one bucket `actions` size.
fn tokens(actions: &[BucketAction]) -> u32 {
    match actions.first().map(BucketAction::told) {
        Some(Told::Bucket(max, ..)) => max,
        Some(Told::DenyAll(_)) => 0,
        other => panic!("a bucket or none: {other:?}"),
    }
}

#[tokio::test]
async fn a_share_leaves_room_for_another_servers_streams_until_they_end() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    // Assignments held a minute: the first stream's record outlives the test.
    let config =
        monthly_config(300, &store).replace("assignment_ttl = \"10s\"", "assignment_ttl = \"60s\"");
    assert!(config.contains("assignment_ttl = \"60s\""));
    let a = TestGateway::start_real_clock(&config, &up.url()).await;
    let b = TestGateway::start_real_clock(&config, &up.url()).await;
    let mut on_a = RlqsStream::open(a.rls.expect("rls")).await;
    // Asked until the store answers (a gateway connects to Redis in its own time).
    let mut first = 0;
    for _ in 0..100 {
        first = tokens(&on_a.ask("edge", vec![tenant("acme", 1, 0)]).await);
        if first > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(first > 0, "the first holder is told a share");
    let mut on_b = RlqsStream::open(b.rls.expect("rls")).await;
    let second = tokens(&on_b.ask("edge", vec![tenant("acme", 1, 0)]).await);
    assert!(
        first + second <= 300,
        "told together no more than the quota: {first} on one server, {second} on the other"
    );
    // The first stream ends: its tokens leave the record, and the other server's next
    // answer has the room.
    on_a.close();
    drop(on_a);
    let mut grown = second;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while grown <= second && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        grown = tokens(&on_b.ask("edge", vec![tenant("acme", 1, 0)]).await);
    }
    assert!(
        grown > second,
        "the ended stream's tokens still take room: {grown}"
    );
}
