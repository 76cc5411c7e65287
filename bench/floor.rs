//! The floor for bench/proxy.sh: what bare hyper does on this machine, built the way
//! tollgate's data plane is (one thread and one current-thread runtime per worker, each
//! with its own SO_REUSEPORT listener), with none of tollgate's work.
//!
//!   floor deny    --listen ADDR [--workers N]
//!       answers every request with tollgate's 429 (the same status, headers and body)
//!   floor forward --listen ADDR --upstream ADDR [--workers N]
//!       forwards every request over one upstream HTTP/1.1 connection dedicated to the
//!       client connection (opened at its first request), streaming the answer back
//!
//! Build: `cargo build --release --example floor`.

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

type Body = UnsyncBoxBody<Bytes, hyper::Error>;

#[derive(Clone, Copy)]
enum Mode {
    Deny,
    Forward(SocketAddr),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let usage = "usage: floor deny|forward --listen ADDR [--upstream ADDR] [--workers N]";
    let listen: SocketAddr = value("--listen")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| exit(usage));
    let workers: usize = value("--workers")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let mode = match args.first().map(String::as_str) {
        Some("deny") => Mode::Deny,
        Some("forward") => Mode::Forward(
            value("--upstream")
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| exit(usage)),
        ),
        _ => exit(usage),
    };
    // The same listeners tollgate's workers get: one SO_REUSEPORT socket per worker.
    let (_, listeners) = tollgate::workers::bind_all(listen, workers)
        .unwrap_or_else(|e| exit(&format!("bind {listen}: {e}")));
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|listener| std::thread::spawn(move || worker(listener, mode)))
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn exit(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}

fn worker(listener: std::net::TcpListener, mode: Mode) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| exit(&format!("runtime: {e}")));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .unwrap_or_else(|e| exit(&format!("listener: {e}")));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::task::spawn_local(async move {
                let upstream: Rc<RefCell<Option<SendRequest<Incoming>>>> = Rc::default();
                let service = hyper::service::service_fn(move |req| {
                    let upstream = upstream.clone();
                    async move {
                        Ok::<_, Infallible>(match mode {
                            Mode::Deny => deny(),
                            Mode::Forward(addr) => forward(req, addr, &upstream).await,
                        })
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// tollgate's answer to a request denied for an hour by policy `hot`.
fn deny() -> Response<Body> {
    let body = r#"{"error":"rate_limited","policy":"hot","retry_after_ms":3599990}"#;
    let mut resp = Response::new(
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|e| match e {})
            .boxed_unsync(),
    );
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = resp.headers_mut();
    for (name, value) in [
        ("content-type", "application/json"),
        ("vary", "accept"),
        ("retry-after", "3600"),
        ("x-ratelimit-limit", "1"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "3600"),
        ("ratelimit-policy", "\"hot\";q=1;w=3600"),
        ("ratelimit", "\"hot\";r=0;t=3600"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// Sends `req` over the client connection's own upstream connection.
async fn forward(
    req: Request<Incoming>,
    addr: SocketAddr,
    upstream: &RefCell<Option<SendRequest<Incoming>>>,
) -> Response<Body> {
    let taken = upstream.borrow_mut().take();
    let mut sender = match taken {
        Some(s) if !s.is_closed() => s,
        _ => match connect(addr).await {
            Some(s) => s,
            None => return bad_gateway(),
        },
    };
    if sender.ready().await.is_err() {
        return bad_gateway();
    }
    let answer = sender.send_request(req).await;
    *upstream.borrow_mut() = Some(sender);
    match answer {
        Ok(resp) => resp.map(BodyExt::boxed_unsync),
        Err(_) => bad_gateway(),
    }
}

async fn connect(addr: SocketAddr) -> Option<SendRequest<Incoming>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::task::spawn_local(conn);
    Some(sender)
}

fn bad_gateway() -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::new())
            .map_err(|e| match e {})
            .boxed_unsync(),
    );
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp
}
