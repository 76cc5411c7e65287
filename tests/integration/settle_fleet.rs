//! Settled costs on a fleet and when a client leaves: two gateways on Redis (single and
//! Cluster) share one token budget exactly, a client hanging up mid-download pays for what
//! moved, the local fallback settles locally (on this gateway's share), and a hang-up
//! while Redis settles still settles every tier.

use std::time::Duration;

use super::settle::{hourly_tokens_on, remaining, used};
use crate::support::*;

#[tokio::test]
async fn with_redis_two_gateways_share_a_token_budget_exactly() {
    let redis = RedisServer::start();
    shared_budget(&format!("\"{}\"", redis.url())).await;
}

#[tokio::test]
async fn with_a_redis_cluster_two_gateways_share_a_token_budget_exactly() {
    let cluster = RedisCluster::start();
    shared_budget(&cluster.urls_toml()).await;
}

/// Two gateways on the store at `url_toml` settle into one budget.
async fn shared_budget(url_toml: &str) {
    let up = Upstream::start().await;
    // T = 36 s: the test cannot refill a unit.
    let toml = hourly_tokens_on(format!(
        "backend = \"redis\"\nurl = {url_toml}\ntimeout = \"5s\"\n"
    ));
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for gw in [&a, &b] {
        gw.wait_for_store("/v1/usage", "warm-up").await;
    }
    let r = used(&a, "60").await;
    assert_eq!(r.num("x-ratelimit-remaining"), 40);
    let r = used(&b, "35").await;
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        5,
        "the second gateway sees the first's settlement"
    );
    assert_eq!(remaining(&a, "tokens").await, 5);
    for gw in [&a, &b] {
        let denied = used(gw, "1").await;
        assert_eq!(denied.status, 429, "5 left, 10 to reserve");
    }
    let r = get(
        &b.url("/v1/usage"),
        &[("x-tenant-id", "globex"), ("x-usage", "1")],
    )
    .await;
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        99,
        "a refund, settled in the store"
    );
}

/// A client that takes part of a large answer and hangs up pays for what moved (at least
/// its reserve), over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn hanging_up_mid_download_pays_for_what_moved() {
    use http_body_util::BodyExt;
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "download",
            "key = \"header:x-tenant-id\"\nlimit = 1000000\nperiod = \"1h\"\nburst = 100000\nreserve = 4\nsettle = \"response_bytes\"\nsettle_unit = 1024\n",
        )
        .route("api", "/", "api", &["download"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let metrics = gw.admin_url("/metrics");
    for (round, client) in [http1(), http2()].into_iter().enumerate() {
        let tenant = format!("t{round}");
        let req = http::Request::get(gw.url("/v1/big"))
            .header("x-tenant-id", &tenant)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let resp = client.request(req).await.expect("head");
        let mut body = resp.into_body();
        let mut taken = 0usize;
        while taken < 256 * 1024 {
            let frame = body.frame().await.expect("a frame").expect("data");
            taken += frame.data_ref().map_or(0, |d| d.len());
        }
        drop(body);
        drop(client);
        let counted = metric_reaches(
            Duration::from_secs(20),
            &metrics,
            "tollgate_settle_fallbacks_total{policy=\"download\",result=\"aborted\"}",
            (round + 1) as f64,
        )
        .await;
        assert!(counted, "round {round}: the cut-short download is settled");
        let limits = get(
            &gw.admin_url(&format!("/admin/limits/download/{tenant}")),
            &[],
        )
        .await
        .json();
        let charged = 100_000 - limits["remaining"].as_u64().expect("remaining");
        assert!(
            charged >= (taken / 1024) as u64,
            "round {round}: {taken} bytes reached the client, {charged} units charged"
        );
    }
}

/// With Redis down and `on_error = "local"`, a request admitted by the local store settles
/// there too: its debt holds back the next request on this gateway.
#[tokio::test]
async fn an_admission_by_the_local_fallback_settles_locally() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = hourly_tokens_on(format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"local\"\n",
        redis.url()
    ));
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    redis.kill();
    let r = used(&gw, "95").await;
    assert_eq!(r.status, 200, "admitted by the local store");
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        5,
        "settled in the local store"
    );
    let next = used(&gw, "1").await;
    assert_eq!(
        next.status, 429,
        "the local debt holds back the next request"
    );
}

/// With Redis down, `on_error = "local"` and two gateways, each decides on half of every
/// limit — and settles on that half too: a unit owed after the answer costs this
/// gateway's share as much as one reserved did (it cost half as much, so each gateway
/// passed twice its share of usage-priced units, the fleet twice the limit).
#[tokio::test]
async fn the_local_fallback_settles_on_this_gateways_share() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = hourly_tokens_on(format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"local\"\nfleet_size = 2\n",
        redis.url()
    ));
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    redis.kill();
    let r = used(&gw, "45").await;
    assert_eq!(r.status, 200, "admitted by the local store");
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        5,
        "45 of this gateway's 50 used"
    );
    let next = used(&gw, "1").await;
    assert_eq!(next.status, 429, "5 left, 10 to reserve");
}

