//! The text fields of a multipart body under every common reader's rules at once (PHP,
//! Rack, Werkzeug, busboy, Django): where a part begins and ends, where its headers end,
//! and what its name is. Each reading of a field is handed over; none is chosen.

use std::borrow::Cow;

use base64::Engine;
use memchr::memmem;

/// A field as one reader takes it: its name, and its value.
pub type Field<'a> = (String, Cow<'a, [u8]>);

/// Calls `each` with every reading of every text field of `body` split at `boundary`.
/// The first delimiter may follow anything (Werkzeug skips junk before it); a later one
/// begins a line (after LF, CRLF or a bare CR). The closing `--` is read past (PHP reads
/// on), and the last part runs to the end of the body when nothing closes it (PHP).
pub fn fields<'a, E>(
    body: &'a [u8],
    boundary: &str,
    each: &mut dyn FnMut(Field<'a>) -> Result<(), E>,
) -> Result<(), E> {
    let delimiter = format!("--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let Some(mut at) = finder.find(body) else {
        return Ok(());
    };
    loop {
        let start = line_end(body, at + delimiter.len());
        let next = next_delimiter(body, start, &finder);
        let end = next.map_or(body.len(), |(end, _)| end);
        part(&body[start..end.max(start)], each)?;
        match next {
            Some((_, next)) => at = next,
            None => return Ok(()),
        }
    }
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

/// The next delimiter from `from` that begins a line: where the part before it ends
/// (its line break excluded) and where the delimiter starts.
fn next_delimiter(body: &[u8], from: usize, finder: &memmem::Finder<'_>) -> Option<(usize, usize)> {
    let mut search = from;
    loop {
        let found = search + finder.find(&body[search..])?;
        if found == from {
            return Some((from, found));
        }
        if matches!(body[found - 1], b'\n' | b'\r') {
            let mut end = found - 1;
            if body[end] == b'\n' && end > from && body[end - 1] == b'\r' {
                end -= 1;
            }
            return Some((end, found));
        }
        search = found + 1;
    }
}

/// One part: each place its headers may end (a blank line of CRLFs, LFs, LF CRLF or CRs:
/// readers differ), its headers and value read from there.
fn part<'a, E>(part: &'a [u8], each: &mut dyn FnMut(Field<'a>) -> Result<(), E>) -> Result<(), E> {
    let mut seen: arrayvec::ArrayVec<usize, 4> = arrayvec::ArrayVec::new();
    for blank in [&b"\r\n\r\n"[..], b"\n\n", b"\n\r\n", b"\r\r"] {
        let Some(i) = memmem::find(part, blank) else {
            continue;
        };
        let value_at = i + blank.len();
        if seen.contains(&value_at) {
            continue;
        }
        seen.push(value_at);
        let (names, base64) = head(&part[..i]);
        let value = &part[value_at..];
        let decoded = base64.then(|| decode_base64(value)).flatten();
        for name in &names {
            each((name.clone(), Cow::Borrowed(value)))?;
            if let Some(decoded) = &decoded {
                each((name.clone(), Cow::Owned(decoded.clone())))?;
            }
        }
    }
    Ok(())
}

/// A part's headers: each reading of its name (none for an upload, which no reader
/// takes as a parameter), and whether its value is base64 (Django decodes it).
fn head(bytes: &[u8]) -> (Vec<String>, bool) {
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
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let base64 = header("content-transfer-encoding")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("base64"));
    let names = match header("content-disposition") {
        Some(disposition) => disposition_names(disposition),
        // Rack names a part without a disposition by its Content-ID.
        None => header("content-id")
            .map(|id| vec![id.trim().to_owned()])
            .unwrap_or_default(),
    };
    (names, base64)
}

/// Every reading of the name in a `Content-Disposition` value, tokenised with and without
/// backslash escapes in quotes: a quoted value as written and unescaped, single-quoted
/// (PHP), unquoted up to `;` or up to white space (PHP, Werkzeug), each also trimmed
/// (Django); `name*` percent-decoded (RFC 8187) and `name*0`, `name*1`… joined (RFC 2231).
/// None for an upload: a part with a non-empty `filename`, which every reader takes as one
/// (busboy and Django take an empty one as a field, Rack a `FILENAME`, PHP a `filename*`).
fn disposition_names(value: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut pieces: Vec<(u32, String)> = Vec::new();
    for escapes in [true, false] {
        for (param, readings) in params(value, escapes) {
            let lower = param.to_ascii_lowercase();
            if param == "filename" && readings.iter().any(|r| !r.is_empty()) {
                return Vec::new();
            }
            if lower == "name" {
                names.extend(readings);
            } else if lower == "name*" {
                names.extend(readings.iter().filter_map(|r| extended(r)));
            } else if let Some(n) = lower
                .strip_prefix("name*")
                .and_then(|n| n.trim_end_matches('*').parse().ok())
            {
                if !pieces.iter().any(|(m, _)| *m == n) {
                    pieces.extend(readings.into_iter().take(1).map(|r| (n, r)));
                }
            }
        }
    }
    if !pieces.is_empty() {
        pieces.sort_by_key(|(n, _)| *n);
        let joined: String = pieces.into_iter().map(|(_, p)| p).collect();
        names.extend(extended(&joined));
        names.push(joined);
    }
    let trimmed: Vec<String> = names.iter().map(|n| n.trim().to_owned()).collect();
    names.extend(trimmed);
    names.sort();
    names.dedup();
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
fn extended(value: &str) -> Option<String> {
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
