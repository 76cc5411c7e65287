//! The embedded store: one `AtomicU64` TAT per hashed (policy, key), in sharded
//! open-addressing tables whose reads take no lock. A decision on a known key is an
//! `arc-swap` load, one cache line of probing and one CAS; only inserting a new key takes
//! the shard's mutex. Tables are rebuilt (to grow, to sweep idle keys, to evict) by
//! freezing each slot as it is copied, so no concurrent update is ever lost.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::limit::{Decision, TatTable};

/// A TAT value that means "this slot is being moved to a new table: reload and retry".
/// Stored TATs are capped one below it.
const FROZEN: u64 = u64::MAX;
const MAX_TAT: u64 = u64::MAX - 1;
/// Key value of an empty slot. A key hash of 0 is stored as 1.
const EMPTY: u64 = 0;

const SLOTS_PER_BUCKET: usize = 4;

/// One tracked key: 16 bytes. The key is a 64-bit keyed hash of (policy, key), so long
/// keys cost nothing extra; see docs/algorithm.md for the collision bound.
struct Slot {
    key: AtomicU64,
    tat: AtomicU64,
}

/// Four slots on one cache line: a lookup costs one cache miss.
#[repr(align(64))]
struct Bucket([Slot; SLOTS_PER_BUCKET]);

impl Bucket {
    fn empty() -> Self {
        Bucket(std::array::from_fn(|_| Slot {
            key: AtomicU64::new(EMPTY),
            tat: AtomicU64::new(0),
        }))
    }
}

/// Linear probing over buckets. Slots are never emptied in place (only by a rebuild), so
/// a probe may stop at the first empty slot.
struct Table {
    buckets: Box<[Bucket]>,
    mask: usize,
}

enum Probe<'a> {
    Found(&'a Slot),
    Absent,
}

impl Table {
    fn with_buckets(n: usize) -> Self {
        let n = n.next_power_of_two().max(1);
        Self {
            buckets: (0..n).map(|_| Bucket::empty()).collect(),
            mask: n - 1,
        }
    }

    fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    fn find(&self, key: u64) -> Probe<'_> {
        let mut index = (key as usize) & self.mask;
        for _ in 0..self.buckets.len() {
            for slot in &self.buckets[index].0 {
                match slot.key.load(Ordering::Acquire) {
                    k if k == key => return Probe::Found(slot),
                    EMPTY => return Probe::Absent,
                    _ => {}
                }
            }
            index = (index + 1) & self.mask;
        }
        Probe::Absent
    }

    /// Places a key known to be absent. Only called under the shard mutex, with room left.
    fn insert(&self, key: u64, tat: u64) -> bool {
        let mut index = (key as usize) & self.mask;
        for _ in 0..self.buckets.len() {
            for slot in &self.buckets[index].0 {
                if slot.key.load(Ordering::Relaxed) == EMPTY {
                    slot.tat.store(tat, Ordering::Relaxed);
                    // Publishes the TAT with the key.
                    slot.key.store(key, Ordering::Release);
                    return true;
                }
            }
            index = (index + 1) & self.mask;
        }
        false
    }
}

/// A shard on its own cache line, so two threads on different shards never false-share.
#[repr(align(64))]
struct Shard {
    table: ArcSwap<Table>,
    /// Bumped after every table swap; lets threads keep a table without touching its count.
    generation: AtomicU64,
    /// Serializes inserts and rebuilds of this shard; readers never take it.
    writer: Mutex<()>,
    len: AtomicUsize,
    /// While full of keys that owe time: the TAT by which an eighth of them will be idle.
    /// Until then a new key goes to its overflow key without another scan.
    full_until: AtomicU64,
}

/// Fewest and most shards; between them, roughly one shard per 8,192 keys of `max_keys`.
const MIN_SHARDS: usize = 16;
const MAX_SHARDS: usize = 1024;
const KEYS_PER_SHARD_HINT: usize = 8192;
/// A table grows when it would be fuller than 7/8.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 8;
/// A sweep rebuilds a shard once at least 1/SWEEP_SHARE of its keys are idle.
const SWEEP_SHARE: usize = 8;

