//! A client whose own upload fails — a malformed chunk, a stall past `body_read_timeout` —
//! left, as one that hangs up: a tier settled by what the answer would have said pays
//! `max_cost`, not the upstream failure `refund_on_upstream_error` makes free. Over a raw
//! HTTP/1.1 socket and HTTP/2.

use std::time::Duration;

use futures_util::StreamExt;

use crate::support::*;

const MAX_COST: u64 = 50;

fn config() -> String {
    Fixture::new()
        .server("body_read_timeout = \"1s\"\n")
        .policy_raw(
            "tokens",
            format!("key = \"header:x-tenant-id\"\nlimit = 1000\nperiod = \"1h\"\nburst = 1000\nreserve = 10\nmax_cost = {MAX_COST}\nrefund_on_upstream_error = true\nsettle = \"response_header:x-usage-tokens\"\n"),
        )
        .route("api", "/", "api", &["tokens"])
        .build()
}

async fn charged(gw: &TestGateway, tenant: &str) -> u64 {
    let url = gw.admin_url(&format!("/admin/limits/tokens/{tenant}"));
    let left = || async { get(&url, &[]).await.json()["remaining"].as_u64() };
    let settled = eventually_async(Duration::from_secs(20), || async {
        left().await.is_some_and(|l| l <= 1_000 - MAX_COST)
    })
    .await;
    let now = left().await.expect("remaining");
    assert!(settled, "{tenant}: {now} left");
    1_000 - now
}

#[tokio::test]
async fn a_client_whose_upload_breaks_or_stalls_pays_max_cost() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&config(), &up.url()).await;
    // A chunk size that is no number, after a first chunk.
    let broken = "POST /upload HTTP/1.1\r\nHost: x\r\nX-Tenant-Id: broke\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n";
    let (answer, _) = raw(gw.addr, broken.as_bytes()).await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert_eq!(charged(&gw, "broke").await, MAX_COST);
    // A body that stops after its first bytes, over HTTP/2.
    let stalled = futures_util::stream::once(async {
        Ok::<_, std::io::Error>(hyper::body::Frame::data(bytes::Bytes::from_static(b"abcd")))
    })
    .chain(futures_util::stream::pending());
    let req = http::Request::post(gw.url("/upload"))
        .header("x-tenant-id", "stalled")
        .body(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(stalled),
        ))
        .expect("request");
    let resp = stream_client(true).request(req).await.expect("an answer");
    assert_eq!(resp.status(), 408);
    assert_eq!(charged(&gw, "stalled").await, MAX_COST);
}
