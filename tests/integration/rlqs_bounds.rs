//! What one quota stream may make the server keep: a bucket past the stream's bound, or
//! with an id too long to keep, is charged and refused a while, not tracked; buckets no
//! report names for five minutes make room for new ones; the holds of ended streams
//! leave once their assignments expire.

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
async fn a_bucket_id_too_long_to_keep_is_charged_and_refused() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let long = "x".repeat(tollgate::rlqs::assign::MAX_BUCKET_ID_BYTES);
    let answers = envoy.ask("edge", vec![tenant(&long, 20, 0)]).await;
    assert_eq!(answers[0].told(), Told::DenyAll(10));
    assert_eq!(proxied(&gw, &long).await, 429, "charged all the same");
    let short = envoy.ask("edge", vec![tenant("short", 1, 0)]).await;
    assert!(matches!(short[0].told(), Told::Bucket(..)));
}
