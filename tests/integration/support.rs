//! Test harness: a real upstream HTTP server, a real gateway on 127.0.0.1:0 and real
//! HTTP/1.1 and HTTP/2 clients. Nothing is mocked.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tollgate::clock::{Clock, FakeClock};
use tollgate::gateway::Gateway;

pub const S: u64 = 1_000_000_000;
pub const MS: u64 = 1_000_000;

/// What the upstream saw.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicUsize,
    pub last_headers: Mutex<Option<HeaderMap>>,
    pub body_bytes: AtomicUsize,
}

/// A real HTTP upstream on a free loopback port.
///
/// Paths: `/slow` answers after 30 s, `/delay` after 1 s, `/reset` breaks mid-body, `/big` streams 8 MiB, anything else echoes 200 and
/// counts the request body.
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
    seen.requests.fetch_add(1, Ordering::SeqCst);
    *seen.last_headers.lock().expect("lock") = Some(req.headers().clone());
    let path = req.uri().path().to_owned();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |p| p.as_str().to_owned());
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    if path == "/delay" {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if path == "/big" {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let stream = futures_util::stream::iter(
            (0..128).map(move |_| Ok::<_, std::io::Error>(hyper::body::Frame::data(chunk.clone()))),
        );
        return Ok(Response::new(BodyExt::boxed(
            http_body_util::StreamBody::new(stream),
        )));
    }
    if path == "/reset" {
        // Headers and one chunk, then the connection breaks mid-body.
        let frames = futures_util::stream::unfold(0, |step| async move {
            match step {
                0 => Some((
                    Ok(hyper::body::Frame::data(Bytes::from(vec![b'y'; 1024]))),
                    1,
                )),
                1 => {
                    // Let the headers and the first chunk reach the gateway first.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Some((Err(std::io::Error::other("upstream died mid-body")), 2))
                }
                _ => None,
            }
        });
        let mut resp = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(Box::pin(
            frames,
        ))));
        resp.headers_mut()
            .insert("content-length", http::HeaderValue::from_static("1000000"));
        return Ok(resp);
    }
    let mut body = req.into_body();
    let mut n = 0;
    while let Some(Ok(frame)) = body.frame().await {
        n += frame.data_ref().map_or(0, |d| d.len());
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

impl Upstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| upstream_answer(s.clone(), req));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self { addr, seen, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::SeqCst)
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

/// Writes raw bytes on a fresh connection; returns everything read until the server
/// closed (`true`) or was silent for 5 s (`false`).
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // A server may answer and close before a large request is written: that is an answer.
    let _ = s.write_all(bytes).await;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) => break true,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&buf).into_owned(), closed)
}

/// The status code of a raw HTTP/1 answer, 0 when there is none.
pub fn raw_status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A port that refuses connections (bound, then closed).
pub async fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

/// A gateway started from TOML text (with `{upstream}` replaced), on 127.0.0.1:0.
pub struct TestGateway {
    pub gateway: Option<Gateway>,
    pub clock: FakeClock,
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
}

pub const SERVER: &str =
    "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = false\n";

impl TestGateway {
    /// Starts with a fake clock at 1000 s: tests move time explicitly.
    pub async fn start(toml: &str, upstream: &str) -> Self {
        Self::start_with_clock(toml, upstream, Some(FakeClock::at(1000 * S))).await
    }

    /// Starts on the real monotonic clock (for max_delay and reload tests).
    pub async fn start_real_clock(toml: &str, upstream: &str) -> Self {
        Self::start_with_clock(toml, upstream, None).await
    }

    async fn start_with_clock(toml: &str, upstream: &str, fake: Option<FakeClock>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, toml.replace("{upstream}", upstream)).expect("write config");
        let config =
            tollgate::config::load(&path).unwrap_or_else(|e| panic!("test config invalid:\n{e}"));
        let clock_handle = fake.clone().unwrap_or_default();
        let clock: Arc<dyn Clock> = match fake {
            Some(f) => Arc::new(f),
            None => Arc::new(tollgate::clock::MonotonicClock::new()),
        };
        let gateway = Gateway::start_with(config, clock)
            .await
            .expect("gateway starts");
        let addr = gateway.addr();
        let admin = gateway.admin_addr();
        Self {
            gateway: Some(gateway),
            clock: clock_handle,
            dir,
            addr,
            admin,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin.expect("admin listener"), path)
    }

    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("tollgate.toml")
    }

    pub fn rewrite(&self, toml: &str, upstream: &str) {
        std::fs::write(self.config_path(), toml.replace("{upstream}", upstream))
            .expect("write config");
    }

    pub fn gw(&self) -> &Gateway {
        self.gateway.as_ref().expect("running")
    }

    pub fn advance(&self, ns: u64) {
        self.clock.advance(ns);
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(g) = self.gateway.take() {
            // Stop accepting and drain in the background; the runtime ends with the test.
            tokio::spawn(g.shutdown());
        }
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn num(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("missing header {name}: {self:?}"))
            .parse()
            .expect("numeric header")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn http1() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn http2() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Sends a request and reads the whole answer, bounded in time.
pub async fn send(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Got {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from_static(body)))
        .expect("request");
    let fut = async {
        let resp = client.request(req).await.expect("request completes");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Got {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("answer within 60 s")
}

pub async fn get(url: &str, headers: &[(&str, &str)]) -> Got {
    send(&http1(), "GET", url, headers, b"").await
}

/// The `tollgate` binary running as a child process, with its stderr collected.
pub struct Process {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub stderr: Arc<Mutex<String>>,
}

impl Process {
    /// Runs `tollgate run --config PATH --ready-file …` and waits for the ready file.
    pub fn run(config: &std::path::Path) -> Self {
        use std::io::BufRead;
        let ready = config.with_extension("ready.json");
        let _ = std::fs::remove_file(&ready);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["run", "--config"])
            .arg(config)
            .arg("--ready-file")
            .arg(&ready)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn tollgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().expect("lock").push_str(&(line + "\n"));
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let info: serde_json::Value = loop {
            if let Some(v) = std::fs::read(&ready)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
            {
                break v;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("tollgate exited ({status}):\n{}", log.lock().expect("lock"));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no ready file within 30 s:\n{}",
                log.lock().expect("lock")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = |key: &str| info[key].as_str().and_then(|a| a.parse().ok());
        assert_eq!(info["pid"], child.id(), "the ready file is this process's");
        Self {
            addr: addr("listen").expect("listen address in the ready file"),
            admin: addr("admin"),
            child,
            stderr: log,
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits up to `limit` for the process to exit; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
