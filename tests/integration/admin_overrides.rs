//! Runtime overrides through the admin API: applied at once keeping what a key used, kept
//! across a reload until their TTL, refused in the config's words, on composite keys and
//! concurrency caps, and waiting inactive while their policy is reloaded away.

use std::time::Duration;

use super::admin::{delete, put_json, put_ok, reload, tenant_config};
use crate::support::*;

/// The `x-ratelimit-limit` and `-remaining` a request of `tenant` sees, and its status.
pub(super) async fn as_tenant(gw: &TestGateway, tenant: &str) -> (u16, u64, u64) {
    let r = get(&gw.url("/"), &[("x-tenant-id", tenant)]).await;
    (
        r.status.as_u16(),
        r.num("x-ratelimit-limit"),
        r.num("x-ratelimit-remaining"),
    )
}

#[tokio::test]
async fn an_override_applies_at_once_and_keeps_what_the_key_used() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    for _ in 0..3 {
        assert_eq!(as_tenant(&gw, "acme").await.0, 200);
    }
    assert_eq!(as_tenant(&gw, "acme").await.0, 429);
    let put = put_ok(
        &gw.admin_url("/admin/overrides/tenant/acme"),
        br#"{"burst": 10}"#,
    )
    .await;
    assert_eq!(put.json()["applied"]["burst"], 10);
    // The next request sees the new burst with the three already used still counted:
    // no amnesty, no reset.
    assert_eq!(as_tenant(&gw, "acme").await, (200, 10, 6));
    assert_eq!(
        as_tenant(&gw, "globex").await,
        (200, 3, 2),
        "other keys keep the policy"
    );
    let limits = get(&gw.admin_url("/admin/limits/tenant/acme"), &[])
        .await
        .json();
    assert_eq!(limits["burst"], 10);
    assert_eq!(limits["remaining"], 6);
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let all = listed["overrides"].as_array().expect("a list");
    assert_eq!(all.len(), 1, "{listed}");
    assert_eq!(all[0]["policy"], "tenant");
    assert_eq!(all[0]["key"][0], "acme");
    assert_eq!(all[0]["set"]["burst"], 10);
    assert_eq!(all[0]["active"], true);
    assert!(
        all[0].get("expires_in_ms").is_none(),
        "no ttl: until deleted"
    );

    let deleted = delete(&gw.admin_url("/admin/overrides/tenant/acme")).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let (_, limit, _) = as_tenant(&gw, "acme").await;
    assert_eq!(limit, 3, "back to the policy's burst");
    let again = delete(&gw.admin_url("/admin/overrides/tenant/acme")).await;
    assert_eq!(again.status, 404);
    assert_eq!(again.json()["error"], "no_override");
}

#[tokio::test]
async fn an_override_survives_a_reload_and_ends_at_its_ttl() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let put = put_ok(
        &gw.admin_url("/admin/overrides/tenant/acme"),
        br#"{"limit": 2, "burst": 10, "ttl": "30s"}"#,
    )
    .await;
    assert_eq!(put.json()["expires_in_ms"], 30_000);
    // A TTL past what milliseconds in 64 bits hold is told as the most they hold, as it
    // is kept, not wrapped around into a short one.
    let forever = put_ok(
        &gw.admin_url("/admin/overrides/tenant/forever"),
        br#"{"limit": 2, "burst": 10, "ttl": "10000000000000000000s"}"#,
    )
    .await;
    assert_eq!(forever.json()["expires_in_ms"], u64::MAX);
    assert_eq!(
        delete(&gw.admin_url("/admin/overrides/tenant/forever"))
            .await
            .status,
        200
    );
    let reloaded = reload(&gw).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    assert_eq!(
        as_tenant(&gw, "acme").await,
        (200, 10, 9),
        "kept across the reload"
    );
    gw.advance(29 * S);
    assert_eq!(
        as_tenant(&gw, "acme").await.1,
        10,
        "still in effect before its ttl"
    );
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    assert_eq!(listed["overrides"][0]["expires_in_ms"], 1_000);
    gw.advance(S);
    assert_eq!(
        as_tenant(&gw, "acme").await.1,
        3,
        "gone at its ttl, to the millisecond"
    );
    let admin = gw.admin_url("/admin/overrides");
    let emptied = eventually_async(Duration::from_secs(20), || async {
        get(&admin, &[]).await.json()["overrides"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    })
    .await;
    assert!(emptied, "an expired override is no longer listed");
}

