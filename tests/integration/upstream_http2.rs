//! HTTP/2 to the upstream (`protocol = "h2c"` / `"h2"`): many calls share a few
//! connections per worker, HTTP/1.1 clients ride them too, a draining upstream (GOAWAY)
//! finishes its streams, a client that stops reading stops the upstream (flow control end
//! to end), h2 over TLS is agreed by ALPN, and a stream the upstream refused unprocessed
//! is sent again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tonic::Code;

use crate::grpc::grpc_config;
use crate::support::*;

#[tokio::test]
async fn http1_clients_reach_an_h2c_upstream() {
    let (addr, seen) = plain_h2_upstream().await;
    let toml = Fixture::new()
        .server("workers = 1")
        .upstream("api", "protocol = \"h2c\"")
        .route("all", "/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    let r = send(
        &http1(),
        "GET",
        &gw.url("/items?x=1"),
        &[("host", "api.test")],
        b"",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "HTTP/2.0 api.test /items?x=1");
    let r = send(&http2(), "GET", &gw.url("/items"), &[], b"").await;
    assert_eq!(r.text(), format!("HTTP/2.0 {} /items", gw.addr));
    // One connection (the one worker's) carried both clients' requests.
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

/// A hyper server speaking only HTTP/2 without TLS, answering with the version, the
/// authority and the target it saw; counts its connections.
async fn plain_h2_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let authority = req
                            .uri()
                            .authority()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        let text = format!(
                            "{:?} {authority} {}",
                            req.version(),
                            req.uri().path_and_query().map_or("", |p| p.as_str())
                        );
                        // The whole body first, as an upstream that reads it does.
                        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(text)),
                        ))
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_body_the_gateway_cuts_is_the_clients_fault_over_http2_too() {
    let (addr, _) = plain_h2_upstream().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .route_raw(
            r#"
            name = "all"
            path = "/"
            upstream = "api"
            policies = []
            max_body = 100_000
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    for http2 in [false, true] {
        let fits = upload(&stream_client(http2), &gw.url("/up"), &[], 50_000).await;
        assert_eq!(fits.expect("answered").status, 200);
        // No declared length: cut as it streams, answered 413, not 502. An HTTP/1.1
        // client still writing may see the closed connection before the answer.
        let over = upload(&stream_client(http2), &gw.url("/up"), &[], 1_000_000).await;
        match over {
            Ok(r) => assert_eq!(r.status, 413, "http2 client: {http2}"),
            Err(e) => assert!(!http2, "an HTTP/2 stream gets its answer: {e}"),
        }
    }
    // Whatever the client saw, the gateway answered the cut as the client's fault.
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let series =
        |class: &str| format!("tollgate_responses_total{{route=\"all\",status=\"{class}\"}}");
    assert_eq!(metric(&metrics, &series("5xx")), 0.0, "{metrics}");
    assert_eq!(metric(&metrics, &series("4xx")), 2.0);
}

#[tokio::test]
async fn two_hundred_concurrent_calls_share_a_few_upstream_connections() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &[]).build(), &up.url()).await;
    let mut calls = tokio::task::JoinSet::new();
    for c in 0..4 {
        let client = EchoClient::connect(&gw.url("")).await;
        for i in 0..50 {
            let mut client = client.clone();
            calls.spawn(async move {
                let msg = Msg {
                    text: format!("{c}-{i}"),
                    delay_ms: 500,
                    ..Msg::default()
                };
                client
                    .say(tonic::Request::new(msg))
                    .await
                    .map(|r| r.into_inner().text)
            });
        }
    }
    let mut answered = 0;
    while let Some(done) = calls.join_next().await {
        let text = done.expect("task").expect("the call succeeds");
        assert!(text.starts_with("hello "), "{text}");
        answered += 1;
    }
    assert_eq!(answered, 200);
    // Two workers, at most 100 streams a connection: at most two connections each.
    let opened = up.connections();
    assert!((1..=4).contains(&opened), "{opened} upstream connections");
}

