//! Envoy's quota service (RLQS) through a real gRPC client (tonic streams): a report is
//! charged to the bucket's key — the key a proxied request of the same value uses — and
//! answered with the Envoy's share as a token bucket; a second Envoy halves the first's
//! share at once; demand moves the split; a gone Envoy's share returns after its TTL;
//! unmatched, empty, duplicate and thousands of buckets; a reload that drops an entry
//! abandons its buckets; a message that is not a report ends the stream with an error.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use crate::support::*;

/// `tenant`: 10 a second, burst 20, keyed like the `/api` route's tier; its buckets keyed
/// by the `tenant` of Envoy's bucket id, assigned for 10 s.
pub(crate) fn rlqs_toml(buckets: bool) -> String {
    let entries = if buckets {
        "[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n"
    } else {
        "[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"team\"]\npolicy = \"tenant\"\n"
    };
    Fixture::new()
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .route("api", "/api", "api", &["tenant"])
        .raw(format!("[rls]\nlisten = \"127.0.0.1:0\"\n{entries}"))
        .build()
}

pub(crate) async fn start() -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&rlqs_toml(true), &up.url()).await;
    (up, gw)
}

pub(crate) async fn open(gw: &TestGateway) -> RlqsStream {
    RlqsStream::open(gw.rls.expect("[rls] listens")).await
}

pub(crate) fn tenant(t: &str, allowed: u64, denied: u64) -> Usage {
    usage(&[("tenant", t)], allowed, denied, 5)
}

pub(crate) async fn proxied(gw: &TestGateway, t: &str) -> u16 {
    let req = http::Request::get(gw.url("/api/x"))
        .header("x-tenant", t)
        .body(Full::new(Bytes::new()))
        .expect("request");
    http1()
        .request(req)
        .await
        .expect("answer")
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_report_is_charged_to_the_key_a_proxied_request_uses_and_answered_with_a_share() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    // Envoy's first report of a bucket: the request that made it, no time elapsed.
    let first = envoy
        .ask("edge", vec![usage(&[("tenant", "a")], 1, 0, 0)])
        .await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].tenant(), "a", "the bucket id comes back as sent");
    assert_eq!(
        first[0].told(),
        Told::Bucket(19, 10, 1, 10),
        "the whole key less the request charged: 19 now, 10 a second, for 10 s"
    );
    // Envoy spent the rest: the key is empty for a proxied request too.
    let spent = envoy.ask("edge", vec![tenant("a", 19, 0)]).await;
    assert_eq!(
        spent[0].told(),
        Told::Bucket(10, 10, 1, 10),
        "the refill only"
    );
    assert_eq!(
        proxied(&gw, "a").await,
        429,
        "the Envoys' usage is the key's"
    );
    assert_eq!(proxied(&gw, "b").await, 200);
    // Usage beyond the bound (τ, 2 s) and one report interval (5 s) is owed, paid out
    // of the next TTL's refill: 80 units are 8 s ahead, 1 s (10 units) of it owed.
    let over = envoy.ask("edge", vec![tenant("a", 60, 0)]).await;
    assert_eq!(
        over[0].told(),
        Told::Bucket(9, 9, 1, 10),
        "(100 − 10) over 10 s"
    );
}

#[tokio::test]
async fn a_second_envoy_halves_the_first_share_at_once_and_demand_moves_the_split() {
    let (_up, gw) = start().await;
    let (mut one, mut two) = (open(&gw).await, open(&gw).await);
    let a = |allowed, denied| vec![tenant("a", allowed, denied)];
    assert_eq!(
        one.ask("edge", a(1, 0)).await[0].told(),
        Told::Bucket(19, 10, 1, 10)
    );
    // An answer to a report starts Envoy's bucket full at its size (its usage is
    // charged, the share net of it): a DENY_ALL for the bucket just before it.
    two.report("edge", a(1, 0)).await;
    let raw = two.next_raw().await.expect("an answer").actions;
    let told: Vec<Told> = raw.iter().map(BucketAction::told).collect();
    assert_eq!(
        told,
        [Told::DenyAll(10), Told::Bucket(9, 5, 1, 10)],
        "half of what is free (18) and of the rate"
    );
    // The first is told its new share without reporting anything, at Envoy's fill
    // ratio (no DENY_ALL): another Envoy joining hands out no fresh tokens.
    let pushed = one.next_raw().await.expect("a re-size").actions;
    assert_eq!(pushed.len(), 1);
    assert_eq!(pushed[0].told(), Told::Bucket(9, 5, 1, 10));
    // The second asks for fifty a second, the first for one: the split follows.
    let Told::Bucket(m2, f2, _, _) = two.ask("edge", a(5, 45)).await[0].told() else {
        panic!("a bucket")
    };
    let Told::Bucket(m1, f1, _, _) = one.ask("edge", a(0, 0)).await[0].told() else {
        panic!("a bucket")
    };
    assert!(m2 > 4 * m1 && f2 > 4 * f1, "two {m2}/{f2}, one {m1}/{f1}");
    assert!(
        f1 + f2 <= 10,
        "the shares never add up to more than the rate"
    );
}

