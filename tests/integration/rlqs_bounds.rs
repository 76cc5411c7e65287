//! What one quota stream may make the server keep: a bucket past the stream's bound (in
//! count, or in its ids' bytes), or with an id past 16 KiB, is charged and refused a
//! while, not tracked; buckets whose reports carried no request for a minute make room
//! for new ones, and Envoy is told to abandon them. A stream that sends no report for
//! 30 s ends, giving its place among the listener's streams back.

use crate::rlqs::{open, proxied, start, tenant, two_stream_places};
use crate::support::*;

#[tokio::test]
async fn a_bucket_past_the_streams_bound_is_charged_and_refused_until_stale_ones_go() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let bound = tollgate::rlqs::assign::MAX_BUCKETS_PER_STREAM;
    let mut usages: Vec<Usage> = (0..bound).map(|i| tenant(&format!("t{i}"), 0, 0)).collect();
    usages.push(tenant("past", 20, 0));
    // Answered in several responses, each below the 4 MiB a gRPC client takes.
    envoy.report("edge", usages).await;
    let answers = envoy.next_actions(bound + 1).await;
    assert_eq!(answers.len(), bound + 1);
    assert_eq!(
        answers[bound].told(),
        Told::DenyAll(10),
        "not tracked: refused"
    );
    assert_eq!(
        proxied(&gw, "past").await,
        429,
        "its usage was charged all the same"
    );
    let known = envoy.ask("edge", vec![tenant("t0", 1, 0)]).await;
    assert!(
        matches!(known[0].told(), Told::Bucket(..)),
        "tracked buckets go on"
    );
    // Five minutes on, the buckets no report named since are forgotten: a new one fits.
    gw.advance(301 * S);
    let new = envoy.ask("edge", vec![tenant("newcomer", 1, 0)]).await;
    assert!(
        matches!(new[0].told(), Told::Bucket(..)),
        "{:?}",
        new[0].told()
    );
}

#[tokio::test]
async fn a_token_sized_bucket_id_is_shared_out_and_a_longer_one_charged_and_refused() {
    let (_up, gw) = start().await;
    let mut envoy = open(&gw).await;
    let max = tollgate::rlqs::keys::MAX_BUCKET_ID_BYTES - "tenant".len();
    let token = "t".repeat(2_000);
    let kept = envoy.ask("edge", vec![tenant(&token, 1, 0)]).await;
    assert_eq!(kept[0].told(), Told::Bucket(19, 10, 1, 10));
    let long = "x".repeat(max + 1);
    let refused = envoy.ask("edge", vec![tenant(&long, 20, 0)]).await;
    assert_eq!(refused[0].told(), Told::DenyAll(10));
    assert_eq!(proxied(&gw, &long).await, 429, "charged all the same");
}

/// `[rls]` with one quota bucket entry (10 a second per tenant) and `extra` lines.
fn bounded(extra: &str) -> String {
    Fixture::new()
        .server("body_read_timeout = \"1s\"")
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .route("api", "/api", "api", &["tenant"])
        .raw(format!("[rls]\nlisten = \"127.0.0.1:0\"\n{extra}[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n"))
        .build()
}

