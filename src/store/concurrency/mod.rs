//! Concurrency tiers (`max_in_flight`): a slot per request in flight, in this process's
//! slot table (memory backend, or `on_error = "local"`), or as a lease in Redis shared by
//! the fleet. Requests that may wait (`max_delay`) are served first come first served per
//! gateway: with Redis, they take turns per key here and only the one whose turn it is
//! asks Redis, again after 50 ms, then twice as long each time up to a second, until a
//! slot frees or `max_delay` has passed.

pub mod full;
pub mod held;
pub mod lease;
pub mod slots;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::redis::RedisStore;
use super::tiers::SlotTier;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::error::StoreError;
use full::FullKeys;
use held::Held;
use lease::{Holder, Lease, LeaseOp, PendingLease};
use prometheus_client::metrics::gauge::Gauge;
use slots::{Acquired, SlotTable};

/// How soon a waiting request first asks Redis again for a slot; each later time waits
/// twice as long, up to [`REDIS_RETRY_MAX`].
const REDIS_RETRY: Duration = Duration::from_millis(50);
const REDIS_RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a key Redis found full is remembered at most (a fraction of its lease ttl).
const FULL_MEMORY: Duration = Duration::from_secs(1);
/// Requests of one gateway waiting for slots in Redis at once, all keys together.
pub const MAX_REDIS_WAITERS: usize = 4096;

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
    /// With Redis: keys found full, and who polls for them.
    full: Arc<FullKeys>,
    /// With Redis: requests waiting for a slot, all keys together.
    waiting: Waiting,
    metrics: Arc<Metrics>,
}

/// A gateway-wide count of requests waiting for a slot in Redis.
#[derive(Default)]
struct Waiting(Arc<AtomicUsize>);

/// One request counted among the waiting until dropped.
struct Waiter(Arc<AtomicUsize>);

impl Waiting {
    /// Counts one more waiter, unless [`MAX_REDIS_WAITERS`] wait already.
    fn enter(&self) -> Option<Waiter> {
        let n = self.0.fetch_add(1, Ordering::AcqRel);
        if n >= MAX_REDIS_WAITERS {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Waiter(self.0.clone()))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Concurrency {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            slots: Arc::default(),
            turns: Arc::default(),
            lease_ids: LeaseIds::default(),
            full: Arc::default(),
            waiting: Waiting::default(),
            metrics,
        }
    }

    /// A slot in this process's table, waiting in the key's queue when the tier allows;
    /// `None` when every slot stayed taken.
    /// `policy`: its name and its in-flight gauge, resolved once per config version.
    pub async fn take_local(
        &self,
        tier: &SlotTier,
        (policy, gauge): (&str, Option<&Gauge>),
        clock: &dyn Clock,
    ) -> Option<Taken> {
        let table = &self.slots;
        let gauge = || {
            gauge
                .cloned()
                .or_else(|| Some(self.metrics.in_flight_gauge(policy)))
        };
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

    /// A lease on `key` in Redis. A request that may not wait is refused here while the
    /// key is remembered full. One that may wait first takes its turn among this
    /// gateway's waiters for the key (at most [`MAX_REDIS_WAITERS`] of them in all; past
    /// that it asks once, as one that may not wait), then
    /// asks Redis until a slot frees or `max_delay` has passed — at once when this gateway
    /// gives a slot of the key back, otherwise less and less often (50 ms, doubling up to a
    /// second): a waiting key costs at most about one call a second, however many wait.
    pub async fn take_remote(
        &self,
        remote: &Arc<RedisStore>,
        key: &str,
        tier: &SlotTier,
        (policy, gauge): (&str, Option<&Gauge>),
        clock: &dyn Clock,
    ) -> Result<Option<Taken>, StoreError> {
        // Past the gateway's waiters (every key's together), a request that may wait
        // asks Redis once, as one that may not: refused only if its own key is full. A
        // client parking waiters on keys of its own refused every other key's otherwise.
        let waiter = tier.waits().then(|| self.waiting.enter()).flatten();
        let waits = waiter.is_some();
        if !waits && self.full.is_full(tier.key, clock.now_ns()) {
            return Ok(None);
        }
        let give_up = tokio::time::Instant::now() + tier.max_delay;
        let started = clock.now_ns();
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
        let poller = waits.then(|| self.full.poll(tier.key));
        let id = self.lease_ids.next();
        let mut retry = REDIS_RETRY;
        loop {
            let pending = PendingLease::new(remote, key, &id);
            let take = lease::call(remote, key, LeaseOp::Take, &id, tier.max, tier.lease_ttl);
            let tag = crate::key::redis_key::tag_of(key);
            let (taken, held) = remote.guarded(tag, clock.now_ns(), take).await?;
            pending.settled();
            let now = tokio::time::Instant::now();
            let gave_up = !waits || now >= give_up;
            if waits && (taken || gave_up) {
                self.waited(clock, started);
            }
            if taken {
                let gauge = gauge
                    .cloned()
                    .unwrap_or_else(|| self.metrics.in_flight_gauge(policy));
                let full = (self.full.clone(), tier.key);
                let holder = Holder {
                    key: key.to_owned(),
                    id,
                    full,
                };
                let lease = Lease::hold(remote.clone(), holder, tier.lease_ttl, gauge);
                return Ok(Some((Held::Remote(lease), held)));
            }
            self.remember_full(tier, clock);
            if gave_up {
                return Ok(None);
            }
            let freed = poller.as_ref().map(|p| p.notify.clone());
            let sleep = tokio::time::sleep(retry.min(give_up - now));
            match freed {
                Some(freed) => {
                    tokio::select! {
                        () = sleep => {}
                        () = freed.notified() => {}
                    }
                }
                None => sleep.await,
            }
            retry = (retry * 2).min(REDIS_RETRY_MAX);
        }
    }

    /// A key Redis found full is remembered so for a while: the lease's refresh
    /// interval, at most a second.
    fn remember_full(&self, tier: &SlotTier, clock: &dyn Clock) {
        let memory = (tier.lease_ttl / 3).min(FULL_MEMORY);
        let until = clock
            .now_ns()
            .saturating_add(u64::try_from(memory.as_nanos()).unwrap_or(0));
        self.full.remember(tier.key, until);
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
