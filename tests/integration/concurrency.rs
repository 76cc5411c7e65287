//! Concurrency policies (`max_in_flight`) through real sockets, against an upstream that
//! holds requests until the test lets them go: exactly N through, slots freed by finished,
//! abandoned and failed requests and by a later tier's refusal, WebSockets holding theirs,
//! and waiters admitted in arrival order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::support::*;

pub(super) const WAIT: Duration = Duration::from_secs(20);

/// An upstream that records the path of every request as it arrives, and holds each one
/// until the gate opens.
pub(super) struct GatedUpstream {
    addr: std::net::SocketAddr,
    arrived: Arc<Mutex<Vec<String>>>,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GatedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GatedUpstream {
    pub(super) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let arrived = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = watch::channel(false);
        let seen = arrived.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, gate) = (seen.clone(), gate.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (seen, mut gate) = (seen.clone(), gate.clone());
                        async move {
                            seen.lock().expect("lock").push(req.uri().path().to_owned());
                            let _ = gate.wait_for(|open| *open).await;
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from_static(b"done\n"),
                            )))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            arrived,
            open,
            task,
        }
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(super) fn arrived(&self) -> Vec<String> {
        self.arrived.lock().expect("lock").clone()
    }

    pub(super) fn release(&self) {
        let _ = self.open.send(true);
    }
}

pub(super) fn capped(max: u32, extra: &str) -> String {
    Fixture::new()
        .policy_raw(
            "cap",
            format!("key = \"header:x-key\"\nmax_in_flight = {max}\n{extra}"),
        )
        .route("all", "/", "api", &["cap"])
        .build()
}

/// The slots `key` holds and the requests waiting for one, from the admin API.
pub(super) async fn slots(gw: &TestGateway, key: &str) -> (u64, u64) {
    let j = get(&gw.admin_url(&format!("/admin/limits/cap/{key}")), &[])
        .await
        .json();
    (
        j["in_flight"].as_u64().expect("in_flight"),
        j["waiting"].as_u64().expect("waiting"),
    )
}

async fn n_plus_k(client: HttpClient) {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(3, ""), &up.url()).await;
    let mut requests = Vec::new();
    for i in 0..5 {
        let (client, url) = (client.clone(), gw.url(&format!("/r{i}")));
        requests.push(tokio::spawn(async move {
            send(&client, "GET", &url, &[("x-key", "k")], b"").await
        }));
    }
    // Two are refused at once; three reach the upstream and wait there.
    assert!(
        eventually(WAIT, || up.arrived().len() == 3).await,
        "three requests reach the upstream: {:?}",
        up.arrived()
    );
    assert_eq!(slots(&gw, "k").await, (3, 0));
    up.release();
    let mut answered = Vec::new();
    for r in requests {
        answered.push(r.await.expect("request"));
    }
    let refused: Vec<&Got> = answered.iter().filter(|g| g.status == 429).collect();
    assert_eq!(refused.len(), 2, "exactly two refused");
    assert_eq!(answered.iter().filter(|g| g.status == 200).count(), 3);
    assert_eq!(
        up.arrived().len(),
        3,
        "refused requests never reach the upstream"
    );
    let r = refused[0];
    let body = r.json();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["policy"], "cap");
    assert_eq!(body["limit"], "concurrency");
    assert_eq!(body["retry_after_ms"], 1000);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"cap\";q=3;qu=\"concurrent-requests\"")
    );
    assert_eq!(r.header("ratelimit"), Some("\"cap\";r=0"));
    assert_eq!(
        r.header("x-ratelimit-limit"),
        None,
        "X-RateLimit-* are for rate tiers"
    );
    // Every slot came back: three more fit at once.
    assert!(eventually_async(WAIT, || async { slots(&gw, "k").await == (0, 0) }).await);
    let ok = send(&client, "GET", &gw.url("/after"), &[("x-key", "k")], b"").await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("ratelimit"), Some("\"cap\";r=2"));
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(
        metric(
            &metrics,
            "tollgate_decisions_total{route=\"all\",policy=\"cap\",outcome=\"denied\"}"
        ),
        2.0
    );
}

#[tokio::test]
async fn n_plus_k_requests_at_once_let_exactly_n_through_over_http1() {
    n_plus_k(http1()).await;
}

#[tokio::test]
async fn n_plus_k_requests_at_once_let_exactly_n_through_over_http2() {
    n_plus_k(http2()).await;
}

#[tokio::test]
async fn a_client_that_goes_away_frees_its_slot() {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(1, ""), &up.url()).await;
    let mut raw = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    raw.write_all(b"GET /held HTTP/1.1\r\nHost: x\r\nx-key: k\r\n\r\n")
        .await
        .expect("write");
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    assert_eq!(slots(&gw, "k").await, (1, 0));
    drop(raw);
    assert!(
        eventually_async(WAIT, || async { slots(&gw, "k").await == (0, 0) }).await,
        "the abandoned request's slot is released"
    );
}

#[tokio::test]
async fn a_failed_upstream_frees_the_slot() {
    let dead = dead_port().await;
    let gw = TestGateway::start(&capped(1, ""), &format!("http://{dead}")).await;
    for _ in 0..3 {
        let r = get(&gw.url("/x"), &[("x-key", "k")]).await;
        assert_eq!(
            r.status, 502,
            "each attempt gets the slot and gives it back"
        );
    }
    assert_eq!(slots(&gw, "k").await, (0, 0));
}

