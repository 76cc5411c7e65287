//! One shard of the store: its current table, the mutex that serialises inserts and
//! rebuilds, and the rebuilds themselves (grow, sweep idle keys, make room).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::table::{Table, EMPTY, FROZEN, SLOTS_PER_BUCKET};

/// A table grows when it would be fuller than 7/8.
pub(super) const MAX_LOAD_NUM: usize = 7;
pub(super) const MAX_LOAD_DEN: usize = 8;
/// A sweep rebuilds a shard once at least 1/SWEEP_SHARE of its keys are idle.
const SWEEP_SHARE: usize = 8;

/// A shard on its own cache line, so two threads on different shards never false-share.
#[repr(align(64))]
pub(super) struct Shard {
    pub(super) table: ArcSwap<Table>,
    /// Bumped after every table swap; lets threads keep a table without touching its count.
    pub(super) generation: AtomicU64,
    /// Serializes inserts and rebuilds of this shard; readers never take it.
    pub(super) writer: Mutex<()>,
    pub(super) len: AtomicUsize,
    /// While full of keys that owe time: the TAT by which an eighth of them will be idle.
    /// Until then a new key goes to its overflow key without another scan.
    pub(super) full_until: AtomicU64,
}

/// What a rebuild keeps.
#[derive(Clone, Copy)]
pub(super) enum Keep {
    All,
    /// Only keys with `TAT > now`.
    Busy(u64),
    /// Only a calendar quota's keys whose usage is of the window ending at the given
    /// instant (`limit::calendar::carried` reads them as its own).
    Window(u64),
}

impl Shard {
    pub(super) fn new() -> Self {
        Shard {
            table: ArcSwap::from_pointee(Table::with_buckets(1)),
            generation: AtomicU64::new(0),
            writer: Mutex::new(()),
            len: AtomicUsize::new(0),
            full_until: AtomicU64::new(0),
        }
    }

    /// Drops this shard's idle keys (`TAT ≤ now`) when an eighth of it is idle or it is
    /// nearly full (`cap` is its share of `max_keys`). Returns how many were dropped.
    pub(super) fn sweep(&self, now: u64, cap: usize) -> usize {
        let idle = {
            let table = self.table.load();
            table
                .buckets
                .iter()
                .flat_map(|b| &b.0)
                .filter(|s| {
                    s.key.load(Ordering::Acquire) != EMPTY && s.tat.load(Ordering::Relaxed) <= now
                })
                .count()
        };
        // Rebuilding costs a pass over the shard: only worth it once idle keys are a
        // real share of it, or the shard is nearly full. Until then they are harmless.
        let len = self.len.load(Ordering::Relaxed);
        if idle > 0 && (idle * SWEEP_SHARE >= len || len * MAX_LOAD_DEN >= cap * MAX_LOAD_NUM) {
            let _writer = self.writer.lock();
            return self.rebuild(Keep::Busy(now), None);
        }
        0
    }

    /// Moves the live keys into a fresh table sized for them (or `buckets`), keeping
    /// those `keep` selects. Caller holds the writer mutex.
    pub(super) fn rebuild(&self, keep: Keep, buckets: Option<usize>) -> usize {
        let old = self.table.load_full();
        let keeps = |tat: u64| match keep {
            Keep::All => true,
            Keep::Busy(now) => tat > now,
            Keep::Window(end) => crate::limit::calendar::usage_of(tat, end),
        };
        let (table, kept) = match buckets {
            // Growing: the size is known, so the keys go straight into the new table. (A copy
            // of them on the side first was as large as the new table's live part: at a
            // million keys, megabytes allocated and freed for every shard that grew.)
            Some(buckets) => {
                let table = Table::with_buckets(buckets);
                let mut kept = 0;
                for (key, tat) in freeze(&old) {
                    if keeps(tat) && table.insert(key, tat) {
                        kept += 1;
                    }
                }
                (table, kept)
            }
            // Sweeping: sized for what is kept, known once every key is frozen.
            None => {
                let kept: Vec<(u64, u64)> = freeze(&old).filter(|&(_, tat)| keeps(tat)).collect();
                let wanted =
                    (kept.len() * MAX_LOAD_DEN / MAX_LOAD_NUM / SLOTS_PER_BUCKET + 1).max(1);
                let table = Table::with_buckets(wanted);
                for &(key, tat) in &kept {
                    table.insert(key, tat);
                }
                (table, kept.len())
            }
        };
        let removed = self.len.load(Ordering::Relaxed).saturating_sub(kept);
        self.len.store(kept, Ordering::Relaxed);
        self.table.store(Arc::new(table));
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// Makes room in a full shard by dropping its idle keys, and only those: a key that
    /// owes time is never forgotten, or flooding fresh keys would be an amnesty. Records
    /// when an eighth of what is left will be idle, so a full shard is not rescanned for
    /// every new key. Returns whether any room was made. Caller holds the writer mutex.
    pub(super) fn evict_idle(&self, now: u64) -> bool {
        let table = self.table.load();
        let mut owing: Vec<u64> = table
            .buckets
            .iter()
            .flat_map(|b| &b.0)
            .filter(|s| s.key.load(Ordering::Acquire) != EMPTY)
            .map(|s| s.tat.load(Ordering::Relaxed))
            .filter(|&tat| tat > now)
            .collect();
        let idle = self.len.load(Ordering::Relaxed).saturating_sub(owing.len());
        drop(table);
        if idle > 0 {
            self.rebuild(Keep::Busy(now), None);
        }
        let eighth = (owing.len() / 8).max(1);
        let retry_at = if owing.len() >= eighth && !owing.is_empty() {
            *owing.select_nth_unstable(eighth - 1).1
        } else {
            now
        };
        self.full_until.store(retry_at, Ordering::Relaxed);
        idle > 0
    }
}

impl Shard {
    /// Makes room in a full quota area's shard by dropping its least-used keys: every key
    /// whose TAT is at most that of the eighth-lowest (so at least one, and all of a tie).
    /// Within one policy and window a lower TAT is less used, and a key of an earlier
    /// window is lower still. Returns the highest TAT dropped: the area's floor rises to
    /// it, so none of them comes back cheaper. Caller holds the writer mutex.
    pub(super) fn evict_least(&self) -> u64 {
        let table = self.table.load();
        let mut tats: Vec<u64> = table
            .buckets
            .iter()
            .flat_map(|b| &b.0)
            .filter(|s| s.key.load(Ordering::Acquire) != EMPTY)
            .map(|s| s.tat.load(Ordering::Relaxed))
            .collect();
        drop(table);
        if tats.is_empty() {
            return 0;
        }
        let eighth = (tats.len() / 8).max(1);
        let threshold = *tats.select_nth_unstable(eighth - 1).1;
        self.rebuild(Keep::Busy(threshold), None);
        threshold
    }
}

/// Every key of `table` with its TAT, each slot frozen as it is read: freezing makes any
/// racing CAS fail, so no update to the old table is lost.
fn freeze(table: &Table) -> impl Iterator<Item = (u64, u64)> + '_ {
    table.buckets.iter().flat_map(|b| &b.0).filter_map(|slot| {
        let key = slot.key.load(Ordering::Acquire);
        (key != EMPTY).then(|| (key, slot.tat.swap(FROZEN, Ordering::AcqRel)))
    })
}
