//! Descriptors of one key in one call are charged together or not at all, so the call is
//! told the wait for all of them: none when together they are over the key's burst (no
//! wait admits them), else until the key holds them all at once.

use crate::rls::{start, tenant};
use crate::support::*;

#[tokio::test]
async fn descriptors_of_one_key_are_told_the_wait_for_all_of_them() {
    let (_up, _gw, mut rls) = start("ok").await;
    // `n` descriptors of tenant `t`, at the call's cost `hits`.
    let call = |t: &str, n: usize, hits: u32| RlsRequest {
        domain: "edge".into(),
        descriptors: vec![tenant(t); n],
        hits_addend: hits,
    };
    // The same key twice, 2 + 2 of a burst of 3: each fits alone, together never (the
    // call is all or nothing). It was told to wait 20 s, and again after that.
    let twice = rls.call(call("c", 2, 2)).await.expect("answered");
    assert_eq!(twice.overall_code, OVER_LIMIT);
    assert_eq!(twice.header("retry-after"), None);
    // 1 + 1 on a drained key (3 a minute): the call waits until the key holds both, 40 s,
    // not the 20 s one of them needs (it was told 20, and refused again then).
    let drain = rls.call(call("d", 1, 3)).await.expect("answered");
    assert_eq!(drain.codes(), [(OK, 0)]);
    let both = rls.call(call("d", 2, 1)).await.expect("answered");
    assert_eq!(both.overall_code, OVER_LIMIT);
    assert_eq!(both.header("retry-after"), Some("40"));
}

/// A refused call charges nothing, so each of its descriptors is shown as the call found
/// its key: two of one key before the refusing one both say what the key holds (the
/// second said one less, the first's charge undone).
#[tokio::test]
async fn a_refused_calls_descriptors_of_one_key_each_show_the_key_untouched() {
    let (_up, _gw, mut rls) = start("ok").await;
    let search = descriptor(&[("tenant", "e"), ("path", "/v1/search")]);
    let first = rls.ask("edge", vec![search.clone()]).await;
    assert_eq!(first.codes(), [(OK, 0)]);
    let refused = rls
        .ask("edge", vec![tenant("e"), tenant("e"), search])
        .await;
    assert_eq!(refused.overall_code, OVER_LIMIT);
    assert_eq!(refused.codes(), [(OK, 3), (OK, 3), (OVER_LIMIT, 0)]);
    assert_eq!(
        refused.header("ratelimit").map(str::to_owned),
        Some("\"tenant\";r=3;t=0, \"tenant\";r=3;t=0, \"search\";r=0;t=60".to_owned())
    );
    // The key itself refusing (2 asked, 1 left of 3 a minute): both descriptors are the
    // key with 1 left, whole again in 40 s (the refusing one said 60, from the charge).
    let drain = rls.call(RlsRequest {
        domain: "edge".into(),
        descriptors: vec![tenant("f")],
        hits_addend: 2,
    });
    assert_eq!(drain.await.expect("answered").codes(), [(OK, 1)]);
    let both = rls.ask("edge", vec![tenant("f"), tenant("f")]).await;
    assert_eq!(both.codes(), [(OK, 1), (OVER_LIMIT, 0)]);
    let resets: Vec<i64> = (both.statuses.iter())
        .map(|s| s.duration_until_reset.expect("reset").seconds)
        .collect();
    assert_eq!(resets, [40, 40]);
}
