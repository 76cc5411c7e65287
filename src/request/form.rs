//! The parameters web frameworks read from a request body as they read the query's:
//! PHP's `$_REQUEST`, Rails' `params`, Laravel's `input()` and Flask's `request.values`
//! merge a form (`application/x-www-form-urlencoded`), the text fields of a
//! `multipart/form-data` body and (Rails, Laravel) a JSON body's members into what a
//! handler reads as a query parameter. Pure functions over a body already read.

use std::borrow::Cow;

use http::header::CONTENT_TYPE;
use http::HeaderMap;
use memchr::memmem;

/// A body whose parameters frameworks merge with the query's, by its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsBody {
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/form-data`, with its boundary.
    Multipart(Box<str>),
    /// `application/json` and every `…/…+json` or `…json…` type Rails and Laravel parse.
    Json,
}

impl ParamsBody {
    /// The kind of `headers`' body, `None` when no framework reads parameters from it
    /// (or it has no `Content-Type`, or a multipart one without a boundary). Every
    /// `Content-Type` line is looked at, the first that names such a body taken: servers
    /// disagree on which of several a framework is given.
    pub fn of(headers: &HeaderMap) -> Option<Self> {
        headers
            .get_all(CONTENT_TYPE)
            .iter()
            .find_map(|value| Self::named(&String::from_utf8_lossy(value.as_bytes())))
    }

    /// The kind one `Content-Type` value names (bytes that are no UTF-8 read as U+FFFD:
    /// parsers take such a value, a charset spelled in Latin-1 say).
    fn named(value: &str) -> Option<Self> {
        let (essence, params) = value.split_once(';').unwrap_or((value, ""));
        let essence = essence.trim();
        if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            Some(ParamsBody::Form)
        } else if essence.eq_ignore_ascii_case("multipart/form-data") {
            boundary(params).map(ParamsBody::Multipart)
        } else if essence.to_ascii_lowercase().contains("json") {
            Some(ParamsBody::Json)
        } else {
            None
        }
    }
}

/// A multipart body's `boundary` parameter, unquoted.
fn boundary(params: &str) -> Option<Box<str>> {
    params.split(';').find_map(|p| {
        let (name, value) = p.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        (!value.is_empty() && value.len() <= 200).then(|| value.into())
    })
}

/// What a body read before the decision holds of parameters, for `query:` keys.
#[derive(Debug, Clone)]
pub enum BodyParams<'a> {
    /// A form's text: `name=value` pairs, as a query's.
    Form(&'a [u8]),
    /// A multipart body's text fields.
    Fields(Vec<Field<'a>>),
}

impl<'a> BodyParams<'a> {
    /// The parameters of `text`, a body of kind `kind` read whole (none in a JSON body:
    /// its members are found by the JSON walk).
    pub fn read(kind: &ParamsBody, text: &'a [u8]) -> Option<Self> {
        match kind {
            ParamsBody::Form => Some(BodyParams::Form(text)),
            ParamsBody::Multipart(boundary) => {
                Some(BodyParams::Fields(multipart_fields(text, boundary)))
            }
            ParamsBody::Json => None,
        }
    }
}

/// One text field of a multipart body: each reading of its name, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field<'a> {
    /// A `Vec`, covariant in `'a` (a `SmallVec` is not), as the request view's facts are.
    pub names: Vec<Cow<'a, str>>,
    pub value: &'a [u8],
}

/// The text fields of a `multipart/form-data` body (parts without a `filename`, which
/// frameworks hand over as uploads instead). Parts are split at the boundary's delimiter
/// after CRLF or a bare LF, as lenient parsers do; a body cut short ends with the last
/// whole part.
pub fn multipart_fields<'a>(body: &'a [u8], boundary: &str) -> Vec<Field<'a>> {
    let delimiter = format!("--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let mut fields = Vec::new();
    // The first delimiter may open the body; every later one follows a line break.
    let mut at = match body.starts_with(delimiter.as_bytes()) {
        true => 0,
        false => match next_delimiter(body, 0, &finder) {
            Some((_, start)) => start,
            None => return fields,
        },
    };
    loop {
        let after = at + delimiter.len();
        if body[after..].starts_with(b"--") {
            return fields;
        }
        // Transport padding up to the end of the delimiter's line.
        let Some(line_end) = memchr::memchr(b'\n', &body[after..]) else {
            return fields;
        };
        let part_start = after + line_end + 1;
        let Some((part_end, next)) = next_delimiter(body, part_start, &finder) else {
            return fields;
        };
        if let Some(field) = field(&body[part_start..part_end]) {
            fields.push(field);
        }
        at = next;
    }
}

