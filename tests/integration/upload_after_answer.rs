//! An upload its upstream answered before reading it all (a 401, an early 200) ends with
//! the answer: the request's concurrency slot, `max_requests` place and in-flight count
//! go back when the answer is over, so the upstream connection must too — not stay busy
//! forwarding a body its client trickles a frame at a time, inside `body_read_timeout`,
//! for as long as it likes. Over HTTP/1.1 and HTTP/2.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::mpsc;

use crate::support::*;

/// An upstream that answers at once and reads the request's body after, telling how its
/// read ended: `true` when the body ended, `false` when it was cut.
async fn early_answer(
    ended: Arc<mpsc::UnboundedSender<bool>>,
    req: http::Request<Incoming>,
) -> Result<http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    let mut body = req.into_body();
    tokio::spawn(async move {
        let whole = loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(_)) => break false,
                None => break true,
            }
        };
        let _ = ended.send(whole);
    });
    Ok(http::Response::new(Full::new(Bytes::from("early")).boxed()))
}

#[tokio::test]
async fn an_upload_answered_early_ends_with_its_answer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = format!("http://{}", listener.local_addr().expect("addr"));
    let (ended, mut ended_rx) = mpsc::unbounded_channel();
    drop(serve_all(listener, Arc::new(ended), early_answer));
    // One upstream connection: a body held on it would keep every other request out.
    let toml = Fixture::new()
        .upstream("api", "max_connections = 1\ntimeout = \"5s\"")
        .route("api", "/", "api", &[])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &upstream).await;
    for http2 in [false, true] {
        let (tx, mut rx) =
            mpsc::unbounded_channel::<Result<hyper::body::Frame<Bytes>, std::io::Error>>();
        let frames = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let req = http::Request::post(gw.url("/v1/upload"))
            .body(BodyExt::boxed(http_body_util::StreamBody::new(frames)))
            .expect("request");
        let frame = || Ok(hyper::body::Frame::data(Bytes::from(vec![b'u'; 1024])));
        tx.send(frame()).expect("first bytes");
        let client = stream_client(http2);
        let resp = client.request(req).await.expect("an answer");
        assert_eq!(resp.status(), 200, "http2 {http2}");
        let text = resp
            .into_body()
            .collect()
            .await
            .expect("its body")
            .to_bytes();
        assert_eq!(&text[..], b"early", "http2 {http2}");
        // The client goes on sending, a frame every 200 ms (well inside
        // `body_read_timeout`), for up to 30 s while the upstream's read is watched.
        let mut cut = None;
        for _ in 0..150 {
            if let Ok(whole) = ended_rx.try_recv() {
                cut = Some(!whole);
                break;
            }
            let _ = tx.send(frame());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            cut,
            Some(true),
            "http2 {http2}: the upload was cut with the answer"
        );
        let next = get(&gw.url("/v1/next"), &[]).await;
        assert_eq!(
            next.status, 200,
            "http2 {http2}: the upstream connection is free"
        );
        let its_read = tokio::time::timeout(Duration::from_secs(10), ended_rx.recv()).await;
        assert_eq!(
            its_read.ok().flatten(),
            Some(true),
            "the GET's empty body ends whole"
        );
    }
}
