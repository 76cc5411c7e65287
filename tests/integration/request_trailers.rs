//! A client's request trailers arrive after the decision: none may carry upstream what a
//! policy keyed on, what the gateway wrote (`X-Forwarded-*`) or what is read before the
//! content. tonic merges a unary call's trailers into its metadata, replacing the header,
//! so a trailer `x-tenant-id: acme` behind a header `x-tenant-id: r1` was charged to a
//! fresh key and served as acme. Over a raw HTTP/1.1 socket (chunked trailers), raw
//! HTTP/2 (the `h2` crate: a trailing HEADERS frame) and a gRPC call to tonic.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};
use prost::Message as _;
use tokio::net::TcpStream;

use super::grpc::grpc_config;
use super::spellings::start;
use crate::support::*;

/// What the upstream may not see in a trailer, and one it may.
const TRAILERS: [(&str, &str); 5] = [
    ("x-api-key", "acme"),
    ("x-forwarded-for", "6.6.6.6"),
    ("x_forwarded_for", "6.6.6.7"),
    ("authorization", "Bearer stolen"),
    ("x-checksum", "abc"),
];

fn assert_only_the_checksum(seen: &HeaderMap, how: &str) {
    let names: Vec<&str> = seen.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["x-checksum"], "{how}: {seen:?}");
    assert_eq!(seen["x-checksum"], "abc", "{how}");
}

#[tokio::test]
async fn a_trailer_carries_no_key_header_and_nothing_the_gateway_wrote_over_http1() {
    let (up, gw) = start().await;
    let announced = TRAILERS.map(|(name, _)| name).join(", ");
    let mut request = format!("POST /k/header HTTP/1.1\r\nHost: x\r\nX-Api-Key: r1\r\nTrailer: {announced}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n").into_bytes();
    for (name, value) in TRAILERS {
        request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let (answer, _) = raw(gw.addr, &request).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(answer.contains("with 5 body bytes"), "{answer}");
    assert_eq!(up.last_headers()["x-api-key"], "r1");
    assert_only_the_checksum(&up.last_trailers(), "HTTP/1.1");
}

#[tokio::test]
async fn a_trailer_carries_no_key_header_and_nothing_the_gateway_wrote_over_http2() {
    let (up, gw) = start().await;
    let mut trailers = HeaderMap::new();
    for (name, value) in TRAILERS {
        trailers.insert(name, HeaderValue::from_static(value));
    }
    // The upstream speaks HTTP/1.1: hyper sends it the trailers `Trailer` announces.
    let announced = TRAILERS.map(|(name, _)| name).join(", ");
    let head = Request::post("http://x/k/header")
        .header("x-api-key", "r1")
        .header("trailer", announced)
        .body(())
        .expect("request");
    let (status, body) = h2_with_trailers(gw.addr, head, b"hello", trailers).await;
    assert_eq!(status, 200, "{body:?}");
    assert_eq!(up.last_headers()["x-api-key"], "r1");
    assert_only_the_checksum(&up.last_trailers(), "HTTP/2");
}

/// A unary call keyed by `x-tenant-id`, the trailer naming another tenant: the handler
/// reads the tenant the gateway charged.
#[tokio::test]
async fn a_grpc_calls_trailers_never_reach_the_upstream() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &["tenant"]).build(), &up.url()).await;
    let mut frame = vec![0u8];
    let msg = Msg::text("whoami").encode_to_vec();
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-tenant-id", HeaderValue::from_static("acme"));
    trailers.insert("x-usage", HeaderValue::from_static("1"));
    let head = Request::post("http://x/test.Echo/Say")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-tenant-id", "r1")
        .body(())
        .expect("request");
    let (status, body) = h2_with_trailers(gw.addr, head, &frame, trailers).await;
    assert_eq!(status, 200);
    assert!(body.len() > 5, "a reply message: {body:?}");
    let reply = Msg::decode(&body[5..]).expect("a reply");
    assert_eq!(reply.text, "tenant r1", "charged as r1, served as r1");
}

/// One HTTP/2 request: `head`, `data`, then `trailers` as a trailing HEADERS frame. The
/// status and the answer's body.
async fn h2_with_trailers(
    addr: std::net::SocketAddr,
    head: Request<()>,
    data: &[u8],
    trailers: HeaderMap,
) -> (u16, Bytes) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let (resp, mut stream) = client.send_request(head, false).expect("send");
    stream
        .send_data(Bytes::copy_from_slice(data), false)
        .expect("data");
    stream.send_trailers(trailers).expect("trailers");
    let resp = tokio::time::timeout(std::time::Duration::from_secs(30), resp)
        .await
        .expect("answer in time")
        .expect("response");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut read = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        read.extend_from_slice(&chunk);
    }
    (status, Bytes::from(read))
}
