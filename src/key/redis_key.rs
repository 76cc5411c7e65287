//! Redis keys for (policy, key): the same on every gateway of a fleet (a fixed digest, no
//! per-process seed), bounded in length, with a hash tag taken from the key's first part
//! so that a request's tiers that share it (tenant and tenant+user, say) share a slot.

use std::fmt::Write;

use sha2::{Digest, Sha256};

use super::KeyPart;

pub const PREFIX: &str = "tg";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKey {
    /// `tg:{<tag>}:<policy>:<digest>`
    pub key: String,
    /// The hash tag: keys with equal tags live in one Redis Cluster slot.
    pub tag: String,
}

#[derive(Default, Clone)]
pub struct RedisKeyBuilder {
    tag: Option<String>,
    all: Sha256,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl RedisKeyBuilder {
    fn absorb(&mut self, bytes: &[u8], marker: bool) {
        if self.tag.is_none() {
            let mut first = Sha256::new();
            first.update([u8::from(marker)]);
            first.update(bytes);
            self.tag = Some(hex(&first.finalize()[..8]));
        }
        if marker {
            self.all.update(u64::MAX.to_le_bytes());
        } else {
            self.all.update((bytes.len() as u64).to_le_bytes());
            self.all.update(bytes);
        }
    }

    pub fn part(&mut self, part: &KeyPart<'_>) {
        match part {
            KeyPart::Bytes(b) => self.absorb(b, false),
            KeyPart::Ip(_) => self.absorb(part.as_text().as_bytes(), false),
        }
    }

    /// An absent part under `missing = "shared"`.
    pub fn missing(&mut self) {
        self.absorb(&[], true);
    }

    pub fn finish(self, policy: &str) -> RedisKey {
        let tag = self.tag.unwrap_or_default();
        let digest = hex(&self.all.finalize()[..16]);
        RedisKey {
            key: format!("{PREFIX}:{{{tag}}}:{policy}:{digest}"),
            tag,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn key(parts: &[&str], policy: &str) -> RedisKey {
        let mut b = RedisKeyBuilder::default();
        for p in parts {
            b.part(&KeyPart::Bytes(Cow::Borrowed(p.as_bytes())));
        }
        b.finish(policy)
    }

    #[test]
    fn stable_distinct_and_tagged_by_first_part() {
        let tenant = key(&["acme"], "tenant");
        assert_eq!(tenant, key(&["acme"], "tenant"), "no per-process seed");
        let user = key(&["acme", "bob"], "user");
        assert_eq!(tenant.tag, user.tag, "tenant and tenant+user share a slot");
        assert_ne!(key(&["ab", "c"], "p").key, key(&["a", "bc"], "p").key);
        assert_ne!(key(&["acme"], "a").key, key(&["acme"], "b").key);
        let long = "x".repeat(10_000);
        assert!(key(&[&long], "p").key.len() < 80, "long keys are digested");
        assert!(tenant.key.starts_with("tg:{"));
    }
}
