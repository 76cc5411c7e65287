//! Cookies as their readers read them: every `Cookie` header's pairs, names and values
//! trimmed as each reader trims them, a quoted value unescaped as Python does, `%` and
//! `+` decoded as Express, Rack and PHP do — every reading charged.

use std::borrow::Cow;

use http::header::COOKIE;
use http::HeaderMap;

use super::part::{push_distinct, KeyPart, KeyValues, TooManyValues};
use super::parts::{trim_ows, trim_python_space};

/// Every cookie called `name` across all Cookie headers; `sid= "k"` and `sid=k` are one,
/// and a quoted value with a backslash is read as Python unescapes it.
/// A value with `%` or `+` is charged as decoders read it: Express, Rack and PHP decode
/// cookie values (`%61bc` is `abc`; Rack and PHP read `+` as a space), so each encoding of
/// one value would otherwise be a fresh key.
pub(super) fn cookie_values<'a>(
    headers: &'a HeaderMap,
    name: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let pairs = headers
        .get_all(COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'));
    for pair in pairs {
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, v) = (&pair[..eq], &pair[eq + 1..]);
        for (k, v) in readings(k, v) {
            cookie_value(name, (k, v), values)?;
        }
    }
    Ok(())
}

/// A cookie's name and value as its readers trim them: spaces and tabs (every reader);
/// and, when either holds more at its ends, as Python's `str.strip()` does — Starlette
/// on the bytes read as Latin-1 (`\xa0`, `\x85`, `\x1c`–`\x1f`, …), Django and Werkzeug on
/// them read as UTF-8 (any Unicode white space) — so `sid=victim\xa0`, `sid=victim\xa0\xa0`
/// and ` \xa0sid=victim` are `victim`'s, not a bucket each nor a cookie missing.
fn readings<'v>(k: &'v [u8], v: &'v [u8]) -> impl Iterator<Item = (&'v [u8], &'v [u8])> {
    let ows = (trim_ows(k), trim_ows(v));
    // Ends that are printable ASCII (nearly every cookie) stop every reader's trim alike.
    let graphic = |b: &[u8]| {
        let printable = |c: Option<&u8>| c.is_none_or(u8::is_ascii_graphic);
        printable(b.first()) && printable(b.last())
    };
    let plain = graphic(ows.0) && graphic(ows.1);
    let python = move |strip: fn(&[u8]) -> &[u8]| {
        let read = (!plain).then(|| (strip(k), strip(v)));
        read.filter(|read| *read != ows)
    };
    std::iter::once(ows)
        .chain(python(trim_python_space))
        .chain(python(strip_unicode_space))
}

/// Python's `str.strip()` on text that is UTF-8 (as it is, when not: its readers then
/// read it otherwise).
fn strip_unicode_space(b: &[u8]) -> &[u8] {
    let Ok(text) = std::str::from_utf8(b) else {
        return b;
    };
    let space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    text.trim_matches(space).as_bytes()
}

/// One cookie's value, charged if its name is `name` (every reading of it, see
/// [`cookie_values`]).
fn cookie_value<'a>(
    name: &str,
    (k, v): (&'a [u8], &'a [u8]),
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let quoted = v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\""));
    let v = quoted.unwrap_or(v);
    if k != name.as_bytes() || v.is_empty() {
        return Ok(());
    }
    // Python (Django, Starlette) unescapes a quoted value: `"\141bc"` is `abc`.
    if quoted.is_some() && v.contains(&b'\\') {
        return push_distinct(values, KeyPart::Bytes(Cow::Owned(python_unquote(v))));
    }
    if !v.iter().any(|&b| b == b'%' || b == b'+') {
        return push_distinct(values, KeyPart::Bytes(Cow::Borrowed(v)));
    }
    // Express: percent-decoded; Rack and PHP: `+` a space first, then decoded. The
    // value as sent is not charged: a reader that takes it raw holds another session
    // for every other spelling, so none of them is a way around this one.
    let decoded: Vec<u8> = percent_encoding::percent_decode(v).collect();
    let plus: Vec<u8> = v
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    let spaced: Vec<u8> = percent_encoding::percent_decode(&plus).collect();
    for form in [decoded, spaced] {
        if !form.is_empty() {
            push_distinct(values, KeyPart::Bytes(Cow::Owned(form)))?;
        }
    }
    Ok(())
}

/// A quoted cookie value's inside as Python's `http.cookies` reads it: `\ooo` (the first
/// digit 0 to 3) is that octal byte, any other `\x` is `x`.
fn python_unquote(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match &v[i..] {
            [b'\\', a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', ..] => {
                out.push((a - b'0') << 6 | (b - b'0') << 3 | (c - b'0'));
                i += 4;
            }
            [b'\\', x, ..] => {
                out.push(*x);
                i += 2;
            }
            [x, ..] => {
                out.push(*x);
                i += 1;
            }
            [] => break,
        }
    }
    out
}
