//! What one quota stream may make the server keep: a bucket past the stream's bound (in
//! count, or in its ids' bytes), or with an id past 16 KiB, is charged and refused a
//! while, not tracked; buckets no report names for five minutes make room for new ones.

use crate::rlqs::{open, proxied, start, tenant};
use crate::support::*;

#[tokio::test]
async fn a_bucket_past_the_streams_bound_is_charged_and_refused_until_stale_ones_go() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let bound = tollgate::rlqs::assign::MAX_BUCKETS_PER_STREAM;
    let mut usages: Vec<Usage> = (0..bound).map(|i| tenant(&format!("t{i}"), 0, 0)).collect();
    usages.push(tenant("past", 20, 0));
    let answers = envoy.ask("edge", usages).await;
    assert_eq!(answers.len(), bound + 1);
    assert_eq!(
        answers[bound].told(),
        Told::DenyAll(10),
        "not tracked: refused"
    );
    assert_eq!(
        proxied(&gw, "past").await,
        429,
        "its usage was charged all the same"
    );
    let known = envoy.ask("edge", vec![tenant("t0", 1, 0)]).await;
    assert!(
        matches!(known[0].told(), Told::Bucket(..)),
        "tracked buckets go on"
    );
    // Five minutes on, the buckets no report named since are forgotten: a new one fits.
    gw.advance(301 * S);
    let new = envoy.ask("edge", vec![tenant("newcomer", 1, 0)]).await;
    assert!(
        matches!(new[0].told(), Told::Bucket(..)),
        "{:?}",
        new[0].told()
    );
}

#[tokio::test]
async fn a_token_sized_bucket_id_is_shared_out_and_a_longer_one_charged_and_refused() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let max = tollgate::rlqs::keys::MAX_BUCKET_ID_BYTES - "tenant".len();
    let token = "t".repeat(2_000);
    let kept = envoy.ask("edge", vec![tenant(&token, 1, 0)]).await;
    assert_eq!(kept[0].told(), Told::Bucket(19, 10, 1, 10));
    let long = "x".repeat(max + 1);
    let refused = envoy.ask("edge", vec![tenant(&long, 20, 0)]).await;
    assert_eq!(refused[0].told(), Told::DenyAll(10));
    assert_eq!(proxied(&gw, &long).await, 429, "charged all the same");
}
