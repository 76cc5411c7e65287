//! A charset an upstream would decode keys in. Django reads a request's query in the
//! charset its `Content-Type` names (a GET's too; its forms too before Django 5), and
//! Django REST framework its JSON body (django.rs runs both against Django itself): `api_key` sent in UTF-16 is the same key to it and other bytes
//! to the gateway, a skipped tier or a fresh bucket. On a route keyed by a query parameter
//! or by the body, such a request is refused 415 before anything is charged or forwarded;
//! UTF-8 and ASCII, in any spelling, pass as before; a route keyed by neither is not
//! concerned. Over HTTP/1.1 and HTTP/2, and repeated `Content-Type` lines.

use bytes::Bytes;

use crate::support::*;

/// `text` as UTF-16LE with its byte-order mark, as Python's `utf-16` codec reads it.
fn utf16(text: &str) -> Bytes {
    let mut out = vec![0xff, 0xfe];
    text.encode_utf16()
        .for_each(|u| out.extend_from_slice(&u.to_le_bytes()));
    Bytes::from(out)
}

/// One request an hour per `api_key`, skipped without one; an unkeyed route beside it.
fn routes() -> String {
    Fixture::new()
        .skipping_policy("per_key", "query:api_key", 1)
        .skipping_policy("per_user", "json:/user", 1)
        .skipping_policy("per_tenant", "header:x-tenant", 1)
        .skipping_policy("per_sub", "jwt:sub", 1)
        .route("login", "/login", "api", &["per_key"])
        .route("tools", "/tools", "api", &["per_user"])
        .route("other", "/other", "api", &["per_tenant"])
        .route("token", "/token", "api", &["per_sub"])
        .build()
}

#[tokio::test]
async fn a_charset_other_than_utf_8_is_refused_where_keys_are_read_and_charges_nothing() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&routes(), &up.url()).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let login = gw.url("/login");
        let refused = [
            // A form in UTF-16 (Django before 5 read one), an ASCII key in its query too.
            (
                format!("{login}?api_key=d{i}"),
                "application/x-www-form-urlencoded; charset=utf-16",
                utf16(&format!("api_key=u{i}")),
                "utf-16",
            ),
            // A GET: Django decodes its query's escapes in the charset named too.
            (
                format!("{login}?api_key=%61%00"),
                "text/plain; charset=UTF-16LE",
                Bytes::new(),
                "UTF-16LE",
            ),
            // A JSON body in EBCDIC, as Django REST framework reads it, and RFC 2231's
            // spelling of a charset.
            (
                gw.url("/tools"),
                "application/json; charset=\"cp500\"",
                Bytes::from_static(b"\xc0\x7f\xa4\xa2\x85\x99\x7f\x7a\x7f\x81\x7f\xd0"),
                "cp500",
            ),
            (
                gw.url("/tools"),
                "application/json; charset*=utf-8''utf-8-sig",
                Bytes::from(format!("\u{feff}{{\"user\":\"s{i}\"}}")),
                "charset*=utf-8''utf-8-sig",
            ),
        ];
        for (url, content_type, body, named) in refused {
            let headers = [("content-type", content_type)];
            let r = send_bytes(client, "POST", &url, &headers, body).await;
            assert_eq!(r.status, 415, "{content_type}: {}", r.text());
            let error = r.json();
            assert_eq!(error["error"], "unsupported_charset", "{}", r.text());
            assert_eq!(error["charset"], named);
            assert_eq!(error["supported"], "utf-8");
        }
        // Nothing was charged: the ASCII key the refused form's query carried has its one
        // request left.
        let again = format!("{login}?api_key=d{i}");
        assert_eq!(send(client, "GET", &again, &[], b"").await.status, 200);
        assert_eq!(send(client, "GET", &again, &[], b"").await.status, 429);
        ascii_and_utf_8_pass(client, &login, i).await;
        // A route keyed by a header reads no parameters: its requests are not concerned.
        let headers = [
            ("content-type", "text/plain; charset=utf-16"),
            ("x-tenant", "t"),
        ];
        let other = gw.url("/other");
        let r = send_bytes(client, "POST", &other, &headers, utf16("x")).await;
        assert_eq!(r.status, if i == 0 { 200 } else { 429 }, "{}", r.text());
    }
    // Upstream saw, per client, the first GET of `d`, the four forms and the ASCII Latin-1
    // form (the requests after them were refused 429), and the unkeyed POST once: none of
    // the refused 415s.
    assert_eq!(up.requests(), 2 * (1 + 4 + 1) + 1);
}

