//! Random bytes from the system's source (secrets, nonces, temporary file names) and the
//! hex text they are written as.

use ring::rand::{SecureRandom, SystemRandom};

/// `N` random bytes.
pub fn bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The system's random source does not fail on any platform tollgate runs on; if it
    // did, nothing secret could be made, so stopping is right.
    SystemRandom::new()
        .fill(&mut bytes)
        .unwrap_or_else(|_| panic!("the system's random number source failed"));
    bytes
}

/// A random name part (16 hex digits), for temporary files.
pub fn suffix() -> String {
    hex(&bytes::<8>())
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    write_hex(&mut out, bytes);
    // Hex digits are ASCII: always UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// `bytes` as lower-case hex into `out`, two digits a byte (`out` is at least twice as
/// long). By table: a key part hashed for a sampled span or a log line is 16 bytes, and
/// formatting each as `{:02x}` cost ~230 instructions a byte.
pub fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(super::hex(&[]), "");
        let mut out = [b'.'; 6];
        super::write_hex(&mut out, &[0xbe, 0xef]);
        assert_eq!(&out, b"beef..");
    }
}
