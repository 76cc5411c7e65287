//! The part-charset trick against busboy itself (`tests/busboy/server.js`; busboy is what
//! Express's multer and Fastify read multipart bodies with). Straight to busboy, a text
//! field whose part names `charset=utf-16le` is read in UTF-16: `alice` to the
//! application, NUL-laced bytes to a gateway. Through tollgate it is refused 415 before
//! anything is charged or forwarded, and the same field in UTF-8 reaches busboy and is
//! charged. Over HTTP/1.1 and HTTP/2.

use bytes::Bytes;

use crate::support::*;

/// `tests/busboy/server.js`: busboy as released.
async fn busboy() -> ScriptUpstream {
    ScriptUpstream::start("node", "tests/busboy/server.js", "Node.js and npm's busboy").await
}

const MULTIPART: (&str, &str) = ("content-type", "multipart/form-data; boundary=XyZ");

/// A multipart body of one `api_key` field, its part's `Content-Type` `part_type`.
fn field(part_type: &str, value: &[u8]) -> Bytes {
    let mut body = format!(
        "--XyZ\r\nContent-Disposition: form-data; name=\"api_key\"\r\nContent-Type: {part_type}\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(value);
    body.extend_from_slice(b"\r\n--XyZ--\r\n");
    Bytes::from(body)
}

/// `alice` in UTF-16LE, no byte-order mark.
fn alice_utf16() -> Vec<u8> {
    "alice".encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[tokio::test]
#[ignore = "needs Node.js and npm's busboy: scripts/test installs them"]
async fn busboy_reads_a_field_in_its_parts_charset_and_the_gateway_refuses_it() {
    let busboy = busboy().await;
    // The premise, straight to busboy.
    let utf16 = field("text/plain; charset=utf-16le", &alice_utf16());
    let direct = send_bytes(
        &http1(),
        "POST",
        &busboy.url(""),
        &[MULTIPART],
        utf16.clone(),
    )
    .await;
    assert_eq!(direct.status, 200, "{}", direct.text());
    assert_eq!(direct.json()["api_key"], serde_json::json!(["alice"]));

    // Express with multer hands the field to a handler in `req.body`, where a `json:`
    // key finds a form's field by its pointer's name.
    let toml = Fixture::new()
        .skipping_policy("per_key", "json:/api_key", 1)
        .route("upload", "/", "api", &["per_key"])
        .build();
    let gw = TestGateway::start(&toml, &busboy.url("")).await;
    let url = gw.url("/upload");
    for client in [http1(), http2()] {
        let r = send_bytes(&client, "POST", &url, &[MULTIPART], utf16.clone()).await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert_eq!(r.json()["charset"], "utf-16le");
    }
    // In UTF-8 the same key reaches busboy once, then is refused: the 415s spent nothing.
    let utf8 = || field("text/plain; charset=utf-8", b"alice");
    let r = send_bytes(&http2(), "POST", &url, &[MULTIPART], utf8()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["api_key"], serde_json::json!(["alice"]));
    let r = send_bytes(&http1(), "POST", &url, &[MULTIPART], utf8()).await;
    assert_eq!(r.status, 429, "{}", r.text());
}
