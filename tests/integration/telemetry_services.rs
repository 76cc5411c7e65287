//! The rate limit and quota services' spans through the real OTLP receiver of
//! `telemetry.rs`: a rate limit service call's and a quota service report's span, each
//! the child of its metadata's `traceparent`, a refusal naming its policy and the key as
//! a hash.

use crate::support::*;
use crate::telemetry::{traceparent, Receiver, CALLER_TRACE};

/// A gateway of `fixture` whose rate limit service serves `entries` (TOML rules or quota
/// buckets), exporting to a fresh receiver and sampling only what its callers sampled.
async fn traced_service(fixture: Fixture, entries: &str) -> (Receiver, Upstream, TestGateway) {
    let receiver = Receiver::start().await;
    let up = Upstream::start().await;
    let toml = fixture
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\n{entries}\
             [telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\nsample_ratio = 0.0\n",
            receiver.grpc
        ))
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    (receiver, up, gw)
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_traced_rate_limit_service_call_exports_its_span_with_the_refusing_policy() {
    let tenant = Fixture::new().policy("tenant", "header:x-tenant", 1, "1h", 1);
    let rule = "[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n";
    let (receiver, _up, gw) = traced_service(tenant, rule).await;
    let mut client = RlsClient::connect(gw.rls.expect("rls")).await;
    for (i, expected) in ["ok", "over_limit"].iter().enumerate() {
        let trace = format!("{}{i:02x}", &CALLER_TRACE[..30]);
        let mut req = tonic::Request::new(RlsRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("tenant", "acme")])],
            hits_addend: 0,
        });
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        req.metadata_mut()
            .insert("traceparent", caller.parse().expect("ascii"));
        client.call_with(req).await.expect("answered");
        let spans = receiver.trace(&trace, 1).await;
        let a = &spans[0]["attributes"];
        assert_eq!(spans[0]["parent"], "00f067aa0ba902b7");
        assert_eq!(a["rpc.method"], "ShouldRateLimit");
        assert_eq!(a["tollgate.decision"], *expected, "{a}");
        if *expected == "over_limit" {
            assert_eq!(a["tollgate.policy"], "tenant");
            assert!(a["tollgate.retry_after_ms"].as_i64() > Some(0));
            assert!(a["tollgate.key_hash"]
                .as_str()
                .is_some_and(|h| !h.contains("acme")));
        }
    }
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_traced_quota_stream_exports_a_span_per_report() {
    let tenant = Fixture::new().policy("tenant", "header:x-tenant", 10, "1s", 10);
    let bucket =
        "[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\n";
    let (receiver, _up, gw) = traced_service(tenant, bucket).await;
    let caller = traceparent(CALLER_TRACE, "00f067aa0ba902b7", "01");
    let mut stream = RlqsStream::open_with(gw.rls.expect("rls"), Some(&caller)).await;
    let usages = vec![
        usage(&[("tenant", "a")], 1, 0, 0),
        usage(&[("tenant", "b")], 1, 0, 0),
    ];
    assert_eq!(stream.ask("edge", usages).await.len(), 2);
    let spans = receiver.trace(CALLER_TRACE, 1).await;
    let a = &spans[0]["attributes"];
    assert_eq!(spans[0]["parent"], "00f067aa0ba902b7");
    assert_eq!(a["rpc.method"], "StreamRateLimitQuotas");
    assert_eq!(a["tollgate.buckets"], 2);
}
