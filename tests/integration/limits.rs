//! One test per row of the contract's limiter and header rules, through real HTTP.

use crate::support::*;

/// One route, `api` on `/`, under `policies`.
fn api_route(policies: &[&str]) -> Fixture {
    Fixture::new().route("api", "/", "api", policies)
}

/// Each tenant: 3 at once, then one a second.
fn per_tenant() -> String {
    api_route(&["tenant"])
        .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
        .build()
}

#[tokio::test]
async fn burst_then_429_with_remaining_counting_down() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_tenant(), &up.url()).await;
    for expected_remaining in [2, 1, 0] {
        let r = get(&gw.url("/x"), &[("x-tenant-id", "acme")]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.num("x-ratelimit-limit"), 3);
        assert_eq!(r.num("x-ratelimit-remaining"), expected_remaining);
        assert_eq!(r.header("ratelimit-policy"), Some("\"tenant\";q=3;w=3"));
    }
    let denied = get(&gw.url("/x"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("content-type"), Some("application/json"));
    assert_eq!(
        up.requests(),
        3,
        "nothing of a denied request reaches the upstream"
    );
}

#[tokio::test]
async fn retry_after_is_exact_and_rounded_up() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_tenant(), &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    for _ in 0..3 {
        assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    }
    let denied = get(&gw.url("/"), &h).await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.num("retry-after"), 1);
    let body = denied.json();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["policy"], "tenant");
    assert_eq!(body["retry_after_ms"], 1000);
    assert_eq!(denied.num("x-ratelimit-reset"), 3);
    assert_eq!(denied.header("ratelimit"), Some("\"tenant\";r=0;t=3"));

    gw.advance(400 * MS);
    let denied = get(&gw.url("/"), &h).await;
    assert_eq!(denied.json()["retry_after_ms"], 600);
    gw.advance(600 * MS - 1);
    let denied = get(&gw.url("/"), &h).await;
    assert_eq!(
        denied.status, 429,
        "one nanosecond early is still too early"
    );
    assert_eq!(denied.json()["retry_after_ms"], 1, "rounded up, never 0");
    assert_eq!(denied.num("retry-after"), 1);
    gw.advance(1);
    assert_eq!(
        get(&gw.url("/"), &h).await.status,
        200,
        "admitted exactly at now + wait"
    );
}

#[tokio::test]
async fn denials_are_free() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_tenant(), &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    for _ in 0..3 {
        get(&gw.url("/"), &h).await;
    }
    for _ in 0..20 {
        assert_eq!(get(&gw.url("/"), &h).await.status, 429);
    }
    gw.advance(S);
    assert_eq!(
        get(&gw.url("/"), &h).await.status,
        200,
        "hammering did not push recovery away"
    );
    assert_eq!(get(&gw.url("/"), &h).await.status, 429);
}

#[tokio::test]
async fn keys_are_independent() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_tenant(), &up.url()).await;
    for _ in 0..3 {
        get(&gw.url("/"), &[("x-tenant-id", "a")]).await;
    }
    assert_eq!(get(&gw.url("/"), &[("x-tenant-id", "a")]).await.status, 429);
    let other = get(&gw.url("/"), &[("x-tenant-id", "b")]).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.num("x-ratelimit-remaining"), 2);
}

