//! What a client's request can make of the spans, and a collector of the exporter: a
//! path of kilobytes and an invented method are bounded in the spans (a batch of them
//! would otherwise outgrow what a collector takes, the honest spans lost with it); two
//! `traceparent`s are none (the first cannot force sampling); a collector at an IPv6
//! address is reached; an export a collector never answers closes its connection.

use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::support::*;
use crate::telemetry::{exporting_nowhere, kind, toml, traced, traceparent, Receiver};

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_clients_long_path_and_invented_method_are_bounded_in_its_spans() {
    let (receiver, _up, gw) = traced("").await;
    let path = format!("/api/{}", "a".repeat(8_000));
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let trace = format!("{:032x}", 0xbad_0000 + i);
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        let tenant = format!("long-{i}");
        let headers = [("x-tenant", tenant.as_str()), ("traceparent", &caller)];
        let r = send(client, "BREWCOFFEE", &gw.url(&path), &headers, b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let spans = receiver.trace(&trace, 2).await;
        let server = kind(&spans, 2);
        let attributes = &server["attributes"];
        let seen = attributes["url.path"].as_str().expect("url.path");
        assert_eq!(seen.len(), 1024, "the path clipped like a log line's");
        assert!(path.starts_with(seen), "its first bytes: {seen}");
        assert_eq!(attributes["http.request.method"], "_OTHER");
        assert_eq!(server["name"], "HTTP /api");
        let client_span = kind(&spans, 3);
        assert_eq!(client_span["name"], "HTTP");
        assert_eq!(client_span["attributes"]["http.request.method"], "_OTHER");
    }
}

#[tokio::test]
async fn two_traceparents_are_none() {
    let up = Upstream::start().await;
    let sampled =
        ["feed", "beef"].map(|t| traceparent(&format!("{t:0>32}"), "00f067aa0ba902b7", "01"));
    for ratio in ["0.0", "1.0"] {
        let gw = exporting_nowhere(&up, &format!("sample_ratio = {ratio}")).await;
        for (i, client) in [http1(), http2()].iter().enumerate() {
            let tenant = format!("two-{ratio}-{i}");
            let headers = [
                ("x-tenant", tenant.as_str()),
                ("traceparent", &sampled[0]),
                ("traceparent", &sampled[1]),
                ("tracestate", "congo=t61rcWkgMzE"),
            ];
            let r = send(client, "GET", &gw.url("/api/x"), &headers, b"").await;
            assert_eq!(r.status, 200);
            let seen = up.last_headers();
            let sent: Vec<&str> = seen
                .get_all("traceparent")
                .iter()
                .map(|v| v.to_str().expect("text"))
                .collect();
            if ratio == "0.0" {
                // Not sampled (the caller's flags count for nothing): the gateway is no
                // hop of the trace, and both pass as they came.
                assert_eq!(sent, [&sampled[0], &sampled[1]], "ratio {ratio}");
            } else {
                // Sampled by the ratio: a trace of its own, the caller's state dropped.
                assert_eq!(sent.len(), 1, "{sent:?}");
                assert!(
                    !sampled.iter().any(|s| s[3..35] == sent[0][3..35]),
                    "{sent:?}"
                );
                assert!(seen.get("tracestate").is_none());
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_collector_at_an_ipv6_address_gets_the_spans_over_both_protocols() {
    let receiver = Receiver::start_on("::1").await;
    let up = Upstream::start().await;
    for (i, (port, protocol)) in [(receiver.grpc, "grpc"), (receiver.http, "http/protobuf")]
        .into_iter()
        .enumerate()
    {
        let telemetry = format!(
            "otlp_endpoint = \"http://[::1]:{port}\"\notlp_protocol = \"{protocol}\"\nsample_ratio = 0.0"
        );
        let gw = TestGateway::start(&toml(&telemetry), &up.url()).await;
        let trace = format!("{:032x}", 0x6_0000 + i);
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        let tenant = format!("v6-{i}");
        let headers = [("x-tenant", tenant.as_str()), ("traceparent", &caller)];
        let r = send(&http1(), "GET", &gw.url("/api/x"), &headers, b"").await;
        assert_eq!(r.status, 200);
        let spans = receiver.trace(&trace, 2).await;
        assert_eq!(
            spans[0]["transport"],
            protocol.split('/').next().unwrap_or("")
        );
    }
}

#[tokio::test]
async fn an_export_a_collector_never_answers_closes_its_connection() {
    let up = Upstream::start().await;
    for protocol in ["http/protobuf", "grpc"] {
        // A collector that takes the connection and its bytes, and never answers.
        let collector = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = collector.local_addr().expect("addr").port();
        let telemetry = format!(
            "otlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"{protocol}\"\nsample_ratio = 1.0"
        );
        let gw = TestGateway::start(&toml(&telemetry), &up.url()).await;
        let r = send(
            &http1(),
            "GET",
            &gw.url("/api/x"),
            &[("x-tenant", protocol)],
            b"",
        )
        .await;
        assert_eq!(r.status, 200);
        let (mut socket, _) = tokio::time::timeout(Duration::from_secs(30), collector.accept())
            .await
            .expect("the export connects")
            .expect("accept");
        // Read (and drop) whatever comes until the gateway closes; past its export's
        // deadline (5 s) and a generous margin, a connection still open is one kept
        // forever. (hyper closes these itself once the export is dropped; the gateway's
        // own bound on a connection's task keeps it so should it not.)
        let closed = tokio::time::timeout(Duration::from_secs(60), async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "{protocol}: the given-up export's connection was closed"
        );
    }
}
