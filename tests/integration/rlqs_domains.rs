//! One quota stream reporting the same bucket id under two domains, each shared out by its
//! own entry: the stream holds both buckets, so another Envoy joining either key finds it
//! among the key's holders (a stream that kept one record per id let the second domain's
//! report take the first key's hold away, and the newcomer got the whole key).

use crate::support::*;

fn toml() -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .policy("team", "header:x-team", 100, "1s", 200)
        .route("api", "/api", "api", &["tenant"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n\
             [[rlqs.buckets]]\ndomain = \"other\"\nbucket = [\"tenant\"]\npolicy = \"team\"\nassignment_ttl = \"10s\"\n",
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
