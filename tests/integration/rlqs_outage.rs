//! Envoy's quota service when the store cannot answer: a report is answered as the
//! store's `on_error` says — `deny` refuses the bucket's requests for a while (DENY_ALL,
//! what Envoy's own `deny_all` does), `allow` lets them through (ALLOW_ALL), `local`
//! decides in this server's memory (a share) — the stream stays open, and once the store
//! answers again the bucket is given a share from it.

use crate::support::*;

/// A Redis-backed `tenant` policy (10 a second, burst 20) handed out to Envoys by
/// tenant, the store failing as `on_error` says.
fn config(redis: &RedisServer, on_error: &str) -> String {
    Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"{on_error}\"",
            redis.url()
        ))
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n")
        .build()
}

/// A gateway with one Envoy's stream, and what a report of tenant `acme` was told
/// before Redis died and while it was dead.
struct Outage {
    before: Told,
    during: Told,
    redis: RedisServer,
    envoy: RlqsStream,
    gateway: (TestGateway, Upstream),
}

async fn outage(on_error: &str) -> Outage {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config(&redis, on_error), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let before = envoy.ask("edge", acme(1)).await[0].told();
    redis.kill();
    let during = envoy.ask("edge", acme(1)).await[0].told();
    Outage {
        before,
        during,
        redis,
        envoy,
        gateway: (gw, up),
    }
}

/// A report of `allowed` requests of tenant `acme` over five seconds.
fn acme(allowed: u64) -> Vec<Usage> {
    vec![usage(&[("tenant", "acme")], allowed, 0, 5)]
}

#[tokio::test]
async fn a_dead_store_under_deny_refuses_the_bucket_until_it_answers_again() {
    let mut o = outage("deny").await;
    assert!(matches!(o.before, Told::Bucket(..)), "{:?}", o.before);
    assert!(matches!(o.during, Told::DenyAll(_)), "{:?}", o.during);
    o.redis.restart();
    // Polled: the stream is the one Envoy holds, asked again until the store answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let told = o.envoy.ask("edge", acme(0)).await[0].told();
        if matches!(told, Told::Bucket(..)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a share again once the store answers: {told:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_dead_store_under_allow_lets_the_bucket_through_and_local_shares_from_memory() {
    let allow = outage("allow").await;
    assert!(
        matches!(allow.during, Told::AllowAll(_)),
        "{:?}",
        allow.during
    );
    let local = outage("local").await;
    assert!(
        matches!(local.during, Told::Bucket(..)),
        "{:?}",
        local.during
    );
    // Decided in memory, not a stale answer: the store's failure was met and counted.
    assert!(store_errors(&local.gateway.0).await > 0);
}

/// The store errors the gateway counted.
async fn store_errors(gw: &TestGateway) -> u64 {
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    (metrics.lines())
        .filter(|l| l.starts_with("tollgate_store_errors_total{backend=\"redis\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
