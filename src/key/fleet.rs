//! The fleet's secret and what is derived from it: the keyed hash that names a key in
//! Redis (so no client can choose or predict which Cluster slot its key lands in, nor
//! read its key back out of Redis), the field names of runtime overrides in Redis, and
//! the sealing of their ids (kept in Redis, but not in clear).
//!
//! The secret is `[store] key_secret` / `key_secret_file`, or, when neither is set, one
//! the first gateway of a fleet draws at random and keeps in Redis for the others
//! (`store::redis::secret`). Until a gateway knows it, its Redis decisions fail as if
//! Redis were unreachable (`on_error` decides).

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use ring::{aead, hmac};

use crate::random::{bytes as random_bytes, hex};

/// A secret's bytes; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySecret(Arc<[u8]>);

impl KeySecret {
    /// The shortest secret accepted.
    pub const MIN_LEN: usize = 16;

    /// A secret as written in the config or its file (surrounding whitespace trimmed).
    pub fn parse(text: &str) -> Result<Self, String> {
        let secret = text.trim();
        if secret.len() < Self::MIN_LEN {
            return Err(format!(
                "the key secret is {} bytes: too short to keep key names unpredictable (at least {})",
                secret.len(),
                Self::MIN_LEN
            ));
        }
        Ok(Self(secret.as_bytes().into()))
    }

    /// 32 random bytes, as 64 hex digits.
    pub fn random() -> Self {
        Self(hex(&random_bytes::<32>()).into_bytes().into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(***)")
    }
}

/// What one secret keys.
pub struct FleetKey {
    secret: KeySecret,
    /// Redis key tags and digests.
    keys: hmac::Key,
    /// Field names of runtime overrides in Redis.
    fields: hmac::Key,
    /// Override ids sealed for Redis.
    seal: aead::LessSafeKey,
}

impl FleetKey {
    pub fn new(secret: KeySecret) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
        let derived = |label: &[u8]| hmac::sign(&root, label);
        let sealing = derived(b"tollgate: sealed override ids, v1");
        let unbound = aead::UnboundKey::new(&aead::CHACHA20_POLY1305, &sealing.as_ref()[..32])
            .unwrap_or_else(|_| unreachable!("an HMAC-SHA256 tag holds a 32-byte key"));
        Self {
            keys: hmac::Key::new(
                hmac::HMAC_SHA256,
                derived(b"tollgate: redis keys, v1").as_ref(),
            ),
            fields: hmac::Key::new(
                hmac::HMAC_SHA256,
                derived(b"tollgate: override fields, v1").as_ref(),
            ),
            seal: aead::LessSafeKey::new(unbound),
            secret,
        }
    }

    pub fn secret(&self) -> &KeySecret {
        &self.secret
    }

    /// A fresh keyed hash for Redis key names.
    pub fn key_hash(&self) -> hmac::Context {
        hmac::Context::with_key(&self.keys)
    }

    /// The Redis field name for `id`'s bytes: 128 bits of keyed hash, as hex.
    pub fn field(&self, id: &[u8]) -> String {
        hex(&hmac::sign(&self.fields, id).as_ref()[..16])
    }

    /// `plain` sealed: a random nonce and the ciphertext with its tag, as hex.
    pub fn seal(&self, plain: &[u8]) -> String {
        let nonce = random_bytes::<{ aead::NONCE_LEN }>();
        let mut sealed = plain.to_vec();
        self.seal
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::empty(),
                &mut sealed,
            )
            .unwrap_or_else(|_| unreachable!("an override id is far below the cipher's limit"));
        let mut out = hex(&nonce);
        out.push_str(&hex(&sealed));
        out
    }

    /// What [`FleetKey::seal`] sealed; `None` for anything else (another secret's, or not
    /// sealed at all).
    pub fn open(&self, sealed: &str) -> Option<Vec<u8>> {
        let mut bytes = unhex(sealed)?;
        if bytes.len() < aead::NONCE_LEN {
            return None;
        }
        let mut nonce = [0u8; aead::NONCE_LEN];
        nonce.copy_from_slice(&bytes[..aead::NONCE_LEN]);
        let body = &mut bytes[aead::NONCE_LEN..];
        let plain = self
            .seal
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::empty(),
                body,
            )
            .ok()?;
        Some(plain.to_vec())
    }
}

