//! The canonical spelling of a request path, so that no spelling an ordinary upstream
//! resolves to `/v1/search` routes or keys differently from `/v1/search`. Pure: no I/O.
//!
//! Steps, in nginx's order: percent-decode unreserved characters (RFC 3986 §2.3; hex
//! digits of what stays encoded upper-cased, raw bytes that are not URI characters
//! encoded), then merge repeated slashes, then remove dot segments (§5.2.4).

use std::borrow::Cow;

/// What to do with `%2F` (an encoded slash) in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EscapedSlash {
    /// 400: upstreams disagree on whether `a%2Fb` is one segment or two.
    #[default]
    Refuse,
    /// Forward `%2F` as is (the path segment keeps its slash).
    Keep,
    /// Decode to `/` before slashes are merged and dot segments removed.
    Decode,
}

/// How paths are normalised; `[server]` fields turn parts off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRules {
    /// Decode unreserved characters, normalise percent-encoding and remove dot segments.
    pub normalize: bool,
    pub merge_slashes: bool,
    pub escaped_slash: EscapedSlash,
    /// Accept `\` and `%5C`, which some upstreams treat as `/`.
    pub allow_backslash: bool,
    /// Route by the path with its ASCII letters lower-cased, as upstreams that match
    /// routes without case do (Express, ASP.NET Core); the path forwarded keeps its case.
    pub ignore_case: bool,
}

impl Default for PathRules {
    fn default() -> Self {
        Self {
            normalize: true,
            merge_slashes: true,
            escaped_slash: EscapedSlash::Refuse,
            allow_backslash: false,
            ignore_case: false,
        }
    }
}

/// `path` with its ASCII letters lower-cased, except the hex digits of each `%XX` escape
/// (normalisation writes those upper-case): what `ignore_path_case` routes by. Borrowed
/// when there is nothing to lower.
pub fn fold_case(path: &str) -> std::borrow::Cow<'_, str> {
    let bytes = path.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => i += 3,
            b if b.is_ascii_uppercase() => {
                out.get_or_insert_with(|| bytes.to_vec())[i] = b.to_ascii_lowercase();
                i += 1;
            }
            _ => i += 1,
        }
    }
    match out.map(String::from_utf8) {
        Some(Ok(folded)) => std::borrow::Cow::Owned(folded),
        _ => std::borrow::Cow::Borrowed(path),
    }
}

/// Why a path is refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("invalid percent-encoding in the path")]
    BadEscape,
    #[error("an encoded slash (%2F) in the path")]
    EscapedSlash,
    #[error("a backslash in the path")]
    Backslash,
    #[error("the path climbs above the root")]
    AboveRoot,
    #[error("a dot segment with path parameters (`..;`) in the path")]
    DotWithParams,
}

impl PathError {
    /// The `error` field of the 400 JSON body.
    pub fn code(self) -> &'static str {
        match self {
            PathError::BadEscape => "bad_path_encoding",
            PathError::EscapedSlash => "encoded_slash",
            PathError::Backslash => "backslash_in_path",
            PathError::AboveRoot => "path_above_root",
            PathError::DotWithParams => "dot_segment_with_params",
        }
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Bytes a path may hold literally (RFC 3986 `pchar` and `/`); others are encoded.
fn is_path_char(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'/' | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'%'
        )
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The canonical form of `path` under `rules`, borrowed when it is already canonical
/// (the common case costs one scan and no allocation). A path that does not start with
/// `/` (`*`, or empty for CONNECT) is returned as it is.
pub fn normalize<'a>(path: &'a str, rules: &PathRules) -> Result<Cow<'a, str>, PathError> {
    if !path.starts_with('/') {
        return Ok(Cow::Borrowed(path));
    }
    if is_canonical(path.as_bytes(), rules)? {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(path.as_bytes(), rules)?;
    let merged = if rules.merge_slashes {
        merge_slashes(&decoded)
    } else {
        decoded
    };
    let out = if rules.normalize {
        remove_dot_segments(&merged)?
    } else {
        merged
    };
    // Every byte pushed is ASCII: decoding yields only unreserved characters and `/`,
    // and everything else is kept as written or percent-encoded.
    Ok(Cow::Owned(
        String::from_utf8(out).map_err(|_| PathError::BadEscape)?,
    ))
}

