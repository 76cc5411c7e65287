//! A JSON-RPC batch too large to read whole (past `max_key_body` as sent, streamed
//! without a length, or gzipped small and decoding past it) is refused like one read
//! whole, over HTTP/1.1 and HTTP/2: its calls would otherwise be charged once. A single
//! call as large goes through.

use crate::support::*;
use bytes::Bytes;

fn call(id: usize) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"deploy"}}}}"#)
}

/// A hundred calls: about 8 KB, past the test's `max_key_body` (4 KiB; what is sent
/// whole fits the sockets' buffers, so a refusal before it is read is still read).
fn batch() -> Vec<u8> {
    let calls: Vec<String> = (0..100).map(call).collect();
    format!("[{}]", calls.join(",")).into_bytes()
}

fn gzip(plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(plain).expect("gzip");
    e.finish().expect("gzip")
}

/// `body` POSTed in 4 KiB frames without a declared length.
async fn streamed(client: &StreamClient, url: &str, body: Vec<u8>) -> Got {
    let body = Bytes::from(body);
    let frames = (0..body.len().div_ceil(4096))
        .map(|i| body.slice(i * 4096..body.len().min((i + 1) * 4096)))
        .collect();
    let json = [("content-type", "application/json")];
    post_frames(client, url, &json, frames)
        .await
        .expect("answered")
}

/// A gateway with `server` settings whose route `/mcp` allows each tool (by
/// `json:/params/name`, skipped when absent) one call.
async fn per_tool(server: &str) -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .server(server)
        .skipping_policy("per_tool", "json:/params/name", 1)
        .route("mcp", "/mcp", "api", &["per_tool"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    (up, gw)
}

fn refused_as_a_batch(r: &Got, how: &str) {
    assert_eq!(r.status, 400, "{how}: {}", r.text());
    assert_eq!(r.json()["error"]["data"]["error"], "jsonrpc_batch", "{how}");
}

#[tokio::test]
async fn a_batch_too_large_to_read_whole_is_refused_however_it_comes() {
    let (up, gw) = per_tool("max_key_body = 4096").await;
    let url = gw.url("/mcp");
    let json = [("content-type", "application/json")];
    let gzipped = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    for client in [http1(), http2()] {
        let sent = send_bytes(&client, "POST", &url, &json, Bytes::from(batch())).await;
        refused_as_a_batch(&sent, "with its length");
        let small = Bytes::from(gzip(&batch()));
        assert!(small.len() < 4096, "{} bytes gzipped", small.len());
        let sent = send_bytes(&client, "POST", &url, &gzipped, small).await;
        refused_as_a_batch(&sent, "gzipped");
    }
    for h2 in [false, true] {
        let sent = streamed(&stream_client(h2), &url, batch()).await;
        refused_as_a_batch(&sent, "streamed");
    }
    assert_eq!(up.requests(), 0, "no batch reached the upstream");
    // One call as large is no batch: it goes through (a tool of its own each time).
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let padded = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"tool-{i}","pad":"{}"}}}}"#,
            "x".repeat(8_000)
        );
        let sent = send_bytes(client, "POST", &url, &json, Bytes::from(padded)).await;
        assert_eq!(sent.status, 200, "{}", sent.text());
    }
    assert_eq!(up.requests(), 2);
}

/// What trails a body's first JSON value is not read by Go's `json.Decoder` (gin, echo,
/// many MCP servers) or Jackson (Spring): `[{call},{call}] {}` is served as the batch
/// and `{call} x` as the call. Both are read here as those upstreams read them: the batch
/// refused, the call keyed by its tool (a spent tool refused, not let through as a body
/// with no key), over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn what_trails_the_first_json_value_hides_no_batch_and_no_key() {
    let (_up, gw) = per_tool("").await;
    let url = gw.url("/mcp");
    let json = [("content-type", "application/json")];
    for client in [http1(), http2()] {
        let trailing_batch = format!("[{},{}] {{}}", call(1), call(2));
        let r = send_bytes(&client, "POST", &url, &json, Bytes::from(trailing_batch)).await;
        refused_as_a_batch(&r, "a batch with a value after it");
    }
    let first = send_bytes(&http1(), "POST", &url, &json, Bytes::from(call(1))).await;
    assert_eq!(first.status, 200, "{}", first.text());
    for (client, how) in [(http1(), "HTTP/1.1"), (http2(), "HTTP/2")] {
        for tail in [" x", "{}", r#"{"params":{"name":"free"}}"#] {
            let body = format!("{}{tail}", call(2));
            let r = send_bytes(&client, "POST", &url, &json, Bytes::from(body)).await;
            assert_eq!(
                r.status,
                429,
                "{how} {tail:?}: deploy is spent: {}",
                r.text()
            );
        }
    }
}
