//! One part of a key (bytes, an address, an IPv6 network), how it is hashed, and the
//! distinct values one key source may take in one request.

use std::borrow::Cow;
use std::fmt;
use std::hash::Hasher;
use std::net::IpAddr;

use arrayvec::ArrayVec;

/// One part of a key, borrowed from the request where possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart<'a> {
    Bytes(Cow<'a, [u8]>),
    Ip(IpAddr),
    /// The IPv6 network an `ip/N` key cut the client's address to.
    Net(ipnet::Ipv6Net),
}

impl KeyPart<'_> {
    /// Feeds the part to a hasher, length-prefixed so `("ab","c")` ≠ `("a","bc")`.
    pub fn hash_into<H: Hasher>(&self, hasher: &mut H) {
        match self {
            KeyPart::Bytes(b) => {
                hasher.write_usize(b.len());
                hasher.write(b);
            }
            // Same bytes as the text an operator names the key by in the admin API.
            KeyPart::Ip(ip) => hash_text(ip, hasher),
            KeyPart::Net(net) => hash_text(net, hasher),
        }
    }

    /// The part as text, for Redis keys, logs and override look-ups.
    pub fn as_text(&self) -> Cow<'_, str> {
        match self {
            KeyPart::Bytes(b) => String::from_utf8_lossy(b),
            KeyPart::Ip(ip) => Cow::Owned(ip.to_string()),
            KeyPart::Net(net) => Cow::Owned(net.to_string()),
        }
    }
}

fn hash_text<H: Hasher>(part: &impl fmt::Display, hasher: &mut H) {
    let mut buf = [0u8; 48];
    let len = write_text(part, &mut buf);
    hasher.write_usize(len);
    hasher.write(&buf[..len]);
}

/// The text of an address or network key part, written on the stack: hashed on every
/// request, where a `String` would allocate.
pub(super) fn write_text(part: &impl std::fmt::Display, buf: &mut [u8; 48]) -> usize {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{part}");
    cursor.position() as usize
}

/// Most distinct values one key source (and one tier's composed key) may take in one
/// request. Each value's bucket is charged; more than this is refused (400), so a
/// client cannot make the gateway charge or look up an unbounded number of buckets.
pub const MAX_KEY_VALUES: usize = crate::limit::MAX_KEYS_PER_TIER;

/// The distinct values of one key source in one request.
pub type KeyValues<'a> = ArrayVec<KeyPart<'a>, MAX_KEY_VALUES>;

/// A key source appeared with more than [`MAX_KEY_VALUES`] distinct values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a key source has more than {MAX_KEY_VALUES} distinct values")]
pub struct TooManyValues;

/// Adds `part` unless an equal value is already there.
pub(super) fn push_distinct<'a>(
    values: &mut KeyValues<'a>,
    part: KeyPart<'a>,
) -> Result<(), TooManyValues> {
    if !values.contains(&part) {
        values.try_push(part).map_err(|_| TooManyValues)?;
    }
    Ok(())
}
