//! The charset a request's `Content-Type` names, where an upstream reads parameters by it.
//!
//! Django decodes a request's query in the charset its `Content-Type` names
//! (`request.encoding`, any Python codec: UTF-16, UTF-32, `utf-8-sig`, EBCDIC's `cp500`…),
//! a GET's too, and its multipart fields; Django REST framework parses a JSON body in it;
//! Tomcat takes `charset=` anywhere in the value (`tests/integration/django.rs` shows
//! Django's two). A key sent in such a charset is other bytes to tollgate and the same text
//! to the upstream: a key not found (a `missing = "skip"` tier skipped) or a fresh bucket
//! per charset. Those bytes cannot be read as every codec would read them, so on a route
//! keyed by the query or by the body a request naming such a charset is refused (415), as
//! Express's body-parser refuses the charsets it does not read.
//!
//! The reading is strict, not loose: a parameter holding `charset` anywhere (its name, its
//! value, another parameter's) passes only when it is plainly `charset=` and a charset's
//! name; any other spelling is refused, since each reader tokenises its own way (Python
//! keeps a quoted `;`, strips non-ASCII white space, decodes RFC 2231's `charset*`).

use http::header::CONTENT_TYPE;
use http::HeaderMap;

/// What a named charset means for reading keys as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charset {
    /// None named, or UTF-8: the bytes are what tollgate keys by.
    Utf8,
    /// ASCII or a Latin-1 family (what Apache HttpClient names by default): the same
    /// text as UTF-8 while every byte is ASCII, and only then (busboy reads `us-ascii` as
    /// Latin-1, others turn non-ASCII into `?`). As written.
    AsciiOnly(String),
    /// Anything else, or a spelling not read plainly: refused. As written.
    Foreign(String),
}

impl Charset {
    /// The stricter of two readings.
    fn worst(self, other: Charset) -> Charset {
        match (&self, &other) {
            (Charset::Foreign(_), _) => self,
            (_, Charset::Foreign(_)) => other,
            (Charset::AsciiOnly(_), _) => self,
            _ => other,
        }
    }

    /// What `bytes` (a query, a body, a field) read under this charset come to: `None`
    /// when they are the bytes tollgate keys by, else the charset to name in a refusal.
    pub fn refusal(&self, bytes: &[u8]) -> Option<&str> {
        match self {
            Charset::Utf8 => None,
            Charset::AsciiOnly(named) => (!is_ascii_text(bytes)).then_some(named),
            Charset::Foreign(named) => Some(named),
        }
    }
}

/// The charset every `Content-Type` line of `headers` names, the strictest of them.
pub fn of_request(headers: &HeaderMap) -> Charset {
    of_lines(headers.get_all(CONTENT_TYPE).iter().map(|l| l.as_bytes()))
}

/// The strictest charset any of `lines` (`Content-Type` values) names.
pub fn of_lines<'v>(lines: impl IntoIterator<Item = &'v [u8]>) -> Charset {
    lines
        .into_iter()
        .fold(Charset::Utf8, |worst, line| worst.worst(of_value(line)))
}

/// The charset one `Content-Type` value names (a multipart part's own, for one): every
/// `;`-separated piece that holds `charset` in any case must read plainly as
/// `charset=NAME` or `charset="NAME"`.
pub fn of_value(value: &[u8]) -> Charset {
    value
        .split(|&b| b == b';')
        .filter(|piece| holds_charset(piece))
        .map(|piece| match plain_charset(piece) {
            Some(name) => named(name),
            None => Charset::Foreign(String::from_utf8_lossy(piece.trim_ascii()).into_owned()),
        })
        .fold(Charset::Utf8, Charset::worst)
}

/// A charset's name classified: compared by its ASCII letters and digits, as codec
/// lookups compare them (`UTF-8`, `utf8` and `UTF_8` are one).
pub fn named(name: &[u8]) -> Charset {
    let letters: Vec<u8> = name
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect();
    let written = || String::from_utf8_lossy(name).into_owned();
    match &letters[..] {
        b"utf8" => Charset::Utf8,
        b"usascii" | b"ascii" | b"iso88591" | b"latin1" | b"l1" | b"windows1252" | b"cp1252"
        | b"xcp1252" | b"iso885911987" => Charset::AsciiOnly(written()),
        _ => Charset::Foreign(written()),
    }
}

/// Whether `piece` holds `charset` in any case, anywhere.
fn holds_charset(piece: &[u8]) -> bool {
    piece.windows(7).any(|w| w.eq_ignore_ascii_case(b"charset"))
}

/// `charset=NAME` or `charset="NAME"`, ASCII white space around, NAME of letters, digits
/// and `-_.:`: the name; `None` for any other spelling.
fn plain_charset(piece: &[u8]) -> Option<&[u8]> {
    let piece = piece.trim_ascii();
    let (name, value) = piece.split_at(piece.iter().position(|&b| b == b'=')?);
    if !name.trim_ascii().eq_ignore_ascii_case(b"charset") {
        return None;
    }
    let value = value[1..].trim_ascii();
    let value = match value.strip_prefix(b"\"") {
        Some(quoted) => quoted.strip_suffix(b"\"")?,
        None => value,
    };
    let plain = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':');
    (!value.is_empty() && value.iter().all(plain)).then_some(value)
}

/// Bytes that read the same in ASCII, Latin-1 and UTF-8, escapes included: no byte past
/// 0x7F, and no `%XX` escape of one.
pub fn is_ascii_text(bytes: &[u8]) -> bool {
    bytes.is_ascii()
        && memchr::memchr_iter(b'%', bytes).all(|at| {
            !bytes
                .get(at + 1)
                .is_some_and(|d| matches!(d, b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
        })
}

#[cfg(test)]
mod tests;
