//! The rate limit service across reloads: rules change and buckets stay, what changed is
//! said by name (what waits for a restart too), and a file that drops `[rls]` is refused.

use super::rls::{rls_toml, start, tenant};
use crate::support::*;

#[tokio::test]
async fn a_reload_changes_the_rules_keeps_the_buckets_and_names_what_waits_for_a_restart() {
    let (up, gw, mut rls) = start("ok").await;
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 2)]
    );
    // `tenant` now decides `customer` descriptors; its bucket for acme keeps its charge.
    let changed = rls_toml("ok")
        .replace(
            "descriptor = [\"tenant\"]\npolicy = \"tenant\"",
            "descriptor = [\"customer\"]\npolicy = \"tenant\"",
        )
        .replace(
            "[rls]\nlisten = \"127.0.0.1:0\"",
            "[rls]\nlisten = \"127.0.0.1:1\"",
        );
    gw.rewrite(&changed, &up.url());
    let report = gw.gw().reload().await.expect("reload");
    assert_eq!(report.needs_restart, ["rls.listen"]);
    assert_eq!(report.changes.services, ["rls.rules"], "said by name");
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 0)]
    );
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.statuses[0].current_limit,
        None
    );
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("customer", "acme")])])
            .await
            .codes(),
        [(OK, 1)]
    );
    // Only what unmatched descriptors are answered changes: said, where the report said
    // nothing changed.
    gw.rewrite(
        &changed.replace("on_unmatched = \"ok\"", "on_unmatched = \"over_limit\""),
        &up.url(),
    );
    let report = gw.gw().reload().await.expect("reload");
    assert_eq!(report.changes.services, ["rls.on_unmatched"]);
    assert_eq!(
        report.changes.lines(),
        ["services: changed rls.on_unmatched"]
    );
}

/// A reload whose file drops `[rls]` is refused whole: the service (and its buckets) goes
/// on, where it answered every Envoy `UNAVAILABLE` at once — which an Envoy failing open
/// turns into every request let through.
#[tokio::test]
async fn a_reload_that_drops_the_rate_limit_service_is_refused() {
    let (up, gw, mut rls) = start("ok").await;
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 2)]
    );
    let without = Fixture::new()
        .policy("tenant", "header:x-tenant", 3, "1m", 3)
        .route("api", "/api", "api", &["tenant"])
        .build();
    gw.rewrite(&without, &up.url());
    let refused = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(
        refused.text().contains("[rls] is gone from the file"),
        "{}",
        refused.text()
    );
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 1)]
    );
}
