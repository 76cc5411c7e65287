//! A client's text in a log line: cut to a bound, and escaped so that it is one token
//! that writes no field of its own and breaks no line.

/// Most bytes of a client's `x-request-id` a line shows.
pub(super) const MAX_ID_BYTES: usize = 128;
/// Most bytes of a method a line shows: hyper takes any token up to the head's size.
pub(super) const MAX_METHOD_BYTES: usize = 32;
/// Most bytes of one key part a line shows (a key has at most four parts a source).
const MAX_KEY_PART_BYTES: usize = 256;

/// A client's text in a log line: at most `.1` bytes (cut at a character, `…` after),
/// with a space, `"`, a backslash and control characters (a tab among them, and the
/// Unicode ones a viewer breaks or reorders a line at: see [`misleads`])
/// percent-encoded, so it is one token that cannot write fields of its own into the text
/// line (`x-request-id: x decision="admitted"`); the JSON log gets the same text as its
/// string. Ordinary ids and paths are written as they are.
pub(super) struct Clipped<'a>(pub &'a str, pub usize);

impl std::fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ascii = |b: u8| matches!(b, b' ' | b'"' | b'\\') || b.is_ascii_control();
        escaped(f, self.0, self.1, ascii)
    }
}

/// One key part in a line: at most [`MAX_KEY_PART_BYTES`], with a space and `%` (and
/// control characters) percent-encoded as the admin API takes a key part, so that a
/// part is one token of the text line — `x-tenant: acme client=1.2.3.4` writes no
/// field. Quotes and backslashes are left to the
/// key's JSON text, which escapes them.
pub(super) struct KeyPart<'a>(pub &'a str);

impl std::fmt::Display for KeyPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ascii = |b: u8| matches!(b, b' ' | b'%') || b.is_ascii_control();
        escaped(f, self.0, MAX_KEY_PART_BYTES, ascii)
    }
}

/// `text`, cut at `max` bytes (at a character, `…` after), each ASCII byte `ascii` names
/// and each character that [`misleads`] percent-encoded.
fn escaped(
    f: &mut std::fmt::Formatter<'_>,
    text: &str,
    max: usize,
    ascii: impl Fn(u8) -> bool,
) -> std::fmt::Result {
    let shown = crate::clip::clipped(text, max);
    let (mut plain, mut i) = (0, 0);
    while let Some(&b) = shown.as_bytes().get(i) {
        let width = match b {
            0..0x80 if ascii(b) => 1,
            0..0x80 => 0,
            _ => match shown[i..].chars().next() {
                Some(c) if misleads(c) => c.len_utf8(),
                Some(c) => {
                    i += c.len_utf8();
                    continue;
                }
                None => break,
            },
        };
        if width == 0 {
            i += 1;
            continue;
        }
        f.write_str(&shown[plain..i])?;
        for b in &shown.as_bytes()[i..i + width] {
            write!(f, "%{b:02X}")?;
        }
        i += width;
        plain = i;
    }
    f.write_str(&shown[plain..])?;
    if shown.len() < text.len() {
        f.write_str("…")?;
    }
    Ok(())
}

/// Characters past ASCII that a log viewer or a line splitter reads as a break, a space
/// or a reordering, or that show nothing: every white space (NEL, no-break and the
/// typographic spaces, the line and paragraph separators), the C1 controls (CSI), the
/// zero-width and filler characters (the combining grapheme joiner, the Hangul fillers),
/// the bidirectional marks, embeddings, overrides and isolates, the soft hyphen, the
/// variation selectors, a byte-order mark and the tag characters (text hidden in plain
/// sight).
fn misleads(c: char) -> bool {
    c.is_whitespace()
        || matches!(c,
            '\u{80}'..='\u{9f}'
            | '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}' | '\u{1160}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
            | '\u{e0100}'..='\u{e01ef}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_a_clients_text_as_one_token_that_breaks_no_line() {
        let part = |text: &str| KeyPart(text).to_string();
        assert_eq!(part("acme a=b"), "acme%20a=b");
        assert_eq!(
            part("50%"),
            "50%25",
            "unambiguous: a `%20` sent reads `%2520`"
        );
        assert_eq!(part("tab\there"), "tab%09here");
        // NEL, a line separator and a right-to-left override: percent-encoded bytes.
        assert_eq!(
            part("a\u{85}b\u{2028}c\u{202e}d"),
            "a%C2%85b%E2%80%A8c%E2%80%AEd"
        );
        assert_eq!(part("café ünï"), "café%20ünï", "other text as it is");
        // A no-break space, an ideographic one, a zero-width one, an Arabic letter mark.
        assert_eq!(
            part("a\u{a0}b\u{3000}c\u{200b}d\u{61c}"),
            "a%C2%A0b%E3%80%80c%E2%80%8Bd%D8%9C"
        );
        // A Hangul filler, a tag letter, a variation selector.
        assert_eq!(
            part("a\u{3164}b\u{e0041}c\u{fe0f}"),
            "a%E3%85%A4b%F3%A0%81%81c%EF%B8%8F"
        );
        let long = "é".repeat(200);
        assert_eq!(part(&long), format!("{}…", "é".repeat(128)));
        let id = Clipped("x \"y\"\u{2029}", 64).to_string();
        assert_eq!(id, "x%20%22y%22%E2%80%A9");
    }
}
