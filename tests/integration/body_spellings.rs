//! Request bodies in a content coding, on a route that keys by the body: a gzip or
//! deflate body is keyed by what it decodes to — the value the upstream reads — and goes
//! upstream as it came; a coding tollgate does not read is refused 415 before anything is
//! charged. No coding makes a key read as missing (here `missing = "skip"`, where a
//! missing key would skip the tier), nor does a JSON text in UTF-16, UTF-32 or behind a
//! byte order mark, which Python's and Java's JSON readers take, nor a body only lenient
//! readers take (`NaN`, a number past a double, an unpaired surrogate), nor a member
//! named in another case (Go's encoding/json fills `model` from `"Model"`). A JSON-RPC
//! batch, many calls for one request, is refused before its decision. Over HTTP/1.1 and
//! HTTP/2, against a real upstream.

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

/// A fixture with the policy `name` keyed by the JSON `pointer`, `burst` requests an
/// hour, skipped by a request without its key: a key read as missing goes around it.
fn skipping(name: &str, pointer: &str, burst: u32) -> Fixture {
    Fixture::new().skipping_policy(name, &format!("json:{pointer}"), burst)
}

fn per_user_route() -> String {
    skipping("per_user", "/user", 1)
        .route("api", "/v1", "api", &["per_user"])
        .build()
}

#[tokio::test]
async fn gzip_and_deflate_bodies_are_keyed_as_decoded_and_other_codings_are_refused() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_user_route(), &up.url()).await;
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
        // A gzip body cut before its trailer, or padded after it: refused, not keyless.
        let whole = gzip(&body("v"));
        for damaged in [
            whole[..whole.len() - 8].to_vec(),
            [&whole[..], &[0; 4]].concat(),
        ] {
            let r = post(client, &url, Some("gzip"), damaged).await;
            assert_eq!(r.status, 400, "{}", r.text());
            assert_eq!(r.json()["error"], "malformed_content_encoding");
        }
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

/// `text` in UTF-16 or UTF-32 (`width` 2 or 4 bytes), of either byte order, after a byte
/// order mark or not.
fn encoded(text: &str, width: usize, big: bool, mark: bool) -> Vec<u8> {
    let chars = mark.then_some('\u{feff}').into_iter().chain(text.chars());
    let units: Vec<u32> = match width {
        2 => chars
            .flat_map(|c| c.encode_utf16(&mut [0; 2]).to_vec())
            .map(u32::from)
            .collect(),
        _ => chars.map(u32::from).collect(),
    };
    units
        .iter()
        .flat_map(|&u| match big {
            true => u.to_be_bytes()[4 - width..].to_vec(),
            false => u.to_le_bytes()[..width].to_vec(),
        })
        .collect()
}

#[tokio::test]
async fn json_in_utf16_utf32_or_behind_a_byte_order_mark_is_keyed_as_its_text() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_user_route(), &up.url()).await;
    let url = gw.url("/v1/chat");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let json = |user: &str| format!("{{\"user\":\"{user}{i}\",\"messages\":[]}}");
        assert_eq!(
            post(client, &url, None, json("u").into_bytes())
                .await
                .status,
            200
        );
        let marked = [&b"\xEF\xBB\xBF"[..], json("u").as_bytes()].concat();
        let mut spellings = vec![("utf-8 with a mark".to_owned(), marked)];
        for (width, big, mark) in [
            (2, false, false),
            (2, true, true),
            (4, false, false),
            (4, true, true),
        ] {
            let name = format!(
                "utf-{} {} mark={mark}",
                width * 8,
                if big { "be" } else { "le" }
            );
            spellings.push((name, encoded(&json("u"), width, big, mark)));
        }
        for (name, body) in spellings {
            let r = post(client, &url, None, body).await;
            assert_eq!(r.status, 429, "{name}: the same user, spent: {}", r.text());
        }
        // A user first seen in UTF-16 is charged to that user.
        let first = post(client, &url, None, encoded(&json("w"), 2, false, false)).await;
        assert_eq!(first.status, 200);
        assert_eq!(
            post(client, &url, None, json("w").into_bytes())
                .await
                .status,
            429
        );
    }
}

