//! A sampled request's spans end with its response body, through the real OTLP receiver:
//! an answer the upstream holds back mid-body while the gateway's (fake) clock moves ends
//! its server and client spans exactly that much after they started, over HTTP/1.1 and
//! HTTP/2, whether the client reads it to the end or hangs up mid-body; a client that
//! hangs up before any answer ends them as it leaves, status 499.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::support::*;
use crate::telemetry::{kind, traced, traceparent};

fn lasted_ns(span: &Value) -> u64 {
    let (start, end) = (span["start"].as_u64(), span["end"].as_u64());
    end.zip(start).map(|(e, s)| e - s).expect("start and end")
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_streamed_answers_spans_end_with_its_body() {
    let (receiver, up, gw) = traced("").await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for hang_up in [false, true] {
            let n = 2 * i + usize::from(hang_up);
            let trace = format!("{:032x}", 0xd219_0000 + n);
            let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
            let req = Request::get(gw.url("/api/drip"))
                .header("x-tenant", format!("tenant-{n}"))
                .header("traceparent", caller)
                .body(Full::new(Bytes::new()))
                .expect("request");
            let asked = tokio::time::timeout(Duration::from_secs(60), client.request(req));
            let resp = asked.await.expect("a head within 60 s").expect("answered");
            assert_eq!(resp.status(), 200, "request {n}");
            // The head is out and the upstream holds the body's end back: time passes.
            let held_s = 5 + n as u64;
            gw.advance(held_s * S);
            let body = if hang_up {
                drop(resp);
                up.seen.release.notify_one();
                None
            } else {
                up.seen.release.notify_one();
                let read = tokio::time::timeout(Duration::from_secs(60), resp.collect());
                Some(
                    read.await
                        .expect("the body within 60 s")
                        .expect("body")
                        .to_bytes(),
                )
            };
            if !hang_up {
                assert_eq!(body.as_deref(), Some(&b"first last"[..]), "request {n}");
            }
            let spans = receiver.trace(&trace, 2).await;
            let (server, upstream_call) = (kind(&spans, 2), kind(&spans, 3));
            assert_eq!(
                lasted_ns(server),
                held_s * S,
                "request {n} (hung up: {hang_up}): the server span covers the body: {server}"
            );
            assert_eq!(
                lasted_ns(upstream_call),
                held_s * S,
                "request {n}: the upstream call's span covers its body: {upstream_call}"
            );
            assert_eq!(server["attributes"]["http.response.status_code"], 200);
        }
    }
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_client_that_hangs_up_before_the_answer_still_ends_its_spans() {
    let (receiver, up, gw) = traced("").await;
    let trace = format!("{:032x}", 0x4990_0000u32);
    let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
    let url = gw.url("/api/slow");
    let waiting = tokio::spawn(async move {
        let headers = [("x-tenant", "leaver"), ("traceparent", caller.as_str())];
        send(&http2(), "GET", &url, &headers, b"").await;
    });
    let forwarded = eventually(Duration::from_secs(20), || up.requests() == 1).await;
    assert!(forwarded, "the call reaches the upstream");
    gw.advance(3 * S);
    waiting.abort();
    let spans = receiver.trace(&trace, 2).await;
    let (server, upstream_call) = (kind(&spans, 2), kind(&spans, 3));
    assert_eq!(lasted_ns(upstream_call), 3 * S, "{upstream_call}");
    assert_eq!(server["attributes"]["http.response.status_code"], 499);
    assert_eq!(server["attributes"]["tollgate.decision"], "admitted");
    assert_eq!(
        lasted_ns(server),
        3 * S,
        "ended as the client left: {server}"
    );
}
