//! What Redis last said about keys it refused: their TAT, moved onto the local clock.
//! A request whose tiers would be refused on those TATs is refused here, without a round
//! trip; anything that might be admitted still goes to Redis, so this never over-admits.
//! A flood of refused requests therefore costs no Redis calls and cannot trip the
//! breaker for everyone. Concurrent calls for a recently refused key are single-flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::snapshot::{SnapshotTable, BASE};
use crate::limit::{evaluate, Mode, Tier, Verdict};

/// Entries kept (a power of two); 16 bytes each. A collision only forgets a refusal.
const SLOTS: usize = 1 << 16;
/// Shards of the in-flight map.
const FLIGHT_SHARDS: usize = 64;

struct Entry {
    key: AtomicU64,
    /// Local-clock TAT; 0 = empty.
    tat: AtomicU64,
}

/// Per call: a semaphore that is closed (never granted) when the call is done.
type Flights = HashMap<u64, Arc<Semaphore>>;

pub struct RefusalCache {
    slots: Box<[Entry]>,
    /// Calls in flight for recently refused keys: followers wait until the leader closes.
    flights: Box<[Mutex<Flights>]>,
}

impl Default for RefusalCache {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS)
                .map(|_| Entry {
                    key: AtomicU64::new(0),
                    tat: AtomicU64::new(0),
                })
                .collect(),
            flights: (0..FLIGHT_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }
}

impl RefusalCache {
    fn slot(&self, key: u64) -> &Entry {
        &self.slots[(key as usize) & (SLOTS - 1)]
    }

    /// The TAT Redis last reported for `key` when it refused it (local clock), if kept.
    fn tat(&self, key: u64) -> Option<u64> {
        let entry = self.slot(key);
        let tat = entry.tat.load(Ordering::Acquire);
        // Read the key after the TAT: a racing writer of another key shows as a miss.
        (entry.key.load(Ordering::Acquire) == key && tat != 0).then_some(tat)
    }

    fn remember(&self, key: u64, tat: u64) {
        let entry = self.slot(key);
        entry.key.store(0, Ordering::Release);
        entry.tat.store(tat.max(1), Ordering::Release);
        entry.key.store(key, Ordering::Release);
    }

    /// Forgets everything (reload, override changes).
    pub fn clear(&self) {
        for entry in self.slots.iter() {
            entry.key.store(0, Ordering::Release);
            entry.tat.store(0, Ordering::Release);
        }
    }

    /// Whether any tier's key was refused recently (its entry may have expired since).
    pub fn known(&self, tiers: &[Tier]) -> bool {
        tiers.iter().any(|t| self.tat(t.key).is_some())
    }

    /// The verdict on the remembered TATs, when it is a refusal. Unknown keys count as
    /// idle, so a refusal here is one Redis would give too (or Redis knows a later TAT).
    pub fn refuse(&self, tiers: &[Tier], now: u64, cost: u64) -> Option<Verdict> {
        if !self.known(tiers) {
            return None;
        }
        let table = SnapshotTable::default();
        for tier in tiers {
            if let Some(tat) = self.tat(tier.key).filter(|&t| t > now) {
                table.insert(tier.key, tat - now);
            }
        }
        let verdict = evaluate(&table, tiers, BASE, cost);
        (!verdict.admitted).then_some(verdict)
    }

    /// Records the TATs of the tiers that refused in a verdict from Redis, decided when
    /// the local clock read `now`. `now` was read before the call, so the recorded TATs
    /// are never later than Redis's: a local refusal never outlasts the real wait.
    pub fn record(&self, tiers: &[Tier], verdict: &Verdict, now: u64) {
        if verdict.admitted {
            return;
        }
        for (tier, outcome) in tiers.iter().zip(verdict.outcomes()) {
            if tier.mode == Mode::Enforce && !outcome.decision.admitted {
                let debt = outcome.prior_tat.saturating_sub(BASE);
                self.remember(tier.key, now.saturating_add(debt));
            }
        }
    }

    /// Joins the call in flight for the same tiers, or leads one: the leader's guard
    /// wakes the followers when dropped. `None` for a follower, after the leader is done.
    pub async fn single_flight(&self, tiers: &[Tier]) -> Option<FlightGuard<'_>> {
        let id = tiers.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, t| {
            (h ^ t.key).wrapping_mul(0x100_0000_01b3)
        });
        let shard = &self.flights[(id as usize) % FLIGHT_SHARDS];
        let leader = {
            let mut map = shard.lock();
            match map.get(&id) {
                Some(done) => Err(done.clone()),
                None => {
                    map.insert(id, Arc::new(Semaphore::new(0)));
                    Ok(())
                }
            }
        };
        match leader {
            Ok(()) => Some(FlightGuard { cache: self, id }),
            Err(done) => {
                // Closed (never granted) when the leader is done: no wake-up can be missed.
                let _ = done.acquire().await;
                None
            }
        }
    }
}

/// The leader of a single-flight call; dropping it releases the followers.
pub struct FlightGuard<'a> {
    cache: &'a RefusalCache,
    id: u64,
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        let shard = &self.cache.flights[(self.id as usize) % FLIGHT_SHARDS];
        if let Some(done) = shard.lock().remove(&self.id) {
            done.close();
        }
    }
}