/// One scan: `true` when no step would change the path; refusals found on the way.
fn is_canonical(path: &[u8], rules: &PathRules) -> Result<bool, PathError> {
    let mut canonical = true;
    let mut segment_start = 0;
    for (i, &b) in path.iter().enumerate() {
        match b {
            b'\\' if !rules.allow_backslash => return Err(PathError::Backslash),
            b'%' => canonical = false,
            b'/' => {
                if rules.merge_slashes && i > 0 && path[i - 1] == b'/' {
                    canonical = false;
                }
                // Only a segment that starts with a dot can be one (one compare a segment).
                if rules.normalize && path.get(segment_start) == Some(&b'.') {
                    canonical &= !dot_segment(&path[segment_start..i])?;
                }
                segment_start = i + 1;
            }
            _ if rules.normalize && !is_path_char(b) && b != b'\\' => canonical = false,
            _ => {}
        }
    }
    if rules.normalize && path.get(segment_start) == Some(&b'.') {
        canonical &= !dot_segment(&path[segment_start..])?;
    }
    Ok(canonical)
}

/// Whether `segment` is `.` or `..`. One with path parameters (`..;x`) is refused: a
/// Java servlet container strips `;…` and then climbs, so `/x/..;/v1/search` is served
/// as `/v1/search` where tollgate saw a segment named `..;`; no client means anything
/// else by it.
///
/// Looks at a segment's first bytes only: run on every segment of every request.
fn dot_segment(segment: &[u8]) -> Result<bool, PathError> {
    match segment {
        b"." | b".." => Ok(true),
        [b'.', b';', ..] | [b'.', b'.', b';', ..] => Err(PathError::DotWithParams),
        _ => Ok(false),
    }
}

/// Percent-decoding of unreserved characters and hex case; raw bytes outside the URI
/// character set are encoded. `%25` stays encoded: decoding it would turn `%252F` into
/// `%2F`, a slash one decode later.
fn decode(path: &[u8], rules: &PathRules) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                path.get(i + 1).copied().and_then(hex_value),
                path.get(i + 2).copied().and_then(hex_value),
            ) else {
                return Err(PathError::BadEscape);
            };
            let value = hi << 4 | lo;
            i += 3;
            if value == b'\\' && !rules.allow_backslash {
                return Err(PathError::Backslash);
            }
            if value == b'/' {
                match rules.escaped_slash {
                    EscapedSlash::Refuse => return Err(PathError::EscapedSlash),
                    EscapedSlash::Decode => {
                        out.push(b'/');
                        continue;
                    }
                    EscapedSlash::Keep => {}
                }
            }
            if rules.normalize && is_unreserved(value) {
                out.push(value);
            } else if rules.normalize {
                out.extend_from_slice(&[b'%', HEX[usize::from(hi)], HEX[usize::from(lo)]]);
            } else {
                out.extend_from_slice(&path[i - 3..i]);
            }
            continue;
        }
        if rules.normalize && !is_path_char(b) && b != b'\\' {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
        i += 1;
    }
    Ok(out)
}

fn merge_slashes(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &b in path {
        if !(b == b'/' && out.last() == Some(&b'/')) {
            out.push(b);
        }
    }
    out
}

/// RFC 3986 §5.2.4 on an absolute path, except that `..` at the root is refused rather
/// than dropped: a client that climbs above the root is probing, not browsing.
fn remove_dot_segments(path: &[u8]) -> Result<Vec<u8>, PathError> {
    // Segments after the leading `/`; an empty last segment is a trailing slash.
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut segments = path[1..].split(|&b| b == b'/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        // Decoding may have made one (`%2e%2e;`).
        dot_segment(segment)?;
        match segment {
            b"." => {
                if last {
                    kept.push(b"");
                }
            }
            b".." => {
                if kept.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
                if last {
                    kept.push(b"");
                }
            }
            s => kept.push(s),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for segment in &kept {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
