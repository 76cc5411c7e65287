//! Random bytes from the system's source (secrets, nonces, temporary file names) and the
//! hex text they are written as.

use std::fmt::Write as _;

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
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
