//! A multipart part's headers as readers take them: unfolded, every reading of its name
//! from every `Content-Disposition` (RFC 2231's pieces and charsets included), and the
//! charset it is written in.

use crate::request::charset::{self, Charset};

/// A part's headers, (lower-cased name, value), unfolded.
pub(super) fn headers(bytes: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(bytes);
    // Lines end at LF or CR; one starting with white space, or without a colon, goes on
    // the header before it (PHP, Rack and Werkzeug unfold both).
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in text.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        let folded = line.starts_with([' ', '\t']) || !line.contains(':');
        match (folded, headers.last_mut()) {
            (true, Some((_, value))) => value.push_str(line),
            _ => {
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                headers.push((name.trim().to_ascii_lowercase(), value.to_owned()));
            }
        }
    }
    headers
}

/// Every value of header `name` among `headers`.
fn all<'h>(headers: &'h [(String, String)], name: &'h str) -> impl Iterator<Item = &'h String> {
    headers
        .iter()
        .filter(move |(n, _)| n == name)
        .map(|(_, v)| v)
}

/// A part's names: each reading of its name from every `Content-Disposition` (none for
/// an upload, which no reader takes as a parameter) or, without one, every `Content-ID`
/// (Rack); and whether any `Content-Transfer-Encoding` says base64 (Django decodes it).
pub(super) fn names(headers: &[(String, String)]) -> (Vec<String>, bool) {
    let all = |name: &'static str| all(headers, name);
    let base64 = all("content-transfer-encoding").any(|v| v.trim().eq_ignore_ascii_case("base64"));
    let mut names: Vec<String> = all("content-disposition")
        .flat_map(|d| disposition_names(d))
        .collect();
    if all("content-disposition").next().is_none() {
        names.extend(all("content-id").map(|id| id.trim().to_owned()));
    }
    names.sort();
    names.dedup();
    (names, base64)
}

/// Whether a part is an upload (a file, no parameter): no name read, a `filename` given.
pub(super) fn is_upload(headers: &[(String, String)], names: &[String]) -> bool {
    names.is_empty()
        && all(headers, "content-disposition").any(|d| d.to_ascii_lowercase().contains("filename"))
}

/// The charset a text field is written in, when its bytes `value` are not what tollgate
/// keys by under it (to name in a refusal): its part's `Content-Type` charset (busboy,
/// Werkzeug and Django read the value in it); the charset of an RFC 2231 value of its
/// `Content-Disposition` (`name*=utf-16le''…`: Django reads the name in it, percent-decoded
/// first, an empty one as Latin-1); or a byte-order mark starting the value (ASP.NET Core
/// reads the value by it).
pub(super) fn charset_of(headers: &[(String, String)], value: &[u8]) -> Option<String> {
    let typed = charset::of_lines(all(headers, "content-type").map(|l| l.as_bytes()));
    if let Some(named) = typed.refusal(value) {
        return Some(named.to_owned());
    }
    for param in all(headers, "content-disposition").flat_map(|d| d.split(';')) {
        let Some((name, text)) = param.split_once('=').filter(|(n, _)| n.contains('*')) else {
            continue;
        };
        let decoded: Vec<u8> =
            percent_encoding::percent_decode(text.trim().trim_matches('"').as_bytes()).collect();
        let Some(quote) = decoded.iter().position(|&b| b == b'\'') else {
            continue;
        };
        let named = match decoded[..quote].trim_ascii() {
            b"" => Charset::AsciiOnly(format!("{}=''", name.trim())),
            written => charset::named(written),
        };
        if let Some(named) = named.refusal(&decoded[quote + 1..]) {
            return Some(named.to_owned());
        }
    }
    let marks: [&[u8]; 3] = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"];
    marks
        .iter()
        .any(|mark| value.starts_with(mark))
        .then(|| "byte-order mark".to_owned())
}

