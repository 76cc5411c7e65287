//! Costs settled after the response: reserved at admission, settled exactly from a
//! response header, a trailer, or the bytes of either body. On a fleet's Redis and when the
//! client hangs up: `settle_fleet.rs`.

use std::time::Duration;

use crate::support::*;

/// Tokens per tenant: 60 a minute (T = 1 s), 100 at once, 10 reserved per request,
/// settled by `settle` (with `extra` lines).
pub(super) fn tokens(settle: &str, extra: &str) -> Fixture {
    Fixture::new()
        .policy_raw(
            "tokens",
            format!(
                "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 10\nsettle = \"{settle}\"\n{extra}"
            ),
        )
        .route("api", "/", "api", &["tokens"])
}

/// The tokens tier on the store `store` names (its `[store]` lines): 100 at once and 100
/// an hour (nothing refills during a test), 10 reserved, settled from `x-usage-tokens`.
pub(super) fn hourly_tokens_on(store: String) -> String {
    Fixture::new()
        .store(store)
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 100\nperiod = \"1h\"\nburst = 100\nreserve = 10\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build()
}

pub(super) async fn used(gw: &TestGateway, usage: &str) -> Got {
    get(
        &gw.url("/v1/usage"),
        &[("x-tenant-id", "acme"), ("x-usage", usage)],
    )
    .await
}

/// What `/admin/limits` says is left of the tenant's 100.
pub(super) async fn remaining(gw: &TestGateway, policy: &str) -> u64 {
    let limits = get(&gw.admin_url(&format!("/admin/limits/{policy}/acme")), &[])
        .await
        .json();
    limits["remaining"].as_u64().expect("remaining")
}

#[tokio::test]
async fn a_header_settles_the_difference_and_the_headers_show_it() {
    let up = Upstream::start().await;
    let toml = tokens("response_header:x-usage-tokens", "").build();
    let gw = TestGateway::start(&toml, &up.url()).await;

    // 10 reserved, 30 used: 20 more owed. The answer's headers are the settled state.
    let r = used(&gw, "30").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.num("x-ratelimit-remaining"), 70);
    assert_eq!(r.header("ratelimit"), Some("\"tokens\";r=70;t=30"));
    // 10 reserved, 2 used: 8 given back.
    let r = used(&gw, "2").await;
    assert_eq!(r.num("x-ratelimit-remaining"), 68);
    assert_eq!(remaining(&gw, "tokens").await, 68);
    // A debt beyond the burst: the key waits it off.
    let r = used(&gw, "500").await;
    assert_eq!(r.status, 200, "admitted on its reserve");
    assert_eq!(r.num("x-ratelimit-remaining"), 0);
    let denied = used(&gw, "1").await;
    assert_eq!(denied.status, 429);
    // Owed: 32 + 500 = 532 s; the next reserve of 10 fits once 442 s have passed.
    assert_eq!(denied.json()["retry_after_ms"], 442_000);
    assert_eq!(denied.num("retry-after"), 442);
    gw.advance(442 * S - 1);
    assert_eq!(used(&gw, "1").await.status, 429, "one nanosecond early");
    gw.advance(1);
    assert_eq!(
        used(&gw, "10").await.status,
        200,
        "admitted when the debt is paid"
    );

    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(
        metric(
            &metrics,
            "tollgate_settlements_total{policy=\"tokens\",result=\"debt\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tollgate_settlements_total{policy=\"tokens\",result=\"refund\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tollgate_settlements_total{policy=\"tokens\",result=\"exact\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&metrics, "tollgate_settled_units_sum{policy=\"tokens\"}"),
        542.0
    );
}

