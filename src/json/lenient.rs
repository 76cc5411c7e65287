//! A second reading of a body the strict walk refused, as the lenient JSON readers in
//! front of many APIs take it: Python's `json.loads` (FastAPI, Starlette, most LLM
//! servers) reads `NaN`, `Infinity` and `-Infinity`, and every common reader (Python,
//! Node.js, Go) takes a string with an unpaired surrogate escape or bytes that are no UTF-8
//! (Go and Node.js read them as U+FFFD), and Python and Node.js a number too large for a
//! double. serde_json refuses `NaN` anywhere, and the rest in a member name or a value a
//! pointer reaches; the body was then "not JSON" and its `json:` keys read as missing
//! while the upstream read them.
//!
//! The copy spells those as strict JSON: the non-numbers and numbers out of a double's
//! range as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (Python reads `1e400` as
//! infinity), an unpaired surrogate and bytes that are no UTF-8 as U+FFFD (as Go reads
//! them). Each spelling is one value, so none is a fresh key per request.

/// The body with every lenient spelling made strict; `None` when there is none to make
/// (the body is not JSON for any reader). At most three times the body's length.
pub fn strict_copy(body: &[u8]) -> Option<Vec<u8>> {
    // Bytes that are no UTF-8 first: Go and Node.js read them as U+FFFD (three bytes for
    // one, so the copy is at most three times the body).
    let text = String::from_utf8_lossy(body);
    let mut changed = matches!(text, std::borrow::Cow::Owned(_));
    let body = text.as_bytes();
    let mut out = Vec::with_capacity(body.len() + body.len() / 4);
    let mut i = 0;
    while i < body.len() {
        let rest = &body[i..];
        let (taken, word): (usize, Option<&[u8]>) = match rest[0] {
            b'"' => {
                i += copy_string(rest, &mut out, &mut changed);
                continue;
            }
            b'N' if rest.starts_with(b"NaN") => (3, Some(b"\"NaN\"")),
            b'I' if rest.starts_with(b"Infinity") => (8, Some(b"\"Infinity\"")),
            b'-' if rest.starts_with(b"-Infinity") => (9, Some(b"\"-Infinity\"")),
            b'-' | b'0'..=b'9' => {
                let len = rest
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(rest.len());
                (len, out_of_range(&rest[..len]))
            }
            _ => (1, None),
        };
        match word {
            Some(word) => {
                out.extend_from_slice(word);
                changed = true;
            }
            None => out.extend_from_slice(&rest[..taken]),
        }
        i += taken;
    }
    changed.then_some(out)
}

/// `"Infinity"` or `"-Infinity"` for a number a double cannot hold.
fn out_of_range(number: &[u8]) -> Option<&'static [u8]> {
    let value: f64 = std::str::from_utf8(number).ok()?.parse().ok()?;
    match value {
        v if v == f64::INFINITY => Some(b"\"Infinity\""),
        v if v == f64::NEG_INFINITY => Some(b"\"-Infinity\""),
        _ => None,
    }
}

/// Copies the string starting at `s[0]` (a quote) with each unpaired surrogate escape
/// written as U+FFFD; returns the bytes taken (to the end, for a string never closed).
fn copy_string(s: &[u8], out: &mut Vec<u8>, changed: &mut bool) -> usize {
    out.push(b'"');
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => {
                out.push(b'"');
                return i + 1;
            }
            b'\\' if s.get(i + 1) == Some(&b'u') => {
                let unit = escape_at(s, i);
                let pair = unit.is_some_and(is_high) && escape_at(s, i + 6).is_some_and(is_low);
                if pair {
                    out.extend_from_slice(&s[i..i + 12]);
                    i += 12;
                } else if unit.is_some_and(|u| is_high(u) || is_low(u)) {
                    out.extend_from_slice(b"\\uFFFD");
                    *changed = true;
                    i += 6;
                } else {
                    out.extend_from_slice(&s[i..(i + 2).min(s.len())]);
                    i += 2;
                }
            }
            b'\\' => {
                out.extend_from_slice(&s[i..(i + 2).min(s.len())]);
                i += 2;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    s.len()
}

/// The code unit of the `\uXXXX` escape at `s[i]`.
fn escape_at(s: &[u8], i: usize) -> Option<u16> {
    let escape = s.get(i..i + 6)?;
    if &escape[..2] != b"\\u" {
        return None;
    }
    u16::from_str_radix(std::str::from_utf8(&escape[2..]).ok()?, 16).ok()
}

fn is_high(unit: u16) -> bool {
    (0xD800..0xDC00).contains(&unit)
}

fn is_low(unit: u16) -> bool {
    (0xDC00..0xE000).contains(&unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(body: &str) -> Option<String> {
        strict_copy(body.as_bytes()).map(|b| String::from_utf8(b).expect("utf-8"))
    }

    #[test]
    fn pythons_non_numbers_and_huge_numbers_become_strings() {
        assert_eq!(
            copy(r#"{"a":NaN,"b":[Infinity,-Infinity],"c":1e400,"d":-2E+999,"e":1.5}"#).as_deref(),
            Some(
                r#"{"a":"NaN","b":["Infinity","-Infinity"],"c":"Infinity","d":"-Infinity","e":1.5}"#
            )
        );
    }

    #[test]
    fn unpaired_surrogates_become_the_replacement_character_and_pairs_stay() {
        assert_eq!(
            copy(r#"{"u":"a\ud800b","v":"\uDC00","w":"\ud83d\ude00","x":"NaN \" \\ud800"}"#)
                .as_deref(),
            Some(r#"{"u":"a\uFFFDb","v":"\uFFFD","w":"\ud83d\ude00","x":"NaN \" \\ud800"}"#)
        );
    }

    #[test]
    fn bytes_that_are_no_utf8_become_the_replacement_character() {
        let body = b"{\"model\":\"m\",\"\xff\":NaN}";
        assert_eq!(
            strict_copy(body)
                .map(|b| String::from_utf8(b).expect("utf-8"))
                .as_deref(),
            Some("{\"model\":\"m\",\"\u{fffd}\":\"NaN\"}")
        );
    }

    #[test]
    fn a_body_with_nothing_to_make_strict_has_no_copy() {
        assert_eq!(copy(r#"{"a":"NaN","b":1e300,"c":"\\uD800"}"#), None);
        assert_eq!(copy("not json"), None);
        assert_eq!(
            copy(r#"{"a":"unclosed\ud800"#).as_deref(),
            Some(r#"{"a":"unclosed\uFFFD"#)
        );
    }
}