/// The next delimiter from `from` that begins a line: where the part before it ends (its
/// line break excluded) and where the delimiter starts.
fn next_delimiter(body: &[u8], from: usize, finder: &memmem::Finder<'_>) -> Option<(usize, usize)> {
    let mut search = from;
    loop {
        let found = search + finder.find(&body[search..])?;
        if found > from && body[found - 1] == b'\n' {
            let end = match found >= from + 2 && body[found - 2] == b'\r' {
                true => found - 2,
                false => found - 1,
            };
            return Some((end, found));
        }
        search = found + 1;
    }
}

/// One part: its headers up to a blank line, then its value; `None` for a file or a part
/// without a name.
fn field(part: &[u8]) -> Option<Field<'_>> {
    let (head, value) = match memmem::find(part, b"\r\n\r\n") {
        Some(i) => (&part[..i], &part[i + 4..]),
        None => {
            let i = memmem::find(part, b"\n\n")?;
            (&part[..i], &part[i + 2..])
        }
    };
    let disposition = head.split(|&b| b == b'\n').find_map(|line| {
        let line = std::str::from_utf8(line).ok()?;
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    })?;
    let mut names = Vec::new();
    for (param, value) in disposition_params(disposition) {
        let is = |word: &str| param.eq_ignore_ascii_case(word);
        if is("filename") || is("filename*") {
            return None;
        } else if is("name") {
            names.extend(value);
        } else if is("name*") {
            names.extend(extended_value(&value[0]));
        }
    }
    (!names.is_empty()).then_some(Field { names, value })
}

/// `form-data; name="a"; filename=b` as (parameter, readings of its value): a quoted value
/// is read as written and with its backslash escapes undone (Werkzeug, PHP), the two
/// readings kept when they differ.
fn disposition_params(text: &str) -> Vec<(&str, smallvec::SmallVec<[Cow<'_, str>; 2]>)> {
    let mut params = Vec::new();
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].rsplit(';').next().unwrap_or("").trim();
        let after = rest[eq + 1..].trim_start();
        let (readings, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let (raw, unescaped, tail) = quoted_string(quoted);
                let mut readings = smallvec::SmallVec::new();
                readings.push(Cow::Borrowed(raw));
                if !unescaped.is_empty() && unescaped != raw {
                    readings.push(Cow::Owned(unescaped));
                }
                (readings, tail)
            }
            None => {
                let end = after.find(';').unwrap_or(after.len());
                let mut readings = smallvec::SmallVec::new();
                readings.push(Cow::Borrowed(after[..end].trim()));
                (readings, &after[end..])
            }
        };
        params.push((name, readings));
        rest = tail;
    }
    params
}

/// A quoted string after its opening quote: as written, with `\x` read as `x` (empty when
/// nothing is escaped), and what follows its closing quote (nothing, when it never closes).
fn quoted_string(text: &str) -> (&str, String, &str) {
    if let Some(end) = text
        .find(['"', '\\'])
        .filter(|&i| text.as_bytes()[i] == b'"')
    {
        // No escape before the closing quote: one reading (the common case).
        return (&text[..end], String::new(), &text[end + 1..]);
    }
    let mut unescaped = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (&text[..i], unescaped, &text[i + 1..]),
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    unescaped.push(escaped);
                }
            }
            c => unescaped.push(c),
        }
    }
    (text, unescaped, "")
}

/// An RFC 8187 value (`UTF-8''api%5Fkey`) percent-decoded, as Werkzeug reads `name*`.
fn extended_value(value: &str) -> Option<Cow<'static, str>> {
    let mut parts = value.splitn(3, '\'');
    let (_charset, _language, encoded) = (parts.next()?, parts.next()?, parts.next()?);
    let decoded = percent_encoding::percent_decode_str(encoded).decode_utf8_lossy();
    Some(Cow::Owned(decoded.into_owned()))
}

#[cfg(test)]
mod tests;
