//! The caller's W3C context kept or dropped: a request sampled with no valid
//! `traceparent` of its caller starts a new trace, and the caller's `tracestate` (which
//! belonged to no trace it can join) is not passed on; over HTTP/1.1 and HTTP/2. No
//! collector is needed: the spans go to a port nothing listens on.

use crate::support::*;

#[tokio::test]
async fn a_new_trace_drops_the_callers_tracestate_a_followed_one_keeps_it() {
    let up = Upstream::start().await;
    let gw = crate::telemetry::exporting_nowhere(&up, "sample_ratio = 1.0").await;
    let state = "congo=t61rcWkgMzE";
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (traceparent, kept) in [
            ("not-a-traceparent", false),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                true,
            ),
        ] {
            let tenant = format!("t-{i}-{traceparent}");
            let headers = [
                ("x-tenant", tenant.as_str()),
                ("traceparent", traceparent),
                ("tracestate", state),
            ];
            let r = send(client, "GET", &gw.url("/api/x"), &headers, b"").await;
            assert_eq!(r.status, 200);
            let seen = up.last_headers();
            let sent = seen["traceparent"].to_str().expect("text").to_owned();
            assert_ne!(
                sent, traceparent,
                "tollgate's span is the upstream's parent"
            );
            assert_eq!(
                seen.get("tracestate").is_some(),
                kept,
                "{traceparent}: upstream got {sent}"
            );
        }
    }
}

#[tokio::test]
async fn the_last_requests_spans_are_exported_before_the_gateway_stops() {
    // A batch lingers a second to fill; at shutdown it goes at once, and shutdown waits
    // for it. To a port nothing listens on, the export fails at once and is counted:
    // what matters is that it was tried before the gateway said it stopped.
    let up = Upstream::start().await;
    let mut gw = crate::telemetry::exporting_nowhere(&up, "sample_ratio = 1.0").await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let tenant = format!("last-{i}");
        let r = send(
            client,
            "GET",
            &gw.url("/api/x"),
            &[("x-tenant", &tenant)],
            b"",
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let shared = gw.gw().shared().clone();
    gw.gateway.take().expect("running").shutdown().await;
    let family = &shared.metrics.telemetry;
    assert_eq!(
        family.exported.get() + family.export_failed.get(),
        4,
        "two requests' server and client spans, sent before shutdown returned"
    );
}