/// The fleet key a gateway decides with: configured, or learned from Redis (and then
/// possibly replaced, when Redis lost it and another gateway drew a new one first).
#[derive(Default)]
pub struct FleetSecret {
    current: ArcSwapOption<FleetKey>,
    configured: bool,
}

impl FleetSecret {
    /// The configured secret, known from the start and never replaced.
    pub fn configured(secret: KeySecret) -> Self {
        Self {
            current: ArcSwapOption::from_pointee(FleetKey::new(secret)),
            configured: true,
        }
    }

    /// A secret to learn from Redis.
    pub fn from_redis() -> Self {
        Self::default()
    }

    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// The key, once known.
    pub fn key(&self) -> Option<Arc<FleetKey>> {
        self.current.load_full()
    }

    /// The key, once known, without touching its reference count (the request path:
    /// no shared write per request). Not to be held across an await.
    pub fn load(&self) -> arc_swap::Guard<Option<Arc<FleetKey>>> {
        self.current.load()
    }

    /// Puts `secret` in effect (a secret learned from Redis); whether it changed.
    pub fn learn(&self, secret: KeySecret) -> bool {
        if self
            .current
            .load()
            .as_ref()
            .is_some_and(|k| k.secret == secret)
        {
            return false;
        }
        self.current.store(Some(Arc::new(FleetKey::new(secret))));
        true
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &str) -> FleetKey {
        FleetKey::new(KeySecret::parse(secret).unwrap())
    }

    #[test]
    fn seals_and_opens_only_with_its_own_secret() {
        let a = key("a-secret-of-the-fleet-0001");
        let sealed = a.seal(b"{\"policy\":\"tenant\",\"key\":[\"acme\"]}");
        assert!(!sealed.contains("acme"));
        assert_eq!(
            a.open(&sealed).unwrap(),
            b"{\"policy\":\"tenant\",\"key\":[\"acme\"]}"
        );
        assert_ne!(a.seal(b"x"), a.seal(b"x"), "a fresh nonce each time");
        assert_eq!(key("another-secret-of-a-fleet").open(&sealed), None);
        assert_eq!(a.open("zz"), None);
        assert_eq!(a.open(&sealed[..sealed.len() - 2]), None, "tampered");
    }

    #[test]
    fn fields_are_keyed() {
        let a = key("a-secret-of-the-fleet-0001");
        assert_eq!(a.field(b"x"), a.field(b"x"));
        assert_ne!(a.field(b"x"), key("another-secret-of-a-fleet").field(b"x"));
        assert_eq!(a.field(b"x").len(), 32);
    }

    #[test]
    fn secrets_are_checked_and_never_printed() {
        assert!(KeySecret::parse("short").unwrap_err().contains("too short"));
        let s = KeySecret::parse("  0123456789abcdef\n").unwrap();
        assert_eq!(s.as_bytes(), b"0123456789abcdef");
        assert_eq!(format!("{s:?}"), "KeySecret(***)");
        assert_eq!(KeySecret::random().as_bytes().len(), 64);
        assert_ne!(KeySecret::random(), KeySecret::random());
    }

    #[test]
    fn a_learned_secret_replaces_a_different_one_only() {
        let fleet = FleetSecret::from_redis();
        assert!(fleet.key().is_none());
        let s = KeySecret::parse("0123456789abcdef").unwrap();
        assert!(fleet.learn(s.clone()));
        assert!(!fleet.learn(s));
        assert!(fleet.learn(KeySecret::parse("fedcba9876543210").unwrap()));
    }
}
