//! The rate limit service (RLS v3) through a real gRPC client (tonic): one call is one
//! decision — exact to the burst, every status filled in, a refused call charging no
//! descriptor, `hits_addend` at both levels (0 checks), shadow and unmatched descriptors,
//! the same bucket as a proxied request keyed by the same value, and gRPC errors for
//! what is not a call.

use crate::support::*;

/// `tenant`: 3 a minute; `search`: 1 a minute; `watch`: 1 a minute in shadow mode; a
/// route `/api` keyed like the `tenant` rule.
pub(super) fn rls_toml(unmatched: &str) -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 3, "1m", 3)
        .policy("search", "header:x-tenant", 1, "1m", 1)
        .policy_raw("watch", "key = \"header:x-tenant\"\nlimit = 1\nperiod = \"1m\"\nburst = 1\nmode = \"shadow\"\n")
        .route("api", "/api", "api", &["tenant"])
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\non_unmatched = \"{unmatched}\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", {{ path = \"/v1/search\" }}]\npolicy = \"search\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"watcher\"]\npolicy = \"watch\"\n"
        ))
        .build()
}

pub(super) async fn start(unmatched: &str) -> (Upstream, TestGateway, RlsClient) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&rls_toml(unmatched), &up.url()).await;
    let client = RlsClient::connect(gw.rls.expect("[rls] listens")).await;
    (up, gw, client)
}

pub(super) fn tenant(t: &str) -> RlsDescriptor {
    descriptor(&[("tenant", t)])
}

fn search(t: &str) -> RlsDescriptor {
    descriptor(&[("tenant", t), ("path", "/v1/search")])
}

#[tokio::test]
async fn a_tenant_is_answered_exactly_to_its_burst_with_every_status_field() {
    let (_up, gw, mut rls) = start("ok").await;
    for remaining in [2, 1, 0] {
        let r = rls.ask("edge", vec![tenant("acme")]).await;
        assert_eq!(r.overall_code, OK);
        let s = &r.statuses[0];
        assert_eq!((s.code, s.limit_remaining), (OK, remaining));
        let limit = s.current_limit.as_ref().expect("current_limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("tenant", 3, MINUTE)
        );
        // Back to the full burst: 20 s per request used.
        let reset = s.duration_until_reset.expect("duration_until_reset");
        assert_eq!(reset.seconds, 20 * i64::from(3 - remaining));
        assert_eq!(r.header("ratelimit-policy"), Some("\"tenant\";q=3;w=60"));
        assert_eq!(
            r.header("ratelimit").map(str::to_owned),
            Some(format!(
                "\"tenant\";r={remaining};t={}",
                20 * (3 - remaining)
            ))
        );
        assert_eq!(r.header("retry-after"), None);
    }
    let refused = rls.ask("edge", vec![tenant("acme")]).await;
    assert_eq!(refused.overall_code, OVER_LIMIT);
    assert_eq!(refused.codes(), [(OVER_LIMIT, 0)]);
    assert_eq!(
        refused.statuses[0]
            .duration_until_reset
            .expect("reset")
            .seconds,
        60
    );
    assert_eq!(refused.header("retry-after"), Some("20"));
    assert_eq!(
        refused.metadata("policy"),
        Some(&prost_types::value::Kind::StringValue("tenant".into()))
    );
    assert_eq!(
        refused.metadata("descriptor_index"),
        Some(&prost_types::value::Kind::NumberValue(0.0))
    );
    // Another tenant has its own bucket; the refused one waits exactly its Retry-After.
    assert_eq!(
        rls.ask("edge", vec![tenant("other")]).await.codes(),
        [(OK, 2)]
    );
    gw.advance(20 * S - MS);
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.overall_code,
        OVER_LIMIT
    );
    gw.advance(MS);
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 0)]
    );
}

#[tokio::test]
async fn a_refused_call_charges_none_of_its_descriptors() {
    let (_up, _gw, mut rls) = start("ok").await;
    let first = rls.ask("edge", vec![tenant("acme"), search("acme")]).await;
    assert_eq!(first.codes(), [(OK, 2), (OK, 0)]);
    // `search` refuses: `tenant` answers OK and is left as it was, 2 remaining.
    for _ in 0..5 {
        let refused = rls.ask("edge", vec![tenant("acme"), search("acme")]).await;
        assert_eq!(refused.overall_code, OVER_LIMIT);
        assert_eq!(refused.codes(), [(OK, 2), (OVER_LIMIT, 0)]);
        assert_eq!(
            refused.metadata("descriptor_index"),
            Some(&prost_types::value::Kind::NumberValue(1.0))
        );
        assert_eq!(
            refused.metadata("policy"),
            Some(&prost_types::value::Kind::StringValue("search".into()))
        );
    }
    assert_eq!(
        rls.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 1)]
    );
}