/// A client that hangs up while the gateway waits on Redis to settle what the answer's
/// header said still pays it, on every tier: the settling does not hang on the request.
/// Redis is frozen once the request is admitted, so the gateway is still waiting on the
/// first tier's settlement when the client goes (HTTP/1.1: the connection closed; HTTP/2:
/// the stream reset).
#[tokio::test]
async fn hanging_up_while_redis_settles_the_cost_still_settles_every_tier() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = three_tiers_on(&redis);
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/v1/usage", "warm-up").await;
    let metrics = gw.admin_url("/metrics");
    for round in 0..2 {
        let tenant = format!("t{round}");
        let seen = up.requests();
        let client = slow_client(&gw, round, &tenant).await;
        assert!(
            eventually(Duration::from_secs(20), || up.requests() > seen).await,
            "round {round}: admitted and forwarded"
        );
        // Admitted: from now on Redis does not answer until resumed.
        redis.pause();
        let waiting = eventually_async(Duration::from_secs(20), || async {
            let text = get(&metrics, &[]).await.text();
            metric(&text, "tollgate_in_flight{policy=\"slots\"}") == 1.0
                && metric(
                    &text,
                    "tollgate_settlements_total{policy=\"tenant\",result=\"debt\"}",
                ) == (round + 1) as f64
        })
        .await;
        assert!(
            waiting,
            "round {round}: the answer came, its settling waits on Redis"
        );
        drop(client);
        let dropped = metric_reaches(
            Duration::from_secs(20),
            &metrics,
            "tollgate_in_flight{policy=\"slots\"}",
            0.0,
        )
        .await;
        assert!(dropped, "round {round}: the gateway let go of the request");
        redis.resume();
        check_every_tier_settled(&gw, round, &tenant).await;
    }
}

/// A concurrency tier and two settled token tiers (per tenant, per tenant and route) on
/// `redis`, with a timeout long enough that a frozen Redis keeps the settling waiting.
fn three_tiers_on(redis: &RedisServer) -> String {
    let tokens = |key: &str| {
        format!(
            "key = {key}\nlimit = 100\nperiod = \"1h\"\nburst = 100\nreserve = 10\nsettle = \"response_header:x-usage-tokens\"\n"
        )
    };
    Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"30s\"\n",
            redis.url()
        ))
        .policy_raw(
            "slots",
            "key = \"header:x-tenant-id\"\nmax_in_flight = 10\n",
        )
        .policy_raw("tenant", tokens("\"header:x-tenant-id\""))
        .policy_raw("endpoint", tokens("[\"header:x-tenant-id\", \"route\"]"))
        .route("api", "/", "api", &["slots", "tenant", "endpoint"])
        .build()
}

/// A request of `tenant` using 60 tokens, answered 3 s late: HTTP/1.1 on a raw connection
/// in round 0, HTTP/2 after. The client, kept until it hangs up.
async fn slow_client(
    gw: &TestGateway,
    round: usize,
    tenant: &str,
) -> Box<dyn std::any::Any + Send> {
    let head = format!(
        "GET /v1/usage HTTP/1.1\r\nhost: gw\r\nx-tenant-id: {tenant}\r\nx-usage: 60\r\nx-delay-ms: 3000\r\n\r\n"
    );
    if round == 0 {
        use tokio::io::AsyncWriteExt;
        let mut s = tokio::net::TcpStream::connect(gw.addr)
            .await
            .expect("connect");
        s.write_all(head.as_bytes()).await.expect("write");
        Box::new(s)
    } else {
        let (url, tenant) = (gw.url("/v1/usage"), tenant.to_owned());
        Box::new(AbortOnDrop(tokio::spawn(async move {
            let headers = [
                ("x-tenant-id", tenant.as_str()),
                ("x-usage", "60"),
                ("x-delay-ms", "3000"),
            ];
            send(&http2(), "GET", &url, &headers, b"").await
        })))
    }
}

/// Both token tiers of `tenant` end up charged the 60 used, not the 10 reserved.
async fn check_every_tier_settled(gw: &TestGateway, round: usize, tenant: &str) {
    for (policy, key) in [
        ("tenant", tenant.to_owned()),
        ("endpoint", format!("{tenant}/api")),
    ] {
        let url = gw.admin_url(&format!("/admin/limits/{policy}/{key}"));
        let settled = eventually_async(Duration::from_secs(20), || async {
            let limits = get(&url, &[]).await.json();
            limits["remaining"].as_u64() == Some(40)
        })
        .await;
        assert!(
            settled,
            "round {round}: {policy} charged the 60 used, not the 10 reserved"
        );
    }
}

/// A spawned request, cancelled (its HTTP/2 stream reset) when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
