//! Values of the sources read from the request's text — a query string's parameters (and
//! those of a body frameworks merge with them), a bearer token's claim (cookies:
//! `cookie.rs`) — each read as the readers behind the gateway read them (Rack, Express,
//! PHP, Go, Python's), every reading charged.

use std::borrow::Cow;

use base64::Engine;
use http::header::HeaderName;
use http::HeaderMap;

use super::part::{push_distinct, KeyPart, KeyValues, TooManyValues};

/// Optional whitespace (RFC 9110 §5.6.3) around text: a header value as read, and a key
/// part given as text (a rate limit service's descriptor value) read the same way.
pub(crate) fn trim_ows_text(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// Optional whitespace (RFC 9110 §5.6.3): spaces and horizontal tabs.
pub(super) fn trim_ows(b: &[u8]) -> &[u8] {
    trim_bytes(b, |c| c == b' ' || c == b'\t')
}

/// `b` without the bytes `trimmed` takes at either end.
fn trim_bytes(b: &[u8], trimmed: impl Fn(u8) -> bool) -> &[u8] {
    let start = b.iter().position(|&c| !trimmed(c)).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| !trimmed(c))
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// The values of headers whose names are `name` with `_` for some `-` (`x_api_key` for
/// `x-api-key`): CGI-style readers (Rack and Puma, Django under ASGI, WSGI servers) take
/// them for the same header. Looked for only when `name` itself is absent, so a request
/// that carries its header pays nothing; one that carries both was charged for `name`,
/// and such readers then drop the other or join the two.
pub(super) fn underscore_values<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let wanted = name.as_str().as_bytes();
    if !wanted.contains(&b'-') {
        return Ok(());
    }
    let folds = |other: &[u8]| {
        other.len() == wanted.len()
            && other
                .iter()
                .zip(wanted)
                .all(|(o, w)| o == w || (*o == b'_' && *w == b'-'))
    };
    for (other, value) in headers {
        if folds(other.as_str().as_bytes()) {
            header_value(value, values)?;
        }
    }
    Ok(())
}

/// Charges one header line's value, spaces and tabs around it removed (HTTP/1 parsers
/// trim them, HTTP/2 does not and the HTTP/1 upstream then does), unless it is empty.
pub(super) fn header_value<'a>(
    value: &'a http::HeaderValue,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let v = trim_ows(value.as_bytes());
    if v.is_empty() {
        return Ok(());
    }
    push_distinct(values, KeyPart::Bytes(Cow::Borrowed(v)))
}

/// Every `name=value` pair, percent-decoded so `a%20b` and `a+b` are one key. A
/// parameter is `name`'s when any common reader takes it so ([`names_param`]), and a `;`
/// separates pairs too, as Rack 2 splits them (`?x=1;key=k` is `key=k` to Rails 7).
pub(super) fn query_values<'a>(
    query: &'a [u8],
    name: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    form_values(query, &|k| names_param(k, name), values)
}

/// Every pair of a query or a form whose decoded name `named` takes, its value charged
/// (pairs split at `&`, then, when there is one, at `;` too: see [`query_values`]).
pub(super) fn form_values<'a>(
    text: &'a [u8],
    named: &dyn Fn(&str) -> bool,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    charge_pairs(text, false, named, values)?;
    if text.contains(&b';') {
        charge_pairs(text, true, named, values)?;
    }
    Ok(())
}

/// Charges the value of each pair of `query` (split at `&`, and at `;` too when
/// `semicolons`) that `named` takes and that is not empty, each decoded as
/// `form_urlencoded` decodes it. A pair's name is decoded first and its value only when
/// the name matches: a form body's long fields of other names cost a scan, not a
/// decoding.
fn charge_pairs<'a>(
    query: &'a [u8],
    semicolons: bool,
    named: &dyn Fn(&str) -> bool,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let mut rest = query;
    while !rest.is_empty() {
        let end = match semicolons {
            true => memchr::memchr2(b'&', b';', rest),
            false => memchr::memchr(b'&', rest),
        };
        let (pair, next) = match end {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        if pair.is_empty() {
            continue;
        }
        let end = memchr::memchr(b'=', pair).unwrap_or(pair.len());
        let name = form_urlencoded::parse(&pair[..end]).next();
        if !name.is_some_and(|(k, _)| named(&k)) {
            continue;
        }
        let Some((_, v)) = form_urlencoded::parse(pair).next() else {
            continue;
        };
        if v.is_empty() {
            continue;
        }
        let part = match v {
            Cow::Borrowed(s) => KeyPart::Bytes(Cow::Borrowed(s.as_bytes())),
            Cow::Owned(s) => KeyPart::Bytes(Cow::Owned(s.into_bytes())),
        };
        push_distinct(values, part)?;
    }
    Ok(())
}