#[tokio::test]
async fn hits_addend_is_the_cost_at_both_levels_and_zero_only_checks() {
    let (_up, _gw, mut rls) = start("ok").await;
    // Per descriptor: 0 checks, as often as asked.
    for _ in 0..10 {
        let check = rls
            .ask("edge", vec![descriptor_costing(&[("tenant", "a")], 0)])
            .await;
        assert_eq!(check.codes(), [(OK, 3)]);
    }
    // The call's own cost applies to descriptors without one.
    let two = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![tenant("a")],
        hits_addend: 2,
    };
    assert_eq!(
        rls.call(two.clone()).await.expect("answered").codes(),
        [(OK, 1)]
    );
    // Over: nothing is left for this call (as envoyproxy/ratelimit says), though one
    // cost-1 request still is — the next call shows it.
    let over = rls.call(two).await.expect("answered");
    assert_eq!(over.codes(), [(OVER_LIMIT, 0)]);
    assert!(over.header("retry-after").is_some(), "a wait helps: told");
    // More than the burst at once: no wait admits it, none is told.
    let never = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![tenant("b")],
        hits_addend: 10,
    };
    let never = rls.call(never).await.expect("answered");
    assert_eq!(never.codes(), [(OVER_LIMIT, 0)]);
    assert_eq!(never.header("retry-after"), None);
    // A descriptor's own cost beats the call's.
    let one = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor_costing(&[("tenant", "a")], 1)],
        hits_addend: 2,
    };
    assert_eq!(rls.call(one).await.expect("answered").codes(), [(OK, 0)]);
    // At zero remaining a check still passes (nothing owed beyond the burst)...
    assert_eq!(
        rls.ask("edge", vec![descriptor_costing(&[("tenant", "a")], 0)])
            .await
            .codes(),
        [(OK, 0)]
    );
    // ... and a refund is only a check: nothing is given back on the caller's word.
    let refund = RlsDescriptor {
        is_negative_hits: true,
        ..descriptor_costing(&[("tenant", "a")], 3)
    };
    assert_eq!(rls.ask("edge", vec![refund]).await.codes(), [(OK, 0)]);
    assert_eq!(
        rls.ask("edge", vec![tenant("a")]).await.overall_code,
        OVER_LIMIT
    );
}

#[tokio::test]
async fn shadow_policies_answer_ok_and_are_counted() {
    let (_up, gw, mut rls) = start("ok").await;
    for _ in 0..3 {
        let r = rls.ask("edge", vec![descriptor(&[("watcher", "w")])]).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].code, OK);
        // No limit Envoy would turn into `X-RateLimit-*` for the client: a shadow
        // policy shows in no answer, as a proxied response's headers never show it.
        assert_eq!(r.statuses[0].current_limit, None);
        assert_eq!(r.statuses[0].duration_until_reset, None);
    }
    // Beside an enforcing descriptor, the headers are the enforcing policy's alone.
    let both = vec![descriptor(&[("watcher", "w")]), tenant("acme")];
    let r = rls.ask("edge", both).await;
    assert_eq!(r.codes(), [(OK, 0), (OK, 2)]);
    assert_eq!(r.statuses[0].current_limit, None);
    assert_eq!(r.header("ratelimit-policy"), Some("\"tenant\";q=3;w=60"));
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    let line = |outcome: &str| {
        format!("tollgate_rls_decisions_total{{domain=\"edge\",policy=\"watch\",outcome=\"{outcome}\"}}")
    };
    assert!(
        metrics.contains(&format!("{} 1\n", line("ok"))),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("{} 3\n", line("shadow_over_limit"))),
        "{metrics}"
    );
}

#[tokio::test]
async fn unmatched_descriptors_pass_uncounted_or_refuse_without_charging() {
    let (_up, _gw, mut rls) = start("ok").await;
    let r = rls
        .ask(
            "edge",
            vec![descriptor(&[("unknown", "x")]), tenant("acme")],
        )
        .await;
    assert_eq!(r.codes(), [(OK, 0), (OK, 2)]);
    assert_eq!(r.statuses[0].current_limit, None);
    let other_domain = rls.ask("elsewhere", vec![tenant("acme")]).await;
    assert_eq!(
        (
            other_domain.overall_code,
            other_domain.statuses[0].current_limit.clone()
        ),
        (OK, None)
    );

    let (_up, _gw, mut strict) = start("over_limit").await;
    for _ in 0..4 {
        let r = strict
            .ask(
                "edge",
                vec![tenant("acme"), descriptor(&[("unknown", "x")])],
            )
            .await;
        assert_eq!(r.overall_code, OVER_LIMIT);
        assert_eq!(r.codes(), [(OK, 3), (OVER_LIMIT, 0)]);
        assert_eq!(
            r.metadata("reason"),
            Some(&prost_types::value::Kind::StringValue("unmatched".into()))
        );
    }
    assert_eq!(
        strict.ask("edge", vec![tenant("acme")]).await.codes(),
        [(OK, 2)]
    );
}

