//! Credentials as Python's readers read them: a cookie's name or value padded with what
//! `str.strip()` removes, and a bearer token among other credentials in one
//! `Authorization` value, are the credential's — over raw HTTP/1.1 bytes and HTTP/2
//! fields, against the spellings suite's policies (`spellings.rs`).

use super::spellings::{h2_get, spend, start};
use super::spellings_keys::bearer;
use crate::support::*;

/// A cookie's name or value padded with what Python's `str.strip()` removes — Latin-1
/// `\xa0` and `\x85` (Starlette), UTF-8 no-break and other Unicode spaces (Django,
/// Werkzeug) — is the trimmed cookie's: not a fresh bucket per padding,
/// nor a cookie missing (a `skip` tier skipped). Raw HTTP/1.1 bytes and HTTP/2 fields.
#[tokio::test]
async fn a_cookie_padded_with_what_python_strips_is_the_trimmed_cookies() {
    let (_up, gw) = start().await;
    spend(&gw, "/k/cookie", &[("cookie", "sid=victim")]).await;
    let paddings: [&[u8]; 6] = [
        b"sid=victim\xa0",
        b"sid=victim\xa0\xa0",
        b"sid=victim\xc2\xa0",
        b"sid=victim\xe3\x80\x80",
        b"\xa0sid=victim",
        b"sid=\x85victim\x85",
    ];
    for cookie in paddings {
        refused_both_ways(&gw, "/k/cookie", ("cookie", cookie)).await;
    }
}

/// An `Authorization` value that holds a bearer token among other elements, or with
/// white space Python splits at (flask-jwt-extended splits the value at commas, then the
/// scheme from the token with `split()`), is the token's: `,Bearer <jwt>`, `Basic …,
/// Bearer <jwt>` and `Bearer\xa0<jwt>` are not a key missing (a `skip` tier skipped).
#[tokio::test]
async fn a_bearer_token_among_other_credentials_is_the_tokens() {
    let (_up, gw) = start().await;
    let token = bearer("alice");
    let spent = format!("Bearer {token}");
    spend(&gw, "/k/jwt", &[("authorization", &spent)]).await;
    let spellings: Vec<Vec<u8>> = vec![
        format!(",Bearer {token}").into_bytes(),
        format!("Basic Zm9v, Bearer {token}").into_bytes(),
        [b"Bearer\xa0".as_slice(), token.as_bytes()].concat(),
    ];
    for value in &spellings {
        refused_both_ways(&gw, "/k/jwt", ("authorization", value)).await;
    }
}

/// A GET of `path` with the header `(name, value)` as raw bytes, over a raw HTTP/1.1
/// socket and a raw HTTP/2 stream: refused both ways (its key is spent).
async fn refused_both_ways(gw: &TestGateway, path: &str, (name, value): (&str, &[u8])) {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{name}: ").into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    let (answer, _) = raw(gw.addr, &request).await;
    assert_eq!(raw_status(&answer), 429, "{value:?}: {answer}");
    let (status, _) = h2_get(gw.addr, "x", path, &[(name, value)]).await;
    assert_eq!(status, 429, "HTTP/2 {value:?}");
}
