//! The `Content-Encoding` of a request body read before its decision (`json:` keys, price
//! quotes): gzip and deflate are decoded, at most `max_key_body` bytes of output, so the
//! values tollgate keys and prices by are the ones the upstream will read. Any other
//! coding is refused: a body tollgate cannot read but the upstream can would be a spelling
//! that dodges its key (read as missing) or its price.

use std::io::Read;

use http::header::CONTENT_ENCODING;
use http::HeaderMap;

/// How the request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    /// HTTP's `deflate`: zlib-wrapped (RFC 9110), or bare deflate as some clients send.
    Deflate,
}

impl Coding {
    /// Its name in `Content-Encoding`.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }
}

/// What decoding made of a body.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// The whole body, decoded.
    Whole(Vec<u8>),
    /// More than the bound decoded: the body is too large to key by.
    TooLarge,
    /// Not in the coding it claims.
    Corrupt,
}

/// The codings tollgate reads, as the 415's `Accept-Encoding` names them.
pub const READ: &str = "gzip, deflate";

/// The request's coding; `Err` with the header's text for one tollgate does not read
/// (another coding, several codings, several headers, or text that is not a token).
pub fn coding_of(headers: &HeaderMap) -> Result<Coding, String> {
    let mut values = headers.get_all(CONTENT_ENCODING).iter();
    let Some(value) = values.next() else {
        return Ok(Coding::Identity);
    };
    let text = value.to_str().map_err(|_| "(not text)".to_owned())?;
    if values.next().is_some() {
        return Err(several(headers));
    }
    let coding = text.trim();
    if coding.eq_ignore_ascii_case("identity") || coding.is_empty() {
        Ok(Coding::Identity)
    } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
        Ok(Coding::Gzip)
    } else if coding.eq_ignore_ascii_case("deflate") {
        Ok(Coding::Deflate)
    } else {
        Err(coding.chars().take(64).collect())
    }
}

/// Every `Content-Encoding` line, joined (for the refusal's detail).
fn several(headers: &HeaderMap) -> String {
    let all: Vec<&str> = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .map(|v| v.to_str().unwrap_or("(not text)"))
        .collect();
    all.join(", ").chars().take(64).collect()
}

/// Decodes `body` (`coding` other than identity) into at most `max` bytes: the work is
/// bounded by the output, so a small body that expands without end costs `max` bytes of
/// inflating, never more.
pub fn decode(coding: Coding, body: &[u8], max: usize) -> Decoded {
    use flate2::bufread::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
    match coding {
        Coding::Identity => Decoded::Whole(body.to_vec()),
        Coding::Gzip => bounded(MultiGzDecoder::new(body), max, |d| d.into_inner().len()),
        // `deflate` is zlib by the letter, raw deflate as some clients send it: read as
        // either, but a body both readings take whole to different texts is refused —
        // which one the upstream takes is anyone's guess.
        Coding::Deflate => match (
            bounded(ZlibDecoder::new(body), max, |d| d.into_inner().len()),
            bounded(DeflateDecoder::new(body), max, |d| d.into_inner().len()),
        ) {
            (Decoded::Corrupt, raw) => raw,
            (Decoded::Whole(zlib), Decoded::Whole(raw)) if zlib != raw => Decoded::Corrupt,
            (zlib, _) => zlib,
        },
    }
}

