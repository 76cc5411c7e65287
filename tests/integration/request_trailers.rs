//! A client's request trailers stop at the gateway: a trailer arrives after the decision,
//! and tonic merges a unary call's trailers into its metadata whatever the content type,
//! replacing the header, so a trailer `x-tenant-id: acme` behind a header
//! `x-tenant-id: r1` was charged to a fresh key and served as acme. None reaches the
//! upstream — over a raw HTTP/1.1 socket (chunked trailers), raw HTTP/2 (the `h2` crate:
//! a trailing HEADERS frame), on a route that reads the body before the decision, and a
//! gRPC call to tonic, under a gRPC content type or another.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};
use prost::Message as _;
use tokio::net::TcpStream;

use super::grpc::grpc_config;
use super::spellings::start;
use crate::support::*;

/// Trailers a client sends: a key header, what the gateway writes, credentials, a
/// checksum.
const TRAILERS: [(&str, &str); 5] = [
    ("x-api-key", "acme"),
    ("x-forwarded-for", "6.6.6.6"),
    ("x_forwarded_for", "6.6.6.7"),
    ("authorization", "Bearer stolen"),
    ("x-checksum", "abc"),
];

fn assert_no_trailer(up: &Upstream, how: &str) {
    assert_eq!(up.last_trailers(), HeaderMap::new(), "{how}");
}

#[tokio::test]
async fn no_trailer_reaches_the_upstream_over_http1() {
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
    assert_no_trailer(&up, "HTTP/1.1");
    assert!(
        up.last_headers().get("trailer").is_none(),
        "nothing announced"
    );
}

#[tokio::test]
async fn no_trailer_reaches_the_upstream_over_http2() {
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
    assert_no_trailer(&up, "HTTP/2");
}

/// A unary call keyed by `x-tenant-id`, the trailer naming another tenant: the handler
/// reads the tenant the gateway charged — also under a content type that does not say
/// gRPC, which tonic serves all the same.
#[tokio::test]
async fn a_grpc_calls_trailers_never_reach_the_upstream() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &["tenant"]).build(), &up.url()).await;
    let mut frame = vec![0u8];
    let msg = Msg::text("whoami").encode_to_vec();
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    for (i, content_type) in ["application/grpc", "application/x"]
        .into_iter()
        .enumerate()
    {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-tenant-id", HeaderValue::from_static("acme"));
        // No policy keys by it: a name filter would have let it through.
        trailers.insert("x-role", HeaderValue::from_static("admin"));
        let tenant = format!("r{i}");
        let head = Request::post("http://x/test.Echo/Say")
            .header("content-type", content_type)
            .header("te", "trailers")
            .header("x-tenant-id", &tenant)
            .body(())
            .expect("request");
        let (status, body) = h2_with_trailers(gw.addr, head, &frame, trailers).await;
        assert_eq!(status, 200, "{content_type}");
        assert!(body.len() > 5, "{content_type}: a reply message: {body:?}");
        let reply = Msg::decode(&body[5..]).expect("a reply");
        assert_eq!(
            reply.text,
            format!("tenant {tenant} role none"),
            "{content_type}: charged and served as one, no role given after the decision"
        );
    }
}

/// On a route that reads the body before the decision (a `json:` key), the trailers read
/// with it stop at the gateway too. The upstream speaks HTTP/2: to an HTTP/1.1 one, a body
/// read whole goes with a `Content-Length`, which carries no trailers anyway.
#[tokio::test]
async fn no_trailer_read_with_the_body_reaches_the_upstream() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .skipping_policy("per_user", "json:/user", 1)
        .route("body", "/", "api", &["per_user"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let announced = TRAILERS.map(|(name, _)| name).join(", ");
    let body = br#"{"user":"ada"}"#;
    let mut request = format!("POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTrailer: {announced}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n", body.len()).into_bytes();
    request.extend_from_slice(body);
    request.extend_from_slice(b"\r\n0\r\n");
    for (name, value) in TRAILERS {
        request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let (answer, _) = raw(gw.addr, &request).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(
        answer.contains(&format!("with {} body bytes", body.len())),
        "{answer}"
    );
    assert_no_trailer(&up, "read before the decision");
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
