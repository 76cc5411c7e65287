//! The per-worker upstream pool, seen from a real upstream that counts its connections:
//! keep-alive reuse, connections the upstream closes, bodies dropped half-way, the idle
//! timeout and idle cap, and pools kept across reloads. One worker, so one pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// A hand-written HTTP/1.1 upstream, so it can close connections exactly when a test
/// wants: `/close` answers with `Connection: close`, `/drop` answers and then closes
/// without saying so, `/slow` answers after 500 ms, `/big` streams 8 MiB; anything else
/// answers `ok`. Requests are GETs without a body.
struct CountingUpstream {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CountingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const BIG: usize = 8 << 20;

impl CountingUpstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (a, c) = (accepted.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                tokio::spawn(async move {
                    serve(stream).await;
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            addr,
            accepted,
            closed,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    fn open(&self) -> usize {
        self.accepted() - self.closed()
    }
}

/// Serves one connection until the peer closes it or a path asks to close.
async fn serve(mut stream: TcpStream) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
        let written = match path.as_str() {
            "/close" => {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                    )
                    .await;
                return;
            }
            "/drop" => {
                let _ = stream.write_all(ok).await;
                return;
            }
            "/slow" => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                stream.write_all(ok).await
            }
            "/big" => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n");
                let mut result = stream.write_all(head.as_bytes()).await;
                let chunk = vec![b'x'; 64 * 1024];
                for _ in 0..BIG / chunk.len() {
                    if result.is_err() {
                        break;
                    }
                    result = stream.write_all(&chunk).await;
                }
                result
            }
            _ => stream.write_all(ok).await,
        };
        if written.is_err() {
            return;
        }
    }
}

fn one_worker(upstream_extra: &str) -> String {
    Fixture::new()
        .server("workers = 1")
        .upstream("api", upstream_extra)
        .route("all", "/", "api", &[])
        .build()
}

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn keep_alive_requests_reuse_upstream_connections() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker(""), &up.url()).await;
    let client = http1();
    for i in 0..20 {
        let r = send(&client, "GET", &gw.url(&format!("/r{i}")), &[], b"").await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        up.accepted(),
        1,
        "20 requests one after another over one client connection use one upstream connection"
    );

    // Four clients at once: at most one upstream connection each, not one per request.
    let mut clients = Vec::new();
    for c in 0..4 {
        let url = gw.url(&format!("/c{c}"));
        clients.push(tokio::spawn(async move {
            let client = http1();
            for _ in 0..10 {
                assert_eq!(send(&client, "GET", &url, &[], b"").await.status, 200);
            }
        }));
    }
    for c in clients {
        c.await.expect("client");
    }
    let accepted = up.accepted();
    assert!(
        accepted <= 5,
        "40 more requests from 4 clients opened {} more upstream connections",
        accepted - 1
    );
}

#[tokio::test]
async fn a_connection_the_upstream_closes_is_not_reused() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker(""), &up.url()).await;
    let client = http1();

    // Announced: `Connection: close` means the next request needs a new connection.
    assert_eq!(
        send(&client, "GET", &gw.url("/close"), &[], b"")
            .await
            .status,
        200
    );
    assert_eq!(
        send(&client, "GET", &gw.url("/next"), &[], b"")
            .await
            .status,
        200
    );
    assert_eq!(up.accepted(), 2);

    // Unannounced: the upstream answers, then closes. Once the gateway has seen the
    // close (its pooled connection is gone), the next request opens a new one.
    assert_eq!(
        send(&client, "GET", &gw.url("/drop"), &[], b"")
            .await
            .status,
        200
    );
    assert!(eventually(WAIT, || up.closed() >= 2).await);
    let metrics = gw.admin_url("/metrics");
    let series = "tollgate_upstream_connections{upstream=\"api\"}";
    assert!(
        metric_reaches(WAIT, &metrics, series, 0.0).await,
        "the gateway saw the upstream close its connection"
    );
    let r = send(&client, "GET", &gw.url("/after-drop"), &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.accepted(), 3);
    // And before it has seen the close: a request that can be replayed is sent again
    // on a new connection, answered all the same.
    assert_eq!(
        send(&client, "GET", &gw.url("/drop"), &[], b"")
            .await
            .status,
        200
    );
    let r = send(&client, "GET", &gw.url("/right-after-drop"), &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        up.accepted() >= 4 && up.accepted() <= 5,
        "{}",
        up.accepted()
    );
}

