//! Concurrency tiers (`max_in_flight`): a slot per request in flight, in this process's
//! slot table (memory backend, or `on_error = "local"`), or as a lease in Redis shared by
//! the fleet. Requests that may wait (`max_delay`) are served first come first served per
//! gateway: with Redis, they take turns per key here and only the one whose turn it is
//! asks Redis, again every 50 ms until a slot frees or `max_delay` has passed.

pub mod held;
pub mod lease;
pub mod slots;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::redis::RedisStore;
use super::tiers::SlotTier;
use super::StoreError;
use crate::clock::Clock;
use crate::metrics::Metrics;
use held::Held;
use lease::{Lease, LeaseOp, PendingLease};
use slots::{Acquired, SlotTable};

/// How often a waiting request asks Redis again for a slot.
const REDIS_RETRY: Duration = Duration::from_millis(50);

/// A slot taken, and how many the key holds with it.
pub type Taken = (Held, u32);

/// Names leases uniquely across a fleet: a random prefix per process and a counter.
#[derive(Debug)]
struct LeaseIds {
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

/// The slots of every concurrency policy of a gateway; outlives reloads.
pub struct Concurrency {
    /// Requests in flight per key (and, with Redis, the `on_error = "local"` fallback).
    slots: Arc<SlotTable>,
    /// With Redis: whose turn it is to ask for a slot, among this gateway's waiters.
    turns: Arc<SlotTable>,
    lease_ids: LeaseIds,
    metrics: Arc<Metrics>,
}

impl Concurrency {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            slots: Arc::default(),
            turns: Arc::default(),
            lease_ids: LeaseIds::default(),
            metrics,
        }
    }

    /// A slot in this process's table, waiting in the key's queue when the tier allows;
    /// `None` when every slot stayed taken.
    pub async fn take_local(
        &self,
        tier: &SlotTier,
        policy: &str,
        clock: &dyn Clock,
    ) -> Option<Taken> {
        let table = &self.slots;
        let gauge = || Some(self.metrics.in_flight_gauge(policy));
        let slot = match table.acquire(tier.key, tier.max, tier.waits(), gauge) {
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

    /// A lease on `key` in Redis. A request that may wait first takes its turn among this
    /// gateway's waiters for the key, then asks Redis until a slot frees or `max_delay`
    /// has passed.
    pub async fn take_remote(
        &self,
        remote: &Arc<RedisStore>,
        key: &str,
        tier: &SlotTier,
        policy: &str,
        clock: &dyn Clock,
    ) -> Result<Option<Taken>, StoreError> {
        let give_up = tokio::time::Instant::now() + tier.max_delay;
        let started = clock.now_ns();
        let waits = tier.waits();
        let _turn = if waits {
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
            let take = lease::call(remote, key, LeaseOp::Take, &id, tier.max, tier.lease_ttl);
            let (taken, held) = remote.guarded(clock.now_ns(), take).await?;
            pending.settled();
            let now = tokio::time::Instant::now();
            let gave_up = !waits || now >= give_up;
            if waits && (taken || gave_up) {
                self.waited(clock, started);
            }
            if taken {
                let gauge = self.metrics.in_flight_gauge(policy);
                let lease = Lease::hold(remote.clone(), key.to_owned(), id, tier.lease_ttl, gauge);
                return Ok(Some((Held::Remote(lease), held)));
            }
            if gave_up {
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
    pub fn waiting(&self, hash: u64) -> usize {
        self.slots.waiting(hash) + self.turns.waiting(hash)
    }

    /// Slots held on a concurrency key now (the admin API): from Redis when it holds them.
    pub async fn held(
        &self,
        remote: Option<&RedisStore>,
        hash: u64,
        redis_key: Option<&str>,
    ) -> Result<u32, StoreError> {
        match (remote, redis_key) {
            (Some(remote), Some(key)) => {
                let key = format!("{key}:in-flight");
                lease::call(remote, &key, LeaseOp::Count, "", 0, Duration::ZERO)
                    .await
                    .map(|(_, held)| held)
            }
            _ => Ok(self.slots.held(hash)),
        }
    }
}
