//! Where limiter state lives: the embedded memory store (default) or Redis, shared by a
//! fleet. Both give the same verdicts; Redis can fail, and `on_error` decides what then.
//! The request path asks one question, [`Limiter::check_request`]; key encoding, the
//! store's failures and their metrics stay in here.

pub mod breaker;
pub mod concurrency;
pub mod held;
pub mod key_locks;
pub mod keys;
pub mod lease;
pub mod memory;
pub mod overrides;
pub mod redis;
pub mod refusals;
pub mod request;
pub mod sentinel;
pub mod settle;
pub mod slices;
pub mod slots;
pub mod snapshot;

use std::sync::Arc;

pub use held::Held;
pub use keys::{KeyBuilder, StoreKey};
pub use memory::MemoryStore;
pub use redis::{RedisStore, StoreError};
pub use request::{Admission, KeyRefusal, Refusal, RequestTiers, SlotOutcome, SlotTier};

use crate::config::OnError;
use crate::limit::{evaluate, Verdict};
use crate::metrics::Metrics;

/// The limiter a gateway decides against: its store, and the metrics its failures go to.
pub struct Limiter {
    pub store: Store,
    /// Requests in flight per key of the concurrency policies (and, with Redis, the
    /// `on_error = "local"` fallback).
    pub slots: Arc<slots::SlotTable>,
    /// With Redis: whose turn it is to ask for a slot, among this gateway's waiters.
    turns: Arc<slots::SlotTable>,
    lease_ids: concurrency::LeaseIds,
    metrics: Arc<Metrics>,
    /// Per-key limits set through the admin API; they beat the file's overrides.
    pub overrides: overrides::KeyOverrides,
    /// The slices of leased keys this gateway holds.
    pub slices: slices::Slices,
}

/// Which store holds the state.
pub enum Store {
    Memory(Arc<MemoryStore>),
    Redis {
        remote: Arc<RedisStore>,
        /// Used when Redis cannot answer and `on_error = "local"`.
        local: Arc<MemoryStore>,
        on_error: OnError,
        /// Refusals remembered until the wait Redis named has passed.
        refusals: Arc<refusals::RefusalCache>,
    },
}

/// How a request was decided (the verdict itself is written in place).
enum Outcome {
    Decided,
    /// The store failed and `on_error = "allow"`: forward, unlimited.
    FailedOpen(StoreError),
    /// The store failed and `on_error = "deny"`.
    FailedClosed(StoreError),
    /// The store failed and `on_error = "local"`: decided by this process alone.
    Local(StoreError),
}

impl Limiter {
    pub fn new(store: Store, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            slots: Arc::default(),
            turns: Arc::default(),
            lease_ids: concurrency::LeaseIds::default(),
            metrics,
            overrides: overrides::KeyOverrides::default(),
            slices: slices::Slices::default(),
        }
    }

    /// The embedded store when it holds all state (memory mode); `None` with Redis, whose
    /// local fallback is [`Limiter::local`].
    pub fn memory(&self) -> Option<&MemoryStore> {
        match &self.store {
            Store::Memory(m) => Some(m),
            Store::Redis { .. } => None,
        }
    }

    /// The process-local store: all state in memory mode, the `local` fallback with Redis.
    pub fn local(&self) -> &MemoryStore {
        match &self.store {
            Store::Memory(m) => m,
            Store::Redis { local, .. } => local,
        }
    }

    /// A hasher for (policy, key) identities that stays the same for the process lifetime.
    fn key_hasher(&self) -> ahash::AHasher {
        self.local().key_hasher()
    }

    fn is_remote(&self) -> bool {
        matches!(self.store, Store::Redis { .. })
    }

    pub fn remote(&self) -> Option<&RedisStore> {
        match &self.store {
            Store::Redis { remote, .. } => Some(remote),
            Store::Memory(_) => None,
        }
    }

    fn refusals(&self) -> Option<&refusals::RefusalCache> {
        match &self.store {
            Store::Redis { refusals, .. } => Some(refusals),
            Store::Memory(_) => None,
        }
    }

    /// Forgets remembered refusals: the numbers behind them may have changed (reload).
    pub fn forget_refusals(&self) {
        if let Some(refusals) = self.refusals() {
            refusals.clear();
        }
    }

    /// Whether the store can answer now (readiness).
    pub fn ready(&self) -> bool {
        self.remote().is_none_or(|r| !r.breaker.is_open())
    }

    /// Decides all tiers of one request at `now` (local clock) into `verdict`; leased
    /// tiers read `clock` again as they take their units.
    async fn check(
        &self,
        request: &RequestTiers,
        now: u64,
        cost: u64,
        clock: &dyn crate::clock::Clock,
        verdict: &mut Verdict,
    ) -> Outcome {
        let (tiers, keys, leased) = (&request.tiers[..], &request.redis_keys[..], request.leased);
        // Tiers whose verdict from Redis tells their key's state as it stays: not served
        // from a slice, and not settled later (a refund moves the TAT back).
        let exact = !(leased | request.settled);
        match &self.store {
            Store::Memory(m) => {
                *verdict = evaluate(&**m, tiers, now, cost);
                Outcome::Decided
            }
            Store::Redis {
                remote,
                local,
                on_error,
                refusals,
            } => {
                if let Some(v) = refusals.refuse(tiers, now, cost) {
                    *verdict = v;
                    return Outcome::Decided;
                }
                // A key refused moments ago: one call at a time, the rest re-check after.
                let _flight = if refusals.known(tiers) {
                    match refusals.single_flight(tiers).await {
                        Some(guard) => Some(guard),
                        None => {
                            if let Some(v) = refusals.refuse(tiers, now, cost) {
                                *verdict = v;
                                return Outcome::Decided;
                            }
                            None
                        }
                    }
                } else {
                    None
                };
                let decided = if leased == 0 {
                    remote.check(tiers, keys, cost, now).await
                } else {
                    self.check_leased(remote, tiers, keys, cost, clock, leased)
                        .await
                };
                match decided {
                    Ok(v) => {
                        refusals.record(tiers, &v, now, exact);
                        *verdict = v;
                        Outcome::Decided
                    }
                    Err(e) => match on_error {
                        OnError::Allow => Outcome::FailedOpen(e),
                        OnError::Deny => Outcome::FailedClosed(e),
                        OnError::Local => {
                            *verdict = evaluate(&**local, tiers, now, cost);
                            Outcome::Local(e)
                        }
                    },
                }
            }
        }
    }
}
