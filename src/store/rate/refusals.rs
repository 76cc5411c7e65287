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
use crate::store::tiers::RateTier;

/// Entries kept (a power of two); 24 bytes each. A collision only forgets a refusal.
const SLOTS: usize = 1 << 16;
/// How long a refusal of a settled tier is remembered at most: a settle on another
/// gateway may have refunded its key meanwhile, which this gateway cannot see.
pub const SETTLED_LIFE_NS: u64 = 1_000_000_000;
/// The lowest bit of a remembered TAT (rounded down to make room for it, so never later
/// than Redis's): set for a key remembered beside one at its limit.
const BESIDE: u64 = 1;
/// Shards of the in-flight map.
const FLIGHT_SHARDS: usize = 64;

struct Entry {
    key: AtomicU64,
    /// Local-clock TAT; 0 = empty.
    tat: AtomicU64,
    /// Local clock: forgotten from then on; 0 = kept until its TAT.
    until: AtomicU64,
}

/// A quota's remembered TAT: its window's end (made even) plus twice its usage, so the
/// lowest bit stays free for [`BESIDE`] without costing a unit (one unit is 1 ns).
fn quota_entry(end: u64, used: u64) -> u64 {
    (end & !BESIDE).saturating_add(used.saturating_mul(2))
}

/// The usage a remembered quota TAT holds (see [`quota_entry`]): exact whether it was
/// kept at its limit (even) or beside one (one less, the bit set).
fn quota_usage(remembered: u64, end: u64) -> u64 {
    let even = if remembered & BESIDE == BESIDE {
        remembered.saturating_add(1)
    } else {
        remembered
    };
    even.saturating_sub(end & !BESIDE) / 2
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
                    until: AtomicU64::new(0),
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

    /// The TAT Redis last reported for `key` when it refused it (local clock), if kept
    /// at `now`.
    fn tat(&self, key: u64, now: u64) -> Option<u64> {
        let entry = self.slot(key);
        let tat = entry.tat.load(Ordering::Acquire);
        let until = entry.until.load(Ordering::Acquire);
        // Read the key after the TAT: a racing writer of another key shows as a miss.
        let kept = until == 0 || now < until;
        (entry.key.load(Ordering::Acquire) == key && tat != 0 && kept).then_some(tat)
    }

    /// Remembers `key`'s TAT on the local clock — one Redis reported, never later than its
    /// own — as a key at its limit (refused, or left with nothing).
    pub fn remember(&self, key: u64, tat: u64) {
        self.store(key, (tat & !BESIDE).max(2), 0);
    }

    /// Forgets what was remembered of `key`: a settle here lowered its TAT.
    pub fn forget(&self, key: u64) {
        let entry = self.slot(key);
        if entry.key.load(Ordering::Acquire) == key {
            entry.key.store(0, Ordering::Release);
        }
    }

    /// Remembers `key`'s TAT as a key with room, recorded only to describe it beside one
    /// at its limit: it refuses what its TAT refuses, but makes no request wait.
    fn remember_beside(&self, key: u64, tat: u64, until: u64) {
        self.store(key, (tat.saturating_sub(1) | BESIDE).max(BESIDE), until);
    }

    fn store(&self, key: u64, tat: u64, until: u64) {
        let entry = self.slot(key);
        entry.key.store(0, Ordering::Release);
        entry.tat.store(tat, Ordering::Release);
        entry.until.store(until, Ordering::Release);
        entry.key.store(key, Ordering::Release);
    }

    /// Forgets everything (reload, override changes).
    pub fn clear(&self) {
        for entry in self.slots.iter() {
            entry.key.store(0, Ordering::Release);
            entry.tat.store(0, Ordering::Release);
            entry.until.store(0, Ordering::Release);
        }
    }

    /// Whether some tier's key is remembered at its limit (refused recently, or left with
    /// nothing; its entry may have expired since). Only then do concurrent requests on it
    /// wait for one another: a key remembered beside one, with room to spare, makes nobody
    /// wait.
    pub fn known<D: AsRef<Tier>>(&self, tiers: &[D], now: u64) -> bool {
        tiers.iter().any(|t| {
            self.tat(t.as_ref().key, now)
                .is_some_and(|tat| tat & BESIDE == 0)
        })
    }

    /// Whether some tier's key is remembered at all.
    fn remembered<D: AsRef<Tier>>(&self, tiers: &[D], now: u64) -> bool {
        tiers
            .iter()
            .any(|t| self.tat(t.as_ref().key, now).is_some())
    }

    /// The verdict on the remembered TATs, when it is a refusal. Unknown keys count as
    /// idle, so a refusal here is one Redis would give too (or Redis knows a later TAT).
    pub fn refuse<D: AsRef<Tier>>(&self, tiers: &[D], now: u64, cost: u64) -> Option<Verdict> {
        if !self.remembered(tiers, now) {
            return None;
        }
        let table = SnapshotTable::default();
        for tier in tiers.iter().map(AsRef::as_ref) {
            if let Some(tat) = self.tat(tier.key, now).filter(|&t| t > now) {
                let debt = match tier.window {
                    Some(end) => end
                        .saturating_sub(now)
                        .saturating_add(quota_usage(tat, end)),
                    None => tat - now,
                };
                table.insert(tier.key, debt);
            }
        }
        let quotas = tiers.iter().any(|t| t.as_ref().window.is_some());
        let verdict = if quotas {
            // A quota's window end moves onto the same timeline as the TATs (BASE = now).
            let placed: smallvec::SmallVec<[Tier; 4]> = tiers
                .iter()
                .map(|t| {
                    let mut tier = *t.as_ref();
                    tier.window = tier
                        .window
                        .map(|end| BASE.saturating_add(end.saturating_sub(now)));
                    tier
                })
                .collect();
            evaluate(&table, &placed, BASE, cost)
        } else {
            evaluate(&table, tiers, BASE, cost)
        };
        (!verdict.admitted).then_some(verdict)
    }

    /// Records what a verdict from Redis, decided when the local clock read `now`, says
    /// will be refused: the tiers that refused; and, of an admission, those of the exact
    /// tiers (decided in Redis, not from a slice, not settled later) that it left with
    /// nothing to spare, whose next request would be refused until a
    /// unit frees — so the requests racing behind it are refused here, not each in a round
    /// trip. The request's other tiers are recorded beside them as the request left them,
    /// so a refusal given here describes every tier as Redis would. `now` was read before
    /// the call, so the recorded TATs are never later than Redis's: a local refusal never
    /// outlasts the real wait.
    pub fn record(&self, tiers: &[RateTier], verdict: &Verdict, now: u64) {
        let outcomes = verdict.outcomes();
        // A slice's numbers and a settled tier's are not the key's as Redis keeps it.
        let exact = |i: usize| !tiers[i].leased && !tiers[i].settled;
        // What tier `i` leaves to remember: its TAT (as the store's offset) and whether it
        // is at its limit. `None`: nothing, since a shadow tier's numbers do not count and
        // a slice's or a settled tier's are not the key's as Redis keeps it.
        let state = |i: usize| {
            let (outcome, d) = (&outcomes[i], &outcomes[i].decision);
            if tiers[i].tier.mode != Mode::Enforce || (d.admitted && !exact(i)) {
                return None;
            }
            let (tat, at_limit) = if verdict.admitted {
                (d.tat, d.remaining == 0)
            } else {
                (outcome.prior_tat, !d.admitted)
            };
            // A quota's TAT is its window's end plus its usage; the end was placed on
            // Redis's clock (its decision's time until idle is the time to the reset), so
            // the usage is exact and is kept beside this gateway's own end of the window.
            if let (Some(local_end), Some(_)) = (tiers[i].tier.window, tiers[i].bounds) {
                let used = tat.saturating_sub(BASE).saturating_sub(d.until_idle_ns);
                let local = quota_entry(local_end, used);
                return Some((BASE.saturating_add(local.saturating_sub(now)), at_limit));
            }
            Some((tat, at_limit))
        };
        if !(0..outcomes.len()).any(|i| matches!(state(i), Some((_, true)))) {
            // Nothing to refuse here; but a key already remembered (beside another at
            // its limit) moved: a refusal served here describes it, as Redis now has it.
            if verdict.admitted {
                self.refresh_remembered(tiers, outcomes.len(), (state, now));
            }
            return;
        }
        for (i, tier) in tiers
            .iter()
            .map(AsRef::as_ref)
            .enumerate()
            .take(outcomes.len())
        {
            let Some((tat, at_limit)) = state(i) else {
                continue;
            };
            if tat <= BASE {
                continue;
            }
            let tat = now.saturating_add(tat - BASE);
            // A settled tier's key may be refunded on another gateway, a quota's reset or
            // raised there: asked again soon.
            let until = if tiers[i].settled || tiers[i].bounds.is_some() {
                now.saturating_add(SETTLED_LIFE_NS)
            } else {
                0
            };
            if at_limit {
                self.store(tier.key, (tat & !BESIDE).max(2), until);
            } else {
                self.remember_beside(tier.key, tat, until);
            }
        }
    }

    /// Rewrites the remembered TATs of the first `decided` of `tiers` to what `state`
    /// says an admission left them (a lookup a tier, a write only for a key remembered).
    fn refresh_remembered(
        &self,
        tiers: &[RateTier],
        decided: usize,
        (state, now): (impl Fn(usize) -> Option<(u64, bool)>, u64),
    ) {
        for (i, tier) in tiers.iter().enumerate().take(decided) {
            let key = tier.tier.key;
            let Some((tat, _)) = state(i).filter(|_| self.tat(key, now).is_some()) else {
                continue;
            };
            let until = self.slot(key).until.load(Ordering::Acquire);
            self.remember_beside(key, now.saturating_add(tat.saturating_sub(BASE)), until);
        }
    }

    /// Joins the call in flight for the same tiers, or leads one: the leader's guard
    /// wakes the followers when dropped. `None` for a follower, after the leader is done.
    pub async fn single_flight<D: AsRef<Tier>>(&self, tiers: &[D]) -> Option<FlightGuard<'_>> {
        let id = tiers.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, t| {
            (h ^ t.as_ref().key).wrapping_mul(0x100_0000_01b3)
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

#[cfg(test)]
mod tests;