#[tokio::test]
async fn a_draining_upstream_finishes_its_streams_and_the_next_call_reconnects() {
    let mut up = GrpcUpstream::start().await;
    let addr = up.addr;
    let gw = TestGateway::start(&grpc_config("", &[]).build(), &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let mut replies = client
        .count(tonic::Request::new(Msg {
            text: "s".into(),
            count: 5,
            delay_ms: 200,
            ..Msg::default()
        }))
        .await
        .expect("stream starts")
        .into_inner();
    let first = replies.message().await.expect("first").expect("some");
    assert_eq!(first.text, "s 0");
    up.drain(); // GOAWAY mid-stream
    let mut rest = 0;
    while let Some(_msg) = replies.message().await.expect("the stream finishes") {
        rest += 1;
    }
    assert_eq!(rest, 4, "every reply after the GOAWAY arrives");
    tokio::time::timeout(Duration::from_secs(30), up.task)
        .await
        .expect("the upstream drains")
        .expect("task");
    // The same address serves again; the gateway opens a new connection to it.
    let again = GrpcUpstream::start_on(addr).await;
    let said = client
        .say(say_as("back", &[]))
        .await
        .expect("a new connection");
    assert_eq!(said.get_ref().text, "hello back");
    assert_eq!(again.connections(), 1);
}

#[tokio::test]
async fn a_client_that_stops_reading_stops_the_upstream() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &[]).build(), &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let total = 200u32;
    let mut replies = client
        .count(tonic::Request::new(Msg {
            text: "big".into(),
            count: total,
            pad: vec![7; 64 * 1024],
            ..Msg::default()
        }))
        .await
        .expect("stream starts")
        .into_inner();
    replies.message().await.expect("first").expect("some");
    // Not reading: the upstream is held back by flow control, end to end.
    let produced = || up.echo.produced.load(Ordering::SeqCst);
    let last = std::cell::Cell::new(produced());
    let settled = eventually_async(Duration::from_secs(60), || {
        let before = last.get();
        let last = &last;
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            last.set(produced());
            last.get() == before
        }
    })
    .await;
    assert!(settled, "the upstream stops producing");
    let held = produced();
    eprintln!("{held} of {total} replies produced while the client did not read");
    // 64 KiB replies: a few MiB of windows and buffers in all, not the 12.5 MiB stream.
    assert!(
        held < 100,
        "{held} of {total} replies produced while nobody read"
    );
    let mut read = 1;
    while let Some(_msg) = replies.message().await.expect("the rest") {
        read += 1;
    }
    assert_eq!(read, total);
}

#[tokio::test]
async fn h2_over_tls_to_the_upstream_by_alpn() {
    let ca = Ca::new("grpc test ca");
    let (cert, key) = ca.leaf(&["127.0.0.1", "localhost"], "grpc upstream");
    let up = GrpcUpstream::start_tls(&cert, &key).await;
    let certs = tempfile::tempdir().expect("tempdir");
    let ca_path = certs.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).expect("write ca");
    let upstream = |protocol: &str, port: u16| {
        format!(
            "targets = [\"https://127.0.0.1:{port}\"]\nprotocol = \"{protocol}\"\nca = \"{}\"\n",
            ca_path.display()
        )
    };
    let toml = Fixture::new()
        .upstream_raw("api", upstream("h2", up.addr.port()))
        .route("echo", "/test.Echo/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, "").await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let said = client.say(say_as("tls", &[])).await.expect("over TLS");
    assert_eq!(said.get_ref().text, "hello tls");

    // A TLS target that offers only HTTP/1.1 by ALPN: 502, UNAVAILABLE to a gRPC client.
    let http1_only = https_http1_upstream(&ca).await;
    let toml = Fixture::new()
        .upstream_raw("api", upstream("h2", http1_only.port()))
        .route("echo", "/test.Echo/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, "").await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let refused = client.say(say_as("tls", &[])).await.expect_err("no h2");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    let r = get(&gw.url("/test.Echo/Say"), &[]).await;
    assert_eq!(r.status, 502);
}

/// A TLS server offering only `http/1.1` by ALPN.
async fn https_http1_upstream(ca: &Ca) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = ca.leaf(&["127.0.0.1"], "http1 upstream");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .expect("pem");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_stream_refused_unprocessed_is_sent_again_but_never_a_body_it_was_given() {
    let (addr, streams) = refusing_h2_upstream().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .route("all", "/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    // Refused (REFUSED_STREAM: not processed), sent again, answered.
    let r = send(&http1(), "GET", &gw.url("/a"), &[], b"").await;
    assert_eq!((r.status.as_u16(), r.text().as_str()), (200, "stream 2"));
    assert_eq!(streams.load(Ordering::SeqCst), 2);
    // A body already handed to the refused stream is not there to send again: 502.
    let r = send(&http1(), "POST", &gw.url("/b"), &[], b"payload").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(streams.load(Ordering::SeqCst), 3);
}

/// An HTTP/2 server (the h2 crate's) that refuses every odd stream with REFUSED_STREAM
/// and answers the others with their number; counts the streams.
async fn refusing_h2_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let streams = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = streams.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    if n % 2 == 1 {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    let head = http::Response::new(());
                    if let Ok(mut body) = respond.send_response(head, false) {
                        let text = bytes::Bytes::from(format!("stream {n}"));
                        let _ = body.send_data(text, true);
                    }
                }
            });
        }
    });
    (addr, streams)
}
