//! Which keys of the process-local store were reset since a request was admitted: a
//! settle's refund after a reset of its key would come out of the usage made since, so it
//! gives nothing back. A reset of another key leaves a refund alone. (Keys in Redis carry
//! their reset in Redis, where every gateway's settle reads it: `store::rate::reset`.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The most keys remembered by name; past it every key counts as reset once, so a flood
/// of resets costs memory up to this bound and refunds in flight at that moment.
const MAX_NAMED: usize = 4096;

/// Resets of the local store's keys, in the order they happened.
#[derive(Default)]
pub struct Resets {
    /// Resets so far: a request reads it before its decision ([`Resets::mark`]).
    count: AtomicU64,
    named: Mutex<Named>,
}

#[derive(Default)]
struct Named {
    /// Each key reset, with the count its latest reset took.
    at: HashMap<u64, u64>,
    /// Every key counts as reset at this count (the map was full, or cleared).
    all: u64,
}

impl Resets {
    /// What a request decided after this reads: its settle compares [`Resets::since`]
    /// with it. Read *before* the decision, so a reset landing while the decision is made
    /// counts as after it (a refund refused, never one given out of later usage).
    #[inline]
    pub fn mark(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// `key` was reset (its state already forgotten).
    pub fn note(&self, key: u64) {
        let mut named = self.named.lock();
        let n = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if named.at.len() >= MAX_NAMED {
            named.at.clear();
            named.all = n;
        }
        named.at.insert(key, n);
    }

    /// Whether `key` was reset after `mark` was read.
    pub fn since(&self, key: u64, mark: u64) -> bool {
        if self.count.load(Ordering::Acquire) == mark {
            return false;
        }
        let named = self.named.lock();
        named.all > mark || named.at.get(&key).is_some_and(|&n| n > mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_reset_key_loses_its_refund_and_a_full_map_fails_closed() {
        let resets = Resets::default();
        let before = resets.mark();
        resets.note(7);
        assert!(resets.since(7, before));
        assert!(!resets.since(8, before), "another key's reset");
        let after = resets.mark();
        assert!(!resets.since(7, after), "admitted after the reset");
        for key in 0..MAX_NAMED as u64 + 1 {
            resets.note(1_000 + key);
        }
        assert!(resets.since(8, after), "past the bound every key counts");
        let later = resets.mark();
        assert!(!resets.since(8, later));
    }
}
