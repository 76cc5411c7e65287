//! Where limiter state lives. The embedded memory store is the default.

pub mod memory;

use std::hash::Hasher;

pub use memory::MemoryStore;

use crate::limit::{evaluate, Tier, Verdict};

/// The store a gateway decides against.
pub enum Limiter {
    Memory(std::sync::Arc<MemoryStore>),
}

impl Limiter {
    /// A hasher for (policy, key) identities that stays the same for the process lifetime.
    pub fn key_hasher(&self) -> impl Hasher {
        match self {
            Limiter::Memory(m) => m.key_hasher(),
        }
    }

    /// Decides all tiers of one request at `now`.
    pub async fn check(&self, tiers: &[Tier], now: u64, cost: u64) -> Verdict {
        match self {
            Limiter::Memory(m) => evaluate(&**m, tiers, now, cost),
        }
    }

    pub fn memory(&self) -> Option<&MemoryStore> {
        match self {
            Limiter::Memory(m) => Some(m),
        }
    }
}