/// Every reading of the name in a `Content-Disposition` value, tokenised with and without
/// backslash escapes in quotes: a quoted value as written and unescaped, single-quoted
/// (PHP), unquoted up to `;` or up to white space (PHP, Werkzeug), each also trimmed
/// (Django); `name*` percent-decoded (RFC 8187) and `name*0`, `name*1`… joined (RFC 2231).
/// None for an upload: a part whose every `filename` is non-empty, which every reader
/// takes as one (busboy and Django take an empty one as a field, Rack a `FILENAME`, PHP a
/// `filename*`; with several, busboy keeps the first and others the last).
fn disposition_names(value: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    // Each tokenisation decides on its own whether the part is an upload; without a
    // backslash they are one.
    let passes: &[bool] = if value.contains('\\') {
        &[true, false]
    } else {
        &[true]
    };
    for &escapes in passes {
        let mut pass: Vec<String> = Vec::new();
        // Some `filename`, and none empty.
        let (mut named_file, mut empty_file) = (false, false);
        let params = params(value, escapes);
        let joined = continued(params.iter().map(first_reading), "name");
        for (param, readings) in params {
            let lower = param.to_ascii_lowercase();
            if param == "filename" {
                named_file = true;
                empty_file |= readings.iter().all(String::is_empty);
            } else if lower == "name" {
                pass.extend(readings);
            } else if lower == "name*" {
                pass.extend(readings.iter().filter_map(|r| extended(r)));
            }
        }
        if let Some(joined) = joined {
            pass.extend(extended(&joined));
            pass.push(joined);
        }
        if !named_file || empty_file {
            names.extend(pass);
        }
    }
    let trimmed: Vec<String> = names
        .iter()
        .filter(|n| n.trim().len() != n.len())
        .map(|n| n.trim().to_owned())
        .collect();
    names.extend(trimmed);
    names
}

/// The `param=value` pairs of a header value after its first `;`, each value's readings.
fn params(value: &str, escapes: bool) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = value.split_once(';').map_or("", |(_, r)| r);
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq]
            .rsplit(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        let after = rest[eq + 1..].trim_start();
        let (readings, tail) = if let Some(q) = after.strip_prefix('"') {
            match escapes {
                true => {
                    let (text, tail) = quoted(q);
                    (vec![text], tail)
                }
                false => {
                    let end = q.find('"').unwrap_or(q.len());
                    (vec![q[..end].to_owned()], q.get(end + 1..).unwrap_or(""))
                }
            }
        } else if let Some(q) = after.strip_prefix('\'') {
            let end = q.find('\'').unwrap_or(q.len());
            (vec![q[..end].to_owned()], q.get(end + 1..).unwrap_or(""))
        } else {
            let end = after.find(';').unwrap_or(after.len());
            let word = after[..end].split([' ', '\t']).next().unwrap_or("");
            (
                vec![after[..end].trim().to_owned(), word.to_owned()],
                &after[end..],
            )
        };
        out.push((name, readings));
        rest = tail;
    }
    out
}

/// A parameter's name and its first reading.
fn first_reading((param, readings): &(String, Vec<String>)) -> (&str, &str) {
    (param, readings.first().map_or("", String::as_str))
}

/// The values of `base*0`, `base*1`… among `params` (name, value) joined in number order
/// (RFC 2231), the first of each number kept; `None` without any.
pub(in crate::request::form) fn continued<'p>(
    params: impl Iterator<Item = (&'p str, &'p str)>,
    base: &str,
) -> Option<String> {
    let mut pieces = std::collections::BTreeMap::new();
    for (param, value) in params {
        let lower = param.to_ascii_lowercase();
        let number = lower
            .strip_prefix(base)
            .and_then(|n| n.strip_prefix('*'))
            .and_then(|n| n.trim_end_matches('*').parse::<u32>().ok());
        if let Some(n) = number {
            pieces.entry(n).or_insert(value);
        }
    }
    (!pieces.is_empty()).then(|| pieces.into_values().collect())
}

/// A quoted string after its opening quote: its text with `\x` read as `x`, and what
/// follows the closing quote (nothing, when it never closes).
pub(in crate::request::form) fn quoted(text: &str) -> (String, &str) {
    let mut unescaped = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (unescaped, &text[i + 1..]),
            '\\' => unescaped.extend(chars.next().map(|(_, c)| c)),
            c => unescaped.push(c),
        }
    }
    (unescaped, "")
}

/// An RFC 8187 value (`UTF-8''api%5Fkey`) percent-decoded, as Werkzeug reads `name*`.
pub(in crate::request::form) fn extended(value: &str) -> Option<String> {
    let mut parts = value.splitn(3, '\'');
    let (_charset, _language, encoded) = (parts.next()?, parts.next()?, parts.next()?);
    let decoded = percent_encoding::percent_decode_str(encoded).decode_utf8_lossy();
    Some(decoded.into_owned())
}
