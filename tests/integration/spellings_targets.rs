//! Request targets the gateway does not forward, refused before routing over HTTP/1.1
//! (raw sockets: a client library would not write them) and HTTP/2: `CONNECT`, and an
//! absolute-form target or `:scheme` naming a scheme other than `http` / `https`.

use http::Request;

use crate::spellings::{h2_send, start};
use crate::support::*;

/// A `CONNECT` was routed by its path and sent on; an upstream's `2xx` then made the
/// upstream connection a tunnel nobody read: the client got an empty reply and a priced
/// route settled its reserve, not the usage. Refused first, over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_connect_is_refused_before_routing_and_never_reaches_the_upstream() {
    let (up, gw) = start().await;
    for target in ["/v1/search", "http://x/v1/search", "api.example.com:443"] {
        let head = format!("CONNECT {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{{}}");
        let (answer, _) = raw(gw.addr, head.as_bytes()).await;
        assert_eq!(raw_status(&answer), 400, "{target}: {answer}");
        assert!(answer.contains("connect_not_supported"), "{answer}");
    }
    let req = Request::builder()
        .method("CONNECT")
        .uri("api.example.com:443")
        .body(())
        .expect("request");
    assert_eq!(h2_send(gw.addr, req).await.0, 400, "HTTP/2 CONNECT");
    assert_eq!(up.requests(), 0);
}

/// `GET ftp://host/x` was routed by its path and forwarded as an HTTP request (as were
/// `wss://` and any scheme): a scheme the gateway does not speak is refused.
#[tokio::test]
async fn a_target_of_another_scheme_is_refused_before_routing() {
    let (up, gw) = start().await;
    for target in [
        "ftp://x/v1/search",
        "wss://x/v1/search",
        "FILE://x/v1/search",
    ] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (answer, _) = raw(gw.addr, head.as_bytes()).await;
        assert_eq!(raw_status(&answer), 400, "{target}: {answer}");
        assert!(answer.contains("unsupported_scheme"), "{answer}");
    }
    let req = Request::get("ftp://x/v1/search").body(()).expect("request");
    assert_eq!(h2_send(gw.addr, req).await.0, 400, "HTTP/2 :scheme ftp");
    assert_eq!(up.requests(), 0);
    // HTTP and HTTPS, in any case, are forwarded.
    for target in ["http://x/v1/search", "HTTPS://x/v1/search"] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (answer, _) = raw(gw.addr, head.as_bytes()).await;
        assert_eq!(raw_status(&answer), 200, "{target}: {answer}");
    }
}
