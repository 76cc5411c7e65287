//! The embedded store: one `AtomicU64` TAT per hashed (policy, key), in sharded hash
//! tables. Deciding on a known key takes a shard read lock and a CAS; only the first
//! admission of a new key takes the shard's write lock.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::RwLock;

use crate::limit::{Decision, TatTable};

/// One tracked key: 16 bytes. The key is a 64-bit keyed hash of (policy, key), so long
/// keys cost nothing extra; see docs/algorithm.md for the collision bound.
struct Slot {
    key: u64,
    tat: AtomicU64,
}

/// A shard on its own cache line, so two threads on different shards never false-share.
#[repr(align(64))]
struct Shard {
    table: RwLock<HashTable<Slot>>,
}

/// Fewest and most shards; between them, roughly one shard per 8,192 keys of `max_keys`.
const MIN_SHARDS: usize = 16;
const MAX_SHARDS: usize = 1024;
const KEYS_PER_SHARD_HINT: usize = 8192;

pub struct MemoryStore {
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

impl MemoryStore {
    /// A store that never tracks more than `max_keys` keys (at least one per shard).
    pub fn new(max_keys: usize) -> Self {
        let shards = (max_keys / KEYS_PER_SHARD_HINT)
            .next_power_of_two()
            .clamp(MIN_SHARDS, MAX_SHARDS);
        let shard_cap = (max_keys / shards).max(1);
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    table: RwLock::new(HashTable::new()),
                })
                .collect(),
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

    fn shard(&self, key: u64) -> &Shard {
        // hashbrown indexes by the low bits and tags by the top 7, so shard by the middle.
        &self.shards[((key >> 40) & self.shard_mask) as usize]
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.table.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every idle key (`TAT ≤ now`): it carries no information. One shard at a
    /// time, so the hot path only ever waits for one shard's pass. Returns how many.
    pub fn sweep(&self, now: u64) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut table = shard.table.write();
            let before = table.len();
            table.retain(|slot| slot.tat.load(Ordering::Relaxed) > now);
            if table.len() < before / 2 {
                table.shrink_to(0, |slot| slot.key);
            }
            removed += before - table.len();
        }
        removed
    }

    /// Makes room in a full shard by dropping its least informative eighth: the lowest
    /// TATs, idle ones first. Sorting is amortised over the inserts that fill the room.
    fn evict(table: &mut HashTable<Slot>) {
        let mut tats: Vec<u64> = table
            .iter()
            .map(|s| s.tat.load(Ordering::Relaxed))
            .collect();
        let n = (tats.len() / 8).max(1);
        let (_, &mut threshold, _) = tats.select_nth_unstable(n - 1);
        table.retain(|slot| slot.tat.load(Ordering::Relaxed) > threshold);
    }
}

/// The CAS loop on one TAT; `decide` is pure, so re-running it on a lost race is safe.
fn apply_to(tat: &AtomicU64, decide: &mut dyn FnMut(u64) -> Decision) -> (u64, Decision) {
    let mut current = tat.load(Ordering::Acquire);
    loop {
        let decision = decide(current);
        if !decision.admitted || decision.tat == current {
            return (current, decision);
        }
        match tat.compare_exchange_weak(current, decision.tat, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return (current, decision),
            Err(actual) => current = actual,
        }
    }
}

impl TatTable for MemoryStore {
    fn apply(&self, key: u64, decide: &mut dyn FnMut(u64) -> Decision) -> (u64, Decision) {
        let shard = self.shard(key);
        {
            let table = shard.table.read();
            if let Some(slot) = table.find(key, |s| s.key == key) {
                return apply_to(&slot.tat, decide);
            }
        }
        // An absent key is idle. A denial of it writes nothing, so only admissions insert.
        let decision = decide(0);
        if !decision.admitted {
            return (0, decision);
        }
        let mut table = shard.table.write();
        if let Some(slot) = table.find(key, |s| s.key == key) {
            // Another thread inserted it meanwhile: decide again on its TAT.
            return apply_to(&slot.tat, decide);
        }
        if table.len() >= self.shard_cap {
            Self::evict(&mut table);
        }
        table.insert_unique(
            key,
            Slot {
                key,
                tat: AtomicU64::new(decision.tat),
            },
            |s| s.key,
        );
        (0, decision)
    }

    fn peek(&self, key: u64) -> u64 {
        let table = self.shard(key).table.read();
        table
            .find(key, |s| s.key == key)
            .map_or(0, |s| s.tat.load(Ordering::Acquire))
    }

    fn undo(&self, key: u64, old: u64, new: u64, now: u64) {
        let table = self.shard(key).table.read();
        let Some(slot) = table.find(key, |s| s.key == key) else {
            return; // evicted or swept: nothing left to undo
        };
        if slot
            .tat
            .compare_exchange(new, old, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Others admitted on top of ours: take back exactly our increment.
            let increment = new.saturating_sub(old.max(now));
            let _ = slot
                .tat
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                    Some(tat.saturating_sub(increment))
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{evaluate, Mode, Quota, Tier};

    const S: u64 = 1_000_000_000;

    fn tier(key: u64, burst: u64) -> Tier {
        Tier {
            quota: Quota::new(1, S, burst).expect("valid"),
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key,
        }
    }

    #[test]
    fn denial_of_unknown_key_inserts_nothing() {
        let store = MemoryStore::new(1000);
        let big = Tier {
            quota: Quota::new(1, S, 1).expect("valid"),
            ..tier(7, 1)
        };
        assert!(!evaluate(&store, &[big], 10 * S, 2).admitted);
        assert!(store.is_empty());
    }

    #[test]
    fn sweep_drops_only_idle_keys() {
        let store = MemoryStore::new(1000);
        let now = 100 * S;
        for key in 0..50u64 {
            assert!(evaluate(&store, &[tier(key << 40 | key, 5)], now, 1).admitted);
        }
        assert_eq!(store.len(), 50);
        assert_eq!(store.sweep(now), 0, "all keys owe time at now");
        assert_eq!(store.sweep(now + S - 1), 0);
        assert_eq!(store.sweep(now + S), 50, "idle exactly one interval later");
        assert!(store.is_empty());
    }

    #[test]
    fn full_shard_evicts_lowest_tat_first() {
        let store = MemoryStore::new(16); // 16 shards, one key each
        let now = 100 * S;
        let key_a = 3;
        let key_b = 5; // same shard (middle bits all zero)
        assert!(evaluate(&store, &[tier(key_a, 5)], now, 1).admitted);
        assert!(evaluate(&store, &[tier(key_b, 5)], now, 3).admitted);
        assert_eq!(store.len(), 1, "the shard holds one key");
        assert_eq!(store.peek(key_a), 0, "lower TAT evicted");
        assert_eq!(store.peek(key_b), now + 3 * S);
    }
}