#[tokio::test]
async fn a_gone_envoys_share_returns_only_after_its_assignment_expires() {
    let (_up, gw) = start().await;
    let (mut one, mut two) = (open(&gw).await, open(&gw).await);
    one.ask("edge", vec![tenant("a", 0, 0)]).await;
    two.ask("edge", vec![tenant("a", 0, 0)]).await;
    let _ = one.next().await;
    one.close();
    drop(one);
    // Until its TTL passes, Envoy may still be spending its cached assignment.
    gw.clock.advance(5 * S);
    let held = two.ask("edge", vec![tenant("a", 0, 0)]).await[0].told();
    let Told::Bucket(_, fill, _, _) = held else {
        panic!("a bucket")
    };
    assert!(fill < 10, "the gone Envoy's share is still held: {held:?}");
    gw.clock.advance(6 * S);
    let back = two.ask("edge", vec![tenant("a", 0, 0)]).await[0].told();
    assert_eq!(back, Told::Bucket(20, 10, 1, 10), "the whole key again");
}

#[tokio::test]
async fn unmatched_empty_duplicate_and_many_buckets_are_each_answered_as_they_should() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let answers = envoy
        .ask(
            "edge",
            vec![
                usage(&[("user", "u")], 1, 0, 0),
                usage(&[], 1, 0, 0),
                tenant("d", 10, 0),
                tenant("d", 10, 0),
            ],
        )
        .await;
    let told: Vec<Told> = answers.iter().map(BucketAction::told).collect();
    assert_eq!(
        told[0],
        Told::AllowAll(10),
        "no entry names it: on_unmatched = ok"
    );
    assert_eq!(told.len(), 3, "an empty bucket id cannot be answered");
    assert_eq!(told[2], Told::Bucket(10, 10, 1, 10), "both usages charged");
    assert_eq!(proxied(&gw, "d").await, 429);
    // Thousands of buckets in one report: one answer naming each, in order.
    let many: Vec<Usage> = (0..3000).map(|i| tenant(&format!("t{i}"), 1, 0)).collect();
    let answers = envoy.ask("edge", many).await;
    assert_eq!(answers.len(), 3000);
    assert_eq!(answers[2999].tenant(), "t2999");
    assert!(answers
        .iter()
        .all(|a| a.told() == Told::Bucket(19, 10, 1, 10)));
}

#[tokio::test]
async fn a_reload_that_drops_a_buckets_entry_abandons_the_bucket() {
    let (up, gw) = start().await;
    let mut envoy = open(&gw).await;
    envoy.ask("edge", vec![tenant("a", 1, 0)]).await;
    gw.rewrite(&rlqs_toml(false), &up.url());
    gw.gw().reload().await.expect("reload");
    let answers = envoy.ask("edge", vec![tenant("a", 1, 0)]).await;
    assert_eq!(answers[0].told(), Told::Abandon);
    let again = envoy.ask("edge", vec![tenant("a", 1, 0)]).await;
    assert_eq!(again[0].told(), Told::AllowAll(10), "then it is unmatched");
}

