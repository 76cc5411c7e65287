//! An HTTP/2 upstream's answer that declares its length and ends with trailers (its last
//! DATA frame without END_STREAM, then the trailers: what Go sends after a flush),
//! settled for an HTTP/1.1 client as for an HTTP/2 one: a trailer's value counts, and
//! bytes that all went through are what moved — not the `max_cost` of a client that
//! left, which the HTTP/1 writer stopping at the declared length looked like.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::*;

/// An h2c upstream answering `hello` with `content-length: 5`, then the trailer
/// `x-usage-tokens: 5` in a frame of its own.
async fn trailing_h2_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("x-usage-tokens", http::HeaderValue::from_static("5"));
                    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                        Ok(Frame::data(Bytes::from_static(b"hello"))),
                        Ok(Frame::trailers(trailers)),
                    ];
                    let body = StreamBody::new(futures_util::stream::iter(frames));
                    let resp = http::Response::builder()
                        .header("content-length", "5")
                        .body(body)
                        .expect("response");
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_h2_upstreams_trailers_and_bytes_settle_for_http1_clients_too() {
    let addr = trailing_h2_upstream().await;
    let tier = |settle: &str| {
        format!("key = \"header:x-tenant-id\"\nlimit = 1000\nperiod = \"1h\"\nburst = 1000\nreserve = 10\nmax_cost = 50\nsettle = \"{settle}\"\n")
    };
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .policy_raw("trailer", tier("response_trailer:x-usage-tokens"))
        .policy_raw("bytes", tier("response_bytes") + "settle_unit = 1\n")
        .route("t", "/t", "api", &["trailer"])
        .route("b", "/b", "api", &["bytes"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (path, policy) in [("/t", "trailer"), ("/b", "bytes")] {
            let tenant = format!("{policy}-{i}");
            let h = [("x-tenant-id", tenant.as_str()), ("te", "trailers")];
            let r = send(client, "GET", &gw.url(path), &h, b"").await;
            assert_eq!((r.status.as_u16(), r.text()), (200, "hello".to_owned()));
            let url = gw.admin_url(&format!("/admin/limits/{policy}/{tenant}"));
            let left = || async { get(&url, &[]).await.json()["remaining"].as_u64() };
            let settled = eventually_async(Duration::from_secs(20), || async {
                left().await == Some(995)
            })
            .await;
            assert!(
                settled,
                "{policy} over {i}: {:?} left, 995 wanted",
                left().await
            );
        }
    }
}
