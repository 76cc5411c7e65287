//! Redis keys for (policy, key): the same on every gateway of a fleet (a hash keyed by the
//! fleet's secret, no per-process seed), bounded in length, with a hash tag taken from
//! the key's first part so that a request's tiers that share it (tenant and tenant+user,
//! say) share a slot. Keyed, so a client can neither pick a key's Cluster slot (crowding a
//! victim's master) nor find its key in Redis by hashing guesses.

use ring::hmac;

use super::fleet::FleetKey;
use super::KeyPart;
use crate::random::hex;

pub const PREFIX: &str = "tg";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKey {
    /// `tg:{<tag>}:<policy>:<digest>`
    pub key: String,
    /// The hash tag: keys with equal tags live in one Redis Cluster slot.
    pub tag: String,
}

/// The hash tag of a Redis key name (`tg:{<tag>}:…` and the names derived from it): the
/// text between its first `{` and the `}` after it; the whole name when it has none.
pub fn tag_of(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or(key, |(tag, _)| tag)
}

#[derive(Clone)]
pub struct RedisKeyBuilder {
    /// The keyed hash the tag is taken from, until the first part has gone into it.
    first: Option<hmac::Context>,
    tag: Option<String>,
    all: hmac::Context,
}

impl RedisKeyBuilder {
    pub fn new(fleet: &FleetKey) -> Self {
        Self {
            first: Some(fleet.key_hash()),
            tag: None,
            all: fleet.key_hash(),
        }
    }

    fn absorb(&mut self, bytes: &[u8], marker: bool) {
        if let Some(mut first) = self.first.take() {
            first.update(&[u8::from(marker)]);
            first.update(bytes);
            self.tag = Some(hex(&first.sign().as_ref()[..8]));
        }
        if marker {
            self.all.update(&u64::MAX.to_le_bytes());
        } else {
            self.all.update(&(bytes.len() as u64).to_le_bytes());
            self.all.update(bytes);
        }
    }

    pub fn part(&mut self, part: &KeyPart<'_>) {
        match part {
            KeyPart::Bytes(b) => self.absorb(b, false),
            KeyPart::Ip(_) | KeyPart::Net(_) => self.absorb(part.as_text().as_bytes(), false),
        }
    }

    /// An absent part under `missing = "shared"`.
    pub fn missing(&mut self) {
        self.absorb(&[], true);
    }

    pub fn finish(self, policy: &str) -> RedisKey {
        let tag = self.tag.unwrap_or_default();
        let mut all = self.all;
        // The policy's name ends the digest: its length first, so no name and parts run
        // into each other.
        all.update(&(policy.len() as u64).to_le_bytes());
        all.update(policy.as_bytes());
        let digest = hex(&all.sign().as_ref()[..16]);
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

    fn fleet(secret: &str) -> FleetKey {
        FleetKey::new(crate::key::fleet::KeySecret::parse(secret).unwrap())
    }

    fn key(parts: &[&str], policy: &str) -> RedisKey {
        keyed(&fleet("the-fleet-secret-0001"), parts, policy)
    }

    fn keyed(fleet: &FleetKey, parts: &[&str], policy: &str) -> RedisKey {
        let mut b = RedisKeyBuilder::new(fleet);
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
        assert_eq!(tag_of(&tenant.key), tenant.tag);
        assert_eq!(tag_of(&format!("{}:in-flight", tenant.key)), tenant.tag);
        let other = keyed(&fleet("another-fleet-secret"), &["acme"], "tenant");
        assert_ne!(other.tag, tenant.tag, "the tag is keyed");
        assert_ne!(other.key, tenant.key);
    }

    /// Tags of keyed hashes spread like random ones: a client choosing tenant ids cannot
    /// steer them, and ids that share a tag under one secret do not under another.
    #[test]
    fn tags_spread_over_cluster_slots() {
        let a = fleet("the-fleet-secret-0001");
        let mut buckets = [0u32; 3];
        for i in 0..3000 {
            let k = keyed(&a, &[&format!("tenant-{i}")], "t");
            let slot = u64::from_str_radix(&k.tag[..4], 16).unwrap() % 3;
            buckets[slot as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (850..1150).contains(&n)),
            "{buckets:?}"
        );
    }
}