#[tokio::test]
async fn a_proxied_request_and_a_descriptor_of_the_same_tenant_share_one_bucket() {
    let (_up, gw, mut rls) = start("ok").await;
    for h2 in [false, true] {
        let t = if h2 { "h2" } else { "h1" };
        let client = if h2 { http2() } else { http1() };
        assert_eq!(
            send(&client, "GET", &gw.url("/api"), &[("x-tenant", t)], b"")
                .await
                .status,
            200
        );
        assert_eq!(rls.ask("edge", vec![tenant(t)]).await.codes(), [(OK, 1)]);
        assert_eq!(
            send(&client, "GET", &gw.url("/api"), &[("x-tenant", t)], b"")
                .await
                .status,
            200
        );
        assert_eq!(
            rls.ask("edge", vec![tenant(t)]).await.overall_code,
            OVER_LIMIT
        );
        assert_eq!(
            send(&client, "GET", &gw.url("/api"), &[("x-tenant", t)], b"")
                .await
                .status,
            429
        );
    }
}

/// A descriptor without entries is what Envoy sends when its only action is a header
/// skipped as absent: nothing to limit, OK even under `on_unmatched = "over_limit"`, and
/// the call's other descriptors decided and charged as without it. It is no error: an
/// Envoy failing open would let the request pass with nothing charged.
#[tokio::test]
async fn an_empty_descriptor_is_ok_and_the_others_are_decided_as_without_it() {
    for unmatched in ["ok", "over_limit"] {
        let (_up, _gw, mut rls) = start(unmatched).await;
        for remaining in [2, 1, 0] {
            let r = rls.ask("edge", vec![descriptor(&[]), tenant("acme")]).await;
            assert_eq!(r.codes(), [(OK, 0), (OK, remaining)], "{unmatched}");
            assert_eq!(r.statuses[0].current_limit, None);
        }
        let r = rls.ask("edge", vec![tenant("acme"), descriptor(&[])]).await;
        assert_eq!(r.overall_code, OVER_LIMIT, "{unmatched}");
        assert_eq!(r.codes(), [(OVER_LIMIT, 0), (OK, 0)]);
        let alone = rls.ask("edge", vec![descriptor(&[])]).await;
        assert_eq!(alone.codes(), [(OK, 0)], "{unmatched}");
    }
}

#[tokio::test]
async fn what_is_not_a_call_gets_a_grpc_error_that_says_why() {
    let (_up, gw, mut rls) = start("ok").await;
    let no_domain = rls
        .call(RlsRequest {
            domain: String::new(),
            descriptors: vec![tenant("a")],
            hits_addend: 0,
        })
        .await;
    let status = no_domain.expect_err("refused");
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::InvalidArgument, "the call names no domain")
    );
    let too_many = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![tenant("a"); 33],
        hits_addend: 0,
    };
    let status = rls.call(too_many).await.expect_err("refused");
    assert_eq!(
        (status.code(), status.message()),
        (
            tonic::Code::InvalidArgument,
            "a call names at most 32 descriptors; this one names 33"
        )
    );
    // Another method of the listener, and plain HTTP/2 that is no gRPC.
    let url = format!(
        "http://{}/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
        gw.rls.expect("rls")
    );
    let other = send(
        &http2(),
        "POST",
        &url,
        &[("content-type", "application/grpc")],
        &[0, 0, 0, 0, 0],
    )
    .await;
    assert_eq!(
        other
            .headers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap_or("")),
        Some("12")
    );
    let url = format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        gw.rls.expect("rls")
    );
    let junk = send(
        &http2(),
        "POST",
        &url,
        &[("content-type", "application/grpc")],
        &[0, 0, 0, 0, 9, 1, 2],
    )
    .await;
    assert_eq!(
        junk.headers
            .get("grpc-status")
            .map(|v| v.to_str().unwrap_or("")),
        Some("3")
    );
    // Nothing of it was charged, and the service still answers.
    assert_eq!(rls.ask("edge", vec![tenant("a")]).await.codes(), [(OK, 2)]);
}
