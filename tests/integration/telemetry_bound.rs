//! The bound on sampled requests a second (`max_sampled_per_second`), through the real
//! OTLP receiver: a client that marks every request sampled gets half the bound's worth of
//! traces and no more, over HTTP/1.1 and HTTP/2; the rest pass their `traceparent`
//! unchanged, build nothing and are counted. The other half stays for the requests the
//! ratio picks.

use std::time::Duration;

use crate::support::*;
use crate::telemetry::{traced, traceparent};

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_client_marking_every_request_sampled_gets_at_most_the_bound() {
    // The fake clock does not move: the bound's one second's worth is all there is, and
    // what clients ask for has half of it (3 of 6).
    let (receiver, up, gw) = traced("max_sampled_per_second = 6").await;
    let mut sampled = Vec::new();
    for i in 0..10u32 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        let trace = format!("{:032x}", 0xfeed_0000 + u128::from(i));
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        let tenant = format!("t{i}");
        let headers = [("x-tenant", tenant.as_str()), ("traceparent", &caller)];
        let r = send(&client, "GET", &gw.url("/api/x"), &headers, b"").await;
        assert_eq!(r.status, 200, "request {i}");
        let upstream_saw = up.last_headers()["traceparent"]
            .to_str()
            .unwrap()
            .to_owned();
        if upstream_saw != caller {
            assert!(
                upstream_saw.starts_with(&format!("00-{trace}-")),
                "{upstream_saw}"
            );
            sampled.push(trace);
        }
    }
    assert_eq!(
        sampled.len(),
        3,
        "the first three followed, no more: {sampled:?}"
    );
    let over = metric(
        &get(&gw.admin_url("/metrics"), &[]).await.text(),
        "tollgate_telemetry_dropped_total{reason=\"over_rate\"}",
    );
    assert_eq!(over, 7.0, "the seven past the bound counted");
    for trace in &sampled {
        assert_eq!(
            receiver.trace(trace, 2).await.len(),
            2,
            "{trace}: server and client spans"
        );
    }
    let exported = metric_reaches(
        Duration::from_secs(30),
        &gw.admin_url("/metrics"),
        "tollgate_telemetry_spans_exported_total",
        6.0,
    )
    .await;
    assert!(exported, "six spans exported");
    assert_eq!(
        receiver.all().len(),
        6,
        "nothing else reached the collector"
    );
}

/// A flood of requests marked sampled leaves the ratio's picks half the bound: without a
/// collector (a port nothing listens on), read from what the upstream gets — a sampled
/// request's `traceparent` is tollgate's, an unsampled one without its own gets none.
#[tokio::test]
async fn a_flood_marked_sampled_leaves_the_ratios_picks_half_the_bound() {
    let up = Upstream::start().await;
    let more = "sample_ratio = 1.0\nmax_sampled_per_second = 4";
    let gw = crate::telemetry::exporting_nowhere(&up, more).await;
    let mut followed = 0;
    for i in 0..10u32 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        let trace = format!("{:032x}", 0xf100_d000 + u128::from(i));
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        let tenant = format!("flood-{i}");
        let headers = [("x-tenant", tenant.as_str()), ("traceparent", &caller)];
        assert_eq!(
            send(&client, "GET", &gw.url("/api/x"), &headers, b"")
                .await
                .status,
            200
        );
        followed += usize::from(up.last_headers()["traceparent"] != caller.as_str());
    }
    assert_eq!(followed, 2, "the clients' half of 4");
    let mut picked = 0;
    for i in 0..10u32 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        let tenant = format!("plain-{i}");
        let r = send(
            &client,
            "GET",
            &gw.url("/api/x"),
            &[("x-tenant", &tenant)],
            b"",
        )
        .await;
        assert_eq!(r.status, 200);
        picked += usize::from(up.last_headers().contains_key("traceparent"));
    }
    assert_eq!(picked, 2, "the rest of the bound, for the ratio's picks");
}

/// Envoy's tracer passes the sampled flag of the request it asks about to the rate limit
/// service call, and that flag is the request's client's: calls marked sampled take half
/// the bound, as a proxied client's requests do, and leave the other half to the ratio.
/// Counted by `over_rate` (a port nothing listens on; the fake clock stands still).
#[tokio::test]
async fn rate_limit_calls_marked_sampled_take_half_the_bound() {
    let up = Upstream::start().await;
    let dead = free_port();
    let toml = Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n\
             [telemetry]\notlp_endpoint = \"http://127.0.0.1:{dead}\"\nsample_ratio = 0.0\nmax_sampled_per_second = 4\n"
        ))
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut client = RlsClient::connect(gw.rls.expect("rls")).await;
    for i in 0..10u32 {
        let mut req = tonic::Request::new(RlsRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("tenant", &format!("t{i}"))])],
            hits_addend: 0,
        });
        let trace = format!("{:032x}", 0xca11_0000 + u128::from(i));
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        req.metadata_mut()
            .insert("traceparent", caller.parse().expect("ascii"));
        client.call_with(req).await.expect("answered");
    }
    let over = metric(
        &get(&gw.admin_url("/metrics"), &[]).await.text(),
        "tollgate_telemetry_dropped_total{reason=\"over_rate\"}",
    );
    assert_eq!(over, 8.0, "two followed (half of 4), eight past it");
}
