//! Where limiter state lives: the embedded memory store (default) or Redis, shared by a
//! fleet. Both give the same verdicts; Redis can fail, and `on_error` decides what then.
//!
//! The request path asks one question, [`Limiter::check_request`] (`limiter/`), and
//! reads the answer from the [`Admission`] it filled (`admission.rs`). Behind that door:
//! the request's tiers and their keys (`tiers.rs`, `keys.rs`; which limit applies to a
//! key is `config::Policy::limit_for`, `overrides.rs` holds the runtime overrides), one
//! room per limit kind — `rate/` (GCRA tiers: the refusal cache, the Redis scripts,
//! settling; `rate/lease/`, leased capacity for `sync = "lease"`), `concurrency/` (slots
//! and their Redis leases) — and the
//! stores themselves: `memory/` (the lock-free table) and `redis/` (the connection, its
//! breaker, Sentinel). Key encoding, the store's failures and their metrics stay in here.

pub mod admission;
pub mod backend;
pub mod concurrency;
pub mod error;
pub mod key_locks;
pub mod keys;
pub mod limiter;
pub mod memory;
pub mod overrides;
mod quote;
pub mod rate;
pub mod redis;
pub mod state;
pub mod tiers;

pub use admission::{Admission, Counted, Outcome, PolicyOutcome, TierReport};
pub use concurrency::held::Held;
pub use error::StoreError;
pub use keys::{KeyBuilder, KeyMaker, StoreKey};
pub use limiter::{Limiter, Settled, Store};
pub use memory::MemoryStore;
pub use redis::RedisStore;
