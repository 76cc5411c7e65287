//! Cookies as their readers read them: every `Cookie` header's pairs — split at `;`, and
//! also where ASP.NET Core (at `,`) and Python's `SimpleCookie` (at white space) split
//! them — names as PHP mangles them, names and values trimmed as each reader trims them,
//! a quoted value unescaped as Python does, `%` and `+` decoded as Express, Rack and PHP
//! do — every reading charged.

use std::borrow::Cow;

use http::header::COOKIE;
use http::HeaderMap;

use super::part::{push_distinct, KeyPart, KeyValues, TooManyValues};
use super::parts::{names_param, trim_ows, trim_python_space};

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
    let segments = headers
        .get_all(COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'));
    for segment in segments {
        if let Some(eq) = segment.iter().position(|&b| b == b'=') {
            charge(name, (&segment[..eq], &segment[eq + 1..]), values)?;
        }
        if trim_ows(segment).iter().any(|&b| splits_further(b)) {
            inner_pairs(segment, name, values)?;
        }
    }
    Ok(())
}

/// Where readers that split a `;`-segment further split it: ASP.NET Core at `,` (and,
/// retrying a byte later on a pair it cannot parse, after white space), Python's
/// `SimpleCookie` (Bottle, CherryPy) at white space.
fn splits_further(b: u8) -> bool {
    matches!(b, b',' | b' ' | b'\t')
}

/// The pairs those readers find inside one `;`-segment, charged when they name `name`:
/// `sid=N1, sid=S` is `S` to ASP.NET Core (the last value wins) and `sid=N1 sid=S` is `S`
/// to `SimpleCookie`, where a `;`-reader reads one cookie whose value is `N1, sid=S`. A
/// name starts the segment or follows a splitting byte; `SimpleCookie` allows white space
/// around `=`; the value is read to the next `,` (ASP.NET) and to the next white space
/// (`SimpleCookie`). Only a pair whose name is the cookie's is read further: a long
/// header of short pieces costs one pass over it.
fn inner_pairs<'a>(
    segment: &'a [u8],
    name: &str,
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    let space = |b: &u8| matches!(b, b' ' | b'\t');
    let starts = std::iter::once(0).chain(
        (segment.iter().enumerate())
            .filter(|(_, &b)| splits_further(b))
            .map(|(i, _)| i + 1),
    );
    for start in starts {
        let rest = &segment[start..];
        let name_len = (rest.iter())
            .position(|&b| b == b'=' || splits_further(b))
            .unwrap_or(rest.len());
        let (k, after) = rest.split_at(name_len);
        if k.is_empty() || !names_cookie(k, name) {
            continue;
        }
        let after = &after[after.iter().take_while(|b| space(b)).count()..];
        let Some(v) = after.strip_prefix(b"=") else {
            continue;
        };
        let v = &v[v.iter().take_while(|b| space(b)).count()..];
        charge(name, (k, value_to(v, |b| b == b',')), values)?;
        charge(name, (k, value_to(v, |b| space(&b))), values)?;
    }
    Ok(())
}

/// A value as a reader that splits further takes it: a quoted one whole, to its closing
/// quote (`\` escaping the byte after it), as `SimpleCookie` and ASP.NET Core read a
/// quoted string (an unclosed one to the end); else up to the first byte that `ends` it.
fn value_to(v: &[u8], ends: impl Fn(u8) -> bool) -> &[u8] {
    if v.first() == Some(&b'"') {
        let mut i = 1;
        while let Some(&b) = v.get(i) {
            match b {
                b'\\' => i += 2,
                b'"' => return &v[..=i],
                _ => i += 1,
            }
        }
        return v;
    }
    let end = v.iter().position(|&b| ends(b)).unwrap_or(v.len());
    &v[..end]
}

/// One pair, charged under every reading of it.
fn charge<'a>(
    name: &str,
    (k, v): (&'a [u8], &'a [u8]),
    values: &mut KeyValues<'a>,
) -> Result<(), TooManyValues> {
    for (k, v) in readings(k, v) {
        cookie_value(name, (k, v), values)?;
    }
    Ok(())
}

/// Whether a cookie called `k` is `name` to a common reader: the same bytes, or the name
/// PHP registers it under (`$_COOKIE`: a `.` or a space is `_`, a `[` that never closes is
/// `_`; the first of a name wins there, so `s.id=S; s_id=N` is `S` to PHP).
fn names_cookie(k: &[u8], name: &str) -> bool {
    if k == name.as_bytes() {
        return true;
    }
    // PHP's mangling keeps a name's length but for an index or a NUL: a longer name
    // cannot be this one to it, and is not read as text.
    k.len() <= name.len() + 8
        && k.iter().any(|b| matches!(b, b'.' | b' ' | b'[' | b']' | 0))
        && std::str::from_utf8(k).is_ok_and(|k| names_param(k, name))
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
    if v.is_empty() || !names_cookie(k, name) {
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
