//! Taking the slots of a request's concurrency tiers: in this process's slot table (memory
//! backend, or `on_error = "local"`), or as leases in Redis shared by the fleet. Requests
//! that may wait (`max_delay`) are served first come first served per gateway: with Redis,
//! they take turns per key here and only the one whose turn it is asks Redis, again every
//! 50 ms until a slot frees or `max_delay` has passed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::held::Held;
use super::lease::{Lease, PendingLease};
use super::redis::{LeaseOp, RedisStore};
use super::request::{Admission, Refusal, SlotOutcome, SlotTier};
use super::slots::Acquired;
use super::{Limiter, Store, StoreError};
use crate::clock::Clock;
use crate::config::{OnError, Route};
use crate::limit::Mode;

/// How often a waiting request asks Redis again for a slot.
const REDIS_RETRY: Duration = Duration::from_millis(50);

/// Names leases uniquely across a fleet: a random prefix per process and a counter.
#[derive(Debug)]
pub struct LeaseIds {
    prefix: u64,
    next: AtomicU64,
}

impl Default for LeaseIds {
    fn default() -> Self {
        Self {
            prefix: std::hash::BuildHasher::hash_one(
                &ahash::RandomState::new(),
                std::process::id(),
            ),
            next: AtomicU64::new(0),
        }
    }
}

impl LeaseIds {
    fn next(&self) -> String {
        format!(
            "{:016x}:{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

impl Limiter {
    /// Takes a slot for every concurrency tier, in route order, into `admission.held`;
    /// on a refusal, gives back what was taken. Returns whether the request may go on.
    pub(super) async fn take_slots(
        &self,
        route: &Route,
        clock: &dyn Clock,
        admission: &mut Admission,
    ) -> Result<bool, Refusal> {
        admission.slot_outcomes.clear();
        admission.held.clear();
        for (i, tier) in admission.tiers.slots.iter().enumerate() {
            if admission.refused_slot().is_some() {
                admission.slot_outcomes.push(SlotOutcome::Skipped);
                continue;
            }
            let policy = &route.policies[tier.position].name;
            let taken = match &self.store {
                Store::Memory(_) => Ok(self.take_local(tier, policy, clock).await),
                Store::Redis { remote, .. } => match admission.tiers.slot_keys.get(i) {
                    Some(key) => self.take_remote(remote, key, tier, policy, clock).await,
                    None => Ok(self.take_local(tier, policy, clock).await),
                },
            };
            let taken = match taken {
                Ok(taken) => taken,
                Err(e) => {
                    self.failed(&e);
                    match self.on_error() {
                        OnError::Allow => {
                            admission.slot_outcomes.push(SlotOutcome::Unchecked);
                            continue;
                        }
                        OnError::Deny => {
                            admission.held.clear();
                            return Err(Refusal::StoreUnavailable);
                        }
                        OnError::Local => self.take_local(tier, policy, clock).await,
                    }
                }
            };
            let outcome = match (taken, tier.mode == Mode::Enforce) {
                (Some((held, count)), _) => {
                    admission.held.push(held);
                    SlotOutcome::Held {
                        free: tier.max.saturating_sub(count),
                    }
                }
                (None, true) => SlotOutcome::Refused,
                (None, false) => SlotOutcome::ShadowFull,
            };
            admission.slot_outcomes.push(outcome);
        }
        if admission.refused_slot().is_some() {
            admission.held.clear();
            return Ok(false);
        }
        Ok(true)
    }

    fn on_error(&self) -> OnError {
        match &self.store {
            Store::Redis { on_error, .. } => *on_error,
            Store::Memory(_) => OnError::Deny,
        }
    }

    /// A slot in this process's table, waiting in the key's queue when the tier allows; with the count
    /// held after taking it.
    async fn take_local(
        &self,
        tier: &SlotTier,
        policy: &str,
        clock: &dyn Clock,
    ) -> Option<(Held, u32)> {
        let table = &self.slots;
        let gauge = || Some(self.metrics.in_flight_gauge(policy));
        let slot = match table.acquire(tier.key, tier.max, waits(tier), gauge) {
            Acquired::Taken(slot) => Some(slot),
            Acquired::Full => None,
            Acquired::Queued(rx) => {
                let started = clock.now_ns();
                let slot = tokio::time::timeout(tier.max_delay, rx)
                    .await
                    .ok()
                    .and_then(Result::ok);
                self.waited(clock, started);
                slot
            }
        }?;
        Some((Held::Local(slot), table.held(tier.key)))
    }

    /// A lease in Redis. A request that may wait first takes its turn among this
    /// gateway's waiters for the key, then asks Redis until a slot frees or `max_delay`
    /// has passed.
    async fn take_remote(
        &self,
        remote: &Arc<RedisStore>,
        key: &str,
        tier: &SlotTier,
        policy: &str,
        clock: &dyn Clock,
    ) -> Result<Option<(Held, u32)>, StoreError> {
        let give_up = tokio::time::Instant::now() + tier.max_delay;
        let started = clock.now_ns();
        let _turn = if waits(tier) {
            match self.turns.acquire(tier.key, 1, true, || None) {
                Acquired::Taken(turn) => Some(turn),
                Acquired::Full => return Ok(None),
                Acquired::Queued(rx) => match tokio::time::timeout_at(give_up, rx).await {
                    Ok(Ok(turn)) => Some(turn),
                    _ => {
                        self.waited(clock, started);
                        return Ok(None);
                    }
                },
            }
        } else {
            None
        };
        let id = self.lease_ids.next();
        loop {
            let pending = PendingLease::new(remote, key, &id);
            let (taken, held) = remote
                .lease(
                    key,
                    LeaseOp::Take,
                    &id,
                    tier.max,
                    tier.lease_ttl,
                    clock.now_ns(),
                )
                .await?;
            pending.settled();
            if taken {
                if waits(tier) {
                    self.waited(clock, started);
                }
                let gauge = self.metrics.in_flight_gauge(policy);
                let lease = Lease::hold(remote.clone(), key.to_owned(), id, tier.lease_ttl, gauge);
                return Ok(Some((Held::Remote(lease), held)));
            }
            let now = tokio::time::Instant::now();
            if !waits(tier) || now >= give_up {
                if waits(tier) {
                    self.waited(clock, started);
                }
                return Ok(None);
            }
            tokio::time::sleep(REDIS_RETRY.min(give_up - now)).await;
        }
    }

    fn waited(&self, clock: &dyn Clock, started: u64) {
        let waited = clock.now_ns().saturating_sub(started);
        self.metrics.queue_wait.observe(waited as f64 / 1e9);
    }

    /// Requests of this gateway waiting for a slot on a concurrency key now (the admin API).
    pub fn slots_waiting(&self, hash: u64) -> usize {
        self.slots.waiting(hash) + self.turns.waiting(hash)
    }

    /// Slots held on a concurrency key now (the admin API): from Redis when it holds them.
    pub async fn slots_held(&self, hash: u64, redis_key: Option<&str>) -> Result<u32, StoreError> {
        match (&self.store, redis_key) {
            (Store::Redis { remote, .. }, Some(key)) => {
                let key = format!("{key}:in-flight");
                remote
                    .lease_unguarded(&key, LeaseOp::Count, "", Duration::ZERO)
                    .await
                    .map(|(_, held)| held)
            }
            _ => Ok(self.slots.held(hash)),
        }
    }
}

/// Whether a request may wait for this tier's slot.
fn waits(tier: &SlotTier) -> bool {
    tier.mode == Mode::Enforce && !tier.max_delay.is_zero()
}
