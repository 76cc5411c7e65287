//! gRPC's length-prefixed messages: a flag byte (0: not compressed), a 4-byte big-endian
//! length, the message. Written by every gRPC front door and client of the crate (the
//! rate limit service, the quota service's streams, the OTLP exporter); read from a
//! stream whose bytes arrive in any split, messages out whole.

use bytes::{Buf, Bytes, BytesMut};

/// The largest message read: a report of every bucket of a busy Envoy (about 60 bytes a
/// bucket: tens of thousands of buckets).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("compressed messages are not supported: send them uncompressed")]
    Compressed,
    #[error("a message of {0} bytes is over the {MAX_MESSAGE_BYTES}-byte bound")]
    TooLarge(usize),
}

/// Bytes read so far, cut into messages.
#[derive(Default)]
pub struct Frames {
    buf: BytesMut,
}

impl Frames {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one has arrived.
    pub fn next_message(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(FrameError::Compressed);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(FrameError::TooLarge(len));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        self.buf.advance(5);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Bytes of a message begun and not ended.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// `message` as one frame.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_out_whole_whatever_the_split() {
        let mut wire = frame(b"hello").to_vec();
        wire.extend_from_slice(&frame(b""));
        wire.extend_from_slice(&frame(b"world"));
        for cut in 0..wire.len() {
            let mut frames = Frames::default();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                frames.push(part);
                while let Some(m) = frames.next_message().expect("valid") {
                    got.push(m);
                }
            }
            assert_eq!(got, [&b"hello"[..], b"", b"world"], "cut at {cut}");
            assert_eq!(frames.pending(), 0);
        }
    }

    #[test]
    fn a_compressed_or_oversized_message_is_an_error() {
        let mut frames = Frames::default();
        frames.push(&[1, 0, 0, 0, 1, 0]);
        assert_eq!(frames.next_message(), Err(FrameError::Compressed));
        let mut frames = Frames::default();
        frames.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            frames.next_message(),
            Err(FrameError::TooLarge(_))
        ));
    }
}
