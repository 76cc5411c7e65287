//! An upstream failure the client can bring about is no cheaper than a usage never
//! reported: a success that broke (after bytes or before the first), or a proxy's `504`,
//! Cloudflare's `524` or Envoy's `408` in front of a model that may still run (a generation longer than
//! the proxy waits), settles an
//! unbounded request at `max_cost`, even with `refund_on_upstream_error`, over HTTP/1.1
//! and HTTP/2. A `502` before any byte stays an upstream failure (the refund applies).

use crate::spend::{budget_with, chat, used_reaches};
use crate::support::*;

const MAX_COST: u64 = 50_000;
const MIN_COST: u64 = 3;

/// A chat stream's head and first event, then the connection closed mid-body.
const BROKE_MID_STREAM: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n2d\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n\r\n";
/// A chat stream's head, then the connection closed before any byte of its body.
const BROKE_BEFORE_A_BYTE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
const PROXY_TIMED_OUT: &[u8] =
    b"HTTP/1.1 504 Gateway Timeout\r\ncontent-type: text/plain\r\ncontent-length: 9\r\n\r\ntimed out";
/// Envoy's (an Istio sidecar's) `stream_idle_timeout` passing before the upstream's head.
const ENVOY_STREAM_IDLE: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 14\r\n\r\nstream timeout";
/// Cloudflare's "a timeout occurred": the origin took too long to answer.
const CLOUDFLARE_TIMED_OUT: &[u8] =
    b"HTTP/1.1 524 A Timeout Occurred\r\ncontent-type: text/plain\r\ncontent-length: 9\r\n\r\ntimed out";
const PROXY_BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nbad";

#[tokio::test]
async fn an_unbounded_request_whose_upstream_broke_or_timed_out_pays_max_cost() {
    let extra =
        format!("max_cost = {MAX_COST}\nmin_cost = {MIN_COST}\nrefund_on_upstream_error = true\n");
    let toml = budget_with(10_000_000, &extra).build();
    assert!(toml.contains("refund_on_upstream_error = true"), "{toml}");
    for (answer, status, charged) in [
        (BROKE_MID_STREAM, 200, MAX_COST),
        (BROKE_BEFORE_A_BYTE, 200, MAX_COST),
        (PROXY_TIMED_OUT, 504, MAX_COST),
        (CLOUDFLARE_TIMED_OUT, 524, MAX_COST),
        (ENVOY_STREAM_IDLE, 408, MAX_COST),
        (PROXY_BAD_GATEWAY, 502, MIN_COST),
    ] {
        let up = RawUpstream::start(answer, true).await;
        let gw = TestGateway::start(&toml, &up.url()).await;
        let url = gw.url("/v1/chat/completions");
        for (i, client) in [http1(), http2()].iter().enumerate() {
            // No max_tokens and no row `max_output`: nothing bounds its output.
            let mut body = chat("mini", 6, 0);
            body.as_object_mut().expect("object").remove("max_tokens");
            body["stream"] = true.into();
            let key = format!("{status}-{}-{i}", answer.len());
            let req = http::Request::post(&url)
                .header("content-type", "application/json")
                .header("x-api-key", &key)
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .expect("request");
            let answered = client.request(req).await;
            // A head with nothing after it may never leave the gateway (its HTTP/1.1
            // writer sends the head with the first bytes): the client then has nothing.
            if let (Err(e), BROKE_BEFORE_A_BYTE) = (&answered, answer) {
                eprintln!("broke before a byte, the client told: {e}");
            } else {
                let resp = answered.expect("a head");
                assert_eq!(resp.status(), status);
                // The broken stream's body fails for the client too; the others end.
                let read = http_body_util::BodyExt::collect(resp.into_body()).await;
                assert_eq!(read.is_err(), status == 200, "{status}");
            }
            assert_eq!(used_reaches(&gw, &key, charged).await, charged, "{status}");
        }
    }
}
