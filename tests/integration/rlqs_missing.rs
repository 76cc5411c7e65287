//! A quota bucket whose id lacks a value of its entry (Envoy leaves a key out of the id
//! when the request's value is empty) is answered by the policy's `missing`, as a
//! request without the header is: `reject` refuses it, `skip` lets it through, `shared`
//! puts every such bucket on one key — never an unmatched bucket let through uncharged.

use crate::support::*;

/// A policy keyed by tenant and user, `missing` as given; its RLQS buckets keyed by the
/// `tenant` and `user` of Envoy's bucket id.
fn config(missing: &str) -> String {
    Fixture::new()
        .policy_raw(
            "pair",
            format!("key = [\"header:x-tenant\", \"header:x-user\"]\nlimit = 10\nperiod = \"1s\"\nburst = 20\nmissing = \"{missing}\"\n"),
        )
        .route("api", "/", "api", &["pair"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\n\
             bucket = [\"tenant\", \"user\"]\npolicy = \"pair\"\nassignment_ttl = \"10s\"\n",
        )
        .build()
}

async fn told(missing: &str, pairs: &[(&str, &str)]) -> Told {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(missing), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let answered = envoy.ask("edge", vec![usage(pairs, 1, 0, 0)]).await;
    assert_eq!(answered.len(), 1);
    answered[0].told()
}

#[tokio::test]
async fn a_bucket_lacking_a_value_is_answered_by_the_policys_missing() {
    let lacking = [("tenant", "acme")];
    assert_eq!(told("reject", &lacking).await, Told::DenyAll(10));
    assert_eq!(told("skip", &lacking).await, Told::AllowAll(10));
    assert!(
        matches!(told("shared", &lacking).await, Told::Bucket(19, 10, 1, 10)),
        "the one bucket of all such, charged"
    );
    // An empty value, where Envoy sends one, is missing the same way.
    let empty = [("tenant", "acme"), ("user", " ")];
    assert_eq!(told("reject", &empty).await, Told::DenyAll(10));
    // Both values there: the pair's own key.
    let both = [("tenant", "acme"), ("user", "u1")];
    assert!(matches!(told("reject", &both).await, Told::Bucket(..)));
}