/// The first `n` bytes `body` decodes to (fewer when it ends or breaks first): what a
/// body too large to read or decode whole begins with.
pub fn decoded_prefix(coding: Coding, body: &[u8], n: usize) -> Vec<u8> {
    fn first(mut decoder: impl Read, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        let mut filled = 0;
        while filled < n {
            match decoder.read(&mut out[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => filled += k,
            }
        }
        out.truncate(filled);
        out
    }
    match coding {
        Coding::Identity => body[..body.len().min(n)].to_vec(),
        Coding::Gzip => first(flate2::read::MultiGzDecoder::new(body), n),
        Coding::Deflate => match first(flate2::read::ZlibDecoder::new(body), n) {
            zlib if zlib.is_empty() => first(flate2::read::DeflateDecoder::new(body), n),
            zlib => zlib,
        },
    }
}

/// `decoder`'s output up to `max`; `left` tells how many input bytes it did not read. A
/// body with bytes after its stream's end is corrupt: what the upstream makes of them is
/// not what was keyed.
fn bounded<D: Read>(decoder: D, max: usize, left: impl FnOnce(D) -> usize) -> Decoded {
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut take = decoder.take(limit);
    match take.read_to_end(&mut out) {
        Ok(_) if out.len() > max => Decoded::TooLarge,
        Ok(_) if left(take.into_inner()) > 0 => Decoded::Corrupt,
        Ok(_) => Decoded::Whole(out),
        Err(_) => Decoded::Corrupt,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CONTENT_ENCODING, v.parse().expect("value"));
        }
        h
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).expect("write");
        e.finish().expect("finish")
    }

    #[test]
    fn codings_are_read_by_name_and_the_rest_named_back() {
        assert_eq!(coding_of(&headers(&[])), Ok(Coding::Identity));
        assert_eq!(coding_of(&headers(&["identity"])), Ok(Coding::Identity));
        assert_eq!(coding_of(&headers(&[" GZip "])), Ok(Coding::Gzip));
        assert_eq!(coding_of(&headers(&["x-gzip"])), Ok(Coding::Gzip));
        assert_eq!(coding_of(&headers(&["Deflate"])), Ok(Coding::Deflate));
        assert_eq!(coding_of(&headers(&["br"])), Err("br".into()));
        assert_eq!(coding_of(&headers(&["gzip, br"])), Err("gzip, br".into()));
        assert_eq!(
            coding_of(&headers(&["gzip", "gzip"])),
            Err("gzip, gzip".into())
        );
    }

    #[test]
    fn gzip_and_both_deflates_decode_and_garbage_is_corrupt() {
        let json = br#"{"model":"gpt-4o","user":"u1"}"#;
        let whole = Decoded::Whole(json.to_vec());
        assert_eq!(decode(Coding::Gzip, &gzip(json), 1024), whole);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(json).expect("write");
        assert_eq!(
            decode(Coding::Deflate, &z.finish().expect("z"), 1024),
            whole
        );
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        d.write_all(json).expect("write");
        assert_eq!(
            decode(Coding::Deflate, &d.finish().expect("d"), 1024),
            whole
        );
        assert_eq!(decode(Coding::Gzip, json, 1024), Decoded::Corrupt);
        // Bytes after the stream's end, zlib or raw: not what was keyed upstream.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(json).expect("write");
        let mut trailing = z.finish().expect("z");
        trailing.extend_from_slice(b"XYZ");
        assert_eq!(decode(Coding::Deflate, &trailing, 1024), Decoded::Corrupt);
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        d.write_all(json).expect("write");
        let mut trailing = d.finish().expect("d");
        trailing.extend_from_slice(b"XYZ");
        assert_eq!(decode(Coding::Deflate, &trailing, 1024), Decoded::Corrupt);
        let mut trailing = gzip(json);
        trailing.extend_from_slice(b"XYZ");
        assert_eq!(decode(Coding::Gzip, &trailing, 1024), Decoded::Corrupt);
        let cut = gzip(json);
        assert_eq!(
            decode(Coding::Gzip, &cut[..cut.len() - 4], 1024),
            Decoded::Corrupt
        );
    }

    #[test]
    fn a_body_that_expands_past_the_bound_stops_there() {
        // 16 MiB of zeros in about 16 KiB: inflating stops at the bound.
        let bomb = gzip(&vec![0u8; 16 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        assert_eq!(decode(Coding::Gzip, &bomb, 64 << 10), Decoded::TooLarge);
        let exact = vec![b' '; 1000];
        assert!(
            matches!(decode(Coding::Gzip, &gzip(&exact), 1000), Decoded::Whole(b) if b.len() == 1000)
        );
        assert_eq!(decode(Coding::Gzip, &gzip(&exact), 999), Decoded::TooLarge);
    }
}