#[tokio::test]
async fn missing_key_modes() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("shared", "header:x-user", 1, "1s", 2)
        .policy_raw(
            "skipped",
            r#"
            key = "header:x-user"
            limit = 1
            period = "1s"
            burst = 1
            missing = "skip"
            "#,
        )
        .policy_raw(
            "rejected",
            r#"
            key = "header:x-user"
            limit = 1
            period = "1s"
            burst = 1
            missing = "reject"
            "#,
        )
        .route("shared", "/shared", "api", &["shared"])
        .route("skip", "/skip", "api", &["skipped"])
        .route("reject", "/reject", "api", &["rejected"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // shared: all anonymous requests draw from one bucket of 2.
    assert_eq!(get(&gw.url("/shared"), &[]).await.status, 200);
    assert_eq!(get(&gw.url("/shared"), &[]).await.status, 200);
    assert_eq!(get(&gw.url("/shared"), &[]).await.status, 429);
    assert_eq!(
        get(&gw.url("/shared"), &[("x-user", "u")]).await.status,
        200,
        "a real key has its own bucket"
    );
    // skip: the tier does not apply at all.
    for _ in 0..5 {
        let r = get(&gw.url("/skip"), &[]).await;
        assert_eq!(r.status, 200);
        assert!(
            r.header("x-ratelimit-limit").is_none(),
            "no tier applied, no headers"
        );
    }
    // reject: 400, nothing forwarded.
    let before = up.requests();
    let r = get(&gw.url("/reject"), &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing_key");
    assert_eq!(up.requests(), before);
}

#[tokio::test]
async fn cost_consumes_units_in_every_tier() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("p", "header:x-user", 1, "1s", 5)
        .route_raw(
            r#"
            name = "heavy"
            path = "/heavy"
            upstream = "api"
            policies = ["p"]
            cost = 2
            "#,
        )
        .route("light", "/light", "api", &["p"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [("x-user", "u")];
    assert_eq!(
        get(&gw.url("/heavy"), &h)
            .await
            .num("x-ratelimit-remaining"),
        3
    );
    assert_eq!(
        get(&gw.url("/heavy"), &h)
            .await
            .num("x-ratelimit-remaining"),
        1
    );
    let denied = get(&gw.url("/heavy"), &h).await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.json()["retry_after_ms"],
        1000,
        "needs one more unit: T"
    );
    // The policy is one limit across both routes.
    assert_eq!(
        get(&gw.url("/light"), &h)
            .await
            .num("x-ratelimit-remaining"),
        0
    );
}

#[tokio::test]
async fn a_later_tier_denial_rolls_back_the_earlier_tiers() {
    let up = Upstream::start().await;
    let toml = api_route(&["tenant", "user"])
        .policy("tenant", "header:x-tenant-id", 10, "1s", 10)
        .policy_raw(
            "user",
            r#"
            key = ["header:x-tenant-id", "header:x-user-id"]
            limit = 1
            period = "2s"
            burst = 1
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let bob = [("x-tenant-id", "acme"), ("x-user-id", "bob")];
    let first = get(&gw.url("/"), &bob).await;
    assert_eq!(first.status, 200);
    for _ in 0..25 {
        let r = get(&gw.url("/"), &bob).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["policy"], "user");
    }
    // The tenant tier saw exactly one admission: 9 remain for another user.
    let alice = get(
        &gw.url("/"),
        &[("x-tenant-id", "acme"), ("x-user-id", "alice")],
    )
    .await;
    assert_eq!(alice.status, 200);
    let admin = get(&gw.admin_url("/admin/limits/tenant/acme"), &[]).await;
    assert_eq!(admin.status, 200);
    assert_eq!(
        admin.json()["remaining"],
        8,
        "two admissions charged, no denial"
    );
}

#[tokio::test]
async fn the_wait_covers_every_tier_and_headers_name_the_longest() {
    let up = Upstream::start().await;
    let toml = api_route(&["fast", "slow"])
        .policy("fast", "header:x-user", 1, "1s", 1)
        .policy("slow", "header:x-user", 1, "5s", 1)
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [("x-user", "u")];
    assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    let denied = get(&gw.url("/"), &h).await;
    assert_eq!(denied.status, 429);
    let body = denied.json();
    assert_eq!(body["policy"], "fast", "the first denying tier");
    assert_eq!(body["retry_after_ms"], 5000, "when every tier admits");
    assert_eq!(denied.num("retry-after"), 5);
    // One list item per enforcing tier; X-RateLimit-* name the longest wait.
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"fast\";q=1;w=1, \"slow\";q=1;w=5")
    );
    assert_eq!(
        denied.header("ratelimit"),
        Some("\"fast\";r=0;t=1, \"slow\";r=0;t=5")
    );
    assert_eq!(denied.num("x-ratelimit-reset"), 5);
    gw.advance(5 * S - 1);
    assert_eq!(get(&gw.url("/"), &h).await.status, 429);
    gw.advance(1);
    assert_eq!(get(&gw.url("/"), &h).await.status, 200);
}

#[tokio::test]
async fn shadow_tiers_count_but_never_deny() {
    let up = Upstream::start().await;
    let toml = api_route(&["trial"])
        .policy_raw(
            "trial",
            r#"
            key = "header:x-user"
            limit = 1
            period = "1s"
            burst = 2
            mode = "shadow"
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for _ in 0..6 {
        assert_eq!(get(&gw.url("/"), &[("x-user", "u")]).await.status, 200);
    }
    assert_eq!(up.requests(), 6);
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("tollgate_decisions_total") && l.contains("outcome=\"shadow_denied\"")
        })
        .expect("shadow counter exported");
    assert!(
        line.ends_with(" 4"),
        "4 of 6 would have been denied: {line}"
    );
}

#[tokio::test]
async fn overrides_give_one_key_its_own_numbers() {
    let up = Upstream::start().await;
    let toml = api_route(&["tenant"])
        .policy_raw(
            "tenant",
            r#"
            key = "header:x-tenant-id"
            limit = 1
            period = "1s"
            burst = 2

            [policies.tenant.overrides]
            "paid" = { burst = 5 }
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let free = get(&gw.url("/"), &[("x-tenant-id", "free")]).await;
    assert_eq!(free.num("x-ratelimit-limit"), 2);
    let paid = get(&gw.url("/"), &[("x-tenant-id", "paid")]).await;
    assert_eq!(paid.num("x-ratelimit-limit"), 5);
    assert_eq!(paid.num("x-ratelimit-remaining"), 4);
}

#[tokio::test]
async fn http2_gets_the_same_answers() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_tenant(), &up.url()).await;
    let client = http2();
    for expected in [200, 200, 200, 429] {
        let r = send(
            &client,
            "GET",
            &gw.url("/h2"),
            &[("x-tenant-id", "h2")],
            b"",
        )
        .await;
        assert_eq!(r.status, expected);
    }
}
