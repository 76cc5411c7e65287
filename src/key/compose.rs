//! A limiter key's identity: the policy name and every part, length-prefixed, hashed
//! with the store's keyed hasher. The request path and the admin API share this.

use std::hash::Hasher;

use super::KeyPart;

/// The bits of a key hash the hasher fills: the top [`STORE_BITS`] are left clear for
/// the store to name where it keeps the key (`store::memory::areas`), so a key hashed
/// here is a rate key until the store places it.
pub const HASH_MASK: u64 = u64::MAX >> STORE_BITS;
/// Top bits of a key hash that are the store's.
pub const STORE_BITS: u32 = 6;

#[derive(Clone)]
pub struct KeyHasher<H: Hasher> {
    hasher: H,
}

impl<H: Hasher> KeyHasher<H> {
    pub fn new(mut hasher: H, policy: &str) -> Self {
        hasher.write_usize(policy.len());
        hasher.write(policy.as_bytes());
        Self { hasher }
    }

    pub fn part(&mut self, part: &KeyPart<'_>) {
        part.hash_into(&mut self.hasher);
    }

    /// An absent part under `missing = "shared"`: a marker no real part produces,
    /// since real parts start with their length and no length is `u64::MAX`.
    pub fn missing(&mut self) {
        self.hasher.write_u64(u64::MAX);
    }

    /// The policy's overflow key: one marker, no parts, shared by every new key the
    /// store is too full to track.
    pub fn overflow(mut self) -> u64 {
        self.hasher.write_u64(u64::MAX - 1);
        self.hasher.finish() & HASH_MASK
    }

    pub fn finish(self) -> u64 {
        self.hasher.finish() & HASH_MASK
    }
}
