//! Where limiter state lives: the embedded memory store (default) or Redis, shared by a
//! fleet. Both give the same verdicts; Redis can fail, and `on_error` decides what then.
//!
//! The request path asks one question, [`Limiter::check_request`] (`limiter/`), and
//! reads the answer from the [`Admission`] it filled (`admission/`). Behind that door:
//! the request's tiers and their keys (`tiers/`, `keys.rs`; which limit applies to a
//! key is `config::Policy::limit_for`, `overrides.rs` holds the runtime overrides; a
//! priced policy's reserve is `quote.rs`), `on_error` read in `backend.rs`, one
//! room per limit kind — `rate/` (GCRA tiers: the refusal cache, the Redis scripts,
//! settling; `rate/lease/`, leased capacity for `sync = "lease"`), `concurrency/` (slots
//! and their Redis leases) — and the
//! stores themselves: `memory/` (the lock-free table; `state/`, its state file) and
//! `redis/` (the connection, its breaker, Sentinel). Key encoding, the store's failures
//! and their metrics stay in here.

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
pub use keys::{KeyMaker, StoreKey};
pub use limiter::{Limiter, Settled, Store};
pub use memory::MemoryStore;
// What the proxy holds of a decision after it (a settle, a metered body's draws) and what
// its snapshot plans: through the door, not the rooms behind it.
pub use rate::draw::{Draw, Need};
pub use rate::settle::PendingSettle;
pub use redis::RedisStore;
pub use tiers::PolicyPlan;
