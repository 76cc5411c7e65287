//! A limiter key in the store's own encoding: the keyed 64-bit hash every store uses,
//! and for Redis the fleet-wide key name as well. Only the store decides which it needs.

use crate::key::{KeyHasher, KeyPart, RedisKey, RedisKeyBuilder};

use super::Limiter;

/// One (policy, key parts) as the store identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreKey {
    pub hash: u64,
    /// The Redis key, when the store is Redis.
    pub redis: Option<RedisKey>,
}

/// Builds a [`StoreKey`] part by part.
#[derive(Clone)]
pub struct KeyBuilder {
    hasher: KeyHasher<ahash::AHasher>,
    /// Boxed: the hash state is large, and memory mode (no Redis key) should not carry it.
    redis: Option<Box<RedisKeyBuilder>>,
}

impl KeyBuilder {
    pub fn part(&mut self, part: &KeyPart<'_>) {
        self.hasher.part(part);
        if let Some(r) = self.redis.as_mut() {
            r.part(part);
        }
    }

    /// An absent part under `missing = "shared"`.
    pub fn missing(&mut self) {
        self.hasher.missing();
        if let Some(r) = self.redis.as_mut() {
            r.missing();
        }
    }

    pub fn finish(self, policy: &str) -> StoreKey {
        StoreKey {
            hash: self.hasher.finish(),
            redis: self.redis.map(|r| r.finish(policy)),
        }
    }
}

impl Limiter {
    /// A key of `policy`, to be given its parts.
    pub fn key_builder(&self, policy: &str) -> KeyBuilder {
        KeyBuilder {
            hasher: KeyHasher::new(self.key_hasher(), policy),
            redis: self.is_remote().then(Box::default),
        }
    }

    /// The key every new key of `policy` shares when the store is too full to track one.
    pub fn overflow_key(&self, policy: &str) -> u64 {
        KeyHasher::new(self.key_hasher(), policy).overflow()
    }

    /// The key named by `parts` (their text, as an operator types them), for inspection.
    pub fn key_of(&self, policy: &str, parts: &[String]) -> StoreKey {
        let mut key = self.key_builder(policy);
        for p in parts {
            key.part(&KeyPart::Bytes(p.as_bytes().into()));
        }
        key.finish(policy)
    }

    /// The key's TAT and the `now` it is relative to (the store's clock for Redis, whose
    /// TATs are reported on a base that plays "now").
    pub async fn peek(&self, key: &StoreKey, now: u64) -> Result<(u64, u64), super::StoreError> {
        match (self.remote(), &key.redis) {
            (Some(remote), Some(redis_key)) => {
                let debts = remote.debts(std::slice::from_ref(redis_key)).await?;
                let debt = debts.first().copied().unwrap_or(0);
                let base = super::snapshot::BASE;
                Ok((if debt == 0 { 0 } else { base + debt }, base))
            }
            _ => {
                use crate::limit::TatTable;
                Ok((self.local().peek(key.hash), now))
            }
        }
    }
}
