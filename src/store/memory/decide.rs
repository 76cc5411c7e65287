//! Deciding on a key of the embedded store: the CAS on a known key, and inserting a new
//! one — into a full rate shard only by dropping idle keys (else its policy's overflow
//! key), into a full quota area by dropping its least-used keys and raising its floor.

use std::sync::atomic::Ordering;

use crate::limit::{Decision, TatTable};

use super::areas::{area_of, AREA_MASK};
use super::shard::{Keep, MAX_LOAD_DEN, MAX_LOAD_NUM};
use super::table::{apply_to, decided_on, normalize, Probe, FROZEN, MAX_TAT};
use super::MemoryStore;

/// Whether a new key may be inserted into a full shard.
#[derive(Clone, Copy)]
pub(super) enum NewKey {
    /// Always (the shard grows past its share): overflow keys, and direct `apply` calls.
    Always,
    /// Only if room can be made at this `now`: in a rate shard by dropping idle keys,
    /// never a debt; in a quota area by dropping its least-used keys (see `areas`).
    IfRoom(u64),
}

impl MemoryStore {
    /// What a key absent from its shard is read at: idle for a rate key, its area's floor
    /// for a quota key.
    #[inline]
    fn absent(&self, key: u64) -> u64 {
        match area_of(key) {
            0 => 0,
            area => self.areas.floor(area),
        }
    }

    /// A quota key a state file of the format before areas put among the rate keys is
    /// moved into its area: `true` when there was one (decide again).
    #[cold]
    fn migrate(&self, key: u64) -> bool {
        let old = normalize(key & !AREA_MASK);
        let tat = self.peek(old);
        if tat == 0 {
            return false;
        }
        self.forget(old);
        self.restore(key, tat);
        true
    }

    /// Decides `key` (see [`TatTable::apply`]); `None` when it is a new rate key, the
    /// shard is full of keys that owe time and `new_key` does not allow growing.
    ///
    /// The known key's path (one table lookup and one CAS) is all that is inlined into a
    /// caller; inserting a new key is out of line, so the decision stays in registers.
    #[inline(always)]
    pub(super) fn apply_key(
        &self,
        key: u64,
        new_key: NewKey,
        decide: &mut impl FnMut(u64) -> Decision,
    ) -> Option<(u64, Decision)> {
        let key = normalize(key);
        let index = self.shard_index(key);
        loop {
            let decide_here = &mut *decide;
            // Always inlined: its size is at the threshold, and out of line the decision
            // leaves registers (+20 instructions a decision when a tier's decide grew).
            let step = self.with_table(
                index,
                #[inline(always)]
                move |table| match table.find(key) {
                    Probe::Found(slot) => match apply_to(slot, decide_here) {
                        Some(prior) => Step::Decided(prior),
                        None => Step::Frozen,
                    },
                    Probe::Absent => Step::Absent,
                },
            );
            match step {
                Step::Decided(prior) => return Some(decided_on(prior, decide)),
                // Frozen by a rebuild: the new table is about to be published.
                Step::Frozen => std::thread::yield_now(),
                Step::Absent => match self.insert_key(key, index, new_key, decide) {
                    Insert::Decided(decided) => return Some(decided),
                    Insert::Full => return None,
                    Insert::Again => {}
                },
            }
        }
    }

    /// Decides a key absent from its shard and inserts it when admitted.
    #[inline(never)]
    fn insert_key(
        &self,
        key: u64,
        index: usize,
        new_key: NewKey,
        decide: &mut impl FnMut(u64) -> Decision,
    ) -> Insert {
        let shard = &self.shards[index];
        let area = area_of(key);
        if area > 0 && self.areas.legacy() && self.migrate(key) {
            return Insert::Again;
        }
        // An absent key is read at its area's floor. A denial of it writes nothing, so
        // only admissions insert.
        let prior = self.absent(key);
        let decision = decide(prior);
        if !decision.admitted {
            return Insert::Decided((prior, decision));
        }
        let _writer = shard.writer.lock();
        let table = shard.table.load_full();
        if let Probe::Found(slot) = table.find(key) {
            // Inserted meanwhile: decide again on its TAT (no rebuild can run: we hold the mutex).
            return match apply_to(slot, decide) {
                Some(prior) => Insert::Decided(decided_on(prior, decide)),
                None => Insert::Again,
            };
        }
        let len = shard.len.load(Ordering::Relaxed);
        if len >= self.areas.shard_cap(area) {
            if let NewKey::IfRoom(now) = new_key {
                if area == 0 {
                    let full =
                        now < shard.full_until.load(Ordering::Relaxed) || !shard.evict_idle(now);
                    if full {
                        return Insert::Full;
                    }
                } else if !shard.evict_idle(now) {
                    let dropped = shard.evict_least();
                    self.areas.raise_floor(area, dropped);
                }
            }
        }
        if self.absent(key) != prior {
            // Making room raised the floor: decide again from it.
            return Insert::Again;
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
        Insert::Decided((prior, decision))
    }

    /// A new key of a store full of debts: it shares its policy's overflow key with every
    /// other new key, so inventing keys throttles only other inventions.
    ///
    /// Out of line, and deciding through a closure of its own type: the known key's
    /// table access (`cache::with_table`) then has one caller per decision closure, which
    /// is what lets the compiler inline it into `apply_tier` (two callers of one
    /// instantiation kept it a call, ~45 instructions of plumbing a decision).
    #[cold]
    #[inline(never)]
    fn apply_overflow(
        &self,
        overflow: u64,
        mut decide: impl FnMut(u64) -> Decision,
    ) -> (u64, u64, Decision) {
        #[expect(
            clippy::redundant_closure,
            reason = "the wrapper is a type of its own: see above"
        )]
        let (prior, decision) = self.apply(overflow, move |tat| decide(tat));
        (overflow, prior, decision)
    }
}

/// What deciding a key absent from its shard came to.
enum Insert {
    /// The TAT decided on and the decision (inserted when admitted).
    Decided((u64, Decision)),
    /// A new rate key, and the shard is full of keys that owe time.
    Full,
    /// The table changed meanwhile: decide again from the top.
    Again,
}

/// What one look at a key's shard found.
enum Step {
    /// Decided on this TAT.
    Decided(u64),
    /// The key's slot is being moved by a rebuild.
    Frozen,
    /// The key is not in the shard.
    Absent,
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
        self.apply_overflow(tier.overflow, decide)
    }

    fn peek(&self, key: u64) -> u64 {
        let key = normalize(key);
        if area_of(key) > 0 && self.areas.legacy() {
            self.migrate(key);
        }
        self.with_slot(key, |slot| match slot {
            None => Some(self.absent(key)),
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
