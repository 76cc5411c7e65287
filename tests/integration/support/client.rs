//! Clients: raw bytes on a socket, and hyper's HTTP/1.1 and HTTP/2 clients reading whole
//! answers.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

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
    send_bytes(client, method, url, headers, Bytes::from_static(body)).await
}

/// [`send`] with a body made at run time.
pub async fn send_bytes(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Got {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body)).expect("request");
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

/// A client whose request bodies stream (no declared length).
pub type StreamClient = Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::combinators::BoxBody<Bytes, std::io::Error>,
>;

pub fn stream_client(http2: bool) -> StreamClient {
    Client::builder(TokioExecutor::new())
        .http2_only(http2)
        .build_http()
}

/// POSTs `total` bytes in 16 KiB chunks without a declared length and reads the answer;
/// `Err` when the exchange broke instead (the gateway cut it and closed).
pub async fn upload(
    client: &StreamClient,
    url: &str,
    headers: &[(&str, &str)],
    total: usize,
) -> Result<Got, String> {
    const CHUNK: usize = 16 * 1024;
    let chunk = Bytes::from(vec![b'u'; CHUNK]);
    let frames =
        (0..total.div_ceil(CHUNK)).map(move |i| chunk.slice(..CHUNK.min(total - i * CHUNK)));
    post_frames(client, url, headers, frames.collect()).await
}

/// POSTs `frames`, one DATA frame (or chunk) each, without a declared length, and reads the
/// answer; `Err` when the exchange broke instead.
pub async fn post_frames(
    client: &StreamClient,
    url: &str,
    headers: &[(&str, &str)],
    frames: Vec<Bytes>,
) -> Result<Got, String> {
    let frames = frames
        .into_iter()
        .map(|f| Ok::<_, std::io::Error>(hyper::body::Frame::data(f)));
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let mut req = Request::builder().method("POST").uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(BodyExt::boxed(body)).expect("request");
    let fut = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Got {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("answer within 60 s")
}

pub async fn get(url: &str, headers: &[(&str, &str)]) -> Got {
    send(&http1(), "GET", url, headers, b"").await
}

/// The value of one series in a Prometheus text exposition (`name` with its labels, as
/// printed), NaN when it is absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| *series == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Whether the series `name` at the metrics endpoint `url` reads `value` within `limit`
/// (polled).
pub async fn metric_reaches(limit: Duration, url: &str, name: &str, value: f64) -> bool {
    super::eventually_async(limit, || async {
        metric(&get(url, &[]).await.text(), name) == value
    })
    .await
}

/// A server that answers, then closes with most of a large request unread (as hyper does
/// with a `431`), makes the kernel reset the connection: the client's write fails half-way.
/// `raw` must take that as the end of its writing and still read the answer.
#[tokio::test]
async fn raw_reads_the_answer_when_its_write_is_cut_short() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut head = [0u8; 64];
        s.read_exact(&mut head).await.expect("a request head");
        s.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("answer");
        // Dropped with unread bytes: the connection is reset.
    });
    // Far more than socket buffers hold, so the write cannot finish before the reset.
    let mut huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.resize(64 << 20, b'a');
    let (answer, closed) = raw(addr, &huge).await;
    server.await.expect("server");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert!(closed, "the reset is the end of the answer");
}

/// Declares a `length`-byte body to `path` over a raw HTTP/2 connection without sending
/// it, and reads the answer: status, headers and body.
pub async fn h2_declared(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    length: usize,
) -> (u16, HeaderMap, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req =
        http::Request::post(format!("http://x{path}")).header("content-length", length.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (resp, _stream) = client
        .send_request(req.body(()).expect("request"), false)
        .expect("send");
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("in time")
        .expect("an answer");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let mut body = resp.into_body();
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        text.extend_from_slice(&chunk);
    }
    task.abort();
    (status, headers, String::from_utf8_lossy(&text).into_owned())
}
