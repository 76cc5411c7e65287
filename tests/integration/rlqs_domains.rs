//! What a report names and measures: one quota stream reporting the same bucket id under
//! two domains, each shared out by its own entry (the stream holds both buckets, so
//! another Envoy joining either key finds it among the key's holders — a stream that kept
//! one record per id let the second domain's report take the first key's hold away); a
//! report without a domain in the stream's domain (rlqs.proto sends it first only);
//! demand per Envoy's own `time_elapsed`; and a fill interval Envoy sees change.

use crate::support::*;

fn toml() -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .policy("team", "header:x-team", 100, "1s", 200)
        .policy("slow", "header:x-slow", 6, "1m", 1)
        .route("api", "/api", "api", &["tenant"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n\
             [[rlqs.buckets]]\ndomain = \"other\"\nbucket = [\"tenant\"]\npolicy = \"team\"\nassignment_ttl = \"10s\"\n\
             [[rlqs.buckets]]\ndomain = \"slow\"\nbucket = [\"tenant\"]\npolicy = \"slow\"\nassignment_ttl = \"60s\"\n",
        )
        .build()
}

#[tokio::test]
async fn one_id_under_two_domains_is_two_buckets_and_keeps_both_holds() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(), &up.url()).await;
    let addr = gw.rls.expect("rls");
    let (mut one, mut two) = (RlqsStream::open(addr).await, RlqsStream::open(addr).await);
    let a = || vec![usage(&[("tenant", "a")], 1, 0, 5)];
    assert_eq!(
        one.ask("edge", a()).await[0].told(),
        Told::Bucket(19, 10, 1, 10)
    );
    assert_eq!(
        one.ask("other", a()).await[0].told(),
        Told::Bucket(199, 100, 1, 10),
        "the same id under the other domain: the other entry's policy"
    );
    assert_eq!(
        two.ask("edge", a()).await[0].told(),
        Told::Bucket(9, 5, 1, 10),
        "the first stream still holds the edge key: half of what is free (18) and of the rate"
    );
}

#[tokio::test]
async fn a_report_without_a_domain_is_in_the_streams_domain() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(), &up.url()).await;
    let mut one = RlqsStream::open(gw.rls.expect("rls")).await;
    let a = || vec![usage(&[("tenant", "a")], 1, 0, 5)];
    assert_eq!(
        one.ask("other", a()).await[0].told(),
        Told::Bucket(199, 100, 1, 10)
    );
    // Not unmatched (ALLOW_ALL): the other domain's entry, charged again.
    assert_eq!(
        one.ask("", a()).await[0].told(),
        Told::Bucket(198, 100, 1, 10)
    );
}

#[tokio::test]
async fn demand_is_measured_over_the_time_envoy_says_the_report_covers() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(), &up.url()).await;
    let addr = gw.rls.expect("rls");
    let (mut one, mut two) = (RlqsStream::open(addr).await, RlqsStream::open(addr).await);
    // Both report 10 requests at their first report on these streams: one's over the 10 s
    // since its last report (before a reconnect, say), two's over 1 s. Two asks ten
    // times as much; one is not read as asking 10 a second.
    one.ask("edge", vec![usage(&[("tenant", "b")], 10, 0, 10)])
        .await;
    let two_told = two
        .ask("edge", vec![usage(&[("tenant", "b")], 10, 0, 1)])
        .await[0]
        .told();
    let one_pushed = one.next().await.expect("re-sized at once").actions[0].told();
    let per_fill = |t: Told| match t {
        Told::Bucket(_, per_fill, _, _) => per_fill,
        other => panic!("a token bucket, not {other:?}"),
    };
    assert!(
        per_fill(two_told) >= 8,
        "10/11 of 10 a second: {two_told:?}"
    );
    assert!(
        per_fill(one_pushed) <= 2,
        "1/11 of 10 a second: {one_pushed:?}"
    );
}

/// Whole-second fill intervals, and a share that changes only its interval told in a form
/// Envoy 1.40 sees change: it compares `max_tokens`, `tokens_per_fill` and the interval's
/// nanos only, and would keep the old, faster bucket.
#[tokio::test]
async fn a_share_changing_only_its_interval_is_told_so_that_envoy_sees_it_change() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(), &up.url()).await;
    let addr = gw.rls.expect("rls");
    // What Envoy compares, and the rate in tokens a minute.
    let told = |actions: &[BucketAction]| {
        let a = actions[0].assignment.as_ref().expect("an assignment");
        let tb = a
            .strategy
            .as_ref()
            .and_then(|s| s.token_bucket.as_ref())
            .expect("a bucket");
        let d = tb.fill_interval.expect("an interval");
        assert_eq!(d.nanos, 0, "whole seconds: {tb:?}");
        let per_fill = tb.tokens_per_fill.expect("tokens per fill");
        let per_minute = f64::from(per_fill) * 60.0 / d.seconds as f64;
        ((tb.max_tokens, per_fill), per_minute)
    };
    let mut one = RlqsStream::open(addr).await;
    // 6 a minute alone: 1 per 10 s.
    let alone = one
        .ask("slow", vec![usage(&[("tenant", "s")], 1, 0, 5)])
        .await;
    let (alone, rate) = told(&alone);
    assert_eq!((alone, rate), ((1, 1), 6.0));
    // A second Envoy with the same demand: each 3 a minute.
    let mut two = RlqsStream::open(addr).await;
    let half = two
        .ask("slow", vec![usage(&[("tenant", "s")], 1, 0, 5)])
        .await;
    assert_eq!(told(&half).1, 3.0);
    let pushed = one.next().await.expect("re-sized at once").actions;
    let (pushed, rate) = told(&pushed);
    assert_eq!(rate, 3.0);
    assert_ne!(pushed, alone, "Envoy would keep 1 per 10 s");
}
