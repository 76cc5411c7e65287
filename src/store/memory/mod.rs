//! The embedded store: one `AtomicU64` TAT per hashed (policy, key), in sharded
//! open-addressing tables whose reads take no lock. A decision on a known key is an
//! `arc-swap` load, one cache line of probing and one CAS; only inserting a new key takes
//! the shard's mutex. Tables are rebuilt (to grow, to sweep idle keys, to evict) by
//! freezing each slot as it is copied, so no concurrent update is ever lost.

mod cache;
#[cfg(test)]
mod model_tests;
mod shard;
mod table;
#[cfg(test)]
mod tests;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limit::{Decision, TatTable};

use shard::{Keep, Shard, MAX_LOAD_DEN, MAX_LOAD_NUM};
use table::{apply_to, normalize, Probe, Slot, FROZEN, MAX_TAT};

/// Fewest and most shards; between them, roughly one shard per 8,192 keys of `max_keys`.
const MIN_SHARDS: usize = 16;
const MAX_SHARDS: usize = 1024;
const KEYS_PER_SHARD_HINT: usize = 8192;

/// Distinguishes stores in the per-thread cache.
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

pub struct MemoryStore {
    id: u64,
    shards: Box<[Shard]>,
    shard_mask: u64,
    shard_cap: usize,
    max_keys: usize,
    hasher: ahash::RandomState,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

/// Whether a new key may be inserted into a full shard.
#[derive(Clone, Copy)]
enum NewKey {
    /// Always (the shard grows past its share): overflow keys, and direct `apply` calls.
    Always,
    /// Only if idle keys can make room at this `now`; never by dropping a debt.
    IfRoom(u64),
}

impl MemoryStore {
    /// A store that never tracks more than `max_keys` keys (at least one per shard).
    pub fn new(max_keys: usize) -> Self {
        let shards = (max_keys / KEYS_PER_SHARD_HINT)
            .next_power_of_two()
            .clamp(MIN_SHARDS, MAX_SHARDS);
        let shard_cap = (max_keys / shards).max(1);
        Self {
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            shards: (0..shards).map(|_| Shard::new()).collect(),
            shard_mask: shards as u64 - 1,
            shard_cap,
            max_keys,
            hasher: ahash::RandomState::new(),
        }
    }

    /// A hasher for building key hashes. Seeded once per store with random keys, so
    /// clients cannot aim collisions; stable for the store's lifetime (reloads included).
    pub fn key_hasher(&self) -> ahash::AHasher {
        self.hasher.build_hasher()
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    fn shard_index(&self, key: u64) -> usize {
        // Buckets are indexed by the low bits; shard by high ones.
        ((key >> 48) & self.shard_mask) as usize
    }

    /// Runs `f` on the shard's current table, through this thread's cache.
    fn with_table<R>(&self, index: usize, f: impl FnOnce(&table::Table) -> R) -> R {
        cache::with_table(self.id, &self.shards, index, f)
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.len.load(Ordering::Relaxed))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops idle keys (`TAT ≤ now`): they carry no information. A shard is rebuilt when
    /// an eighth of it is idle or it is nearly full; one shard at a time. A decision on a key
    /// being moved waits (yielding) until that shard's new table is published; keys of other
    /// shards never wait. Returns how many were dropped.
    pub fn sweep(&self, now: u64) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.sweep(now, self.shard_cap))
            .sum()
    }

    /// Calls `f(key, tat)` for every key with `TAT > now` (what carries information),
    /// reading the current tables without a lock. A key caught mid-move by a rebuild is
    /// read from the table that replaces it.
    pub fn busy_keys(&self, now: u64, mut f: impl FnMut(u64, u64)) {
        for shard in self.shards.iter() {
            let mut moved = Vec::new();
            let table = shard.table.load_full();
            for slot in table.buckets.iter().flat_map(|b| &b.0) {
                let key = slot.key.load(Ordering::Acquire);
                if key == table::EMPTY {
                    continue;
                }
                match slot.tat.load(Ordering::Acquire) {
                    FROZEN => moved.push(key),
                    tat if tat > now => f(key, tat),
                    _ => {}
                }
            }
            for key in moved {
                let tat = self.peek(key);
                if tat > now {
                    f(key, tat);
                }
            }
        }
    }

    /// Sets `key`'s TAT to `tat` when it is later than the one kept (a state file's key
    /// at start).
    pub fn restore(&self, key: u64, tat: u64) {
        self.apply(key, |current| Decision {
            admitted: tat > current,
            tat: tat.max(current),
            remaining: 0,
            wait_ns: 0,
            delay_ns: 0,
            until_idle_ns: 0,
        });
    }

    /// Forgets `key`'s state (its TAT becomes idle; the next sweep drops it): the admin
    /// API's reset.
    pub fn forget(&self, key: u64) {
        self.with_slot(normalize(key), |slot| {
            let Some(slot) = slot else {
                return Some(());
            };
            loop {
                let current = slot.tat.load(Ordering::Acquire);
                if current == FROZEN {
                    return None; // being moved: retried on the new table
                }
                if slot
                    .tat
                    .compare_exchange_weak(current, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(());
                }
            }
        });
    }