/// Overrides the admin API refuses: the path after `/admin/overrides/`, the body, the
/// status and what the answer says (the config check's words).
const BAD_OVERRIDES: [(&str, &[u8], u16, &str); 10] = [
    ("nope/acme", br#"{"burst": 5}"#, 404, "unknown_policy"),
    ("tenant/a/b", br#"{"burst": 5}"#, 400, "bad_key"),
    (
        "tenant/acme",
        br#"{"limit": "5"}"#,
        400,
        "a number, not a string",
    ),
    (
        "tenant/acme",
        br#"{"brust": 5}"#,
        400,
        "did you mean `burst`?",
    ),
    (
        "tenant/acme",
        br#"{"burst": 0}"#,
        400,
        "burst must be a whole number of at least 1",
    ),
    (
        "tenant/acme",
        br#"{"period": "soon"}"#,
        400,
        "is not a duration",
    ),
    (
        "tenant/acme",
        br#"{"max_in_flight": 2}"#,
        400,
        "cannot set max_in_flight",
    ),
    (
        "inflight/acme",
        br#"{"limit": 5}"#,
        400,
        "cannot set `limit`",
    ),
    (
        "tenant/acme",
        br#"{"burst": 5, "ttl": "0s"}"#,
        400,
        "ttl must be at least 1s",
    ),
    ("tenant/acme", b"burst=5", 400, "not JSON"),
];

#[tokio::test]
async fn bad_overrides_are_refused_with_the_config_checks_hints() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
        .policy_raw("inflight", "key = \"header:x-tenant-id\"\nmax_in_flight = 2\n")
        .policy_raw("monthly", "key = \"header:x-tenant-id\"\nquota = 100\nwindow = \"month\"\n")
        .route_raw("name = \"heavy\"\npath = \"/heavy\"\nupstream = \"api\"\npolicies = [\"tenant\", \"monthly\"]\ncost = 3\n")
        .route("api", "/", "api", &["tenant", "inflight"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = |p: &str| gw.admin_url(&format!("/admin/overrides/{p}"));
    for (path, body, status, says) in BAD_OVERRIDES {
        let r = put_json(&url(path), None, body).await;
        assert_eq!(
            r.status.as_u16(),
            status,
            "{path} {}: {}",
            String::from_utf8_lossy(body),
            r.text()
        );
        assert!(
            r.text().contains(says),
            "{path} {}: expected {says:?} in {}",
            String::from_utf8_lossy(body),
            r.text()
        );
    }
    // A key part over 1 KiB: what bounds the overrides' memory (here, the file, Redis).
    let long = "k".repeat(1025);
    let r = put_json(&url(&format!("tenant/{long}")), None, br#"{"burst": 5}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "key_too_long");
    assert_eq!(r.json()["max_bytes"], 1024);
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    assert_eq!(
        listed["overrides"],
        serde_json::json!([]),
        "nothing refused was kept"
    );
    let fits = "k".repeat(1024);
    let r = put_json(&url(&format!("tenant/{fits}")), None, br#"{"burst": 5}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Below a route's cost: set as asked (the operator may mean to keep the key off the
    // route), and told which routes refuse it.
    for (path, body) in [
        ("tenant/acme", br#"{"burst": 2}"#),
        ("monthly/acme", br#"{"quota": 2}"#),
    ] {
        let r = put_json(&url(path), None, body).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(
            r.json()["refused_routes"],
            serde_json::json!(["heavy"]),
            "{path}"
        );
    }
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let acme: Vec<_> = (listed["overrides"].as_array().expect("a list").iter())
        .filter(|o| o["key"][0] == "acme")
        .collect();
    assert_eq!(acme.len(), 2, "{listed}");
    for one in acme {
        assert_eq!(one["active"], true, "{one}");
        assert_eq!(one["refused_routes"], serde_json::json!(["heavy"]), "{one}");
    }
}

#[tokio::test]
async fn composite_keys_and_concurrency_caps_take_overrides_too() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw("user", "key = [\"header:x-tenant-id\", \"header:x-user\"]\nlimit = 1\nperiod = \"1s\"\nburst = 2\n")
        .policy_raw("inflight", "key = \"header:x-tenant-id\"\nmax_in_flight = 2\n")
        .route("api", "/", "api", &["inflight", "user"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    put_ok(
        &gw.admin_url("/admin/overrides/user/acme/al%2Fice"),
        br#"{"burst": 7}"#,
    )
    .await;
    put_ok(
        &gw.admin_url("/admin/overrides/inflight/acme"),
        br#"{"max_in_flight": 5}"#,
    )
    .await;
    let alice = get(
        &gw.url("/"),
        &[("x-tenant-id", "acme"), ("x-user", "al/ice")],
    )
    .await;
    assert_eq!(alice.status, 200);
    assert_eq!(
        alice.num("x-ratelimit-limit"),
        7,
        "the composite key's override"
    );
    let bob = get(&gw.url("/"), &[("x-tenant-id", "acme"), ("x-user", "bob")]).await;
    assert_eq!(
        bob.num("x-ratelimit-limit"),
        2,
        "another user of the tenant keeps the policy"
    );
    let limits = get(&gw.admin_url("/admin/limits/inflight/acme"), &[])
        .await
        .json();
    assert_eq!(limits["max_in_flight"], 5);
}

/// A gateway of the tenant policy with tenant `acme`'s burst raised to 10 at run time.
async fn with_acme_raised(up: &Upstream) -> TestGateway {
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    put_ok(
        &gw.admin_url("/admin/overrides/tenant/acme"),
        br#"{"burst": 10}"#,
    )
    .await;
    gw
}

/// Rewrites `gw`'s file to `toml` and reloads it, which must succeed; its answer.
async fn reloaded_with(gw: &TestGateway, up: &Upstream, toml: &str) -> Got {
    gw.rewrite(toml, &up.url());
    let reloaded = reload(gw).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    reloaded
}

#[tokio::test]
async fn an_override_whose_policy_is_reloaded_away_waits_inactive() {
    let up = Upstream::start().await;
    let gw = with_acme_raised(&up).await;
    let without = Fixture::new()
        .policy("other", "header:x-tenant-id", 1, "1s", 3)
        .route("api", "/", "api", &["other"])
        .build();
    reloaded_with(&gw, &up, &without).await;
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let one = &listed["overrides"][0];
    assert_eq!(one["active"], false, "{listed}");
    assert!(
        one["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no policy `tenant`"),
        "{listed}"
    );
    reloaded_with(&gw, &up, &tenant_config("")).await;
    assert_eq!(
        as_tenant(&gw, "acme").await.1,
        10,
        "in effect again with its policy"
    );
}

/// An override names a key by its text; a reload that keys its policy by another source
/// makes the same text another client's key (an `x-api-key` equal to the tenant id the
/// override was raised for): it waits inactive, saying why, instead of following the text.
#[tokio::test]
async fn an_override_set_before_its_policy_was_rekeyed_waits_inactive() {
    let up = Upstream::start().await;
    let gw = with_acme_raised(&up).await;
    assert_eq!(as_tenant(&gw, "acme").await.1, 10, "in effect");
    let rekeyed = Fixture::new()
        .policy("tenant", "header:x-api-key", 1, "1s", 3)
        .route("api", "/", "api", &["tenant"])
        .build();
    let reloaded = reloaded_with(&gw, &up, &rekeyed).await;
    let warnings = reloaded.json()["report"]["warnings"].to_string();
    assert!(
        warnings
            .contains("policy `tenant` is keyed by header:x-api-key now, not header:x-tenant-id"),
        "the reload says so: {warnings}"
    );
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &gw.url("/"), &[("x-api-key", "acme")], b"").await;
        assert_eq!(r.num("x-ratelimit-limit"), 3, "the policy's own burst");
    }
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let one = &listed["overrides"][0];
    assert_eq!(one["active"], false, "{listed}");
    let why = one["problems"][0]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("keyed by header:x-tenant-id") && why.contains("header:x-api-key now"),
        "{listed}"
    );
}
