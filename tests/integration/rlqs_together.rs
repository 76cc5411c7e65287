//! One Envoy's RLQS buckets that one key limits — the addresses of one IPv6 network under
//! an `ip/64` policy, which Envoy buckets apart by `remote_address` — split the Envoy's
//! share of the key between them: N buckets are given the key once, not N times, and the
//! buckets already holding it are re-sized when another joins.

use crate::support::*;

/// `net`: 10 a second, burst 20, keyed by `ip/64`; RLQS buckets keyed by the `client` of
/// Envoy's bucket id, assigned for 10 s.
fn config() -> String {
    Fixture::new()
        .policy("net", "ip/64", 10, "1s", 20)
        .route("api", "/", "api", &["net"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\n\
             bucket = [\"client\"]\npolicy = \"net\"\nassignment_ttl = \"10s\"\n",
        )
        .build()
}

fn client(action: &BucketAction) -> String {
    action.bucket_id.as_ref().expect("id").bucket["client"].clone()
}

/// The token buckets `actions` gave (most tokens, tokens a fill, seconds a fill), by
/// client.
fn buckets(actions: &[BucketAction]) -> Vec<(String, u32, u32, i64)> {
    let mut told: Vec<(String, u32, u32, i64)> = actions
        .iter()
        .map(|a| match a.told() {
            Told::Bucket(max, per_fill, fill_s, 10) => (client(a), max, per_fill, fill_s),
            other => panic!("{}: {other:?}", client(a)),
        })
        .collect();
    told.sort();
    told
}

#[tokio::test]
async fn buckets_of_one_network_split_one_share_of_its_key() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let (a, b) = ("2001:db8:7:7::1", "2001:db8:7:7:ffff::2");
    let first = |ip| usage(&[("client", ip)], 1, 0, 0);
    let answered = envoy.ask("edge", vec![first(a), first(b)]).await;
    // `a` was alone when answered; `b` joined the key and has half of what is free (18)
    // and of the rate.
    assert_eq!(
        buckets(&answered),
        [(a.to_owned(), 19, 10, 1), (b.to_owned(), 9, 5, 1)]
    );
    // `a` is re-sized at once, without reporting: the two never hold more than the key.
    let pushed = envoy.next().await.expect("a re-size").actions;
    let halves = [(a.to_owned(), 9, 5, 1), (b.to_owned(), 9, 5, 1)];
    assert_eq!(buckets(&pushed), halves);
    // Both idle now: `a` is answered while `b` still holds its old demand (a sliver
    // for `a`), then `b` half; the next report, halves. Never more than the key between
    // them. The next network is another key.
    let again = |ip| usage(&[("client", ip)], 0, 0, 5);
    let moving = buckets(&envoy.ask("edge", vec![again(a), again(b)]).await);
    assert_eq!(moving, [(a.to_owned(), 1, 1, 2), (b.to_owned(), 9, 5, 1)]);
    assert_eq!(
        buckets(&envoy.ask("edge", vec![again(a), again(b)]).await),
        halves
    );
    let other = "2001:db8:7:8::1";
    let alone = envoy.ask("edge", vec![first(other)]).await;
    assert_eq!(buckets(&alone), [(other.to_owned(), 19, 10, 1)]);
}
