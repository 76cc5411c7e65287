//! The text fields of a multipart body under every common reader's rules at once (PHP,
//! Rack, Werkzeug, busboy, Django): where a part begins and ends, where its headers end,
//! and what its name is. Each reading of a field is handed over; none is chosen.

use std::borrow::Cow;

use base64::Engine;
use memchr::memmem;

use crate::request::charset;

/// A field as readers take it: every reading of its name, and one of its value.
pub type Field<'n, 'a> = (&'n [String], Cow<'a, [u8]>);

/// Where a delimiter splits the body: readers disagree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    /// Anywhere, even inside a line (Django).
    Anywhere,
    /// At a line's start: after LF, CRLF or a bare CR (PHP, Rack, busboy).
    LineStart,
    /// At a line's start, and followed only by white space up to the line's end, or by
    /// `--` (Werkzeug): `--bZ` inside a part is data to it.
    Strict,
}

/// Calls `each` with every reading of every text field of `body` split at `boundary`,
/// under each reader's split ([`Split`]). Under the first two splits the first delimiter
/// may follow anything (junk before it is a preamble); the closing `--` is read past (PHP
/// reads on), and the last part runs to the end of the body when nothing closes it (PHP).
pub fn fields<'a, E>(
    body: &'a [u8],
    boundary: &str,
    each: &mut dyn FnMut(Field<'_, 'a>) -> Result<(), E>,
) -> Result<(), E> {
    parts(body, boundary, &mut |bytes| part(bytes, each))
}

/// The first charset other than UTF-8 or ASCII a text field of `body` is written in, as
/// written: one its part's `Content-Type` names (busboy, under Express's multer and
/// Fastify, decodes the value in it: UTF-16, Latin-1, even base64; `tests/integration/
/// busboy.rs`), or one a `name*` names (RFC 2231 asks a reader to decode the name in it).
/// The field is the same to such an upstream and other bytes to the gateway, so the
/// request is refused, as a request naming such a charset is (`request::charset`). An
/// upload's charset is its own.
pub fn foreign_charset(body: &[u8], boundary: &str) -> Option<String> {
    if !may_name_charset(body) {
        return None;
    }
    let found = parts(body, boundary, &mut |bytes| {
        blank_lines(bytes).try_for_each(|(head_end, _)| {
            let headers = headers(&bytes[..head_end]);
            match names(&headers).0.is_empty() {
                true => Ok(()),
                false => charset_of(&headers).map_or(Ok(()), Err),
            }
        })
    });
    found.err()
}

/// Whether `body` has a `charset` parameter or an RFC 2231 `*=` anywhere, in any case:
/// the parts' headers are parsed for [`foreign_charset`] only then (a browser's body has
/// neither, and the parse cost as much as reading a key from it).
fn may_name_charset(body: &[u8]) -> bool {
    memchr::memchr_iter(b'=', body).any(|at| {
        let name = body[..at].trim_ascii_end();
        let tail = name.len().checked_sub(7).map(|start| &name[start..]);
        name.ends_with(b"*") || tail.is_some_and(|t| t.eq_ignore_ascii_case(b"charset"))
    })
}

/// Calls `each` with every part of `body` split at `boundary`, under each reader's split
/// ([`Split`]); a part two splits agree on, once.
fn parts<'a, E>(
    body: &'a [u8],
    boundary: &str,
    each: &mut dyn FnMut(&'a [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let delimiter = format!("--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    // A part two splits agree on is read once (in a browser's body all three agree).
    let mut read: std::collections::HashSet<(usize, usize)> = Default::default();
    for split in [Split::LineStart, Split::Anywhere, Split::Strict] {
        let first = match split {
            Split::Strict => next_delimiter(body, 0, &finder, split).map(|(_, at)| at),
            _ => finder.find(body),
        };
        let Some(mut at) = first else {
            continue;
        };
        loop {
            let start = line_end(body, at + delimiter.len());
            let next = next_delimiter(body, start, &finder, split);
            let end = next.map_or(body.len(), |(end, _)| end).max(start);
            if read.insert((start, end)) {
                each(&body[start..end])?;
            }
            match next {
                Some((_, next)) => at = next,
                None => break,
            }
        }
    }
    Ok(())
}

/// Where the line holding `from` ends: after its LF, CRLF or bare CR.
fn line_end(body: &[u8], from: usize) -> usize {
    match memchr::memchr2(b'\r', b'\n', &body[from..]) {
        Some(i) if body[from + i] == b'\r' && body.get(from + i + 1) == Some(&b'\n') => {
            from + i + 2
        }
        Some(i) => from + i + 1,
        None => body.len(),
    }
}