/// Each thread keeps the last table it used per shard, with the shard generation it was
/// current for: a decision then costs no reference-count or arc-swap traffic at all. A
/// stale table is harmless: its slots are frozen, so using it fails and refreshes.
struct CachedTable {
    store: u64,
    generation: u64,
    table: Option<Arc<Table>>,
}

thread_local! {
    static TABLES: RefCell<Vec<CachedTable>> = const { RefCell::new(Vec::new()) };
}

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

/// What a rebuild keeps.
enum Keep {
    All,
    /// Only keys with `TAT > now`.
    Busy(u64),
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
            shards: (0..shards)
                .map(|_| Shard {
                    table: ArcSwap::from_pointee(Table::with_buckets(1)),
                    generation: AtomicU64::new(0),
                    writer: Mutex::new(()),
                    len: AtomicUsize::new(0),
                    full_until: AtomicU64::new(0),
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

    fn shard_index(&self, key: u64) -> usize {
        // Buckets are indexed by the low bits; shard by high ones.
        ((key >> 48) & self.shard_mask) as usize
    }

    /// Runs `f` on the shard's current table, through this thread's cache.
    fn with_table<R>(&self, index: usize, f: impl FnOnce(&Table) -> R) -> R {
        let shard = &self.shards[index];
        let generation = shard.generation.load(Ordering::Acquire);
        TABLES.with(|cell| {
            let Ok(mut cache) = cell.try_borrow_mut() else {
                return f(&shard.table.load());
            };
            if cache.len() < self.shards.len() {
                cache.resize_with(self.shards.len(), || CachedTable {
                    store: 0,
                    generation: 0,
                    table: None,
                });
            }
            let entry = &mut cache[index];
            let table = match &entry.table {
                Some(t) if entry.store == self.id && entry.generation == generation => t,
                _ => {
                    *entry = CachedTable {
                        store: self.id,
                        generation,
                        table: Some(shard.table.load_full()),
                    };
                    match &entry.table {
                        Some(t) => t,
                        None => return f(&shard.table.load()),
                    }
                }
            };
            f(table)
        })
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
        let mut removed = 0;
        for shard in self.shards.iter() {
            let idle = {
                let table = shard.table.load();
                table
                    .buckets
                    .iter()
                    .flat_map(|b| &b.0)
                    .filter(|s| {
                        s.key.load(Ordering::Acquire) != EMPTY
                            && s.tat.load(Ordering::Relaxed) <= now
                    })
                    .count()
            };
            // Rebuilding costs a pass over the shard: only worth it once idle keys are a
            // real share of it, or the shard is nearly full. Until then they are harmless.
            let len = shard.len.load(Ordering::Relaxed);
            if idle > 0
                && (idle * SWEEP_SHARE >= len
                    || len * MAX_LOAD_DEN >= self.shard_cap * MAX_LOAD_NUM)
            {
                let _writer = shard.writer.lock();
                removed += Self::rebuild(shard, Keep::Busy(now), None);
            }
        }
        removed
    }

    /// Moves a shard's live keys into a fresh table sized for them (or `buckets`),
    /// keeping those `keep` selects. Caller holds the shard's writer mutex.
    fn rebuild(shard: &Shard, keep: Keep, buckets: Option<usize>) -> usize {
        let old = shard.table.load_full();
        let mut kept: Vec<(u64, u64)> = Vec::with_capacity(shard.len.load(Ordering::Relaxed));
        for slot in old.buckets.iter().flat_map(|b| &b.0) {
            let key = slot.key.load(Ordering::Acquire);
            if key == EMPTY {
                continue;
            }
            // Freezing makes any racing CAS fail, so no update to the old table is lost.
            let tat = slot.tat.swap(FROZEN, Ordering::AcqRel);
            let keep_it = match keep {
                Keep::All => true,
                Keep::Busy(now) => tat > now,
            };
            if keep_it {
                kept.push((key, tat));
            }
        }
        let wanted = buckets.unwrap_or_else(|| {
            (kept.len() * MAX_LOAD_DEN / MAX_LOAD_NUM / SLOTS_PER_BUCKET + 1).max(1)
        });
        let table = Table::with_buckets(wanted);
        for &(key, tat) in &kept {
            table.insert(key, tat);
        }
        let removed = shard.len.load(Ordering::Relaxed).saturating_sub(kept.len());
        shard.len.store(kept.len(), Ordering::Relaxed);
        shard.table.store(Arc::new(table));
        shard.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// Makes room in a full shard by dropping its idle keys, and only those: a key that
    /// owes time is never forgotten, or flooding fresh keys would be an amnesty. Records
    /// when an eighth of what is left will be idle, so a full shard is not rescanned for
    /// every new key. Returns whether any room was made.
    fn evict_idle(shard: &Shard, now: u64) -> bool {
        let table = shard.table.load();
        let mut owing: Vec<u64> = table
            .buckets
            .iter()
            .flat_map(|b| &b.0)
            .filter(|s| s.key.load(Ordering::Acquire) != EMPTY)
            .map(|s| s.tat.load(Ordering::Relaxed))
            .filter(|&tat| tat > now)
            .collect();
        let idle = shard
            .len
            .load(Ordering::Relaxed)
            .saturating_sub(owing.len());
        drop(table);
        if idle > 0 {
            Self::rebuild(shard, Keep::Busy(now), None);
        }
        let eighth = (owing.len() / 8).max(1);
        let retry_at = if owing.len() >= eighth && !owing.is_empty() {
            *owing.select_nth_unstable(eighth - 1).1
        } else {
            now
        };
        shard.full_until.store(retry_at, Ordering::Relaxed);
        idle > 0
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

fn normalize(key: u64) -> u64 {
    if key == EMPTY {
        1
    } else {
        key
    }
}

/// The CAS loop on one TAT; `decide` is pure, so re-running it on a lost race is safe.
/// `None` when the slot is frozen by a rebuild.
#[inline(always)]
fn apply_to(slot: &Slot, decide: &mut impl FnMut(u64) -> Decision) -> Option<(u64, Decision)> {
    let mut current = slot.tat.load(Ordering::Acquire);
    loop {
        if current == FROZEN {
            return None;
        }
        let mut decision = decide(current);
        decision.tat = decision.tat.min(MAX_TAT);
        if !decision.admitted || decision.tat == current {
            return Some((current, decision));
        }
        match slot.tat.compare_exchange_weak(
            current,
            decision.tat,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some((current, decision)),
            Err(actual) => current = actual,
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
                    let full = now < shard.full_until.load(Ordering::Relaxed)
                        || !Self::evict_idle(shard, now);
                    if full {
                        return None;
                    }
                }
            }
            let table = shard.table.load_full();
            let len = shard.len.load(Ordering::Relaxed);
            if (len + 1) * MAX_LOAD_DEN > table.capacity() * MAX_LOAD_NUM {
                Self::rebuild(shard, Keep::All, Some(table.buckets.len() * 2));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{evaluate, Mode, Quota, Tier};

    const S: u64 = 1_000_000_000;

    fn tier(key: u64, burst: u64) -> Tier {
        Tier {
            overflow: 0,
            quota: Quota::new(1, S, burst).expect("valid"),
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key,
        }
    }

    #[test]
    fn denial_of_unknown_key_inserts_nothing() {
        let store = MemoryStore::new(1000);
        assert!(!evaluate(&store, &[tier(7, 1)], 10 * S, 2).admitted);
        assert!(store.is_empty());
    }

    #[test]
    fn sweep_drops_only_idle_keys() {
        let store = MemoryStore::new(1000);
        let now = 100 * S;
        for key in 0..50u64 {
            assert!(evaluate(&store, &[tier(key << 48 | key, 5)], now, 1).admitted);
        }
        assert_eq!(store.len(), 50);
        assert_eq!(store.sweep(now), 0, "all keys owe time at now");
        assert_eq!(store.sweep(now + S - 1), 0);
        assert_eq!(store.sweep(now + S), 50, "idle exactly one interval later");
        assert!(store.is_empty());
    }

    #[test]
    fn tables_grow_and_keep_every_tat() {
        let store = MemoryStore::new(1_000_000);
        let now = 100 * S;
        for key in 1..=20_000u64 {
            let cost = key % 3 + 1;
            assert!(
                evaluate(
                    &store,
                    &[tier(key.wrapping_mul(0x9E37_79B9_7F4A_7C15), 5)],
                    now,
                    cost
                )
                .admitted
            );
        }
        assert_eq!(store.len(), 20_000);
        for key in 1..=20_000u64 {
            assert_eq!(
                store.peek(key.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                now + (key % 3 + 1) * S
            );
        }
    }

    #[test]
    fn a_full_shard_never_forgets_a_debt_and_sends_new_keys_to_the_overflow_key() {
        let store = MemoryStore::new(16); // 16 shards, one key each
        let now = 100 * S;
        let (owing, fresh, overflow) = (3, 5, 7 << 60); // 3 and 5 share a shard
        let with_overflow = |key| Tier {
            overflow,
            ..tier(key, 5)
        };
        assert!(evaluate(&store, &[with_overflow(owing)], now, 3).admitted);
        let v = evaluate(&store, &[with_overflow(fresh)], now, 1);
        assert!(v.admitted);
        assert_eq!(v.outcomes()[0].key, overflow, "decided on the overflow key");
        assert_eq!(store.peek(owing), now + 3 * S, "the debt is kept");
        assert_eq!(store.peek(fresh), 0, "the new key is not tracked");
        assert_eq!(
            store.peek(overflow),
            now + S,
            "the overflow key was charged"
        );
        // Every new key shares the overflow key: inventing keys throttles only inventions.
        for key in (9..1000).step_by(2) {
            evaluate(&store, &[with_overflow(key << 4 | 5)], now, 1);
        }
        assert_eq!(
            store.peek(overflow),
            now + 5 * S,
            "the overflow key's burst is spent"
        );
        assert!(!evaluate(&store, &[with_overflow(11)], now, 1).admitted);
        assert_eq!(store.peek(owing), now + 3 * S);
        // Once the debt is paid off, its room is reused.
        let later = now + 10 * S;
        let v = evaluate(&store, &[with_overflow(fresh)], later, 1);
        assert_eq!(v.outcomes()[0].key, fresh);
        assert_eq!(store.peek(owing), 0, "idle keys are dropped to make room");
    }

    #[test]
    fn updates_racing_rebuilds_are_never_lost() {
        use std::sync::atomic::AtomicBool;
        // Large enough that the shard never evicts: only growth rebuilds happen.
        let store = Arc::new(MemoryStore::new(100_000_000));
        let now = 100 * S;
        let hot = 42u64;
        let stop = Arc::new(AtomicBool::new(false));
        // One thread keeps inserting new keys into the hot key's shard, forcing rebuilds.
        let grower = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut k = 1u64;
                while !stop.load(Ordering::Relaxed) && k < 50_000 {
                    evaluate(&*store, &[tier(k << 8, 5)], now, 1);
                    k += 1;
                }
            })
        };
        let quota = Quota::new(1, 1000, 1_000_000).expect("valid"); // T = 1 µs
        let mut admitted = 0u64;
        for _ in 0..200_000 {
            let t = Tier {
                overflow: 0,
                quota,
                mode: Mode::Enforce,
                max_delay_ns: 0,
                key: hot,
            };
            if evaluate(&*store, &[t], now, 1).admitted {
                admitted += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        grower.join().expect("grower");
        assert_eq!(
            store.peek(hot),
            now + admitted * quota.interval_ns(),
            "every admission is in the TAT"
        );
    }
}