/// ASCII and Latin-1 (Apache HttpClient's default) hold for ASCII bytes only; UTF-8 and
/// ASCII pass however spelt, and are charged (`i`: the client's number, in the keys).
async fn ascii_and_utf_8_pass(client: &HttpClient, login: &str, i: usize) {
    let latin = [(
        "content-type",
        "application/x-www-form-urlencoded; charset=ISO-8859-1",
    )];
    let r = send_bytes(
        client,
        "POST",
        login,
        &latin,
        Bytes::from(format!("api_key=l{i}")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send_bytes(
        client,
        "POST",
        login,
        &latin,
        Bytes::from_static(b"api_key=caf%E9"),
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(r.json()["charset"], "ISO-8859-1");
    let url = format!("{login}?api_key=caf%C3%A9");
    assert_eq!(send(client, "GET", &url, &latin, b"").await.status, 415);
    // UTF-8 and ASCII pass, however spelt, and are charged.
    for (n, charset) in ["utf-8", "UTF8", "\"utf_8\"", "us-ascii"]
        .iter()
        .enumerate()
    {
        let content_type = format!("application/x-www-form-urlencoded; charset={charset}");
        let headers = [("content-type", content_type.as_str())];
        let body = Bytes::from(format!("api_key=c{n}{i}"));
        let r = send_bytes(client, "POST", login, &headers, body).await;
        assert_eq!(r.status, 200, "{charset}: {}", r.text());
        let spent = format!("{login}?api_key=c{n}{i}");
        assert_eq!(send(client, "GET", &spent, &[], b"").await.status, 429);
    }
}

#[tokio::test]
async fn a_charset_on_any_content_type_line_is_read() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&routes(), &up.url()).await;
    let url = gw.url("/login");
    let headers = [
        (
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        ),
        (
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-16",
        ),
    ];
    for client in [http1(), http2()] {
        let body = Bytes::from_static(b"api_key=two");
        let r = send_bytes(&client, "POST", &url, &headers, body).await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert_eq!(r.json()["charset"], "utf-16");
    }
    // From a raw socket, one line joined by a comma, as Django under ASGI joins them.
    let request = "POST /login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded; charset=utf-8, text/plain; charset=utf-32\r\ncontent-length: 11\r\nconnection: close\r\n\r\napi_key=two";
    let (answer, _) = raw(gw.addr, request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 415, "{answer}");
    // Read strictly: the piece holding a comma is no plain charset, and is named whole.
    assert!(
        answer.contains("\"charset\":\"charset=utf-8, text/plain\""),
        "{answer}"
    );
    assert_eq!(up.requests(), 0);
    // The key was never charged.
    assert_eq!(get(&format!("{url}?api_key=two"), &[]).await.status, 200);
}

#[tokio::test]
async fn a_multipart_field_in_another_charset_is_refused() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&routes(), &up.url()).await;
    let url = gw.url("/login");
    let multipart = [("content-type", "multipart/form-data; boundary=XyZ")];
    let body = |head: &str, value: &[u8]| {
        let mut body = format!("--XyZ\r\n{head}\r\n\r\n").into_bytes();
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n--XyZ--\r\n");
        Bytes::from(body)
    };
    let field = "Content-Disposition: form-data; name=\"api_key\"";
    for (i, client) in [http1(), http2()].iter().enumerate() {
        // busboy (Express's multer, Fastify) decodes a field in its part's charset (busboy.rs
        // shows it), and RFC 2231 has a name read in its charset: other bytes here.
        let utf16 = utf16(&format!("m{i}")).slice(2..);
        let refused = [
            (
                body(
                    &format!("{field}\r\nContent-Type: text/plain; charset=utf-16le"),
                    &utf16,
                ),
                "utf-16le",
            ),
            (
                body(
                    "Content-Disposition: form-data; name*=utf-16le''a%00p%00i%00_%00k%00e%00y%00",
                    format!("n{i}").as_bytes(),
                ),
                "utf-16le",
            ),
            (
                body(
                    &format!("{field}\r\nContent-Type: text/plain; charset=base64"),
                    b"bTA=",
                ),
                "base64",
            ),
        ];
        for (sent, named) in refused {
            let r = send_bytes(client, "POST", &url, &multipart, sent).await;
            assert_eq!(r.status, 415, "{named}: {}", r.text());
            assert_eq!(r.json()["error"], "unsupported_charset");
            assert_eq!(r.json()["charset"], named);
        }
        // A refused body charges nothing: an ASCII key beside the UTF-16 field keeps its
        // one request.
        let mut both = body(&format!("{field}\r\n"), format!("k{i}").as_bytes()).to_vec();
        both.truncate(both.len() - b"--XyZ--\r\n".len());
        both.extend_from_slice(&body(
            &format!("{field}\r\nContent-Type: text/plain; charset=utf-16le"),
            &utf16,
        ));
        let r = send_bytes(client, "POST", &url, &multipart, Bytes::from(both)).await;
        assert_eq!(r.status, 415, "{}", r.text());
        let spent = format!("{url}?api_key=k{i}");
        assert_eq!(send(client, "GET", &spent, &[], b"").await.status, 200);
        assert_eq!(send(client, "GET", &spent, &[], b"").await.status, 429);
        // A file's charset is its own: an upload passes, its field is no key.
        let upload = body(
            "Content-Disposition: form-data; name=\"api_key\"; filename=\"k.csv\"\r\nContent-Type: text/csv; charset=iso-8859-1",
            b"k\xe9",
        );
        let r = send_bytes(client, "POST", &url, &multipart, upload).await;
        assert_eq!(r.status, 200, "{}", r.text());
        // A field in UTF-8 is read and charged as before.
        let sent = body(
            &format!("{field}\r\nContent-Type: text/plain; charset=UTF-8"),
            format!("u{i}").as_bytes(),
        );
        let r = send_bytes(client, "POST", &url, &multipart, sent).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let spent = format!("{url}?api_key=u{i}");
        assert_eq!(send(client, "GET", &spent, &[], b"").await.status, 429);
    }
    assert_eq!(up.requests(), 6);
}

#[tokio::test]
async fn a_grpc_call_naming_another_charset_is_told_why_in_grpc() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&routes(), &up.url()).await;
    let headers = [
        ("content-type", "application/grpc; charset=utf-16"),
        ("te", "trailers"),
    ];
    let url = gw.url("/login/pkg.Svc/Call?api_key=g");
    let r = send(&http2(), "POST", &url, &headers, b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("grpc-status"), Some("12"), "UNIMPLEMENTED");
    assert_eq!(
        r.header("grpc-message"),
        Some("tollgate: the request's content-type names a charset other than utf-8, which keys are not read in")
    );
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn a_jwt_key_read_from_the_query_is_covered_too() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&routes(), &up.url()).await;
    // A token in `access_token`, which an upstream reading the query would decode in the
    // charset named: refused as a `query:` key's request is.
    let token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.";
    let url = gw.url(&format!("/token?access_token={token}"));
    let utf16 = [("content-type", "text/plain; charset=utf-16")];
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &url, &utf16, b"").await;
        assert_eq!(r.status, 415, "{}", r.text());
    }
    assert_eq!(get(&url, &[]).await.status, 200);
    assert_eq!(get(&url, &[]).await.status, 429);
    assert_eq!(up.requests(), 1);
}
