//! The charset a request's `Content-Type` names, where an upstream reads parameters by it.
//!
//! Django decodes a request's query in the charset its `Content-Type` names
//! (`request.encoding`, any Python codec: UTF-16, UTF-32, `utf-8-sig`, EBCDIC's `cp500`…),
//! a GET's too (its forms too before Django 5), and Django REST framework parses a JSON
//! body in it (`tests/integration/django.rs` shows both). A name or a key sent in such a
//! charset is other bytes to tollgate and the same text to the upstream: a key
//! not found (a `missing = "skip"` tier skipped) or a fresh bucket per charset. Those
//! bytes cannot be read as every codec would read them, so on a route keyed by a query
//! parameter or by the body a request naming any charset but UTF-8 or ASCII is refused
//! (415), as Express's body-parser refuses the charsets it does not read.

use http::header::CONTENT_TYPE;
use http::HeaderMap;

/// The first charset the `Content-Type` lines of `headers` name that is not UTF-8 or
/// ASCII, as written; `None` when every one named is (or none is).
///
/// Read as loosely as any reader does: a parameter ends at `;` or `,` (Django joins
/// repeated lines with a comma), its name is trimmed, lower-cased and cut at `*` (RFC
/// 2231's `charset*=utf-8''utf-16`, which Django decodes), quotes are dropped, and a name
/// whose last word is `charset` counts. A charset is then compared by its letters and
/// digits alone, as Python looks a codec up (`UTF_8`, `utf8` and `UTF-8` are one).
pub fn unsupported(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(CONTENT_TYPE)
        .iter()
        .find_map(|line| unsupported_in(line.as_bytes()))
}

/// [`unsupported`] of one `Content-Type` value (a multipart part's own, for one).
pub fn unsupported_in(value: &[u8]) -> Option<String> {
    value
        .split(|&b| b == b';' || b == b',')
        .filter_map(charset_value)
        .find(|value| !supported(value))
        .map(|value| String::from_utf8_lossy(&value).into_owned())
}

/// The value of a `charset` parameter, RFC 2231's form decoded; `None` for any other.
fn charset_value(param: &[u8]) -> Option<Vec<u8>> {
    let eq = param.iter().position(|&b| b == b'=')?;
    let name = param[..eq].trim_ascii();
    let name = name.split(|&b| b == b'*').next().unwrap_or(name);
    let last_word = name.rsplit(u8::is_ascii_whitespace).next().unwrap_or(name);
    if !last_word.eq_ignore_ascii_case(b"charset") {
        return None;
    }
    let value = param[eq + 1..].trim_ascii();
    let value: Vec<u8> = value.iter().copied().filter(|&b| b != b'"').collect();
    // `charset*=utf-8''utf-16`: the text after the language, percent-decoded.
    Some(match value.iter().rposition(|&b| b == b'\'') {
        Some(quote) => percent_decoded(&value[quote + 1..]),
        None => value,
    })
}

fn percent_decoded(text: &[u8]) -> Vec<u8> {
    percent_encoding::percent_decode(text).collect()
}

/// UTF-8 or ASCII: read as the bytes tollgate keys by.
pub fn supported(value: &[u8]) -> bool {
    let letters: Vec<u8> = value
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect();
    matches!(&letters[..], b"utf8" | b"usascii" | b"ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(lines: &[&str]) -> Option<String> {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(CONTENT_TYPE, line.parse().expect("header value"));
        }
        unsupported(&headers)
    }

    #[test]
    fn utf_8_and_ascii_in_any_spelling_are_read() {
        for line in [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=utf-8",
            "application/x-www-form-urlencoded;charset=UTF-8",
            "application/json; charset=\"utf-8\"",
            "text/plain; charset=utf8",
            "text/plain; charset=UTF_8",
            "text/plain; charset=us-ascii",
            "text/plain; charset=ASCII",
            "text/plain; charset*=utf-8''utf-8",
            "text/plain; boundary=x",
        ] {
            assert_eq!(named(&[line]), None, "{line}");
        }
        assert_eq!(named(&[]), None);
    }

    #[test]
    fn every_other_charset_is_named_as_written() {
        for (line, charset) in [
            (
                "application/x-www-form-urlencoded; charset=utf-16",
                "utf-16",
            ),
            ("application/json; charset=UTF-32LE", "UTF-32LE"),
            ("application/json; charset=\"cp500\"", "cp500"),
            ("text/plain; charset=utf-8-sig", "utf-8-sig"),
            ("text/plain; charset=iso-8859-1", "iso-8859-1"),
            ("text/plain; CHARSET = utf-16 ", "utf-16"),
            ("text/plain; charset*=utf-8''utf%2D16", "utf-16"),
            ("text/plain; charset*0=utf-16", "utf-16"),
            ("text/plain charset=utf-16", "utf-16"),
            (
                "text/plain; charset=utf-8, text/plain; charset=utf-16",
                "utf-16",
            ),
            ("text/plain; charset=", ""),
        ] {
            assert_eq!(named(&[line]).as_deref(), Some(charset), "{line}");
        }
    }

    #[test]
    fn every_line_is_read() {
        let lines = ["text/plain; charset=utf-8", "text/plain; charset=utf-16"];
        assert_eq!(named(&lines).as_deref(), Some("utf-16"));
    }

    #[test]
    fn other_parameters_are_not_a_charset() {
        assert_eq!(named(&["text/plain; xcharset=utf-16"]), None);
        assert_eq!(named(&["text/plain; charsets=utf-16"]), None);
        assert_eq!(
            named(&["multipart/form-data; boundary=charset=utf-16"]),
            None
        );
    }
}
