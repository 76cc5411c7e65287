//! TLS on both sides, with certificates generated at test time and real rustls clients.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

pub(super) fn client_config(ca: &Ca, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(ca.roots())
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` as `name`: the stream, the negotiated ALPN and the leaf.
pub(super) async fn connect(
    addr: SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    Option<Vec<u8>>,
    CertificateDer<'static>,
) {
    let tcp = TcpStream::connect(addr).await.expect("tcp");
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from(name.to_owned()).expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let (_, conn) = stream.get_ref();
    let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = conn.peer_certificates().expect("peer certs")[0]
        .clone()
        .into_owned();
    (stream, alpn, leaf)
}

/// TLS on the data plane (the files [`write_certs`] writes), a certificate of its own for
/// api.example.com, and one route, `api` on `/`, under `policies`.
pub(super) fn tls_config(policies: &[&str]) -> Fixture {
    Fixture::new()
        .raw(
            r#"
            [server.tls]
            cert = "gw.pem"
            key = "gw.key"

            [[server.tls.sni]]
            names = ["api.example.com"]
            cert = "api.pem"
            key = "api.key"
            "#,
        )
        .route("api", "/", "api", policies)
}

/// Writes the gateway's certificate files next to its config, then starts it.
async fn tls_gateway(ca: &Ca, upstream_url: &str) -> TestGateway {
    tls_gateway_from(ca, &tls_config(&[]).build(), upstream_url).await
}

async fn tls_gateway_from(ca: &Ca, toml: &str, upstream_url: &str) -> TestGateway {
    let dir = tempfile::tempdir().expect("tempdir");
    write_certs(dir.path(), ca, "first");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml.replace("{upstream}", upstream_url)).expect("write");
    let config = tollgate::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let gateway = tollgate::gateway::Gateway::start_with(
        config,
        Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await
    .expect("start");
    TestGateway {
        addr: gateway.addr(),
        admin: gateway.admin_addr(),
        rls: gateway.rls_addr(),
        gateway: Some(gateway),
        clock: Default::default(),
        dir,
    }
}

pub(super) fn write_certs(dir: &std::path::Path, ca: &Ca, cn: &str) {
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"], cn);
    std::fs::write(dir.join("gw.pem"), cert).expect("write");
    std::fs::write(dir.join("gw.key"), key).expect("write");
    let (cert, key) = ca.leaf(&["api.example.com"], "api");
    std::fs::write(dir.join("api.pem"), cert).expect("write");
    std::fs::write(dir.join("api.key"), key).expect("write");
}

#[tokio::test]
async fn https_http1_and_http2_by_alpn() {
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let gw = tls_gateway(&ca, &up.url()).await;

    let (stream, alpn, _) = connect(
        gw.addr,
        "localhost",
        client_config(&ca, &[b"h2", b"http/1.1"]),
    )
    .await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2");
    tokio::spawn(conn);
    let req = http::Request::get(format!("https://localhost:{}/over-h2", gw.addr.port()))
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = h2.send_request(req).await.expect("h2 response");
    assert_eq!(resp.status(), 200);
    assert_eq!(up.last_headers()["x-forwarded-proto"], "https");

    let (stream, alpn, _) = connect(gw.addr, "localhost", client_config(&ca, &[b"http/1.1"])).await;
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (mut h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("h1");
    tokio::spawn(conn);
    let req = http::Request::get("/over-h1")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = h1.send_request(req).await.expect("h1 response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"upstream saw /over-h1 with 0 body bytes");
}

#[tokio::test]
async fn certificates_are_chosen_by_sni() {
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let gw = tls_gateway(&ca, &up.url()).await;
    let (_, _, default_leaf) = connect(gw.addr, "localhost", client_config(&ca, &[])).await;
    let (_, _, api_leaf) = connect(gw.addr, "api.example.com", client_config(&ca, &[])).await;
    assert_ne!(
        default_leaf, api_leaf,
        "api.example.com gets its own certificate"
    );
}

#[tokio::test]
async fn reload_swaps_the_certificate_and_keeps_open_connections() {
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let gw = tls_gateway(&ca, &up.url()).await;
    let (stream, _, first_leaf) =
        connect(gw.addr, "localhost", client_config(&ca, &[b"http/1.1"])).await;
    let (mut old, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("h1");
    tokio::spawn(conn);

    write_certs(gw.dir.path(), &ca, "second");
    gw.gw().reload().await.expect("reload");
    let (_, _, second_leaf) = connect(gw.addr, "localhost", client_config(&ca, &[])).await;
    assert_ne!(
        first_leaf, second_leaf,
        "a new connection sees the new certificate"
    );

    let req = http::Request::get("/still-open")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .expect("req");
    assert_eq!(
        old.send_request(req)
            .await
            .expect("old connection works")
            .status(),
        200
    );

    // A broken certificate file is refused; the running certificate stays.
    std::fs::write(gw.dir.path().join("gw.pem"), "not a certificate").expect("write");
    let err = gw
        .gw()
        .reload()
        .await
        .expect_err("broken certificate refused");
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
    let (_, _, still) = connect(gw.addr, "localhost", client_config(&ca, &[])).await;
    assert_eq!(still, second_leaf);
}

/// An HTTPS upstream whose certificate is signed by `ca`.
async fn https_upstream(ca: &Ca) -> SocketAddr {
    let (cert_pem, key_pem) = ca.leaf(&["127.0.0.1", "upstream.internal"], "upstream");
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .expect("pem certificates");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                        b"secure upstream",
                    ))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_upstreams_verify_against_their_ca() {
    let gateway_ca = Ca::new("gateway ca");
    let upstream_ca = Ca::new("private upstream ca");
    let up = https_upstream(&upstream_ca).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("upstream-ca.pem"), upstream_ca.pem()).expect("write");
    std::fs::write(dir.path().join("wrong-ca.pem"), gateway_ca.pem()).expect("write");
    let block = |ca: &str, extra: &str| {
        Fixture::new()
            .upstream_raw(
                "api",
                format!(
                    r#"
                    targets = ["https://127.0.0.1:{}"]
                    ca = "{}"
                    {extra}
                    "#,
                    up.port(),
                    dir.path().join(ca).display()
                ),
            )
            .route("api", "/", "api", &[])
            .build()
    };
    let good = TestGateway::start_real_clock(&block("upstream-ca.pem", ""), "").await;
    let r = get(&good.url("/"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "secure upstream");

    let sni = TestGateway::start_real_clock(
        &block("upstream-ca.pem", r#"sni = "upstream.internal""#),
        "",
    )
    .await;
    assert_eq!(
        get(&sni.url("/"), &[]).await.status,
        200,
        "SNI override verified against the certificate"
    );

    let wrong = TestGateway::start_real_clock(&block("wrong-ca.pem", ""), "").await;
    let r = get(&wrong.url("/"), &[]).await;
    assert_eq!(
        r.status, 502,
        "an upstream the CA does not vouch for is refused"
    );

    // The CA file rotated in place (same path) is picked up by a reload.
    std::fs::write(dir.path().join("wrong-ca.pem"), upstream_ca.pem()).expect("rotate");
    wrong.gw().reload().await.expect("reload");
    assert_eq!(
        get(&wrong.url("/"), &[]).await.status,
        200,
        "the rotated CA is in use"
    );
}

/// Over HTTP/2 on TLS, as over h2c: padded, repeated and re-spelled values are one key.
#[tokio::test]
async fn spelling_dodges_fail_over_http2_on_tls() {
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let toml = tls_config(&["k"])
        .policy("k", "header:x-api-key", 1, "1h", 1)
        .build();
    let gw = tls_gateway_from(&ca, &toml, &up.url()).await;
    let (stream, _, _) = connect(gw.addr, "localhost", client_config(&ca, &[b"h2"])).await;
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2");
    tokio::spawn(conn);
    let mut statuses = Vec::new();
    for (path, values) in [
        ("/v1/search", &["k"][..]),
        ("/v1/search", &[" k"]),
        ("/v1//search", &["k\t"]),
        ("/v1/%73earch", &["", "k"]),
        ("/v1/search", &["other", "k"]),
    ] {
        let mut req = http::Request::get(format!("https://localhost:{}{path}", gw.addr.port()));
        for v in values {
            req = req.header("x-api-key", *v);
        }
        let resp = h2
            .send_request(req.body(Empty::<Bytes>::new()).expect("req"))
            .await
            .expect("h2 response");
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 429, 429, 429, 429]);
    assert_eq!(up.requests(), 1);
}

/// Over TLS too, an idle HTTP/2 client that answers nothing (no SETTINGS or PING ack) is
/// closed within `idle_timeout` and a second's grace.
#[tokio::test]
async fn an_idle_tls_http2_client_that_answers_nothing_is_closed() {
    use tokio::io::AsyncWriteExt;
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let toml = tls_config(&[])
        .server("idle_timeout = \"2s\"\nheader_read_timeout = \"30s\"\n")
        .build();
    let gw = tls_gateway_from(&ca, &toml, &up.url()).await;
    let (mut stream, alpn, _) = connect(gw.addr, "localhost", client_config(&ca, &[b"h2"])).await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    stream
        .write_all(crate::silent_clients::PREFACE)
        .await
        .expect("preface");
    let took =
        crate::silent_clients::closed_within(&mut stream, std::time::Duration::from_secs(20))
            .await
            .expect("closed");
    assert!(
        took < std::time::Duration::from_secs(8),
        "closed after {took:?}"
    );
}