/// Every stream's buckets count against the listener's `max_quota_buckets`: past it a new
/// bucket on any stream is charged and refused a while, not tracked; a stream that ends
/// gives its places back.
#[tokio::test]
async fn the_listeners_bound_on_buckets_holds_across_streams() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&bounded("max_quota_buckets = 3\n"), &up.url()).await;
    let mut first = open(&gw).await;
    let both = first
        .ask("edge", vec![tenant("a1", 1, 0), tenant("a2", 1, 0)])
        .await;
    assert!(both.iter().all(|b| matches!(b.told(), Told::Bucket(..))));
    let mut second = open(&gw).await;
    let third = second.ask("edge", vec![tenant("b1", 1, 0)]).await;
    assert!(matches!(third[0].told(), Told::Bucket(..)));
    let past = second.ask("edge", vec![tenant("b2", 20, 0)]).await;
    assert_eq!(past[0].told(), Told::DenyAll(10), "the listener is full");
    assert_eq!(proxied(&gw, "b2").await, 429, "charged all the same");
    let known = first.ask("edge", vec![tenant("a1", 1, 0)]).await;
    assert!(
        matches!(known[0].told(), Told::Bucket(..)),
        "tracked ones go on"
    );
    drop(first);
    // The stream's end reaches the server in its own time: asked until it has.
    let mut freed = false;
    for _ in 0..300 {
        let next = second.ask("edge", vec![tenant("b3", 1, 0)]).await;
        if matches!(next[0].told(), Told::Bucket(..)) {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(freed, "the ended stream's places came back");
}

/// A quota stream opened by a raw HTTP/2 client (which answers nothing on its own).
async fn raw_stream(
    gw: &TestGateway,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    raw_stream_taking(gw, 65_535).await
}

/// [`raw_stream`], its stream taking at most `window` bytes of answers.
async fn raw_stream_taking(
    gw: &TestGateway,
    window: u32,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let tcp = tokio::net::TcpStream::connect(gw.rls.expect("rls"))
        .await
        .expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake(tcp)
        .await
        .expect("h2");
    tokio::spawn(connection);
    let head = http::Request::post(format!(
        "http://rls{}",
        tollgate::rlqs::proto::STREAM_RATE_LIMIT_QUOTAS
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("request");
    let mut client = client.ready().await.expect("ready");
    client.send_request(head, false).expect("send")
}

/// The trailers a stream ends with, its messages read and dropped.
async fn trailers_of(response: h2::client::ResponseFuture) -> http::HeaderMap {
    let response = tokio::time::timeout(std::time::Duration::from_secs(30), response)
        .await
        .expect("answered")
        .expect("head");
    let mut body = response.into_body();
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(chunk) = body.data().await {
            chunk.expect("body");
        }
        body.trailers().await
    })
    .await
    .expect("the stream ended within 30 s")
    .expect("trailers")
    .unwrap_or_default()
}

/// A message begun and never ended holds its bytes; past `body_read_timeout` from its
/// first byte the stream ends `DEADLINE_EXCEEDED`, over a raw HTTP/2 client that sends
/// nothing more.
#[tokio::test]
async fn a_stalled_message_ends_its_stream_at_the_read_timeout() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&bounded(""), &up.url()).await;
    let (response, mut stream) = raw_stream(&gw).await;
    // A frame announcing 100,000 bytes, and ten of them.
    let mut begun = vec![0u8];
    begun.extend_from_slice(&100_000u32.to_be_bytes());
    begun.extend_from_slice(&[7; 10]);
    stream
        .send_data(bytes::Bytes::from(begun), false)
        .expect("data");
    let ended = trailers_of(response).await;
    assert_eq!(
        ended.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"4"[..])
    );
    drop(stream);
}

/// The read timeout is a message's, not a stream's: an Envoy whose reports keep coming,
/// each write ending one message and beginning the next (a stream always holding part
/// of a message), is not cut while every message ends within it.
#[tokio::test]
async fn a_stream_whose_messages_keep_ending_is_never_cut() {
    let up = Upstream::start().await;
    let toml = bounded("").replace("body_read_timeout = \"1s\"", "body_read_timeout = \"3s\"");
    assert!(toml.contains("body_read_timeout = \"3s\""));
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let (response, mut stream) = raw_stream(&gw).await;
    // One report naming its domain, as a gRPC message: 5 bytes of frame, 6 of body.
    let mut message = vec![0u8];
    message.extend_from_slice(&6u32.to_be_bytes());
    message.extend_from_slice(b"\x0a\x04edge");
    let (begin, end) = message.split_at(3);
    stream
        .send_data(bytes::Bytes::copy_from_slice(begin), false)
        .expect("data");
    // Five seconds of reports (past the 3 s timeout), each write ending one message and
    // beginning the next.
    for _ in 0..10 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let next = [end, begin].concat();
        stream
            .send_data(bytes::Bytes::from(next), false)
            .expect("data");
    }
    stream
        .send_data(bytes::Bytes::copy_from_slice(end), true)
        .expect("data");
    let ended = trailers_of(response).await;
    assert_eq!(
        ended.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..]),
        "{ended:?}"
    );
}

/// Envoy names every bucket it caches in every report, used or not: buckets a client made
/// once (a request each, an id of its own) held their places for good, and every new
/// tenant after got `DENY_ALL`. A minute without a request, a full listener (or stream)
/// forgets them to make room and tells Envoy to abandon them; named idle in the same
/// report, they are not let back in.
#[tokio::test]
async fn buckets_unused_for_a_minute_make_room_and_are_abandoned() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&bounded("max_quota_buckets = 3\n"), &up.url()).await;
    let mut envoy = open(&gw).await;
    let made: Vec<Usage> = (0..3).map(|i| tenant(&format!("t{i}"), 1, 0)).collect();
    let answers = envoy.ask("edge", made).await;
    assert!(answers.iter().all(|a| matches!(a.told(), Told::Bucket(..))));
    let refused = envoy.ask("edge", vec![tenant("early", 1, 0)]).await;
    assert_eq!(
        refused[0].told(),
        Told::DenyAll(10),
        "full, all used just now"
    );
    gw.advance(61 * S);
    // A newcomer, then the idle buckets, as Envoy names every bucket it holds.
    let mut named = vec![tenant("newcomer", 1, 0)];
    named.extend((0..3).map(|i| tenant(&format!("t{i}"), 0, 0)));
    let answers = envoy.ask("edge", named).await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(answers[0].tenant(), "newcomer");
    assert!(
        matches!(answers[0].told(), Told::Bucket(..)),
        "{:?}",
        answers[0].told()
    );
    let mut abandoned: Vec<String> = answers[1..]
        .iter()
        .filter(|a| a.told() == Told::Abandon)
        .map(BucketAction::tenant)
        .collect();
    abandoned.sort();
    assert_eq!(abandoned, ["t0", "t1", "t2"], "each abandoned once");
    // Their places are free: two more fit.
    let more = envoy
        .ask("edge", vec![tenant("b1", 1, 0), tenant("b2", 1, 0)])
        .await;
    assert!(more.iter().all(|a| matches!(a.told(), Told::Bucket(..))));
}