    /// The slot for `key` in the current table, retrying while a rebuild moves it.
    fn with_slot<R>(&self, key: u64, mut f: impl FnMut(Option<&Slot>) -> Option<R>) -> R {
        let index = self.shard_index(key);
        loop {
            let done = self.with_table(index, |table| match table.find(key) {
                Probe::Found(slot) => f(Some(slot)),
                Probe::Absent => f(None),
            });
            if let Some(r) = done {
                return r;
            }
            std::thread::yield_now();
        }
    }
}

impl MemoryStore {
    /// Decides `key` (see [`TatTable::apply`]); `None` when it is new, the shard is full of
    /// keys that owe time and `new_key` does not allow growing.
    #[inline]
    fn apply_key(
        &self,
        key: u64,
        new_key: NewKey,
        decide: &mut impl FnMut(u64) -> Decision,
    ) -> Option<(u64, Decision)> {
        let key = normalize(key);
        let index = self.shard_index(key);
        let shard = &self.shards[index];
        loop {
            // The result is written in place: moving a nested Option of a Decision through
            // the closure cost more than the CAS itself (store-forwarding stalls).
            let mut decided: Option<(u64, Decision)> = None;
            let found = self.with_table(index, |table| match table.find(key) {
                Probe::Found(slot) => {
                    decided = apply_to(slot, decide);
                    true
                }
                Probe::Absent => false,
            });
            if decided.is_some() {
                return decided;
            }
            if found {
                // Frozen by a rebuild: the new table is about to be published.
                std::thread::yield_now();
                continue;
            }
            // An absent key is idle. A denial of it writes nothing, so only admissions insert.
            let decision = decide(0);
            if !decision.admitted {
                return Some((0, decision));
            }
            let _writer = shard.writer.lock();
            let table = shard.table.load_full();
            if let Probe::Found(slot) = table.find(key) {
                // Inserted meanwhile: decide again on its TAT (no rebuild can run: we hold the mutex).
                if let Some(result) = apply_to(slot, decide) {
                    return Some(result);
                }
                continue;
            }
            let len = shard.len.load(Ordering::Relaxed);
            if len >= self.shard_cap {
                if let NewKey::IfRoom(now) = new_key {
                    let full =
                        now < shard.full_until.load(Ordering::Relaxed) || !shard.evict_idle(now);
                    if full {
                        return None;
                    }
                }
            }
            let table = shard.table.load_full();
            let len = shard.len.load(Ordering::Relaxed);
            if (len + 1) * MAX_LOAD_DEN > table.capacity() * MAX_LOAD_NUM {
                shard.rebuild(Keep::All, Some(table.buckets.len() * 2));
            }
            let table = shard.table.load();
            if table.insert(key, decision.tat.min(MAX_TAT)) {
                shard.len.fetch_add(1, Ordering::Relaxed);
            }
            return Some((0, decision));
        }
    }
}

impl TatTable for MemoryStore {
    #[inline]
    fn apply(&self, key: u64, mut decide: impl FnMut(u64) -> Decision) -> (u64, Decision) {
        match self.apply_key(key, NewKey::Always, &mut decide) {
            Some(result) => result,
            None => unreachable!("NewKey::Always inserts"),
        }
    }

    #[inline]
    fn apply_tier(
        &self,
        tier: &crate::limit::Tier,
        now: u64,
        mut decide: impl FnMut(u64) -> Decision,
    ) -> (u64, u64, Decision) {
        if let Some((prior, decision)) = self.apply_key(tier.key, NewKey::IfRoom(now), &mut decide)
        {
            return (tier.key, prior, decision);
        }
        // Full of debts: this new key shares its policy's overflow key with every other
        // new key, so inventing keys throttles only other inventions.
        let (prior, decision) = self.apply(tier.overflow, decide);
        (tier.overflow, prior, decision)
    }

    fn peek(&self, key: u64) -> u64 {
        self.with_slot(normalize(key), |slot| match slot {
            None => Some(0),
            Some(s) => match s.tat.load(Ordering::Acquire) {
                FROZEN => None,
                tat => Some(tat),
            },
        })
    }

    fn undo(&self, key: u64, old: u64, new: u64, now: u64) {
        // Others may have admitted on top of ours: then take back exactly our increment.
        let increment = new.saturating_sub(old.max(now));
        self.with_slot(normalize(key), |slot| {
            let Some(slot) = slot else {
                return Some(()); // evicted or swept: nothing left to undo
            };
            let mut current = slot.tat.load(Ordering::Acquire);
            loop {
                if current == FROZEN {
                    return None;
                }
                let target = if current == new {
                    old
                } else {
                    current.saturating_sub(increment)
                };
                match slot.tat.compare_exchange_weak(
                    current,
                    target,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(()),
                    Err(actual) => current = actual,
                }
            }
        })
    }
}
