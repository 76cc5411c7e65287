//! Under `on_error = "local"`, what a streaming body draws from the local table while
//! Redis cannot be reached is the local table's: the settle in Redis gives none of it
//! back. Redis's key ends charged with what the body moved, over HTTP/1.1 and HTTP/2.
//!
//! The draw must fail without reaching Redis (an unanswered call may still run there
//! later): Redis is frozen until the gateway's breaker opens, so the draw is refused at
//! once, then thawed and the breaker closed before the upstream answers and the settle
//! goes to Redis.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::{mpsc, Semaphore};

use crate::support::*;

/// An upstream that reads a request's whole body, says how many bytes it got, and
/// answers only when let.
struct Held {
    got: mpsc::UnboundedSender<usize>,
    answer: Semaphore,
}

async fn held_answer(
    held: Arc<Held>,
    req: http::Request<Incoming>,
) -> Result<http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    let n = match req.into_body().collect().await {
        Ok(body) => body.to_bytes().len(),
        Err(_) => 0,
    };
    let _ = held.got.send(n);
    if let Ok(permit) = held.answer.acquire().await {
        permit.forget();
    }
    Ok(http::Response::new(Full::new(Bytes::from("done")).boxed()))
}

const KIB: usize = 1024;

/// A [`Held`] upstream: its URL, its gate, and the body sizes it got.
async fn held_upstream() -> (String, Arc<Held>, mpsc::UnboundedReceiver<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = format!("http://{}", listener.local_addr().expect("addr"));
    let (got, got_rx) = mpsc::unbounded_channel();
    let held = Arc::new(Held {
        got,
        answer: Semaphore::new(0),
    });
    drop(serve_all(listener, held.clone(), held_answer));
    (upstream, held, got_rx)
}

#[tokio::test]
async fn units_drawn_locally_while_redis_is_out_are_not_refunded_into_redis() {
    let redis = RedisServer::start();
    let (upstream, held, mut got_rx) = held_upstream().await;
    // 1 KiB a unit, 4 reserved, a draw takes 64 (64 KiB) at a time; T = 6 min: nothing
    // refills while the test runs.
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"local\"\n",
            redis.url()
        ))
        .policy_raw(
            "upload",
            "key = \"header:x-tenant-id\"\nlimit = 10\nperiod = \"1h\"\nburst = 256\nreserve = 4\nsettle = \"request_bytes\"\nsettle_unit = 1024\n",
        )
        .route("api", "/", "api", &["upload"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &upstream).await;
    let metrics = gw.admin_url("/metrics");
    let breaker = "tollgate_store_breaker_open";
    for (round, http2) in [false, true].into_iter().enumerate() {
        let tenant = format!("t{round}");
        let limits = gw.admin_url(&format!("/admin/limits/upload/{tenant}"));
        let remaining = || async { get(&limits, &[]).await.json()["remaining"].as_u64() };
        let (tx, rx) =
            mpsc::unbounded_channel::<Result<hyper::body::Frame<Bytes>, std::io::Error>>();
        let body = http_body_util::StreamBody::new(tokio_stream_of(rx));
        let req = http::Request::post(gw.url("/v1/upload"))
            .header("x-tenant-id", &tenant)
            .body(BodyExt::boxed(body))
            .expect("request");
        let client = stream_client(http2);
        let answered = tokio::spawn(async move { client.request(req).await.map(|r| r.status()) });
        let frame = |n: usize| Ok(hyper::body::Frame::data(Bytes::from(vec![b'u'; n])));
        tx.send(frame(2 * KIB)).expect("first bytes");
        let reserved = eventually_async(Duration::from_secs(20), || async {
            remaining().await == Some(252)
        })
        .await;
        assert!(reserved, "round {round}: the reserve charged in Redis");
        redis.pause();
        let open = metric_reaches(Duration::from_secs(30), &metrics, breaker, 1.0).await;
        assert!(
            open,
            "round {round}: the breaker opens while Redis is frozen"
        );
        // Past the reserve: a draw, refused at once by the open breaker, drawn locally.
        tx.send(frame(4 * KIB)).expect("more bytes");
        drop(tx);
        let n = tokio::time::timeout(Duration::from_secs(30), got_rx.recv())
            .await
            .expect("the body reaches the upstream")
            .expect("a count");
        assert_eq!(n, 6 * KIB, "round {round}: the whole body went through");
        redis.resume();
        let closed = metric_reaches(Duration::from_secs(30), &metrics, breaker, 0.0).await;
        assert!(
            closed,
            "round {round}: the breaker closes once Redis answers"
        );
        held.answer.add_permits(1);
        let status = answered.await.expect("client task").expect("an answer");
        assert_eq!(status, 200, "round {round}");
        // 6 units moved, 4 of them charged in Redis at admission: 2 more owed there, and
        // nothing of the 64 the local table granted comes back out of Redis's key.
        let settled = eventually_async(Duration::from_secs(20), || async {
            remaining().await != Some(252)
        })
        .await;
        let left = remaining().await;
        assert!(settled, "round {round}: settled in Redis ({left:?} left)");
        assert_eq!(left, Some(250), "round {round}: Redis charged what moved");
    }
}

/// The receiving end of `rx` as a stream of body frames.
fn tokio_stream_of<T>(mut rx: mpsc::UnboundedReceiver<T>) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
