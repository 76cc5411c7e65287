//! Request bodies in a content coding, on a route that keys by the body: a gzip or
//! deflate body is keyed by what it decodes to — the value the upstream reads — and goes
//! upstream as it came; a coding tollgate does not read is refused 415 before anything is
//! charged. No coding makes a key read as missing (here `missing = "skip"`, where a
//! missing key would skip the tier). Over HTTP/1.1 and HTTP/2, against a real upstream.

use std::io::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::support::*;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("write");
    e.finish().expect("gzip")
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("write");
    e.finish().expect("deflate")
}

async fn post(client: &HttpClient, url: &str, coding: Option<&str>, body: Vec<u8>) -> Got {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(coding) = coding {
        headers.push(("content-encoding", coding));
    }
    send_bytes(client, "POST", url, &headers, Bytes::from(body)).await
}

#[tokio::test]
async fn gzip_and_deflate_bodies_are_keyed_as_decoded_and_other_codings_are_refused() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "per_user",
            "key = \"json:/user\"\nlimit = 1\nperiod = \"1h\"\nburst = 1\nmissing = \"skip\"\n",
        )
        .route("api", "/v1", "api", &["per_user"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let body = |user: &str| format!("{{\"user\":\"{user}{i}\",\"messages\":[]}}").into_bytes();
        assert_eq!(post(client, &url, None, body("u")).await.status, 200);
        // The same user, compressed: the same bucket, spent.
        for (coding, encoded) in [("gzip", gzip(&body("u"))), ("deflate", deflate(&body("u")))] {
            let r = post(client, &url, Some(coding), encoded).await;
            assert_eq!(r.status, 429, "{coding}: {}", r.text());
        }
        // A coding tollgate does not read: refused, nothing charged.
        let r = post(client, &url, Some("br"), body("v")).await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert_eq!(r.json()["error"], "unsupported_content_encoding");
        assert_eq!(r.json()["content_encoding"], "br");
        assert_eq!(r.headers["accept-encoding"], "gzip, deflate");
        let r = post(client, &url, Some("gzip, gzip"), gzip(&gzip(&body("v")))).await;
        assert_eq!(r.status, 415, "two codings: {}", r.text());
        assert_eq!(
            post(client, &url, None, body("v")).await.status,
            200,
            "v was not charged"
        );
        // A compressed body is charged to its user and forwarded as it came.
        let encoded = gzip(&body("w"));
        let before = up.seen.body_bytes.load(Ordering::SeqCst);
        let r = post(client, &url, Some("gzip"), encoded.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(up.last_headers()["content-encoding"], "gzip");
        assert_eq!(
            up.seen.body_bytes.load(Ordering::SeqCst) - before,
            encoded.len(),
            "the body upstream is the one sent"
        );
        assert_eq!(
            post(client, &url, None, body("w")).await.status,
            429,
            "w was charged"
        );
    }
}