/// Whether a query parameter called `k` (decoded) is `name` to a common reader: the same
/// name; an array of it (`name[]`, `name[0]`: Rack, Express's `qs`, PHP; a hash,
/// `name[a]`, is another value to all of them); Rack's reading of stray brackets
/// (`[name]`, `name]`); PHP's mangling (leading spaces dropped; before the first `[`, a `.`
/// or a space is `_`; a `[` that never closes is `_` and ends the mangling).
pub(super) fn names_param(k: &str, name: &str) -> bool {
    if k == name {
        return true;
    }
    // PHP registers a variable by its C string: the name ends at a NUL.
    if let Some(nul) = k.find('\0') {
        return names_param(&k[..nul], name) || names_param(&k.replace('\0', ""), name);
    }
    if !k.bytes().any(|b| matches!(b, b'[' | b']' | b'.' | b' ')) {
        return false;
    }
    let array_of = |k: &str, name: &str| {
        let index = k.strip_prefix(name).and_then(|r| r.strip_prefix('['));
        index
            .and_then(|r| r.strip_suffix(']'))
            .is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit()))
    };
    if array_of(k, name) || k.trim_start_matches(['[', ']']).trim_end_matches(']') == name {
        return true;
    }
    let php = k.trim_start_matches(' ');
    let mangle = |base: &str| -> String {
        base.chars()
            .map(|c| if c == '.' || c == ' ' { '_' } else { c })
            .collect()
    };
    match php.find('[') {
        Some(open) if php[open..].contains(']') => {
            let (base, rest) = php.split_at(open);
            array_of(&format!("{}{rest}", mangle(base)), name)
        }
        Some(open) => format!("{}_{}", mangle(&php[..open]), &php[open + 1..]) == name,
        None => mangle(php) == name,
    }
}

/// Longest bearer token whose payload we are willing to decode.
const MAX_JWT_LEN: usize = 8192;

/// The claim of every bearer token in one `Authorization` value. The signature is NOT
/// verified: the gateway only reads the claim to pick a bucket (docs/configuration.md).
/// A value is one credential to RFC 9110, but its readers take more: flask-jwt-extended
/// splits it at commas (`Basic Zm9v, Bearer <jwt>` and `,Bearer <jwt>` hold a token) and
/// the scheme from the token at any white space Python's `split()` takes (`Bearer\xa0<jwt>`,
/// the value read as Latin-1), so each such element's claim is charged; a JWT holds no
/// comma.
pub(super) fn jwt_claims<'a>(
    value: &[u8],
    claim: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    for element in value.split(|&b| b == b',') {
        if let Some(part) = bearer_claim(element, claim) {
            push_distinct(values, part)?;
        }
    }
    Ok(())
}

/// The claim of one `Bearer <jwt>` credential: any run of white space (Python's, on
/// Latin-1: spaces, tabs, `\xa0`, `\x85`, …) between scheme and token.
fn bearer_claim<'a>(element: &[u8], claim: &str) -> Option<KeyPart<'a>> {
    let space = |b: &u8| python_space(*b);
    let element = trim_python_space(element);
    let (scheme, token) = element.split_at(element.iter().position(space)?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    token_claim(std::str::from_utf8(trim_python_space(token)).ok()?, claim)
}

/// Python's `str.isspace` on a byte read as Latin-1 (`\t`–`\r`, `\x1c`–`\x20`, `\x85`,
/// `\xa0`).
fn python_space(b: u8) -> bool {
    matches!(b, b'\t'..=b'\r' | 0x1c..=0x20 | 0x85 | 0xa0)
}

/// `b` without what Python's `str.strip()` removes from its ends, read as Latin-1.
pub(super) fn trim_python_space(b: &[u8]) -> &[u8] {
    trim_bytes(b, python_space)
}

/// Every `access_token` parameter of the query, read as a bearer token: RFC 6750 lets a
/// client send it there, and passport-http-bearer (and Spring, when told to) takes it.
pub(super) fn query_token_claims<'a>(
    query: &str,
    claim: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    // The parameter as the query's readers name it (`access%5Ftoken`, a `;` pair, …).
    let mut tokens = KeyValues::new();
    query_values(query.as_bytes(), "access_token", &mut tokens)?;
    for token in &tokens {
        let token = token.as_text();
        if let Some(part) = token_claim(&token, claim) {
            push_distinct(values, part)?;
        }
    }
    Ok(())
}

/// A claim of one token's payload; `None` for a token too long or not a JWT.
fn token_claim<'a>(token: &str, claim: &str) -> Option<KeyPart<'a>> {
    if token.len() > MAX_JWT_LEN {
        return None;
    }
    let mut segments = token.split('.');
    let (_header, payload, _sig) = (segments.next()?, segments.next()?, segments.next()?);
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let text = match json.get(claim)? {
        serde_json::Value::String(s) if !s.is_empty() => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    Some(KeyPart::Bytes(Cow::Owned(text.into_bytes())))
}