/// The next delimiter from `from` where `split` splits: where the part before it ends
/// (the line break before it excluded) and where the delimiter starts.
fn next_delimiter(
    body: &[u8],
    from: usize,
    finder: &memmem::Finder<'_>,
    split: Split,
) -> Option<(usize, usize)> {
    let mut search = from;
    loop {
        let found = search + finder.find(&body[search..])?;
        let line_start = found == 0 || found == from || matches!(body[found - 1], b'\n' | b'\r');
        let takes = match split {
            Split::Anywhere => true,
            Split::LineStart => line_start,
            Split::Strict => line_start && ends_line(&body[found + finder.needle().len()..]),
        };
        if takes {
            let mut end = found;
            if end > from && body[end - 1] == b'\n' {
                end -= 1;
            }
            if end > from && body[end - 1] == b'\r' {
                end -= 1;
            }
            return Some((end.max(from), found));
        }
        search = found + 1;
    }
}

/// Whether what follows a delimiter ends it for Werkzeug: `--`, or white space up to a
/// line break or the body's end.
fn ends_line(after: &[u8]) -> bool {
    if after.starts_with(b"--") {
        return true;
    }
    let rest = after.iter().position(|b| !matches!(b, b' ' | b'\t'));
    rest.is_none_or(|i| matches!(after[i], b'\r' | b'\n'))
}

/// One part: each place its headers may end (a blank line of CRLFs, LFs, LF CRLF or CRs:
/// readers differ), its headers and value read from there.
fn part<'a, E>(
    part: &'a [u8],
    each: &mut dyn FnMut(Field<'_, 'a>) -> Result<(), E>,
) -> Result<(), E> {
    for (head_end, value_at) in blank_lines(part) {
        let (names, base64) = names(&headers(&part[..head_end]));
        if names.is_empty() {
            continue;
        }
        let value = &part[value_at..];
        each((&names, Cow::Borrowed(value)))?;
        if let Some(decoded) = base64.then(|| decode_base64(value)).flatten() {
            each((&names, Cow::Owned(decoded)))?;
        }
    }
    Ok(())
}

/// Where a part's headers may end, each once: (the headers' end, the value's start).
fn blank_lines(part: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut seen: arrayvec::ArrayVec<usize, 4> = arrayvec::ArrayVec::new();
    [&b"\r\n\r\n"[..], b"\n\n", b"\n\r\n", b"\r\r"]
        .into_iter()
        .filter_map(move |blank| {
            let i = memmem::find(part, blank)?;
            let value_at = i + blank.len();
            (!seen.contains(&value_at)).then(|| {
                seen.push(value_at);
                (i, value_at)
            })
        })
}

/// A part's headers, (lower-cased name, value), unfolded.
fn headers(bytes: &[u8]) -> Vec<(String, String)> {
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
fn names(headers: &[(String, String)]) -> (Vec<String>, bool) {
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

/// A charset other than UTF-8 or ASCII that a part's `Content-Type` names, or that a
/// `name*` of its `Content-Disposition` is written in (the text before its first `'`).
fn charset_of(headers: &[(String, String)]) -> Option<String> {
    let typed = all(headers, "content-type").find_map(|v| charset::unsupported_in(v.as_bytes()));
    typed.or_else(|| {
        all(headers, "content-disposition")
            .flat_map(|d| d.split(';'))
            .filter_map(|param| param.split_once('='))
            .filter(|(name, _)| name.trim().to_ascii_lowercase().starts_with("name*"))
            .filter_map(|(_, value)| value.trim().trim_matches('"').split_once('\''))
            .map(|(charset, _)| charset.trim())
            .find(|charset| !charset.is_empty() && !charset::supported(charset.as_bytes()))
            .map(str::to_owned)
    })
}

/// Every reading of the name in a `Content-Disposition` value, tokenised with and without
/// backslash escapes in quotes: a quoted value as written and unescaped, single-quoted
/// (PHP), unquoted up to `;` or up to white space (PHP, Werkzeug), each also trimmed
/// (Django); `name*` percent-decoded (RFC 8187) and `name*0`, `name*1`… joined (RFC 2231).
/// None for an upload: a part with a non-empty `filename`, which every reader takes as one
/// (busboy and Django take an empty one as a field, Rack a `FILENAME`, PHP a `filename*`).
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
        let mut upload = false;
        let params = params(value, escapes);
        let joined = continued(params.iter().map(first_reading), "name");
        for (param, readings) in params {
            let lower = param.to_ascii_lowercase();
            if param == "filename" && readings.iter().any(|r| !r.is_empty()) {
                upload = true;
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
        if !upload {
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
pub(super) fn continued<'p>(
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
pub(super) fn quoted(text: &str) -> (String, &str) {
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
pub(super) fn extended(value: &str) -> Option<String> {
    let mut parts = value.splitn(3, '\'');
    let (_charset, _language, encoded) = (parts.next()?, parts.next()?, parts.next()?);
    let decoded = percent_encoding::percent_decode_str(encoded).decode_utf8_lossy();
    Some(decoded.into_owned())
}

/// A base64 value, white space ignored, as Django decodes one.
fn decode_base64(value: &[u8]) -> Option<Vec<u8>> {
    let compact: Vec<u8> = value
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}
