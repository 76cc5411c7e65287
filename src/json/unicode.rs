//! A JSON body in the encodings its readers detect from its first bytes (RFC 4627,
//! section 3, as Python's `json.loads` and Jackson read bytes): UTF-8 after a byte order
//! mark, UTF-16 and UTF-32 of either byte order, with a mark or without. Such a body is
//! walked as its UTF-8 text, so no encoding an upstream reads makes a key read as missing.

/// How a body is encoded, when it is not plain UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8Marked,
    Utf16 { big: bool },
    Utf32 { big: bool },
}

/// From a byte order mark, or the zero bytes the first character leaves (JSON text starts
/// with an ASCII character, so UTF-16 and UTF-32 show zeros in the first four bytes).
fn detect(body: &[u8]) -> Option<Encoding> {
    use Encoding::*;
    Some(match body {
        [0, 0, 0xFE, 0xFF, ..] | [0, 0, 0, _, ..] => Utf32 { big: true },
        [0xFF, 0xFE, 0, 0, ..] | [_, 0, 0, 0, ..] => Utf32 { big: false },
        [0xFE, 0xFF, ..] | [0, _, ..] => Utf16 { big: true },
        [0xFF, 0xFE, ..] | [_, 0, ..] => Utf16 { big: false },
        [0xEF, 0xBB, 0xBF, ..] => Utf8Marked,
        _ => return None,
    })
}

/// `body` as UTF-8 text without its byte order mark, when it is in another encoding or
/// carries a mark; `None` when it is plain UTF-8, to be read as it is. A code unit that is
/// no character (an unpaired surrogate, a number past the last code point) reads as
/// U+FFFD, as Python's `surrogatepass` and Go let such text through; a trailing odd byte
/// is dropped.
pub fn to_utf8(body: &[u8]) -> Option<Vec<u8>> {
    let mut text = match detect(body)? {
        Encoding::Utf8Marked => {
            return Some(
                String::from_utf8_lossy(&body[3..])
                    .into_owned()
                    .into_bytes(),
            )
        }
        Encoding::Utf16 { big } => {
            let units = body.chunks_exact(2).map(|c| match big {
                true => u16::from_be_bytes([c[0], c[1]]),
                false => u16::from_le_bytes([c[0], c[1]]),
            });
            char::decode_utf16(units)
                .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                .collect::<String>()
        }
        Encoding::Utf32 { big } => body
            .chunks_exact(4)
            .map(|c| {
                let c = [c[0], c[1], c[2], c[3]];
                let unit = if big {
                    u32::from_be_bytes(c)
                } else {
                    u32::from_le_bytes(c)
                };
                char::from_u32(unit).unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect::<String>(),
    };
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Some(text.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str, big: bool, mark: bool) -> Vec<u8> {
        let mark = mark.then_some(0xFEFF);
        mark.into_iter()
            .chain(text.encode_utf16())
            .flat_map(|u| {
                if big {
                    u.to_be_bytes()
                } else {
                    u.to_le_bytes()
                }
            })
            .collect()
    }

    fn utf32(text: &str, big: bool, mark: bool) -> Vec<u8> {
        let mark = mark.then_some('\u{feff}');
        mark.into_iter()
            .chain(text.chars())
            .flat_map(|c| {
                if big {
                    (c as u32).to_be_bytes()
                } else {
                    (c as u32).to_le_bytes()
                }
            })
            .collect()
    }

    #[test]
    fn every_detected_encoding_reads_as_the_same_utf8_text() {
        let json = "{\"user\":\"\u{e9}\u{1F600}\"}";
        for big in [true, false] {
            for mark in [true, false] {
                for body in [utf16(json, big, mark), utf32(json, big, mark)] {
                    assert_eq!(to_utf8(&body).as_deref(), Some(json.as_bytes()), "{body:?}");
                }
            }
        }
        let marked = [&[0xEF, 0xBB, 0xBF][..], json.as_bytes()].concat();
        assert_eq!(to_utf8(&marked).as_deref(), Some(json.as_bytes()));
    }

    #[test]
    fn plain_utf8_is_left_as_it_is_and_units_that_are_no_character_read_as_u_fffd() {
        assert_eq!(to_utf8(b"{\"user\":\"u\"}"), None);
        assert_eq!(to_utf8(b" [1]"), None);
        assert_eq!(to_utf8(b""), None);
        // An unpaired surrogate, and an odd length, in UTF-16LE.
        let fffd = "\u{fffd}".as_bytes();
        assert_eq!(
            to_utf8(&[b'{', 0, 0x00, 0xD8, b'}', 0]),
            Some([b"{", fffd, b"}"].concat())
        );
        assert_eq!(to_utf8(&[b'{', 0, b'}']).as_deref(), Some(&b"{"[..]));
        // Past the last code point, in UTF-32BE.
        assert_eq!(
            to_utf8(&[0, 0, 0, b'1', 0, 0x11, 0, 0]),
            Some([b"1", fffd].concat())
        );
        // Bytes that are no UTF-8 after a UTF-8 mark.
        assert_eq!(
            to_utf8(&[0xEF, 0xBB, 0xBF, b'1', 0xFF]),
            Some([b"1", fffd].concat())
        );
    }
}
