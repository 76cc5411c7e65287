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

/// The value of one series in a Prometheus text exposition (`name` with its labels, as
/// printed), NaN when it is absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| *series == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}
