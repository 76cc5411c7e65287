//! Upstreams the gateway forwards to: a real HTTP server that records what it saw, a raw
//! one that answers fixed bytes, a WebSocket echo, and a port that refuses connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;

use super::answers::{big_answer, drip_answer, reset_answer, usage_answer};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// What the upstream saw.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicUsize,
    pub last_headers: Mutex<Option<HeaderMap>>,
    /// The request target (path and query) of every request, in arrival order.
    pub targets: Mutex<Vec<String>>,
    pub body_bytes: AtomicUsize,
    /// The trailers of the last request whose body was counted, if it had any.
    pub last_trailers: Mutex<Option<HeaderMap>>,
    /// Every `Authorization` value any request carried, in arrival order.
    pub authorizations: Mutex<Vec<String>>,
    /// Lets a `drip` answer send its last chunk (one waiting answer per `notify_one`).
    pub release: tokio::sync::Notify,
}

/// A real HTTP upstream on a free loopback port.
///
/// By the path's last segment (`/slow` and `/v1/slow` alike): `slow` answers after 30 s,
/// `delay` after 1 s, `reset` breaks mid-body, `big` streams 8 MiB, `drip` sends one chunk
/// and its last when the test releases it (`Seen::release`, 30 s at most); anything else echoes
/// 200 and counts the request body. Any request with `x-delay-ms: N` is answered N ms late.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn upstream_answer(
    seen: Arc<Seen>,
    req: Request<Incoming>,
) -> Result<Response<http_body_util::combinators::BoxBody<Bytes, std::io::Error>>, Infallible> {
    let path = req.uri().path().to_owned();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |p| p.as_str().to_owned());
    *seen.last_headers.lock().expect("lock") = Some(req.headers().clone());
    seen.targets.lock().expect("lock").push(target.clone());
    if let Some(auth) = req.headers().get(http::header::AUTHORIZATION) {
        let auth = String::from_utf8_lossy(auth.as_bytes()).into_owned();
        seen.authorizations.lock().expect("lock").push(auth);
    }
    // Counted last: a test that sees the count move also sees the headers and target.
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let delay_ms = req
        .headers()
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(ms) = delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if path.ends_with("/slow") {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    if path.ends_with("/delay") {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if path.ends_with("/big") {
        return Ok(big_answer());
    }
    if path.ends_with("/reset") {
        return Ok(reset_answer());
    }
    if path.ends_with("/drip") {
        return Ok(drip_answer(seen));
    }
    if let Some(answer) = usage_answer(&path, req.uri().query(), req.headers()) {
        // Drain the request body first, as a real API would.
        let mut body = req.into_body();
        while let Some(Ok(_)) = body.frame().await {}
        return Ok(answer);
    }
    let mut body = req.into_body();
    let mut n = 0;
    while let Some(Ok(frame)) = body.frame().await {
        n += frame.data_ref().map_or(0, |d| d.len());
        if let Ok(trailers) = frame.into_trailers() {
            *seen.last_trailers.lock().expect("lock") = Some(trailers);
        }
    }
    seen.body_bytes.fetch_add(n, Ordering::SeqCst);
    Ok(Response::new(
        Full::new(Bytes::from(format!(
            "upstream saw {target} with {n} body bytes"
        )))
        .map_err(|never| match never {})
        .boxed(),
    ))
}

/// Serves every connection `listener` accepts, HTTP/1.1 or HTTP/2, each request answered
/// by `answer` with the server's `state`.
pub fn serve_all<S, F, Fut, E>(
    listener: TcpListener,
    state: Arc<S>,
    answer: F,
) -> tokio::task::JoinHandle<()>
where
    S: Send + Sync + 'static,
    F: Fn(Arc<S>, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: std::future::Future<
            Output = Result<Response<http_body_util::combinators::BoxBody<Bytes, E>>, Infallible>,
        > + Send
        + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| answer(state.clone(), req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let task = serve_all(listener, seen.clone(), upstream_answer);
        Self { addr, seen, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests that have reached the upstream (counted as their head arrives).
    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::SeqCst)
    }

    /// The request targets (path and query) the upstream has seen, in arrival order.
    pub fn targets(&self) -> Vec<String> {
        self.seen.targets.lock().expect("lock").clone()
    }

    /// Every `Authorization` value the upstream has seen.
    pub fn authorizations(&self) -> Vec<String> {
        self.seen.authorizations.lock().expect("lock").clone()
    }

    /// The last counted request's trailers (none: an empty map).
    pub fn last_trailers(&self) -> HeaderMap {
        let trailers = self.seen.last_trailers.lock().expect("lock");
        trailers.clone().unwrap_or_default()
    }

    pub fn last_headers(&self) -> HeaderMap {
        self.seen
            .last_headers
            .lock()
            .expect("lock")
            .clone()
            .unwrap_or_default()
    }
}

/// A WebSocket echo server (raw tokio-tungstenite) on a free loopback port.
pub async fn websocket_echo() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind ws");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() || msg.is_binary() {
                        let _ = ws.send(msg).await;
                    }
                }
            });
        }
    });
    (addr, task)
}

/// A WebSocket through the gateway.
pub type WebSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket to `path` through the gateway at `addr` (its handshake within 30 s), and
/// the gateway's answer to the upgrade.
pub async fn websocket_through(
    addr: SocketAddr,
    path: &str,
) -> (
    WebSocket,
    tokio_tungstenite::tungstenite::handshake::client::Response,
) {
    let url = format!("ws://{addr}{path}");
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("in time")
    .expect("websocket handshake through the gateway")
}

/// Sends `message` on `ws` and returns the echo (within 30 s).
pub async fn echoed(
    ws: &mut WebSocket,
    message: tokio_tungstenite::tungstenite::Message,
) -> tokio_tungstenite::tungstenite::Message {
    ws.send(message).await.expect("send");
    tokio::time::timeout(Duration::from_secs(30), ws.next())
        .await
        .expect("in time")
        .expect("frame")
        .expect("ok")
}

/// An upstream that answers every request head it reads with the same raw bytes, and
/// records each head. `close` ends the connection after each answer (HTTP/1.0 style).
pub struct RawUpstream {
    pub addr: SocketAddr,
    pub heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawUpstream {
    pub async fn start(answer: &'static [u8], close: bool) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            seen.lock()
                                .expect("lock")
                                .push(String::from_utf8_lossy(&head).into_owned());
                            if stream.write_all(answer).await.is_err() || close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, heads, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("lock").clone()
    }
}

/// An upstream that takes connections and never answers anything (nor closes one): its
/// address, and the task holding them (abort it to let them go).
pub async fn silent_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = silent.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    (addr, held)
}

/// A port that refuses connections (bound, then closed).
pub async fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}
