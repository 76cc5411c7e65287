//! An upstream that answers with the admin listener's identity header (`tollgate-admin`,
//! by mistake or to catch the token): the proxy strips it from every answer, so
//! `tollgate reload` pointed at the data-plane port by mistake still finds no admin
//! listener there and sends the admin token nowhere. Over HTTP/1.1 and HTTP/2.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::control::{reload, run, TOKEN};
use crate::support::*;

/// What the posing upstream saw: each request's target and `Authorization`, if any.
type Seen = Mutex<Vec<(String, Option<String>)>>;

/// Answers everything as the admin listener would mark it.
async fn posing_as_admin(
    seen: Arc<Seen>,
    req: http::Request<Incoming>,
) -> Result<http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    let auth = req.headers().get("authorization");
    let auth = auth.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    seen.lock()
        .expect("lock")
        .push((req.uri().to_string(), auth));
    let mut resp = http::Response::new(Full::new(Bytes::from("{\"status\":\"ok\"}")).boxed());
    resp.headers_mut()
        .insert("tollgate-admin", http::HeaderValue::from_static("1"));
    Ok(resp)
}

#[tokio::test]
async fn an_upstreams_admin_header_never_reaches_the_client() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Seen::default());
    drop(serve_all(listener, seen.clone(), posing_as_admin));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let config = Fixture::new()
        .server(format!("admin_token = \"{TOKEN}\""))
        .route("everything", "/", "api", &[]);
    std::fs::write(&path, config.build_for(&upstream)).expect("write");
    let gw = Process::run(&path);

    for client in [http1(), http2()] {
        let resp = send(
            &client,
            "GET",
            &format!("http://{}/healthz", gw.addr),
            &[],
            b"",
        )
        .await;
        assert_eq!(resp.status, 200, "the upstream answered");
        assert_eq!(resp.header("tollgate-admin"), None, "stripped");
    }
    let mut cmd = reload(gw.addr);
    cmd.env("TOLLGATE_ADMIN_TOKEN", TOKEN);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, Some(2), "stdout: {out}\nstderr: {err}");
    let said = format!("{} does not look like tollgate's admin listener", gw.addr);
    assert!(err.contains(&said), "{err}");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 3, "two GETs and the command's probe: {seen:?}");
    assert!(
        seen.iter().all(|(_, auth)| auth.is_none()),
        "no token: {seen:?}"
    );
}
