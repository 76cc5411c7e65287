//! The embedded store: one `AtomicU64` TAT per hashed (policy, key), in sharded
//! open-addressing tables whose reads take no lock. A decision on a known key is an
//! `arc-swap` load, one cache line of probing and one CAS; only inserting a new key takes
//! the shard's mutex. Tables are rebuilt (to grow, to sweep idle keys, to evict) by
//! freezing each slot as it is copied, so no concurrent update is ever lost.

pub mod areas;
#[cfg(test)]
mod areas_tests;
mod cache;
mod decide;
#[cfg(test)]
mod model_tests;
mod shard;
mod table;
#[cfg(test)]
mod tests;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::limit::{Decision, TatTable};

use areas::{area_of, Areas, AREAS, QUOTA_SHARDS};
use shard::Shard;
use table::{normalize, Probe, Slot, FROZEN};

/// Fewest and most shards; between them, roughly one shard per 8,192 keys of `max_keys`.
const MIN_SHARDS: usize = 16;
const MAX_SHARDS: usize = 1024;
const KEYS_PER_SHARD_HINT: usize = 8192;

/// Distinguishes stores in the per-thread cache.
static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

pub struct MemoryStore {
    id: u64,
    /// The rate keys' shards, then [`QUOTA_SHARDS`] for each quota policy's area.
    shards: Box<[Shard]>,
    rate_shards: usize,
    shard_mask: u64,
    max_keys: usize,
    areas: Arc<Areas>,
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

impl MemoryStore {
    /// A store that never tracks more than `max_keys` keys (at least one per shard).
    pub fn new(max_keys: usize) -> Self {
        let shards = (max_keys / KEYS_PER_SHARD_HINT)
            .next_power_of_two()
            .clamp(MIN_SHARDS, MAX_SHARDS);
        let all = shards + (AREAS - 1) * QUOTA_SHARDS;
        Self {
            id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
            shards: (0..all).map(|_| Shard::new()).collect(),
            rate_shards: shards,
            shard_mask: shards as u64 - 1,
            max_keys,
            areas: Arc::new(Areas::new(max_keys, shards)),
            hasher: ahash::RandomState::new(),
        }
    }

    /// A store of `max_keys` where `policy`, a quota of `calendar`, has an area: the store
    /// and the area's tag (for tests of quota keys, here and in the state file's).
    #[cfg(test)]
    pub(crate) fn with_area(max_keys: usize, policy: &str, calendar: &str) -> (Self, u64) {
        let store = Self::new(max_keys);
        store.areas().arrange(&[(policy, calendar.into())]);
        let tag = store.areas().tag(policy);
        (store, tag)
    }

    /// Which policy's keys live in which area, and each area's bound and floor.
    pub fn areas(&self) -> &Arc<Areas> {
        &self.areas
    }

    /// A hasher for building key hashes. Seeded once per store with random keys, so
    /// clients cannot aim collisions; stable for the store's lifetime (reloads included).
    pub fn key_hasher(&self) -> ahash::AHasher {
        self.hasher.build_hasher()
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    #[inline]
    fn shard_index(&self, key: u64) -> usize {
        // Buckets are indexed by the low bits; shard by high ones, below the area's.
        match area_of(key) {
            0 => ((key >> 48) & self.shard_mask) as usize,
            area => {
                let within = ((key >> 48) as usize) & (QUOTA_SHARDS - 1);
                self.rate_shards + (area - 1) * QUOTA_SHARDS + within
            }
        }
    }

    /// The area shard `index` belongs to.
    fn area_of_shard(&self, index: usize) -> usize {
        index
            .checked_sub(self.rate_shards)
            .map_or(0, |q| q / QUOTA_SHARDS + 1)
    }

    /// Runs `f` on the shard's current table, through this thread's cache.
    #[inline(always)]
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
            .enumerate()
            .map(|(i, shard)| shard.sweep(now, self.areas.shard_cap(self.area_of_shard(i))))
            .sum()
    }

    /// Drops the keys of the areas [`Areas::arrange`] marked stale: of an area that went
    /// to another policy, every key (the old policy's would count against the new one's
    /// bound and raise its floor as it makes room); of one whose policy's calendar
    /// changed, all but those whose usage is of the window `end_of(area)` says the policy
    /// is in now (the window both calendars share, when they do, carries over). At
    /// reload, after the areas are arranged. Returns the keys dropped.
    pub fn empty_stale_areas(&self, end_of: impl Fn(usize) -> Option<u64>) -> usize {
        let mut dropped = 0;
        for area in 1..AREAS {
            let Some(stale) = self.areas.take_stale(area) else {
                continue;
            };
            let keep = match stale {
                areas::Stale::OtherPolicy => shard::Keep::Busy(u64::MAX),
                areas::Stale::OtherCalendar => {
                    shard::Keep::Window(end_of(area).unwrap_or(u64::MAX))
                }
            };
            let first = self.rate_shards + (area - 1) * QUOTA_SHARDS;
            let shards = &self.shards[first..first + QUOTA_SHARDS];
            let _writers: Vec<_> = shards.iter().map(|s| s.writer.lock()).collect();
            for shard in shards {
                dropped += shard.rebuild(keep, None);
            }
            if stale == areas::Stale::OtherPolicy {
                // Between the arrangement and now, the old policy's keys may have raised
                // it (a settle in flight, a full area making room).
                self.areas.clear_floor(area);
            }
        }
        dropped
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

    /// A calendar quota key's usage set to none, its TAT its window's `end`: the admin
    /// API's reset of a quota key. Written, not forgotten: a quota key its area does not
    /// hold reads at the area's floor (the most a dropped key had used), so forgetting a
    /// key of a full area left it there. It stays until the area next drops its
    /// least-used keys to make room, as any key that has used nothing.
    pub fn reset_quota(&self, key: u64, end: u64) {
        self.apply(key, |_| Decision {
            admitted: true,
            tat: end,
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