#[tokio::test]
async fn a_body_only_lenient_readers_take_is_keyed_as_they_read_it() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_user_route(), &up.url()).await;
    let url = gw.url("/v1/chat");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let send = |body: String| post(client, &url, None, body.into_bytes());
        assert_eq!(send(format!(r#"{{"user":"u{i}"}}"#)).await.status, 200);
        // Python's json.loads reads these (FastAPI, most LLM servers): the same user.
        for extra in ["NaN", "Infinity", "-Infinity", "1e400", r#""\ud800""#] {
            let r = send(format!(r#"{{"user":"u{i}","temperature":{extra}}}"#)).await;
            assert_eq!(r.status, 429, "{extra} beside the key: {}", r.text());
        }
        // Bytes that are no UTF-8 in a member name (Go and Node.js read U+FFFD).
        let mut raw = format!(r#"{{"user":"u{i}","x":1}}"#).into_bytes();
        let x = raw.iter().position(|&b| b == b'x').expect("x");
        raw[x] = 0xFF;
        let r = post(client, &url, None, raw).await;
        assert_eq!(
            r.status,
            429,
            "a name that is no UTF-8 beside the key: {}",
            r.text()
        );
        // At the pointer: one value per spelling as Python reads it, not one per request.
        // (Infinity over HTTP/1.1, -Infinity over HTTP/2: a key of its own each.)
        let sign = ["", "-"][i];
        assert_eq!(send(format!(r#"{{"user":{sign}1e400}}"#)).await.status, 200);
        let r = send(format!(r#"{{"user":{sign}1e500}}"#)).await;
        assert_eq!(
            r.status, 429,
            "{sign}1e400 and {sign}1e500 are both infinite"
        );
        assert_eq!(
            send(format!(r#"{{"user":"v{i}\ud800"}}"#)).await.status,
            200
        );
        let r = send(format!(r#"{{"user":"v{i}\udbff"}}"#)).await;
        assert_eq!(r.status, 429, "every unpaired surrogate reads as U+FFFD");
    }
}

#[tokio::test]
async fn a_member_named_in_another_case_is_charged_as_go_reads_it() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_user_route(), &up.url()).await;
    let url = gw.url("/v1/chat");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let send = |body: String| post(client, &url, None, body.into_bytes());
        assert_eq!(send(format!(r#"{{"user":"u{i}"}}"#)).await.status, 200);
        for name in ["User", "USER", "uSeR"] {
            let r = send(format!(r#"{{"{name}":"u{i}"}}"#)).await;
            assert_eq!(r.status, 429, "{name}: the same user, spent: {}", r.text());
        }
        // Both spellings at once: both keys charged, so neither is a way around the other.
        let r = send(format!(r#"{{"user":"w{i}","User":"u{i}"}}"#)).await;
        assert_eq!(
            r.status, 429,
            "u{i} is spent, whichever member the upstream reads"
        );
        assert_eq!(
            send(format!(r#"{{"user":"w{i}"}}"#)).await.status,
            200,
            "w{i} was not charged by the refusal"
        );
    }
}

#[tokio::test]
async fn a_json_rpc_batch_is_refused_before_its_decision_and_one_call_is_not() {
    let up = Upstream::start().await;
    let toml = skipping("per_tool", "/params/name", 1)
        .route("mcp", "/mcp", "api", &["per_tool"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/mcp");
    let call = |id: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"deploy"}}}}"#
        )
    };
    for client in [http1(), http2()] {
        let batch = format!("[{},{},{}]", call(1), call(2), call(3));
        let before = up.requests();
        let r = post(&client, &url, None, batch.into_bytes()).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let body = r.json();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], serde_json::Value::Null);
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["error"]["data"]["error"], "jsonrpc_batch");
        assert_eq!(up.requests(), before, "the upstream never saw the batch");
        // Spelled for a lenient or a case-folding reader, the same.
        let lenient = format!(r#"[{},{{"jsonrpc":"2.0","x":NaN}}]"#, call(2));
        let folded = format!(r#"[{}]"#, call(3).replace("jsonrpc", "JSONRPC"));
        for batch in [lenient, folded] {
            let r = post(&client, &url, None, batch.clone().into_bytes()).await;
            assert_eq!(r.status, 400, "{batch}: {}", r.text());
        }
        // Compressed, the same.
        let batch = format!("[{}]", call(4));
        let r = post(&client, &url, Some("gzip"), gzip(batch.as_bytes())).await;
        assert_eq!(r.status, 400, "{}", r.text());
    }
    // One call a request is limited per tool, the batches charged nothing.
    assert_eq!(
        post(&http1(), &url, None, call(5).into_bytes())
            .await
            .status,
        200
    );
    assert_eq!(
        post(&http2(), &url, None, call(6).into_bytes())
            .await
            .status,
        429
    );
}

#[tokio::test]
async fn a_copy_read_instead_of_the_body_counts_against_the_memory_share() {
    let up = Upstream::start().await;
    let toml = skipping("per_user", "/user", 100)
        .server("workers = 1\nmax_key_body = 1024\nmax_key_body_memory = 1024\n")
        .route("api", "/v1", "api", &["per_user"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat");
    let padded = |size: usize, extra: &str| {
        let pad = "x".repeat(size);
        format!(r#"{{"user":"u","pad":"{pad}","t":{extra}}}"#).into_bytes()
    };
    for client in [http1(), http2()] {
        assert_eq!(
            post(&client, &url, None, padded(600, "1")).await.status,
            200
        );
        // Its strict copy would hold as much again, past the worker's 1 KiB: 503, as a
        // body past the share, never read as a body without its key.
        let r = post(&client, &url, None, padded(600, "NaN")).await;
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.json()["error"], "overloaded");
        // Decoded, the same: 980 bytes decoded beside the compressed body do not fit.
        let r = post(&client, &url, Some("gzip"), gzip(&padded(950, "1"))).await;
        assert_eq!(r.status, 503, "{}", r.text());
        // A key value written with an escape is a copy the walk holds beside the body
        // through the decision: 561 bytes beside 580 pass the 1 KiB too. Unescaped, the
        // same value is read from the body itself.
        let long = "u".repeat(560);
        let escaped = format!(r#"{{"user":"\u0075{long}","t":1}}"#).into_bytes();
        let r = post(&client, &url, None, escaped).await;
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.json()["error"], "overloaded");
        let plain = format!(r#"{{"user":"u{long}","t":1}}"#).into_bytes();
        assert_eq!(post(&client, &url, None, plain).await.status, 200);
        // Small enough for both, each is read.
        let small = br#"{"user":"u","t":NaN}"#.to_vec();
        assert_eq!(post(&client, &url, None, small.clone()).await.status, 200);
        assert_eq!(
            post(&client, &url, Some("gzip"), gzip(&small)).await.status,
            200
        );
    }
}

#[tokio::test]
async fn max_body_bounds_a_body_as_decoded_on_a_route_that_reads_it() {
    let up = Upstream::start().await;
    let toml = skipping("per_tool", "/params/name", 1)
        .server("max_key_body = 1024\n")
        .route_raw("name = \"mcp\"\npath = \"/mcp\"\nupstream = \"api\"\npolicies = [\"per_tool\"]\nmax_body = 1024\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/mcp");
    let call = |pad: usize| {
        let pad = "A".repeat(pad);
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{"pad":"{pad}"}}}}}}"#
        )
    };
    for client in [http1(), http2()] {
        // A small gzip that expands past max_body: refused as a plain one would be, not
        // read as a call without a tool (which would skip per_tool).
        let expanding = gzip(call(4000).as_bytes());
        assert!(expanding.len() < 1024);
        let before = up.requests();
        let r = post(&client, &url, Some("gzip"), expanding).await;
        assert_eq!(r.status, 413, "{}", r.text());
        assert_eq!(r.json()["decoded"], true);
        let batch = format!("[{}]", call(4000));
        let r = post(&client, &url, Some("gzip"), gzip(batch.as_bytes())).await;
        assert_eq!(r.status, 413, "{}", r.text());
        assert_eq!(up.requests(), before, "neither reached the upstream");
    }
    // Within the bound, the tool is read and limited.
    assert_eq!(
        post(&http1(), &url, Some("gzip"), gzip(call(10).as_bytes()))
            .await
            .status,
        200
    );
    assert_eq!(
        post(&http2(), &url, None, call(10).into_bytes())
            .await
            .status,
        429
    );
}
