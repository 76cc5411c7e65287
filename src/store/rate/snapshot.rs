//! A request-sized table of TATs read from a remote store, so that the verdict (wait,
//! remaining, the reporting tier) comes from the same `evaluate` as the memory store's.

use arrayvec::ArrayVec;

use crate::limit::{Decision, TatTable, MAX_DECISIONS};

/// Times are relative to `BASE`, which plays "now": far from 0 and from overflow.
pub const BASE: u64 = 1 << 62;

#[derive(Debug, Default)]
pub struct SnapshotTable {
    entries: std::cell::RefCell<ArrayVec<(u64, u64), MAX_DECISIONS>>,
}

impl SnapshotTable {
    /// Records that `key` owes `debt_ns` (its TAT minus the store's now; 0 = idle).
    pub fn insert(&self, key: u64, debt_ns: u64) {
        let tat = if debt_ns == 0 {
            0
        } else {
            BASE.saturating_add(debt_ns)
        };
        let mut entries = self.entries.borrow_mut();
        match entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = tat,
            None => {
                let _ = entries.try_push((key, tat));
            }
        }
    }
}

impl TatTable for SnapshotTable {
    fn apply(&self, key: u64, mut decide: impl FnMut(u64) -> Decision) -> (u64, Decision) {
        let tat = self.peek(key);
        let decision = decide(tat);
        if decision.admitted {
            self.insert_raw(key, decision.tat);
        }
        (tat, decision)
    }

    fn peek(&self, key: u64) -> u64 {
        self.entries
            .borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |(_, tat)| *tat)
    }

    fn undo(&self, key: u64, old: u64, _new: u64, _now: u64) {
        self.insert_raw(key, old);
    }
}

impl SnapshotTable {
    fn insert_raw(&self, key: u64, tat: u64) {
        let mut entries = self.entries.borrow_mut();
        match entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = tat,
            None => {
                let _ = entries.try_push((key, tat));
            }
        }
    }
}
