//! The admin API's changes of a key reach the Envoys holding a share of it over their
//! quota streams (RLQS) at once, not at their next report: a reset hands back the whole
//! key, an override set or removed re-sizes the share to the key's new numbers, and a
//! stream holding no share of the key is told nothing.

use crate::rlqs::{open, proxied, start, tenant};
use crate::support::*;

async fn admin(gw: &TestGateway, method: &str, path: &str, body: &'static [u8]) {
    let headers: &[(&str, &str)] = if body.is_empty() {
        &[]
    } else {
        &[("content-type", "application/json")]
    };
    let got = send(&http1(), method, &gw.admin_url(path), headers, body).await;
    assert_eq!(got.status, 200, "{method} {path}: {}", got.text());
}

#[tokio::test]
async fn a_reset_sends_the_envoys_holding_the_key_the_whole_key_at_once() {
    let (_up, gw) = start().await;
    let (mut holder, mut other) = (open(&gw).await, open(&gw).await);
    holder
        .ask("edge", vec![usage(&[("tenant", "a")], 1, 0, 0)])
        .await;
    let spent = holder.ask("edge", vec![tenant("a", 19, 0)]).await;
    assert_eq!(
        spent[0].told(),
        Told::Bucket(10, 10, 1, 10),
        "the refill only"
    );
    other.ask("edge", vec![tenant("b", 1, 0)]).await;
    assert_eq!(proxied(&gw, "a").await, 429);

    admin(&gw, "POST", "/admin/reset/tenant/a", b"").await;
    // The whole key, started full (a DENY_ALL just before it: Envoy would otherwise
    // start it at the drained bucket's fill ratio), before Envoy's next report.
    let pushed = holder.next_raw().await.expect("a re-size").actions;
    let told: Vec<(String, Told)> = pushed.iter().map(|a| (a.tenant(), a.told())).collect();
    assert_eq!(
        told,
        [
            ("a".to_owned(), Told::DenyAll(10)),
            ("a".to_owned(), Told::Bucket(20, 10, 1, 10))
        ]
    );
    assert_eq!(proxied(&gw, "a").await, 200);
    // The other stream holds no share of `a`: its next message answers its own report.
    let answered = other.ask("edge", vec![tenant("b", 0, 0)]).await;
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].tenant(), "b", "nothing was pushed to it");
}

#[tokio::test]
async fn an_override_set_or_removed_resizes_the_holders_share_at_once() {
    let (_up, gw) = start().await;
    let mut holder = open(&gw).await;
    assert_eq!(
        holder.ask("edge", vec![tenant("a", 0, 0)]).await[0].told(),
        Told::Bucket(20, 10, 1, 10)
    );
    admin(
        &gw,
        "PUT",
        "/admin/overrides/tenant/a",
        br#"{"limit": 100, "period": "1s", "burst": 200}"#,
    )
    .await;
    // New numbers, at Envoy's fill ratio (no DENY_ALL before it): the Envoy's spending
    // since its last report is not charged yet, and a bucket started full would hand it
    // out again.
    let raised = holder.next_raw().await.expect("a re-size").actions;
    let told: Vec<Told> = raised.iter().map(BucketAction::told).collect();
    assert_eq!(
        told,
        [Told::Bucket(200, 100, 1, 10)],
        "the override's numbers"
    );
    admin(&gw, "DELETE", "/admin/overrides/tenant/a", b"").await;
    let back = holder.next().await.expect("a re-size").actions;
    assert_eq!(
        back[0].told(),
        Told::Bucket(20, 10, 1, 10),
        "the policy's own again"
    );
}
