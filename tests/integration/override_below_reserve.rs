//! A runtime override below its policy's reserve: one set while it fitted, then a reload
//! raised the reserve above it. It stays in force — the key reserves its whole (smaller)
//! quota and pays its usage when it settles — instead of being set aside, which gave the
//! key the policy's own quota back (the restriction failed open). On the memory store and
//! on Redis, over HTTP/1.1 and HTTP/2.

use crate::admin::{put_ok, reload};
use crate::support::*;

/// A monthly quota of 100 units per `x-key`, `reserve` reserved a request and settled
/// from the answer's `x-usage-tokens`.
fn plan(store: &str, reserve: u64) -> String {
    Fixture::new()
        .server("workers = 1")
        .store(store)
        .policy_raw(
            "plan",
            format!("key = \"header:x-key\"\nquota = 100\nwindow = \"month\"\nreserve = {reserve}\nsettle = \"response_header:x-usage-tokens\"\n"),
        )
        .route("api", "/", "api", &["plan"])
        .build()
}

/// A call of `key` that reports `usage` units (none: no `x-usage-tokens`).
async fn call(gw: &TestGateway, client: &HttpClient, key: &str, usage: Option<&str>) -> Got {
    let mut headers = vec![("x-key", key)];
    headers.extend(usage.map(|u| ("x-usage", u)));
    send(client, "GET", &gw.url("/v1/usage"), &headers, b"").await
}

/// Units `key` used this month, polled until they are `expected` (a settle may land just
/// after the answer).
async fn used_reaches(gw: &TestGateway, key: &str, expected: u64) -> u64 {
    used_reaches_of(gw, ("plan", key), expected).await
}

async fn an_override_below_a_raised_reserve_stays_in_force(
    gw: &TestGateway,
    up: &Upstream,
    store: &str,
) {
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let (key, other) = (format!("small-{i}"), format!("silent-{i}"));
        for k in [&key, &other] {
            let path = gw.admin_url(&format!("/admin/overrides/plan/{k}"));
            put_ok(&path, br#"{"quota": 6}"#).await;
        }
        gw.rewrite(&plan(store, 10), &up.url());
        let reloaded = reload(gw).await;
        assert_eq!(reloaded.status, 200, "{}", reloaded.text());
        let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
        for one in listed["overrides"].as_array().expect("a list") {
            assert_eq!(one["active"], true, "still in force: {listed}");
        }
        // Reserves its whole quota of 6 (the 10 written could never be taken), and pays
        // what it used; the next needs the 6 free again, as a reserve always does.
        let first = call(gw, client, &key, Some("4")).await;
        assert_eq!(first.status, 200, "{}", first.text());
        assert_eq!(first.num("x-ratelimit-limit"), 6, "the override's quota");
        assert_eq!(used_reaches(gw, &key, 4).await, 4);
        let over = call(gw, client, &key, Some("1")).await;
        assert_eq!(over.status, 429, "the override's 6, not the policy's 100");
        assert!(
            over.text().contains("\"limit\":\"quota\""),
            "{}",
            over.text()
        );
        assert_eq!(over.num("x-ratelimit-remaining"), 2, "{:?}", over.headers);
        // A call whose usage never comes pays the reserve as written, past the quota.
        assert_eq!(call(gw, client, &other, None).await.status, 200);
        assert_eq!(
            used_reaches(gw, &other, 10).await,
            10,
            "the reserve as written"
        );
        assert_eq!(call(gw, client, &other, Some("1")).await.status, 429);
        gw.rewrite(&plan(store, 2), &up.url());
        assert_eq!(reload(gw).await.status, 200);
    }
}

#[tokio::test]
async fn an_override_below_a_raised_reserve_stays_in_force_in_memory() {
    let up = Upstream::start().await;
    let store = "backend = \"memory\"";
    let gw = TestGateway::start(&plan(store, 2), &up.url()).await;
    an_override_below_a_raised_reserve_stays_in_force(&gw, &up, store).await;
}

#[tokio::test]
async fn an_override_below_a_raised_reserve_stays_in_force_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis.store_toml();
    let gw = TestGateway::start_real_clock(&plan(&store, 2), &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    an_override_below_a_raised_reserve_stays_in_force(&gw, &up, &store).await;
}