/// A stream that never reports would hold one of the listener's places for good, and an
/// Envoy refused a place loses the report it opened its stream with: after 30 s without
/// a whole report a stream ends, while one reporting every 5 s (as Envoy does) goes on.
#[tokio::test]
async fn a_stream_silent_for_30_s_ends_and_gives_its_place_back() {
    let (_up, gw, _) = two_stream_places().await;
    let addr = gw.rls.expect("rls");
    let opened = std::time::Instant::now();
    let mut silent = open(&gw).await;
    let mut reporting = open(&gw).await;
    // The bound is two: a third is refused while the silent one holds its place.
    let third = RlqsStream::try_open(addr, None)
        .await
        .err()
        .map(|s| s.code());
    assert_eq!(third, Some(tonic::Code::ResourceExhausted));
    // A report of no bucket keeps no place: only reports of buckets do.
    silent.report("edge", Vec::new()).await;
    let silent_end = tokio::spawn(async move {
        let limit = std::time::Duration::from_secs(120);
        (silent.next_within(limit).await, opened.elapsed())
    });
    // Reports every 5 s until the silent stream has ended (well past its 30 s).
    let (ended, after) = loop {
        assert_eq!(
            reporting.ask("edge", vec![tenant("a", 0, 0)]).await.len(),
            1
        );
        if silent_end.is_finished() {
            break silent_end.await.expect("joined");
        }
        assert!(
            opened.elapsed() < std::time::Duration::from_secs(120),
            "the silent stream is still open"
        );
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    };
    let status = ended.expect_err("ended with a status");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert_eq!(
        status.message(),
        "no report for 30s: the stream's place is given back"
    );
    assert!(after >= std::time::Duration::from_secs(30), "{after:?}");
    // The reporting stream, open as long, goes on; the silent one's place is free.
    assert_eq!(
        reporting.ask("edge", vec![tenant("a", 0, 0)]).await.len(),
        1
    );
    let mut third = RlqsStream::try_open(addr, None)
        .await
        .expect("a free place");
    assert_eq!(third.ask("edge", vec![tenant("c", 1, 0)]).await.len(), 1);
}

/// A client that sends reports and never takes the answers (its stream's window shut)
/// would hold its stream's place, and the stream's timers, for good: an answer not taken
/// within 10 s ends the stream, and its place is given back — before the 30 s a silent
/// stream gets, since the stream here keeps reporting.
#[tokio::test]
async fn a_stream_whose_answers_are_never_taken_ends_and_gives_its_place_back() {
    let (_up, gw, _) = two_stream_places().await;
    let addr = gw.rls.expect("rls");
    let (_response, mut stalled) = raw_stream_taking(&gw, 0).await;
    // The other place's stream reports as Envoy does, so it keeps its place.
    let mut other = open(&gw).await;
    let started = std::time::Instant::now();
    // A report of a new tenant each, each answered: more answers than the stream queues.
    for i in 0..40 {
        let report = Reports {
            domain: "edge".into(),
            usages: vec![tenant(&format!("t{i}"), 1, 0)],
        };
        let body = prost::Message::encode_to_vec(&report);
        let mut message = vec![0u8];
        message.extend_from_slice(&(body.len() as u32).to_be_bytes());
        message.extend_from_slice(&body);
        stalled
            .send_data(bytes::Bytes::from(message), false)
            .expect("data");
    }
    let reported = std::time::Instant::now();
    let mut opened = None;
    while opened.is_none() && reported.elapsed() < std::time::Duration::from_secs(60) {
        assert_eq!(other.ask("edge", vec![tenant("o", 0, 0)]).await.len(), 1);
        opened = RlqsStream::try_open(addr, None).await.ok();
        if opened.is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
    let after = reported.elapsed();
    assert!(opened.is_some(), "the stalled stream still holds its place");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(9),
        "ended by the send timeout, not at once: {:?}",
        started.elapsed()
    );
    assert!(
        after < std::time::Duration::from_secs(28),
        "ended by the send timeout, before the silent stream's 30 s: {after:?}"
    );
    drop(stalled);
}
