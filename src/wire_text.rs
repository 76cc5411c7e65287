//! Text fields of the messages Envoy sends the gRPC front doors (a rate limit service
//! descriptor's entries, an RLQS bucket id), read as the bytes they are. Envoy copies a
//! request header's value into them as it came, and an HTTP header may carry bytes
//! 0x80–0xFF that are not UTF-8; a `string` field decoded strictly would fail the whole
//! message on one such client byte — an error Envoy answers by its failure mode, which
//! lets the request through unlimited (RLS), or a quota report lost with every bucket in
//! it (RLQS). So every byte string is read, losslessly, into a `String`: valid UTF-8 as
//! it is, each other byte as one character of the private-use range U+10FF00–U+10FFFF
//! (and a character of that range that came as valid UTF-8 as its four bytes, so the
//! mapping is one to one). Written back — an RLQS bucket id is echoed to Envoy, which
//! finds its bucket by it — the same bytes go out.

use std::borrow::Cow;

use bytes::{Buf, BufMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len};
use prost::encoding::{DecodeContext, WireType};
use prost::DecodeError;

/// The character that stands for byte 0x00; byte `b` is `ESCAPE_BASE + b`.
const ESCAPE_BASE: u32 = 0x10_FF00;

fn escape(byte: u8) -> char {
    char::from_u32(ESCAPE_BASE + u32::from(byte)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

fn escaped(c: char) -> Option<u8> {
    u8::try_from(u32::from(c).checked_sub(ESCAPE_BASE)?).ok()
}

/// Whether `bytes` may hold a character of the escape range (its UTF-8 starts F4 8F
/// BC–BF): the common text holds none, and is taken as it is.
fn may_hold_escapes(bytes: &[u8]) -> bool {
    bytes
        .windows(3)
        .any(|w| w[0] == 0xF4 && w[1] == 0x8F && w[2] >= 0xBC)
}

/// `bytes` as text: itself when it is UTF-8 with no character of the escape range.
pub fn from_wire(bytes: Vec<u8>) -> String {
    let bytes = match String::from_utf8(bytes) {
        Ok(text) if !may_hold_escapes(text.as_bytes()) => return text,
        Ok(text) => text.into_bytes(),
        Err(e) => e.into_bytes(),
    };
    let mut text = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match escaped(c) {
                None => text.push(c),
                Some(_) => {
                    let mut utf8 = [0u8; 4];
                    text.extend(c.encode_utf8(&mut utf8).bytes().map(escape));
                }
            }
        }
        text.extend(chunk.invalid().iter().copied().map(escape));
    }
    text
}

/// The bytes `text` (made by [`from_wire`]) came from.
pub fn to_wire(text: &str) -> Cow<'_, [u8]> {
    if !may_hold_escapes(text.as_bytes()) {
        return Cow::Borrowed(text.as_bytes());
    }
    let mut bytes = Vec::with_capacity(text.len());
    for c in text.chars() {
        match escaped(c) {
            Some(byte) => bytes.push(byte),
            None => bytes.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
    }
    Cow::Owned(bytes)
}

/// prost's `string::encode`, writing the bytes `value` stands for. (`&String`: prost's
/// map functions take the field's own type.)
#[allow(clippy::ptr_arg)]
pub fn encode(tag: u32, value: &String, buf: &mut impl BufMut) {
    let bytes = to_wire(value);
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.put_slice(&bytes);
}

/// prost's `string::merge`, reading any bytes (see the module's comment).
pub fn merge(
    wire_type: WireType,
    value: &mut String,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    let mut bytes = Vec::new();
    prost::encoding::bytes::merge(wire_type, &mut bytes, buf, ctx)?;
    *value = from_wire(bytes);
    Ok(())
}

/// prost's `string::encoded_len` of what [`encode`] writes.
#[allow(clippy::ptr_arg)]
pub fn encoded_len(tag: u32, value: &String) -> usize {
    let len = to_wire(value).len();
    key_len(tag) + encoded_len_varint(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_read_as_text_and_write_back_as_they_came() {
        let cases: [&[u8]; 7] = [
            b"acme",
            b"",
            b"a\xffb",
            b"\xc3",
            "caf\u{e9} \u{10FF41}".as_bytes(),
            b"\xf4\x8f\xbc",
            b"\x80\x80\xf0\x9f\x98\x80\xff",
        ];
        let mut seen = std::collections::HashSet::new();
        for bytes in cases {
            let text = from_wire(bytes.to_vec());
            assert_eq!(&*to_wire(&text), bytes, "{text:?}");
            assert!(seen.insert(text), "{bytes:?} reads as text of its own");
        }
        assert_eq!(from_wire(b"acme".to_vec()), "acme", "text is itself");
        assert_eq!(from_wire("caf\u{e9}".into()), "caf\u{e9}");
        assert!(matches!(to_wire("acme"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_string_field_with_any_bytes_decodes_and_encodes_the_same() {
        let mut wire = Vec::new();
        encode_key(2, WireType::LengthDelimited, &mut wire);
        encode_varint(3, &mut wire);
        wire.extend_from_slice(b"a\xffb");
        let mut buf = &wire[1..];
        let mut value = String::new();
        merge(
            WireType::LengthDelimited,
            &mut value,
            &mut buf,
            DecodeContext::default(),
        )
        .expect("read");
        let mut out = Vec::new();
        encode(2, &value, &mut out);
        assert_eq!(out, wire);
        assert_eq!(encoded_len(2, &value), wire.len());
    }
}
