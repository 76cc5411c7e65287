//! The charset trick against a real Django upstream (`tests/django/app.py`, Django and
//! Django REST framework as released). Straight to Django, a GET whose `Content-Type`
//! names UTF-16 has its query's escapes read as UTF-16 (`%61%00…` is `alice`), and a JSON
//! body in EBCDIC (`charset=cp500`) is parsed by Django REST framework: the same key to the
//! application, other bytes to a gateway. Through tollgate both are refused 415 before
//! anything is charged or forwarded, and the same keys in UTF-8 reach Django and are
//! charged. Over HTTP/1.1 and HTTP/2.

use bytes::Bytes;

use crate::support::*;

/// `tests/django/app.py`: Django and Django REST framework as released.
async fn django() -> ScriptUpstream {
    ScriptUpstream::start(
        "python3",
        "tests/django/app.py",
        "django and djangorestframework",
    )
    .await
}

/// `alice` as UTF-16LE escapes in a query of odd length: Django decodes the query in the
/// charset named, falls back to Latin-1 when that fails, then reads the escapes in it.
const UTF16_QUERY: &str = "/login?api_key=%61%00%6c%00%69%00%63%00%65%00&";
const UTF16: (&str, &str) = ("content-type", "text/plain; charset=utf-16");
/// `{"user":"alice"}` in EBCDIC (Python's `cp500`).
const EBCDIC_JSON: &[u8] = &[
    192, 127, 164, 162, 133, 153, 127, 122, 127, 129, 147, 137, 131, 133, 127, 208,
];
const EBCDIC: (&str, &str) = ("content-type", "application/json; charset=cp500");

#[tokio::test]
#[ignore = "needs Python's django and djangorestframework: scripts/test installs them"]
async fn django_reads_keys_in_the_charset_named_and_the_gateway_refuses_it() {
    let django = django().await;
    // The premise, straight to Django.
    let direct = send(&http1(), "GET", &django.url(UTF16_QUERY), &[UTF16], b"").await;
    assert_eq!(direct.status, 200, "{}", direct.text());
    assert_eq!(direct.json()["get"], serde_json::json!(["alice"]));
    let tools = django.url("/tools");
    let direct = send(&http1(), "POST", &tools, &[EBCDIC], EBCDIC_JSON).await;
    assert_eq!(direct.status, 200, "{}", direct.text());
    assert_eq!(direct.json()["user"], "alice");

    let toml = Fixture::new()
        .skipping_policy("per_key", "query:api_key", 1)
        .skipping_policy("per_user", "json:/user", 1)
        .route("login", "/login", "api", &["per_key"])
        .route("tools", "/tools", "api", &["per_user"])
        .build();
    let gw = TestGateway::start(&toml, &django.url("")).await;
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &gw.url(UTF16_QUERY), &[UTF16], b"").await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert_eq!(r.json()["charset"], "utf-16");
        let r = send(&client, "POST", &gw.url("/tools"), &[EBCDIC], EBCDIC_JSON).await;
        assert_eq!(r.status, 415, "{}", r.text());
        assert_eq!(r.json()["charset"], "cp500");
    }
    // The same keys in UTF-8 reach Django once each, then are refused: nothing was spent
    // on them by the refusals above.
    let login = gw.url("/login?api_key=alice");
    let r = send(&http2(), "GET", &login, &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["get"], serde_json::json!(["alice"]));
    assert_eq!(send(&http1(), "GET", &login, &[], b"").await.status, 429);
    let json = [("content-type", "application/json")];
    let body = || Bytes::from_static(b"{\"user\":\"alice\"}");
    let r = send_bytes(&http1(), "POST", &gw.url("/tools"), &json, body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["user"], "alice");
    let r = send_bytes(&http2(), "POST", &gw.url("/tools"), &json, body()).await;
    assert_eq!(r.status, 429, "{}", r.text());
}

#[tokio::test]
#[ignore = "needs Python's django and djangorestframework: scripts/test installs them"]
async fn every_charset_spelling_django_decodes_in_is_refused() {
    let django = django().await;
    let toml = Fixture::new()
        .skipping_policy("per_key", "query:api_key", 1000)
        .route("login", "/login", "api", &["per_key"])
        .build();
    let gw = TestGateway::start(&toml, &django.url("")).await;
    // Spellings readers tokenise differently: whatever Django reads as a charset other
    // than UTF-8, the gateway refuses (it refuses some Django ignores, never the reverse).
    for content_type in [
        "text/plain; charset=utf-8",
        "text/plain; charset=UTF8",
        "text/plain; charset=utf-16",
        "text/plain; charset=\"utf-8;sig\"",
        "text/plain; charset=utf-8,sig",
        "text/plain; charset*=utf-8''utf-16",
        "text/plain; charset*=utf-8''utf%2D16",
        "text/plain; CHARSET = cp500",
        "text/plain; charset=\"utf\\-16\"",
        "text/plain; charset=utf-8; charset=utf-16",
        "text/plain; charset=utf-16; charset=utf-8",
        "text/plain; xcharset=utf-16",
    ] {
        let headers = [("content-type", content_type)];
        let direct = send(&http1(), "GET", &django.url("/login?x=1"), &headers, b"").await;
        let encoding = direct.json()["encoding"]
            .as_str()
            .map(str::to_ascii_lowercase);
        let utf8 = encoding
            .as_deref()
            .is_none_or(|e| matches!(e.replace(['-', '_'], "").as_str(), "utf8"));
        let through = send(&http1(), "GET", &gw.url("/login?x=1"), &headers, b"").await;
        if !utf8 {
            assert_eq!(
                through.status, 415,
                "{content_type}: Django reads {encoding:?}"
            );
        }
        if ["text/plain; charset=utf-8", "text/plain; charset=UTF8"].contains(&content_type) {
            assert_eq!(through.status, 200, "{content_type}: {}", through.text());
        }
    }
}
