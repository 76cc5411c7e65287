//! TLS certificate names: a wildcard entry covers one label and an exact name beats it,
//! whatever their order, and a wildcard that can never match is a located config error.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;

use super::tls::{client_config, connect, tls_config, write_certs};
use crate::support::*;

/// A wildcard entry listed before an exact one, and a default certificate that also covers
/// the names no entry matches, so every handshake below is verified by the client.
#[tokio::test]
async fn wildcard_names_cover_one_label_and_exact_names_beat_them() {
    let ca = Ca::new("test ca");
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |stem: &str, names: &[&str]| {
        let (cert, key) = ca.leaf(names, stem);
        std::fs::write(dir.path().join(format!("{stem}.pem")), cert).expect("write");
        std::fs::write(dir.path().join(format!("{stem}.key")), key).expect("write");
    };
    write("gw", &["localhost", "a.b.example.com", "example.com"]);
    write("wild", &["*.example.com"]);
    write("api", &["api.example.com"]);
    let toml = Fixture::new()
        .raw(
            r#"
            [server.tls]
            cert = "gw.pem"
            key = "gw.key"

            [[server.tls.sni]]
            names = ["*.Example.com"]
            cert = "wild.pem"
            key = "wild.key"

            [[server.tls.sni]]
            names = ["api.example.com"]
            cert = "api.pem"
            key = "api.key"
            "#,
        )
        .route("api", "/", "api", &[])
        .build_for(&up.url());
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml).expect("write");
    let config = tollgate::config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let gateway = tollgate::gateway::Gateway::start_with(
        config,
        Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await
    .expect("start");
    let addr = gateway.addr();
    let leaf = |stem: &str| {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_file(dir.path().join(format!("{stem}.pem"))).expect("leaf")
    };
    let client = client_config(&ca, &[b"http/1.1"]);
    let served = |name: &'static str| connect(addr, name, client.clone());

    let (_, _, got) = served("api.example.com").await;
    assert_eq!(got, leaf("api"), "the exact name beats the wildcard");
    let (stream, _, got) = served("www.example.com").await;
    assert_eq!(
        got,
        leaf("wild"),
        "the wildcard serves a one-label subdomain"
    );
    let (_, _, got) = served("WWW.EXAMPLE.COM").await;
    assert_eq!(got, leaf("wild"), "whatever the case");
    let (_, _, got) = served("a.b.example.com").await;
    assert_eq!(got, leaf("gw"), "two labels deep: the default certificate");
    let (_, _, got) = served("example.com").await;
    assert_eq!(
        got,
        leaf("gw"),
        "the parent domain: the default certificate"
    );

    // The connection the wildcard certificate opened serves requests.
    let (mut h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("h1");
    tokio::spawn(conn);
    let req = http::Request::get("/wild")
        .header("host", "www.example.com")
        .body(Empty::<Bytes>::new())
        .expect("req");
    assert_eq!(h1.send_request(req).await.expect("response").status(), 200);
    gateway.shutdown().await;
}

#[test]
fn a_wildcard_that_cannot_match_is_a_located_error() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().expect("tempdir");
    write_certs(dir.path(), &ca, "first");
    let text = tls_config(&[]).build_for("http://127.0.0.1:9").replace(
        r#"names = ["api.example.com"]"#,
        r#"names = ["api.example.com", "*.com", "a.*.example.com"]"#,
    );
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, &text).expect("write");
    let err = tollgate::config::load(&path)
        .expect_err("refused")
        .to_string();
    let line = text
        .lines()
        .position(|l| l.contains("*.com"))
        .expect("names line")
        + 1;
    let column = |name: &str| {
        let l = text.lines().nth(line - 1).expect("line");
        l.find(&format!("\"{name}\"")).expect("name") + 1
    };
    for (name, says) in [
        ("*.com", "covers a whole top-level domain"),
        ("a.*.example.com", "is not a usable wildcard name"),
    ] {
        let at = format!(
            "{}:{line}:{}: `{name}` {says}",
            path.display(),
            column(name)
        );
        assert!(err.contains(&at), "expected {at:?} in:\n{err}");
    }
    assert!(
        err.contains("hint:") && err.contains("*.example.com"),
        "{err}"
    );
}
