//! What the headers say is true: the `X-RateLimit-*` triple comes from one tier (its
//! limit, its remaining, its reset) on admissions and refusals alike, a refusal from Redis
//! describes every tier as the request left it, and an HTTP/2 client's cookie crumbs reach
//! an HTTP/1.1 upstream as one `Cookie` line.

use super::redis::on_redis;
use crate::support::*;

/// A token tier (2,000 an hour, 1,500 reserved a request, settled from the upstream's
/// `x-usage-tokens`) and a request tier (10 an hour) on one route.
fn tokens_and_requests() -> String {
    Fixture::new()
        .policy_raw(
            "tokens",
            "key = \"header:x-key\"\nlimit = 2000\nperiod = \"1h\"\nburst = 2000\nreserve = 1500\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .policy("requests", "header:x-key", 10, "1h", 10)
        .route("api", "/", "api", &["tokens", "requests"])
        .build()
}

#[tokio::test]
async fn the_x_ratelimit_triple_comes_from_one_tier() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tokens_and_requests(), &up.url()).await;
    for (client, key) in [(http1(), "one"), (http2(), "two")] {
        let headers = [("x-key", key), ("x-usage", "1500")];
        let first = send(&client, "GET", &gw.url("/v1/usage"), &headers, b"").await;
        assert_eq!(first.status, 200, "{}", first.text());
        // The tightest tier after the settle is the request tier (9 left, against the
        // token tier's 500): its three numbers.
        assert_eq!(first.num("x-ratelimit-limit"), 10, "{:?}", first.headers);
        assert_eq!(first.num("x-ratelimit-remaining"), 9);
        assert_eq!(first.num("x-ratelimit-reset"), 360);
        let refused = send(&client, "GET", &gw.url("/v1/usage"), &headers, b"").await;
        assert_eq!(refused.status, 429, "1,500 reserved, 500 left");
        // The refusing tier, with the longest wait: tokens again, not the requests
        // tier's 9 left.
        assert_eq!(
            refused.num("x-ratelimit-limit"),
            2000,
            "{:?}",
            refused.headers
        );
        assert_eq!(
            refused.num("x-ratelimit-remaining"),
            500,
            "{:?}",
            refused.headers
        );
        // 1,500 of 2,000 used at 1.8 s a token: whole again in 2,700 s.
        assert_eq!(refused.num("x-ratelimit-reset"), 2700);
        let list = refused.header("ratelimit").expect("RateLimit");
        assert!(
            list.contains("\"tokens\";r=500") && list.contains("\"requests\";r=9"),
            "every tier in the list: {list}"
        );
    }
}

#[tokio::test]
async fn http2_cookie_crumbs_reach_an_http1_upstream_as_one_line_and_key_alike() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("session", "cookie:session", 2, "1h", 2)
        .route("api", "/", "api", &["session"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // HTTP/2 crumbs, and the one line an HTTP/1.1 client sends: the upstream sees the same.
    let crumbs = [
        ("cookie", "theme=dark"),
        ("cookie", "session=abc"),
        ("cookie", "lang=en"),
    ];
    let line = [("cookie", "theme=dark; session=abc; lang=en")];
    for (client, cookies) in [(http2(), &crumbs[..]), (http1(), &line[..])] {
        let r = send(&client, "GET", &gw.url("/"), cookies, b"").await;
        assert_eq!(r.status, 200);
        let seen = up
            .seen
            .last_headers
            .lock()
            .expect("lock")
            .clone()
            .expect("headers");
        let lines: Vec<_> = seen.get_all("cookie").iter().collect();
        assert_eq!(
            lines,
            ["theme=dark; session=abc; lang=en"],
            "one Cookie line"
        );
    }
    // Both requests were keyed on the same session: the third is refused.
    let third = send(
        &http2(),
        "GET",
        &gw.url("/"),
        &[("cookie", "session=abc")],
        b"",
    )
    .await;
    assert_eq!(third.status, 429);
}

/// On a refusal from Redis, every tier is described as the request left it: a tier that
/// admitted and was rolled back shows what it still has, not 0.
#[tokio::test]
async fn a_refusal_from_redis_describes_every_tier() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let url = format!("\"{}\"", redis.url());
    let toml = on_redis(&url, "deny", &["tenant", "strict"])
        .policy("tenant", "header:x-tenant-id", 1, "1h", 10)
        .policy("strict", "header:x-tenant-id", 1, "1h", 1)
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    assert_eq!(get(&gw.url("/"), &h).await.status, 200);
    let denied = get(&gw.url("/"), &h).await;
    assert_eq!(denied.status, 429);
    let items = denied.header("ratelimit").expect("RateLimit").to_owned();
    assert!(items.starts_with("\"tenant\";r=9;"), "{items}");
    assert!(items.contains("\"strict\";r=0;"), "{items}");
}

/// A key source that gives one value twice is one tier of that key (its values are
/// distinct), so a refusal by another tier shows the key untouched, not one charge down
/// as a rate limit service call naming one key twice once did (`rls_same_key`): on memory
/// and on Redis, over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_refusal_shows_a_key_given_twice_untouched() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let url = format!("\"{}\"", redis.url());
    let policies = |f: Fixture| {
        f.policy("tenant", "header:x-tenant-id", 1, "1h", 10)
            .policy("strict", "header:x-strict", 1, "1h", 1)
    };
    let memory = policies(Fixture::new())
        .route("api", "/", "api", &["tenant", "strict"])
        .build();
    let on_redis = policies(on_redis(&url, "deny", &["tenant", "strict"])).build();
    for toml in [memory, on_redis] {
        let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
        for (client, key) in [(http1(), "one"), (http2(), "two")] {
            let strict = [("x-strict", key)];
            assert_eq!(
                send(&client, "GET", &gw.url("/"), &strict, b"")
                    .await
                    .status,
                200
            );
            let twice = [
                ("x-tenant-id", key),
                ("x-tenant-id", key),
                ("x-strict", key),
            ];
            let denied = send(&client, "GET", &gw.url("/"), &twice, b"").await;
            assert_eq!(denied.status, 429);
            let items = denied.header("ratelimit").expect("RateLimit").to_owned();
            assert!(items.starts_with("\"tenant\";r=10;t=0, "), "{items}");
        }
    }
}