#[tokio::test]
async fn a_message_that_is_not_a_report_ends_the_stream_with_invalid_argument() {
    let (_up, gw) = start().await;
    let mut framed = vec![0u8, 0, 0, 0, 3];
    framed.extend_from_slice(&[0xff, 0xff, 0xff]);
    let req = http::Request::post(format!(
        "http://{}/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
        gw.rls.expect("rls")
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(Bytes::from(framed)))
    .expect("request");
    let resp = http2().request(req).await.expect("answer");
    assert_eq!(resp.status(), 200);
    let collected = resp.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned().expect("trailers");
    assert_eq!(trailers["grpc-status"], "3", "{trailers:?}");
    assert!(
        trailers["grpc-message"]
            .to_str()
            .is_ok_and(|m| m.contains("RateLimitQuotaUsageReports")),
        "{trailers:?}"
    );
    // The listener still answers.
    let mut envoy = open(&gw).await;
    assert_eq!(envoy.ask("edge", vec![tenant("z", 1, 0)]).await.len(), 1);
}

#[tokio::test]
async fn a_monthly_quota_is_handed_out_without_refill_a_shadow_policy_allows_all() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "monthly",
            "key = \"header:x-tenant\"\nquota = 1000\nwindow = \"month\"\n",
        )
        .policy_raw(
            "watch",
            "key = \"header:x-tenant\"\nlimit = 1\nperiod = \"1m\"\nburst = 1\nmode = \"shadow\"\n",
        )
        .route("api", "/api", "api", &["monthly"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"monthly\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"watcher\"]\npolicy = \"watch\"\n",
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut envoy = open(&gw).await;
    let first = envoy.ask("edge", vec![tenant("a", 600, 0)]).await;
    assert_eq!(
        first[0].told(),
        Told::Bucket(400, 1, 3600, 10),
        "what is left of the month, no refill within reach"
    );
    assert_eq!(
        proxied(&gw, "a").await,
        200,
        "the proxy sees the month's usage too"
    );
    let watched = envoy
        .ask("edge", vec![usage(&[("watcher", "w")], 5, 0, 5)])
        .await;
    assert_eq!(
        watched[0].told(),
        Told::AllowAll(10),
        "shadow: counted, never refused"
    );
}

#[tokio::test]
async fn two_servers_on_one_redis_split_a_key_between_their_envoys() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"",
            redis.url()
        ))
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build();
    let (a, b) = (
        TestGateway::start_real_clock(&toml, &up.url()).await,
        TestGateway::start_real_clock(&toml, &up.url()).await,
    );
    let (mut one, mut two) = (open(&a).await, open(&b).await);
    let Told::Bucket(_, alone, _, _) = one.ask("edge", vec![tenant("a", 0, 5)]).await[0].told()
    else {
        panic!("a bucket")
    };
    assert_eq!(alone, 10, "one Envoy in the fleet: the whole rate");
    let Told::Bucket(_, split, _, _) = two.ask("edge", vec![tenant("a", 0, 5)]).await[0].told()
    else {
        panic!("a bucket")
    };
    assert_eq!(
        split, 5,
        "the other server's Envoy is counted: half the rate"
    );
    let Told::Bucket(_, again, _, _) = one.ask("edge", vec![tenant("a", 0, 5)]).await[0].told()
    else {
        panic!("a bucket")
    };
    assert_eq!(
        again, 5,
        "and the first server sees the second's at its next report"
    );
}

#[tokio::test]
async fn absurd_counts_are_charged_and_answered_and_the_listener_stays_up() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let answers = envoy
        .ask("edge", vec![tenant("huge", u64::MAX, u64::MAX)])
        .await;
    assert_eq!(
        answers[0].told(),
        Told::DenyAll(10),
        "a key owing more than it ever refills"
    );
    assert_eq!(proxied(&gw, "huge").await, 429);
    assert_eq!(proxied(&gw, "other").await, 200);
    let next = envoy.ask("edge", vec![tenant("fine", 1, 0)]).await;
    assert_eq!(next[0].told(), Told::Bucket(19, 10, 1, 10));
}

/// A gateway whose listener lets two quota streams be open at once, and its config.
pub(crate) async fn two_stream_places() -> (Upstream, TestGateway, String) {
    let up = Upstream::start().await;
    let toml = rlqs_toml(true).replace(
        "[rls]\nlisten = \"127.0.0.1:0\"\n",
        "[rls]\nlisten = \"127.0.0.1:0\"\nmax_quota_streams = 2\n",
    );
    let gw = TestGateway::start(&toml, &up.url()).await;
    (up, gw, toml)
}

#[tokio::test]
async fn streams_past_the_listeners_bound_are_refused_until_one_ends() {
    let (up, gw, toml) = two_stream_places().await;
    let addr = gw.rls.expect("rls");
    let mut first = open(&gw).await;
    let mut second = open(&gw).await;
    assert_eq!(first.ask("edge", vec![tenant("a", 1, 0)]).await.len(), 1);
    assert_eq!(second.ask("edge", vec![tenant("b", 1, 0)]).await.len(), 1);
    let refused = RlqsStream::try_open(addr, None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert_eq!(refused.message(), "overloaded: 2 quota streams are open");
    // The open ones go on; once one ends, its place is free again.
    assert_eq!(second.ask("edge", vec![tenant("b", 1, 0)]).await.len(), 1);
    first.close();
    // Polled: the server frees the place when it sees the stream's end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut third = loop {
        match RlqsStream::try_open(addr, None).await {
            Ok(stream) => break stream,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted);
                assert!(
                    std::time::Instant::now() < deadline,
                    "a place freed by a stream's end is taken again"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(third.ask("edge", vec![tenant("c", 1, 0)]).await.len(), 1);
    // The bound is the listener's from its start: a reload that changes it keeps it and
    // says so, each time, until a restart.
    let raised = toml.replace("max_quota_streams = 2", "max_quota_streams = 5");
    for _ in 0..2 {
        gw.rewrite(&raised, &up.url());
        let report = gw.gw().reload().await.expect("reload");
        assert_eq!(report.needs_restart, ["rls.max_quota_streams"]);
    }
}
