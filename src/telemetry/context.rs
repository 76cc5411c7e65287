//! W3C Trace Context's `traceparent` (version 00): read from a request, written for the
//! upstream. Pure. An invalid value (or more than one) is as if there were none (the
//! spec's rule): the request starts a trace of its own when sampled, and the header is
//! replaced; an unsampled request's headers pass upstream as the client sent them (the
//! gateway is then no hop of the trace).

use http::HeaderValue;

/// The trace a request belongs to and the span that sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    /// The caller recorded its span (flag 01): a parent-based sampler follows it.
    pub sampled: bool,
}

/// `traceparent`'s value, if it is one: `00-<32 hex>-<16 hex>-<2 hex>` (a later version
/// is read by its first four fields, as the spec asks); lower-case hex, ids not all zero.
pub fn parse(value: &[u8]) -> Option<TraceParent> {
    let version = hex_bytes::<1>(value.get(0..2)?)?[0];
    if version == 0xff || value.get(2) != Some(&b'-') {
        return None;
    }
    let exact = version == 0 && value.len() == 55;
    let later = version > 0 && (value.len() == 55 || value.get(55) == Some(&b'-'));
    if !(exact || later) || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = hex_bytes::<16>(&value[3..35])?;
    let parent_id = hex_bytes::<8>(&value[36..52])?;
    let flags = hex_bytes::<1>(&value[53..55])?[0];
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        sampled: flags & 1 == 1,
    })
}

/// The value naming `span_id` of `trace_id` as the parent, sampled or not.
pub fn format(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> HeaderValue {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    crate::random::write_hex(&mut out[3..35], trace_id);
    out[35] = b'-';
    crate::random::write_hex(&mut out[36..52], span_id);
    out[52] = b'-';
    out[53..55].copy_from_slice(if sampled { b"01" } else { b"00" });
    // ASCII hex and dashes: always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn hex_bytes<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_spec_example_reads_and_writes_back() {
        let tp = parse(VALID.as_bytes()).expect("valid");
        assert!(tp.sampled);
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(format(&tp.trace_id, &tp.parent_id, true), VALID);
        assert!(
            !parse(VALID.replace("-01", "-00").as_bytes())
                .expect("valid")
                .sampled
        );
    }

    #[test]
    fn what_the_spec_forbids_is_no_parent() {
        for bad in [
            VALID.to_uppercase(),
            VALID.replace("00-4bf9", "ff-4bf9"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_owned(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01".to_owned(),
            format!("{VALID}-extra"),
            VALID[..54].to_owned(),
            VALID.replace('-', "_"),
            String::new(),
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        // A later version may carry more fields.
        assert!(parse(format!("{}-more", VALID.replacen("00", "01", 1)).as_bytes()).is_some());
    }
}