#[tokio::test]
async fn a_later_rate_tier_refusing_gives_the_slot_back() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw("cap", "key = \"header:x-key\"\nmax_in_flight = 1\n")
        .policy("rate", "header:x-key", 1, "1h", 1)
        .route("all", "/", "api", &["cap", "rate"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    assert_eq!(get(&gw.url("/a"), &[("x-key", "k")]).await.status, 200);
    for _ in 0..3 {
        let r = get(&gw.url("/b"), &[("x-key", "k")]).await;
        assert_eq!(r.status, 429);
        assert_eq!(
            r.json()["policy"],
            "rate",
            "the rate tier refused, not the cap"
        );
        assert_eq!(
            slots(&gw, "k").await,
            (0, 0),
            "no slot kept by a refused request"
        );
    }
    assert_eq!(up.requests(), 1);
}

#[tokio::test]
async fn a_websocket_holds_its_slot_until_it_closes() {
    let (ws_addr, _task) = websocket_echo().await;
    let toml = Fixture::new()
        .policy_raw("cap", "key = \"ip\"\nmax_in_flight = 1\n")
        .route("ws", "/ws", "api", &["cap"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{ws_addr}")).await;
    let (mut ws, resp) = tokio::time::timeout(
        WAIT,
        tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.addr)),
    )
    .await
    .expect("in time")
    .expect("handshake");
    assert_eq!(resp.status(), 101);
    ws.send(tokio_tungstenite::tungstenite::Message::text("hi"))
        .await
        .expect("send");
    assert!(ws.next().await.is_some(), "echoed through the tunnel");
    let ip_slots = || async {
        get(&gw.admin_url("/admin/limits/cap/127.0.0.1"), &[])
            .await
            .json()["in_flight"]
            .as_u64()
    };
    assert_eq!(ip_slots().await, Some(1), "the tunnel holds the slot");
    let second = get(&gw.url("/ws"), &[]).await;
    assert_eq!(
        second.status, 429,
        "no second request while the tunnel is open"
    );
    ws.close(None).await.expect("close");
    drop(ws);
    assert!(
        eventually_async(WAIT, || async { ip_slots().await == Some(0) }).await,
        "closing the tunnel frees the slot"
    );
}

#[tokio::test]
async fn waiting_requests_are_admitted_in_arrival_order() {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(1, "max_delay = \"30s\""), &up.url()).await;
    let done = Arc::new(AtomicUsize::new(0));
    let spawn = |path: &'static str| {
        let (url, done) = (gw.url(path), done.clone());
        tokio::spawn(async move {
            let r = send(&http1(), "GET", &url, &[("x-key", "k")], b"").await;
            done.fetch_add(1, Ordering::SeqCst);
            r.status
        })
    };
    let first = spawn("/first");
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    let mut queued = Vec::new();
    for (i, path) in ["/second", "/third", "/fourth"].into_iter().enumerate() {
        queued.push(spawn(path));
        // The next one is sent only once this one is in the queue.
        assert!(
            eventually_async(WAIT, || async {
                slots(&gw, "k").await == (1, i as u64 + 1)
            })
            .await,
            "{path} waits for the slot"
        );
    }
    up.release();
    assert_eq!(first.await.expect("first"), 200);
    for q in queued {
        assert_eq!(q.await.expect("queued"), 200, "admitted once its turn came");
    }
    assert_eq!(
        up.arrived(),
        ["/first", "/second", "/third", "/fourth"],
        "the upstream saw them in arrival order"
    );
    assert_eq!(done.load(Ordering::SeqCst), 4);
    assert_eq!(slots(&gw, "k").await, (0, 0));
}

#[tokio::test]
async fn a_wait_longer_than_max_delay_is_refused() {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(1, "max_delay = \"1s\""), &up.url()).await;
    let held = {
        let url = gw.url("/held");
        tokio::spawn(async move { send(&http1(), "GET", &url, &[("x-key", "k")], b"").await })
    };
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    let r = get(&gw.url("/late"), &[("x-key", "k")]).await;
    assert_eq!(r.status, 429, "no slot within max_delay");
    assert_eq!(r.json()["limit"], "concurrency");
    assert_eq!(
        slots(&gw, "k").await,
        (1, 0),
        "the refused waiter left the queue"
    );
    up.release();
    assert_eq!(held.await.expect("held").status, 200);
}

/// HTTP/2: a client that resets its streams (holding slots, or waiting for one) frees
/// them, and its connection stays usable; the slots cannot be pinned by cancelled streams.
#[tokio::test]
async fn reset_http2_streams_free_their_slots_and_leave_the_queue() {
    let up = GatedUpstream::start().await;
    let gw = TestGateway::start(&capped(1, "max_delay = \"30s\""), &up.url()).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let request = |path: &str| {
        Request::get(format!("http://x{path}"))
            .header("x-key", "k")
            .body(())
            .expect("request")
    };
    let (held, mut held_stream) = client.send_request(request("/held"), true).expect("send");
    assert!(eventually(WAIT, || up.arrived().len() == 1).await);
    let (queued, mut queued_stream) = client.send_request(request("/queued"), true).expect("send");
    assert!(
        eventually_async(WAIT, || async { slots(&gw, "k").await == (1, 1) }).await,
        "one held, one waiting"
    );
    // Cancel the waiter, then the holder.
    queued_stream.send_reset(h2::Reason::CANCEL);
    drop(queued);
    assert!(
        eventually_async(WAIT, || async { slots(&gw, "k").await == (1, 0) }).await,
        "the cancelled waiter left the queue"
    );
    held_stream.send_reset(h2::Reason::CANCEL);
    drop(held);
    assert!(
        eventually_async(WAIT, || async { slots(&gw, "k").await == (0, 0) }).await,
        "the cancelled request's slot is free"
    );
    // The same connection still works, and the slot is there to take.
    up.release();
    let (resp, _) = client.send_request(request("/next"), true).expect("send");
    let resp = tokio::time::timeout(WAIT, resp)
        .await
        .expect("in time")
        .expect("response");
    assert_eq!(resp.status(), 200);
    driver.abort();
}
