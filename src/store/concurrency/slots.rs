//! Requests in flight per key, for concurrency policies: a count per (policy, key) hash in
//! sharded maps, and a first-come-first-served queue per key for requests that may wait
//! (`max_delay`). An entry exists only while a slot is held or a request waits, so memory
//! follows the requests in flight, never the number of keys ever seen.
//!
//! A held slot is a [`Slot`]: dropping it releases the slot exactly once, handing it straight
//! to the first live waiter when there is one (so a waiter cannot be overtaken).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

/// Waiters one key may queue; beyond, a request that could wait is refused at once.
pub const MAX_WAITERS_PER_KEY: usize = 1024;
const SHARDS: usize = 64;

#[derive(Default)]
struct Entry {
    held: u32,
    /// The cap the latest request for this key brought (a reload may have changed it).
    max: u32,
    waiters: VecDeque<oneshot::Sender<Slot>>,
    /// The policy's in-flight gauge, moved with every slot taken and given back.
    gauge: Option<Gauge>,
}

#[derive(Default)]
struct Shard(Mutex<HashMap<u64, Entry>>);

/// The slots of every concurrency policy of a gateway; outlives reloads.
pub struct SlotTable {
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for SlotTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTable").finish_non_exhaustive()
    }
}

impl Default for SlotTable {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// One slot held on a key, released when dropped.
pub struct Slot {
    table: Option<Arc<SlotTable>>,
    key: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(table) = self.table.take() {
            table.release(self.key);
        }
    }
}

impl Slot {
    /// Forgets the slot without releasing it (it was handed over, or never taken).
    fn disarm(mut self) {
        self.table = None;
    }
}

/// The answer to a request for a slot.
pub enum Acquired {
    Taken(Slot),
    /// Every slot is held (and, when the caller may wait, the queue is full).
    Full,
    /// In the queue: the slot arrives on the channel, in arrival order.
    Queued(oneshot::Receiver<Slot>),
}

impl SlotTable {
    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Entry>> {
        &self.shards[(key >> 58) as usize % SHARDS].0
    }

    /// Takes a slot on `key` if fewer than `max` are held and nobody waits ahead; else,
    /// with `wait`, joins the key's queue. `gauge` gives the gauge that counts the policy's
    /// slots held; it is asked only when the key had none held.
    pub fn acquire(
        self: &Arc<Self>,
        key: u64,
        max: u32,
        wait: bool,
        gauge: impl FnOnce() -> Option<Gauge>,
    ) -> Acquired {
        let mut map = self.shard(key).lock();
        let entry = map.entry(key).or_default();
        entry.max = max;
        // Waiters that gave up (timed out, client gone) do not hold anyone back.
        entry.waiters.retain(|w| !w.is_closed());
        // A raised cap (reload) frees slots for those already waiting, first.
        while entry.held < max && self.hand_to_next_waiter(entry, key) {
            entry.held += 1;
            if let Some(g) = &entry.gauge {
                g.inc();
            }
        }
        if entry.held < max && entry.waiters.is_empty() {
            entry.held += 1;
            if entry.gauge.is_none() {
                entry.gauge = gauge();
            }
            if let Some(g) = &entry.gauge {
                g.inc();
            }
            return Acquired::Taken(Slot {
                table: Some(self.clone()),
                key,
            });
        }
        if !wait || entry.waiters.len() >= MAX_WAITERS_PER_KEY {
            if entry.held == 0 && entry.waiters.is_empty() {
                map.remove(&key);
            }
            return Acquired::Full;
        }
        let (tx, rx) = oneshot::channel();
        entry.waiters.push_back(tx);
        Acquired::Queued(rx)
    }

    /// Slots held on `key` now.
    pub fn held(&self, key: u64) -> u32 {
        self.shard(key).lock().get(&key).map_or(0, |e| e.held)
    }

    /// Requests waiting for a slot on `key` now.
    pub fn waiting(&self, key: u64) -> usize {
        self.shard(key)
            .lock()
            .get(&key)
            .map_or(0, |e| e.waiters.iter().filter(|w| !w.is_closed()).count())
    }

    /// Gives a slot on `key` to the first waiter still waiting; false when none is.
    fn hand_to_next_waiter(self: &Arc<Self>, entry: &mut Entry, key: u64) -> bool {
        while let Some(waiter) = entry.waiters.pop_front() {
            let handed = Slot {
                table: Some(self.clone()),
                key,
            };
            match waiter.send(handed) {
                Ok(()) => return true,
                // That waiter is gone: the slot was not handed over, try the next one.
                Err(back) => back.disarm(),
            }
        }
        false
    }

