//! Which store holds a gateway's limiter state — the embedded table, or Redis with the
//! embedded table beside it for `on_error = "local"` — and what `on_error` makes of a
//! decision Redis could not make.

use std::sync::Arc;

use super::memory::MemoryStore;
use super::redis::RedisStore;
use crate::config::OnError;

/// Which store holds the state.
pub enum Store {
    Memory(Arc<MemoryStore>),
    Redis {
        remote: Arc<RedisStore>,
        /// Used when Redis cannot answer and `on_error = "local"`.
        local: Arc<MemoryStore>,
        on_error: OnError,
    },
}

/// What a decision becomes when the store could not make it (`on_error`).
pub(super) enum Fallback {
    /// `allow`: go on unlimited by this tier.
    Unchecked,
    /// `deny`: refuse the request (503).
    Refuse,
    /// `local`: decide in this process alone.
    Local,
}

impl Store {
    /// The embedded store when it holds all state (memory mode).
    pub fn memory(&self) -> Option<&MemoryStore> {
        match self {
            Store::Memory(m) => Some(m),
            Store::Redis { .. } => None,
        }
    }

    /// The process-local store: all state in memory mode, the `local` fallback with Redis.
    pub fn local(&self) -> &MemoryStore {
        match self {
            Store::Memory(m) => m,
            Store::Redis { local, .. } => local,
        }
    }

    pub fn remote(&self) -> Option<&Arc<RedisStore>> {
        match self {
            Store::Redis { remote, .. } => Some(remote),
            Store::Memory(_) => None,
        }
    }

    /// What `on_error` makes of a decision the store failed to make: the one place it is
    /// read.
    pub(super) fn fallback(&self) -> Fallback {
        match self {
            Store::Redis { on_error, .. } => match on_error {
                OnError::Allow => Fallback::Unchecked,
                OnError::Deny => Fallback::Refuse,
                OnError::Local => Fallback::Local,
            },
            Store::Memory(_) => Fallback::Refuse,
        }
    }
}