#[tokio::test]
async fn a_response_dropped_half_way_does_not_return_its_connection() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker(""), &up.url()).await;
    let mut raw = TcpStream::connect(gw.addr).await.expect("connect");
    raw.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut got = vec![0u8; 64 * 1024];
    raw.read_exact(&mut got).await.expect("the first bytes");
    drop(raw);
    assert!(
        eventually(WAIT, || up.closed() == 1).await,
        "the upstream connection of an abandoned response is closed (open: {})",
        up.open()
    );
    assert_eq!(get(&gw.url("/fresh"), &[]).await.status, 200);
    assert_eq!(up.accepted(), 2, "the next request needed a new connection");
}

#[tokio::test]
async fn idle_upstream_connections_close_after_idle_timeout() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker(r#"idle_timeout = "1s""#), &up.url()).await;
    assert_eq!(get(&gw.url("/once"), &[]).await.status, 200);
    assert_eq!(up.accepted(), 1);
    assert!(
        eventually(WAIT, || up.closed() == 1).await,
        "an idle upstream connection is closed after idle_timeout"
    );
    assert_eq!(get(&gw.url("/again"), &[]).await.status, 200);
    assert_eq!(up.accepted(), 2);
}

#[tokio::test]
async fn idle_connections_kept_never_exceed_max_idle() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker("max_idle = 2"), &up.url()).await;
    let mut slow = Vec::new();
    for i in 0..6 {
        let url = gw.url(&format!("/slow?{i}"));
        // One client each: six upstream connections at once.
        slow.push(tokio::spawn(async move {
            send(&http1(), "GET", &url, &[], b"").await.status
        }));
    }
    for s in slow {
        assert_eq!(s.await.expect("request"), 200);
    }
    assert_eq!(
        up.accepted(),
        6,
        "six requests at once needed six connections"
    );
    assert!(
        eventually(WAIT, || up.open() == 2).await,
        "two idle connections kept, the rest closed (open: {})",
        up.open()
    );
    // The two kept serve what follows, and stay the only ones.
    let client = http1();
    for _ in 0..5 {
        assert_eq!(
            send(&client, "GET", &gw.url("/"), &[], b"").await.status,
            200
        );
    }
    assert_eq!(up.accepted(), 6);
    assert_eq!(up.open(), 2);
}

#[tokio::test]
async fn the_pool_survives_a_reload_that_keeps_the_upstream() {
    let up = CountingUpstream::start().await;
    let gw = TestGateway::start(&one_worker(""), &up.url()).await;
    let client = http1();
    assert_eq!(
        send(&client, "GET", &gw.url("/a"), &[], b"").await.status,
        200
    );
    assert_eq!(up.accepted(), 1);

    // Routes change, the upstream does not: its warm connection is used.
    let routes_changed = Fixture::new()
        .server("workers = 1")
        .route("a", "/a", "api", &[])
        .route("b", "/b", "api", &[])
        .build();
    gw.rewrite(&routes_changed, &up.url());
    gw.gw().reload().await.expect("reload");
    assert_eq!(
        send(&client, "GET", &gw.url("/b"), &[], b"").await.status,
        200
    );
    assert_eq!(
        up.accepted(),
        1,
        "the upstream connection survived the reload"
    );

    // The upstream's settings change: a new pool, and the old connection is closed.
    gw.rewrite(&one_worker("max_idle = 8"), &up.url());
    gw.gw().reload().await.expect("reload");
    assert_eq!(
        send(&client, "GET", &gw.url("/c"), &[], b"").await.status,
        200
    );
    assert_eq!(up.accepted(), 2);
    assert!(
        eventually(WAIT, || up.closed() == 1).await,
        "the replaced pool's connection is closed"
    );
}

#[tokio::test]
async fn idle_connections_to_one_target_give_way_to_another_at_the_cap() {
    let (a, b) = (
        CountingUpstream::start().await,
        CountingUpstream::start().await,
    );
    // One worker, one connection in all: round robin alternates targets, and each request
    // needs the place the other target's idle connection holds.
    let toml = Fixture::new()
        .server("workers = 1")
        .upstream_raw(
            "api",
            format!(
                "targets = [\"{}\", \"{}\"]\nmax_connections = 1\ntimeout = \"20s\"\n",
                a.url(),
                b.url()
            ),
        )
        .route("all", "/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, "unused").await;
    let client = http1();
    let started = std::time::Instant::now();
    for i in 0..4 {
        let r = send(&client, "GET", &gw.url(&format!("/r{i}")), &[], b"").await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "no request waited out the busy timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(
        a.accepted() + b.accepted(),
        4,
        "each switch opened a connection"
    );
    assert!(
        a.accepted() >= 1 && b.accepted() >= 1,
        "both targets served"
    );
    assert!(
        eventually(WAIT, || a.open() + b.open() == 1).await,
        "never more than the cap open"
    );
}