#[tokio::test]
async fn missing_invalid_and_capped_values_fall_back_and_are_counted() {
    let up = Upstream::start().await;
    let toml = tokens("response_header:x-usage-tokens", "max_cost = 50\n").build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let plain = get(&gw.url("/v1/usage"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(
        plain.num("x-ratelimit-remaining"),
        90,
        "no value: the reserve"
    );
    assert_eq!(
        used(&gw, "-5").await.num("x-ratelimit-remaining"),
        80,
        "negative: the reserve"
    );
    assert_eq!(
        used(&gw, "1.5").await.num("x-ratelimit-remaining"),
        70,
        "not whole: the reserve"
    );
    assert_eq!(
        used(&gw, "9999").await.num("x-ratelimit-remaining"),
        20,
        "capped at max_cost 50"
    );
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    for (reason, n) in [("missing", 1.0), ("invalid", 2.0), ("capped", 1.0)] {
        let series =
            format!("tollgate_settle_fallbacks_total{{policy=\"tokens\",result=\"{reason}\"}}");
        assert_eq!(metric(&metrics, &series), n, "{series}\n{metrics}");
    }
}

#[tokio::test]
async fn a_trailer_settles_once_the_body_is_done() {
    let up = Upstream::start().await;
    let toml = tokens("response_trailer:x-usage-tokens", "").build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [
        ("x-tenant-id", "acme"),
        ("x-usage", "40"),
        ("te", "trailers"),
    ];
    let r = get(&gw.url("/v1/usage-trailer"), &h).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        90,
        "sent before the cost was known: the reservation"
    );
    assert_eq!(
        up.last_headers().get("te").map(|v| v.as_bytes()),
        Some(&b"trailers"[..]),
        "TE: trailers reaches the upstream"
    );
    let admin = gw.admin_url("/admin/limits/tokens/acme");
    let settled = eventually_async(Duration::from_secs(10), || async {
        get(&admin, &[]).await.json()["remaining"] == 60
    })
    .await;
    assert!(settled, "40 used: 30 more than reserved");
    // The client that asked for trailers gets them.
    let (answer, _) = raw(
        gw.addr,
        b"GET /v1/usage-trailer HTTP/1.1\r\nhost: x\r\nx-tenant-id: globex\r\nx-usage: 7\r\nte: trailers\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.contains("\r\n0\r\nx-usage-tokens: 7\r\n"),
        "{answer}"
    );
    // Without TE: trailers the gateway still asks the upstream for them: the cost is
    // settled all the same, and the client that did not ask gets no trailers.
    let (answer, _) = raw(
        gw.addr,
        b"GET /v1/usage-trailer HTTP/1.1\r\nhost: x\r\nx-tenant-id: acme\r\nx-usage: 40\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("x-usage-tokens"), "{answer}");
    assert_eq!(
        up.last_headers().get("te").map(|v| v.as_bytes()),
        Some(&b"trailers"[..]),
        "asked for trailers although the client did not"
    );
    let settled = eventually_async(Duration::from_secs(10), || async {
        get(&admin, &[]).await.json()["remaining"] == 20
    })
    .await;
    assert!(settled, "40 more used: 20 left, not the reserve's 50");
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(
        metric(
            &metrics,
            "tollgate_settle_fallbacks_total{policy=\"tokens\",result=\"missing\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn bytes_settle_in_units_both_ways() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "download",
            "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 4\nsettle = \"response_bytes\"\nsettle_unit = 1024\n",
        )
        .policy_raw(
            "upload",
            "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 1\nsettle = \"request_bytes\"\nsettle_unit = 1000\n",
        )
        .route("down", "/down", "api", &["download"])
        .route("up", "/up", "api", &["upload"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    let r = get(&gw.url("/down/bytes?n=10240"), &h).await;
    assert_eq!(r.body.len(), 10_240);
    assert_eq!(
        r.num("x-ratelimit-remaining"),
        96,
        "headers carry the reservation"
    );
    let admin = gw.admin_url("/admin/limits/download/acme");
    let settled = eventually_async(Duration::from_secs(10), || async {
        get(&admin, &[]).await.json()["remaining"] == 90
    })
    .await;
    assert!(settled, "10 KiB: 10 units");
    assert_eq!(get(&gw.url("/down/bytes?n=100"), &h).await.status, 200);
    let refunded = eventually_async(Duration::from_secs(10), || async {
        get(&admin, &[]).await.json()["remaining"] == 89
    })
    .await;
    assert!(
        refunded,
        "100 bytes: 1 unit, 3 of the 4 reserved given back"
    );

    let upload: &'static [u8] = &[b'u'; 5_000];
    let r = send(&http1(), "POST", &gw.url("/up/echo"), &h, upload).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let admin = gw.admin_url("/admin/limits/upload/acme");
    let settled = eventually_async(Duration::from_secs(10), || async {
        get(&admin, &[]).await.json()["remaining"] == 95
    })
    .await;
    assert!(settled, "5,000 bytes up: 5 units");
}

#[tokio::test]
async fn concurrent_requests_beyond_the_reserve_are_stopped_at_the_door() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 40\nsettle = \"response_header:x-usage-tokens\"\nmax_cost = 45\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let slow = |gw_url: String| {
        tokio::spawn(async move { get(&gw_url, &[("x-tenant-id", "acme")]).await })
    };
    let first = slow(gw.url("/v1/slow"));
    let second = slow(gw.url("/v1/slow"));
    assert!(
        eventually(Duration::from_secs(20), || up.requests() == 2).await,
        "both in flight"
    );
    let third = used(&gw, "1").await;
    assert_eq!(
        third.status, 429,
        "80 of 100 reserved: another 40 does not fit"
    );
    assert_eq!(up.requests(), 2);
    // The clients give up before the value came back: the measure never arrives
    // because they left, so each settles at max_cost (45), not its reserve (40).
    first.abort();
    second.abort();
    let admin = gw.admin_url("/admin/limits/tokens/acme");
    let metrics = gw.admin_url("/metrics");
    let settled = metric_reaches(
        Duration::from_secs(20),
        &metrics,
        "tollgate_settle_fallbacks_total{policy=\"tokens\",result=\"aborted\"}",
        2.0,
    )
    .await;
    assert!(settled, "both settled as left by their clients");
    assert_eq!(get(&admin, &[]).await.json()["remaining"], 10);
}

#[tokio::test]
async fn a_later_tier_denying_leaves_no_reservation() {
    let up = Upstream::start().await;
    let toml = tokens("response_header:x-usage-tokens", "")
        .policy("strict", "header:x-tenant-id", 1, "1h", 1)
        .route("both", "/both", "api", &["tokens", "strict"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme"), ("x-usage", "30")];
    assert_eq!(get(&gw.url("/both/usage"), &h).await.status, 200);
    assert_eq!(remaining(&gw, "tokens").await, 70);
    for _ in 0..3 {
        assert_eq!(get(&gw.url("/both/usage"), &h).await.status, 429);
    }
    assert_eq!(
        remaining(&gw, "tokens").await,
        70,
        "denied requests reserved nothing"
    );
}

#[tokio::test]
async fn a_failed_upstream_settles_at_the_reserve_or_refunds_when_asked() {
    let dead = dead_port().await;
    let toml = Fixture::new()
        .policy_raw(
            "keep",
            "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 10\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .policy_raw(
            "refund",
            "key = \"header:x-tenant-id\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 10\nsettle = \"response_header:x-usage-tokens\"\nrefund_on_upstream_error = true\nmin_cost = 0\n",
        )
        .route("api", "/", "api", &["keep", "refund"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{dead}")).await;
    let r = get(&gw.url("/v1/usage"), &[("x-tenant-id", "acme")]).await;
    assert_eq!(r.status, 502);
    assert_eq!(remaining(&gw, "keep").await, 90, "settled at the reserve");
    assert_eq!(remaining(&gw, "refund").await, 100, "refunded");

    // An upstream 5xx without the value counts as a failure too.
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml, &up.url()).await;
    let r = get(
        &gw.url("/v1/usage"),
        &[("x-tenant-id", "acme"), ("x-status", "503")],
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(remaining(&gw, "keep").await, 90);
    assert_eq!(remaining(&gw, "refund").await, 100);
    // With the value, the value wins whatever the status.
    let r = get(
        &gw.url("/v1/usage"),
        &[
            ("x-tenant-id", "acme"),
            ("x-status", "500"),
            ("x-usage", "3"),
        ],
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(remaining(&gw, "keep").await, 87);
}
