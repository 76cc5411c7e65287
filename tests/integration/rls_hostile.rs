//! What a caller of the rate limit service can hold: calls parked with their message
//! unsent are bounded (`max_requests` in flight, then RESOURCE_EXHAUSTED at once) and cut
//! at a second (or `body_read_timeout`, when shorter); a message over 4 MiB is refused
//! unread; none of it charges a key or stops the service answering. Driven by a raw
//! HTTP/2 client (the `h2` crate), which sends only what the test tells it to. A value
//! with bytes that are not UTF-8 (a client's header, as Envoy copies it) is keyed as it
//! came, not refused.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use prost::Message;

use crate::support::*;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn toml() -> String {
    Fixture::new()
        .server("max_requests = 2\nbody_read_timeout = \"2s\"")
        .policy("tenant", "header:x-tenant", 3, "1m", 3)
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build()
}

async fn raw_h2(addr: std::net::SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    client
}

fn call_head() -> Request<()> {
    call_head_to(PATH)
}

fn call_head_to(path: &str) -> Request<()> {
    Request::post(format!("http://rls{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

fn framed(message: &[u8]) -> Bytes {
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// The `grpc-status` of an answer's headers (trailers-only) or, failing that, trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    grpc_answer(response).await.0
}

/// The `grpc-status` and `grpc-message` of an answer (trailers-only, or trailers).
async fn grpc_answer(response: h2::client::ResponseFuture) -> (String, String) {
    let field = |map: &http::HeaderMap, name: &str| {
        map.get(name)
            .map_or("none".to_owned(), |v| v.to_str().unwrap_or("?").to_owned())
    };
    let response = response.await.expect("answered");
    if response.headers().contains_key("grpc-status") {
        let head = response.headers();
        return (field(head, "grpc-status"), field(head, "grpc-message"));
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let _ = chunk.expect("body");
    }
    let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
    (
        field(&trailers, "grpc-status"),
        field(&trailers, "grpc-message"),
    )
}

/// The service answers, and tenant `a` has its whole burst of 3: nothing was charged.
async fn nothing_charged(rls: &mut RlsClient) {
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("tenant", "a")])])
            .await
            .codes(),
        [(OK, 2)]
    );
}

#[tokio::test]
async fn parked_calls_are_bounded_then_cut_and_charge_nothing() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&toml(), &up.url()).await;
    let addr = gw.rls.expect("rls");
    let mut client = raw_h2(addr).await;
    // Two calls whose messages never come hold both places.
    let mut parked = Vec::new();
    for _ in 0..2 {
        client = client.ready().await.expect("ready");
        let (response, stream) = client.send_request(call_head(), false).expect("send");
        parked.push((response, stream));
    }
    // The next call is refused at once, whole as it is.
    let started = Instant::now();
    let message = RlsRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(&[("tenant", "a")])],
        hits_addend: 0,
    };
    client = client.ready().await.expect("ready");
    let (response, mut stream) = client.send_request(call_head(), false).expect("send");
    stream
        .send_data(framed(&message.encode_to_vec()), true)
        .expect("data");
    assert_eq!(grpc_status(response).await, "8");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused without waiting"
    );
    // The parked ones are cut at a second (body_read_timeout is 2 s) as INVALID_ARGUMENT.
    for (response, _stream) in parked {
        assert_eq!(grpc_status(response).await, "3");
    }
    // Then the places are free and nothing was charged.
    nothing_charged(&mut RlsClient::connect(addr).await).await;
}

/// A client's long header, copied by Envoy into every descriptor naming it, is decided
/// like any value (an error would be a request let through by an Envoy failing open);
/// only a message past gRPC's own 4 MiB is refused, unread.
#[tokio::test]
async fn a_long_value_in_many_descriptors_is_decided_a_message_over_4_mib_refused_unread() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&toml(), &up.url()).await;
    let addr = gw.rls.expect("rls");
    let long = "x".repeat(60 * 1024);
    let call = |value: &str, n: usize| RlsRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(&[("tenant", value)]); n],
        hits_addend: 0,
    };
    let mut rls = RlsClient::connect(addr).await;
    let decided = rls.call(call(&long, 32)).await.expect("decided");
    assert_eq!(decided.statuses.len(), 32);
    assert_eq!(
        decided.overall_code, 2,
        "32 units of a burst of 3: OVER_LIMIT"
    );
    let huge = "x".repeat(4 * 1024 * 1024);
    let status = rls.call(call(&huge, 1)).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        status.message(),
        "the request message is over 4194304 bytes"
    );
    nothing_charged(&mut rls).await;
}

/// A call's message must follow its head within a second, whatever `body_read_timeout`
/// allows a proxied body (30 s here): Envoy sends both together, and a caller that parks
/// calls holds places Envoy's calls need. Cut as INVALID_ARGUMENT, charging nothing.
#[tokio::test]
async fn a_call_whose_message_does_not_follow_within_a_second_is_cut() {
    let up = Upstream::start().await;
    let toml = toml().replace("body_read_timeout = \"2s\"", "body_read_timeout = \"30s\"");
    assert!(toml.contains("body_read_timeout = \"30s\""), "{toml}");
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let addr = gw.rls.expect("rls");
    let client = raw_h2(addr).await;
    let mut client = client.ready().await.expect("ready");
    let started = Instant::now();
    let (response, _stream) = client.send_request(call_head(), false).expect("send");
    assert_eq!(grpc_status(response).await, "3");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "cut after {took:?}");
    nothing_charged(&mut RlsClient::connect(addr).await).await;
}

