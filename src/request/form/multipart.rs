//! The text fields of a multipart body under every common reader's rules at once (PHP,
//! Rack, Werkzeug, busboy, Django): where a part begins and ends, where its headers end,
//! and what its name is. Each reading of a field is handed over; none is chosen.

use std::borrow::Cow;

use base64::Engine;
use memchr::memmem;

mod head;

use head::{charset_of, headers, is_upload, names};
pub(super) use head::{continued, extended, quoted};

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

/// The charset a text field of `body` is written in, as written, when its bytes are not
/// what tollgate keys by under it (`head::charset_of`: its part's `Content-Type`, which
/// busboy under Express's multer and Fastify, Werkzeug and Django read the value in, even
/// base64, `tests/integration/busboy.rs`; an RFC 2231 `name*`'s; a byte-order mark). The
/// field is the same to such an upstream and other bytes to the gateway, so the request
/// is refused, as a request naming such a charset is (`request::charset`). An upload's
/// charset is its own.
pub fn foreign_charset(body: &[u8], boundary: &str) -> Option<String> {
    if !may_name_charset(body) {
        return None;
    }
    let found = parts(body, boundary, &mut |bytes| {
        blank_lines(bytes).try_for_each(|(head_end, value_at)| {
            let headers = headers(&bytes[..head_end]);
            if is_upload(&headers, &names(&headers).0) {
                return Ok(());
            }
            charset_of(&headers, &bytes[value_at..]).map_or(Ok(()), Err)
        })
    });
    found.err()
}

/// Whether `body` may name a charset or start a field with a byte-order mark: a `=` after
/// `charset` or after a `*` or a digit (RFC 2231's `name*`, `charset*0`), white space and
/// other bytes that are not a name's skipped; or a byte-order mark anywhere. The parts'
/// headers are parsed for [`foreign_charset`] only then (a browser's body has none of
/// these, and the parse cost as much as reading a key from it).
fn may_name_charset(body: &[u8]) -> bool {
    let marks: [&[u8]; 3] = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"];
    let starts_mark = |at: usize| marks.iter().any(|mark| body[at..].starts_with(mark));
    if memchr::memchr3_iter(0xef, 0xff, 0xfe, body).any(starts_mark) {
        return true;
    }
    // Each `=`'s name is looked for back to the `=` before it only (beyond it, the name is
    // the one that `=` found): one pass over the body. Looking back to the body's start
    // from every `=` was quadratic — 64 KiB of `=` cost two billion steps, before the
    // limiter decided anything.
    let (mut scanned_to, mut name_end) = (0, 0);
    memchr::memchr_iter(b'=', body).any(|at| {
        let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'*';
        if let Some(i) = body[scanned_to..at].iter().rposition(is_name) {
            name_end = scanned_to + i + 1;
        }
        scanned_to = at + 1;
        let name = &body[..name_end];
        let tail = name.len().checked_sub(7).map(|start| &name[start..]);
        name.last()
            .is_some_and(|b| *b == b'*' || b.is_ascii_digit())
            || tail.is_some_and(|t| t.eq_ignore_ascii_case(b"charset"))
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

#[cfg(test)]
mod scan_tests {
    use proptest::prelude::*;

    /// The reading as first written: each `=`'s name looked for back to the body's start.
    fn looked_back_to_the_start(body: &[u8]) -> bool {
        memchr::memchr_iter(b'=', body).any(|at| {
            let before = &body[..at];
            let end = before
                .iter()
                .rposition(|b| b.is_ascii_alphanumeric() || *b == b'*')
                .map_or(0, |i| i + 1);
            let name = &before[..end];
            let tail = name.len().checked_sub(7).map(|start| &name[start..]);
            name.last()
                .is_some_and(|b| *b == b'*' || b.is_ascii_digit())
                || tail.is_some_and(|t| t.eq_ignore_ascii_case(b"charset"))
        })
    }

    proptest! {
        #[test]
        fn reads_as_looking_back_to_the_start_did(
            body in proptest::collection::vec(
                prop::sample::select(b"=* \t;aCcharsetT09\r\n\"x".to_vec()), 0..200),
        ) {
            prop_assert_eq!(super::may_name_charset(&body), looked_back_to_the_start(&body));
        }
    }

    /// A body of nothing but `=` (a client's, on a route that reads the body for a key):
    /// one pass, not a look-back per `=` (4 MiB of them were 8·10¹² steps).
    #[test]
    fn a_body_of_equals_signs_is_read_in_one_pass() {
        let body = vec![b'='; 4 << 20];
        assert!(!super::may_name_charset(&body));
        let mut named = body.clone();
        named[..8].copy_from_slice(b"charset=");
        assert!(super::may_name_charset(&named));
    }
}
