//! A runtime override whose burst a reload put below a route's cost (an unsettled
//! policy): it stays in force. That route refuses the key for good — `429
//! cost_above_burst`, no wait told, nothing charged — and the policy's other routes keep
//! the override. Setting it aside, as before, lifted the key's restriction on every route
//! of the policy; refusing to set it again (its `ttl` renewed) let it lapse.

use crate::admin::{put_ok, reload};
use crate::support::*;

/// One a second per tenant, a burst of 3; `/heavy` costs `heavy`.
fn config(heavy: u64) -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
        .route("api", "/", "api", &["tenant"])
        .route_raw(format!(
            "name = \"heavy\"\npath = \"/heavy\"\nupstream = \"api\"\npolicies = [\"tenant\"]\ncost = {heavy}\n"
        ))
        .build()
}

async fn as_tenant(gw: &TestGateway, client: &HttpClient, path: &str, tenant: &str) -> Got {
    send(
        client,
        "GET",
        &gw.url(path),
        &[("x-tenant-id", tenant)],
        b"",
    )
    .await
}

#[tokio::test]
async fn an_override_below_a_raised_cost_refuses_that_route_and_keeps_the_others() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(2), &up.url()).await;
    for tenant in ["acme-1", "acme-2"] {
        let url = gw.admin_url(&format!("/admin/overrides/tenant/{tenant}"));
        put_ok(&url, br#"{"burst": 2}"#).await;
    }
    gw.rewrite(&config(3), &up.url());
    let reloaded = reload(&gw).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    for one in listed["overrides"].as_array().expect("a list") {
        assert_eq!(one["active"], true, "in force: {listed}");
    }
    let seen = up.requests();
    for (i, client) in [http1(), http2()].iter().enumerate() {
        refused_on_heavy_only(&gw, client, i).await;
    }
    assert_eq!(up.requests(), seen + 6, "no refused request went upstream");
    counted_as_refusals_of_the_key(&gw).await;
    // A gRPC call is told not to retry (a negative pushback).
    for client in [http2(), http1()] {
        let headers = [
            ("x-tenant-id", "acme-1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        let r = send(&client, "POST", &gw.url("/heavy"), &headers, b"").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("grpc-status"), Some("8"));
        assert_eq!(r.header("grpc-retry-pushback-ms"), Some("-1"));
        assert_eq!(
            r.header("grpc-message"),
            Some("tollgate: this call costs more than policy tenant lets its key hold: refused whenever it comes")
        );
    }
    // The list says which route refuses each; the same override can be set again (its
    // `ttl` renewed), told the same.
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    for one in listed["overrides"].as_array().expect("a list") {
        assert_eq!(
            one["refused_routes"],
            serde_json::json!(["heavy"]),
            "{listed}"
        );
    }
    let url = gw.admin_url("/admin/overrides/tenant/acme-1");
    let again = put_ok(&url, br#"{"burst": 2, "ttl": "1h"}"#).await;
    assert_eq!(again.json()["refused_routes"], serde_json::json!(["heavy"]));
}

/// Tenant `acme-{i + 1}` (its override's burst of 2 below `/heavy`'s cost of 3) through
/// `client`: `/heavy` refused whenever it comes, in both bodies, charging nothing; `/`
/// under the override's 2; a key without an override pays `/heavy` within the policy's 3.
async fn refused_on_heavy_only(gw: &TestGateway, client: &HttpClient, i: usize) {
    let tenant = format!("acme-{}", i + 1);
    let heavy = as_tenant(gw, client, "/heavy", &tenant).await;
    assert_eq!(heavy.status, 429, "{}", heavy.text());
    assert_eq!(heavy.header("retry-after"), None, "no wait admits it");
    let body = heavy.json();
    assert_eq!(body["error"], "cost_above_burst", "{body}");
    assert_eq!(body["policy"], "tenant", "{body}");
    let accept = [
        ("x-tenant-id", tenant.as_str()),
        ("accept", "application/problem+json"),
    ];
    let problem = send(client, "GET", &gw.url("/heavy"), &accept, b"").await;
    assert_eq!(
        problem.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        problem.json()["violated-policies"],
        serde_json::json!(["tenant"])
    );
    // Nothing was charged: the override's 2 are whole on the other route.
    for _ in 0..2 {
        assert_eq!(as_tenant(gw, client, "/", &tenant).await.status, 200);
    }
    let third = as_tenant(gw, client, "/", &tenant).await;
    assert_eq!(
        third.status, 429,
        "the override's burst of 2, not the policy's 3"
    );
    assert_eq!(third.num("x-ratelimit-limit"), 2);
    let other = format!("other-{i}");
    assert_eq!(as_tenant(gw, client, "/heavy", &other).await.status, 200);
}

/// The refusals counted under the key that refused, in the top-keys view and the metrics.
async fn counted_as_refusals_of_the_key(gw: &TestGateway) {
    let top = get(&gw.admin_url("/admin/top?policy=tenant&n=10"), &[])
        .await
        .json();
    let of = |tenant: &str| {
        (top.as_array().expect("a list").iter())
            .find(|k| k["key"] == serde_json::json!([tenant]))
            .cloned()
    };
    for tenant in ["acme-1", "acme-2"] {
        let entry = of(tenant).unwrap_or_else(|| panic!("{tenant} in {top}"));
        // Two on `/heavy` (its form asked twice), one on `/` past the override's 2.
        assert_eq!(
            (&entry["refused"], &entry["admitted"]),
            (&3.into(), &2.into()),
            "{entry}"
        );
    }
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let denied = metrics
        .lines()
        .find(|l| l.contains("route=\"heavy\"") && l.contains("outcome=\"denied\""))
        .unwrap_or_else(|| panic!("heavy's denials in {metrics}"));
    assert!(denied.ends_with(" 4"), "{denied}");
}