/// An Envoy gone without closing its connection (a host cut off, a NAT that dropped the
/// flow) answers nothing: the service's pings find it and close the connection within a
/// ping interval and its timeout (30 s + 10 s), giving back its place among the
/// listener's connections. Not before the first ping is due: an idle Envoy that answers
/// keeps its connection. A raw socket, which acknowledges nothing (an HTTP/2 library
/// would answer the pings by itself).
#[tokio::test]
async fn an_envoy_that_answers_nothing_is_closed_by_the_services_pings() {
    let gw = TestGateway::start(&toml(), "http://127.0.0.1:9").await;
    let rls = gw.rls.expect("[rls] listens");
    let mut silent = tokio::net::TcpStream::connect(rls).await.expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut silent, crate::silent_clients::PREFACE)
        .await
        .expect("preface");
    let took = crate::silent_clients::closed_within(&mut silent, Duration::from_secs(90)).await;
    let took = took.expect("closed within 90 s: pings every 30 s, 10 s to answer");
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(50),
        "closed after {took:?}: a ping at 30 s, 10 s to answer it"
    );
}

/// A descriptor's entries with bytes for strings: what Envoy sends when a client's header
/// carries bytes that are not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawRequest {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(message, repeated, tag = "2")]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawDescriptor {
    #[prost(message, repeated, tag = "1")]
    entries: Vec<RawEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawEntry {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// A value that is not UTF-8 was a decode error (INVALID_ARGUMENT), which Envoy's usual
/// `failure_mode_deny: false` turns into a request let through uncharged: one client byte
/// was a way past the limit. Now it is keyed by its bytes: refused past the burst, a
/// bucket of its own (another byte is another key, and `a` is untouched).
#[tokio::test]
async fn a_value_that_is_not_utf8_is_keyed_by_its_bytes_not_refused() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&toml(), &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let call = |value: &[u8]| {
        tonic::Request::new(RawRequest {
            domain: "edge".into(),
            descriptors: vec![RawDescriptor {
                entries: vec![RawEntry {
                    key: b"tenant".to_vec(),
                    value: value.to_vec(),
                }],
            }],
        })
    };
    let mut codes = Vec::new();
    for _ in 0..4 {
        let answer = rls.call_message(call(b"a\xff")).await.expect("decided");
        codes.push(answer.overall_code);
    }
    assert_eq!(codes, [OK, OK, OK, OVER_LIMIT], "a burst of 3");
    let other = rls.call_message(call(b"a\xfe")).await.expect("decided");
    assert_eq!(other.codes(), [(OK, 2)], "another byte, another key");
    nothing_charged(&mut rls).await;
}

/// The gateway's peak resident memory, in KiB.
fn peak_kib(gw: &Process) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.child.id()));
    let status = status.expect("the gateway's status");
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"));
    let kib = line.expect("VmHWM").trim().trim_end_matches("kB").trim();
    kib.parse().expect("KiB")
}

/// Two million empty descriptors are 4 MB on the wire and ~230 MB decoded: one call took
/// the gateway from 36 to 270 MiB (and a second of CPU) to be told it names too many. They
/// are counted on the wire now, and refused before a struct is made. A call of too many
/// entries in one descriptor, a quota report of too many usages or of an id of too many
/// keys, the same.
#[tokio::test]
async fn a_call_of_millions_of_empty_descriptors_is_refused_before_it_is_decoded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml().replace("{upstream}", "http://127.0.0.1:9")).expect("write");
    let gw = Process::run(&path);
    let mut client = raw_h2(gw.rls.expect("rls")).await;
    let mut nothing_but_descriptors = b"\x0a\x04edge".to_vec();
    nothing_but_descriptors.extend([0x12u8, 0x00].repeat(2_000_000));
    // One descriptor (field 2) of two million empty entries (its field 1).
    let entries = [0x0au8, 0x00].repeat(2_000_000);
    let mut wide = b"\x0a\x04edge\x12".to_vec();
    prost::encoding::encode_varint(entries.len() as u64, &mut wide);
    wide.extend(entries);
    // A quota report (field 2: its usages) of two million empty usages, and one whose
    // usage's id (field 1) has a hundred keys (its field 1, each an entry).
    let mut empty_usages = b"\x0a\x04edge".to_vec();
    empty_usages.extend([0x12u8, 0x00].repeat(2_000_000));
    let mut id = Vec::new();
    for i in 0..100u8 {
        id.extend([0x0a, 0x03, 0x0a, 0x01, i]);
    }
    let mut usage = vec![0x0a];
    prost::encoding::encode_varint(id.len() as u64, &mut usage);
    usage.extend(id);
    let mut wide_id = b"\x0a\x04edge\x12".to_vec();
    prost::encoding::encode_varint(usage.len() as u64, &mut wide_id);
    wide_id.extend(usage);
    let quota_call = call_head_to(tollgate::rlqs::proto::STREAM_RATE_LIMIT_QUOTAS);
    let before = peak_kib(&gw);
    for (head, message, says) in [
        (call_head(), nothing_but_descriptors, "names 2000000"),
        (call_head(), wide, "has 2000000 entries"),
        (quota_call.clone(), empty_usages, "names 2000000"),
        (
            quota_call,
            wide_id,
            "at most 64 keys; one of this report has 100",
        ),
    ] {
        let (response, mut send) = client.send_request(head, false).expect("send");
        send.send_data(framed(&message), true).expect("message");
        let (status, message) = grpc_answer(response).await;
        assert_eq!(status, "3", "INVALID_ARGUMENT: {message}");
        assert!(message.contains(says), "{says}: {message}");
    }
    let grown = peak_kib(&gw).saturating_sub(before);
    assert!(grown < 64 * 1024, "the peak grew by {grown} KiB");
}
