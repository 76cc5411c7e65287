//! The lock-free table under one shard: 16-byte slots of (key hash, TAT), four to a cache
//! line, probed linearly. Slots are only ever emptied by building a new table.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::limit::Decision;

/// A TAT value that means "this slot is being moved to a new table: reload and retry".
/// Stored TATs are capped one below it.
pub(super) const FROZEN: u64 = u64::MAX;
pub(super) const MAX_TAT: u64 = u64::MAX - 1;
/// Key value of an empty slot. A key hash of 0 is stored as 1.
pub(super) const EMPTY: u64 = 0;

pub(super) const SLOTS_PER_BUCKET: usize = 4;

/// One tracked key: 16 bytes. The key is a 64-bit keyed hash of (policy, key), so long
/// keys cost nothing extra; see docs/algorithm.md for the collision bound.
pub(super) struct Slot {
    pub(super) key: AtomicU64,
    pub(super) tat: AtomicU64,
}

/// Four slots on one cache line: a lookup costs one cache miss.
#[repr(align(64))]
pub(super) struct Bucket(pub(super) [Slot; SLOTS_PER_BUCKET]);

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
pub(super) struct Table {
    pub(super) buckets: Box<[Bucket]>,
    mask: usize,
}

pub(super) enum Probe<'a> {
    Found(&'a Slot),
    Absent,
}

impl Table {
    pub(super) fn with_buckets(n: usize) -> Self {
        let n = n.next_power_of_two().max(1);
        Self {
            buckets: (0..n).map(|_| Bucket::empty()).collect(),
            mask: n - 1,
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    pub(super) fn find(&self, key: u64) -> Probe<'_> {
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
    pub(super) fn insert(&self, key: u64, tat: u64) -> bool {
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

pub(super) fn normalize(key: u64) -> u64 {
    if key == EMPTY {
        1
    } else {
        key
    }
}

/// The CAS loop on one TAT; `decide` is pure, so re-running it on a lost race is safe.
/// Returns the TAT the decision was made on (the decision is `decide` of it: the caller
/// computes it again, so only two words leave this loop, and only `admitted` and `tat`
/// are computed inside it); `None` when the slot is frozen by a rebuild.
#[inline(always)]
pub(super) fn apply_to(slot: &Slot, decide: &mut impl FnMut(u64) -> Decision) -> Option<u64> {
    let mut current = slot.tat.load(Ordering::Acquire);
    loop {
        if current == FROZEN {
            return None;
        }
        let decision = decide(current);
        let tat = decision.tat.min(MAX_TAT);
        if !decision.admitted || tat == current {
            return Some(current);
        }
        match slot
            .tat
            .compare_exchange_weak(current, tat, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(current),
            Err(actual) => current = actual,
        }
    }
}

/// The decision on `prior`, as stored (a TAT is capped below [`FROZEN`]).
#[inline(always)]
pub(super) fn decided_on(prior: u64, decide: &mut impl FnMut(u64) -> Decision) -> (u64, Decision) {
    let mut decision = decide(prior);
    decision.tat = decision.tat.min(MAX_TAT);
    (prior, decision)
}