    /// Gives a slot back: to the first waiter still waiting, or to the pool.
    fn release(self: Arc<Self>, key: u64) {
        let mut map = self.shard(key).lock();
        let Some(entry) = map.get_mut(&key) else {
            return;
        };
        // Handed on only while the key is within its cap: after a reload lowered it, slots
        // are given back until the held ones fit.
        if entry.held <= entry.max && self.hand_to_next_waiter(entry, key) {
            return;
        }
        entry.held = entry.held.saturating_sub(1);
        if let Some(g) = &entry.gauge {
            g.dec();
        }
        if entry.held == 0 {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn taken(a: Acquired) -> Option<Slot> {
        match a {
            Acquired::Taken(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn slots_are_capped_released_once_and_forgotten_when_free() {
        let table = Arc::new(SlotTable::default());
        let a = taken(table.acquire(7, 2, false, || None)).expect("first");
        let b = taken(table.acquire(7, 2, false, || None)).expect("second");
        assert!(matches!(
            table.acquire(7, 2, false, || None),
            Acquired::Full
        ));
        drop(a);
        assert_eq!(table.held(7), 1);
        drop(b);
        assert_eq!(table.held(7), 0);
        assert!(table.shard(7).lock().is_empty(), "no entry left behind");
    }

    #[tokio::test]
    async fn waiters_get_slots_in_arrival_order_and_dead_ones_are_skipped() {
        let table = Arc::new(SlotTable::default());
        let held = taken(table.acquire(1, 1, true, || None)).expect("held");
        let Acquired::Queued(first) = table.acquire(1, 1, true, || None) else {
            panic!("queued")
        };
        let Acquired::Queued(gone) = table.acquire(1, 1, true, || None) else {
            panic!("queued")
        };
        let Acquired::Queued(third) = table.acquire(1, 1, true, || None) else {
            panic!("queued")
        };
        drop(gone);
        drop(held);
        let slot = first.await.expect("the first waiter gets the slot");
        assert_eq!(table.held(1), 1);
        drop(slot);
        let slot = third.await.expect("the dead waiter is skipped");
        drop(slot);
        assert_eq!(table.held(1), 0);
    }

    #[tokio::test]
    async fn a_lowered_cap_is_reached_before_waiters_are_served_and_a_raised_one_serves_them() {
        let table = Arc::new(SlotTable::default());
        let a = taken(table.acquire(5, 2, false, || None)).expect("a");
        let b = taken(table.acquire(5, 2, false, || None)).expect("b");
        let Acquired::Queued(mut waiter) = table.acquire(5, 2, true, || None) else {
            panic!("queued")
        };
        // A request under a reload's lower cap: refused, and the cap is now 1.
        assert!(matches!(
            table.acquire(5, 1, false, || None),
            Acquired::Full
        ));
        drop(a);
        assert!(
            waiter.try_recv().is_err(),
            "2 held > 1: the slot is given back, not handed on"
        );
        assert_eq!(table.held(5), 1);
        drop(b);
        let slot = waiter
            .await
            .expect("within the cap again: the waiter is served");
        assert_eq!(table.held(5), 1);

        // A raised cap serves the waiters first, then newcomers.
        let Acquired::Queued(second) = table.acquire(5, 1, true, || None) else {
            panic!("queued")
        };
        assert!(matches!(
            table.acquire(5, 2, false, || None),
            Acquired::Full
        ));
        let other = second
            .await
            .expect("the raise handed the new slot to the waiter");
        assert_eq!(table.held(5), 2);
        drop((slot, other));
        assert_eq!(table.held(5), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire(u64),
        Release(usize),
    }

    proptest! {
        /// Any interleaving of takes and releases on a few keys: a key never holds more
        /// than its cap, and once everything is released nothing is left.
        #[test]
        fn held_never_exceeds_the_cap_and_never_leaks(
            ops in proptest::collection::vec(
                prop_oneof![(0u64..3).prop_map(Op::Acquire), (0usize..8).prop_map(Op::Release)],
                1..200,
            ),
            cap in 1u32..4,
        ) {
            let table = Arc::new(SlotTable::default());
            let mut slots: Vec<(u64, Slot)> = Vec::new();
            for op in ops {
                match op {
                    Op::Acquire(k) => {
                        let before = slots.iter().filter(|(key, _)| *key == k).count() as u32;
                        match table.acquire(k, cap, false, || None) {
                            Acquired::Taken(s) => {
                                prop_assert!(before < cap);
                                slots.push((k, s));
                            }
                            Acquired::Full => prop_assert_eq!(before, cap),
                            Acquired::Queued(_) => prop_assert!(false, "never queued without wait"),
                        }
                    }
                    Op::Release(i) if !slots.is_empty() => {
                        slots.remove(i % slots.len());
                    }
                    Op::Release(_) => {}
                }
                for k in 0..3 {
                    let expected = slots.iter().filter(|(key, _)| *key == k).count() as u32;
                    prop_assert_eq!(table.held(k), expected);
                }
            }
            slots.clear();
            prop_assert!(table.shards.iter().all(|s| s.0.lock().is_empty()));
        }
    }
}
