//! Concurrency keys Redis last found full, as this gateway remembers them: a request that
//! may not wait is refused here, without a round trip, until a slot of the key is given
//! back through this gateway or the memory runs out (a fraction of the lease's ttl, so a
//! slot freed by another gateway is seen soon). A flood on a full key therefore costs
//! Redis almost nothing. The requests waiting for a slot of a key are woken here when this
//! gateway gives one back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Entries kept (a power of two). A collision only forgets that a key was full.
const SLOTS: usize = 1 << 14;

struct Entry {
    key: AtomicU64,
    /// Local clock: forgotten from then on.
    until: AtomicU64,
}

pub struct FullKeys {
    slots: Box<[Entry]>,
    /// Keys a request is polling Redis for: woken when this gateway gives a slot back.
    /// Each poll has an id, so a poller leaving removes only its own entry.
    polled: Mutex<HashMap<u64, (u64, Arc<Notify>)>>,
    next_poll: AtomicU64,
}

impl Default for FullKeys {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS)
                .map(|_| Entry {
                    key: AtomicU64::new(0),
                    until: AtomicU64::new(0),
                })
                .collect(),
            polled: Mutex::default(),
            next_poll: AtomicU64::new(1),
        }
    }
}

impl FullKeys {
    fn slot(&self, key: u64) -> &Entry {
        &self.slots[(key as usize) & (SLOTS - 1)]
    }

    /// Redis found `key` full: remembered so until `until` (local clock).
    pub fn remember(&self, key: u64, until: u64) {
        let entry = self.slot(key);
        entry.key.store(0, Ordering::Release);
        entry.until.store(until, Ordering::Release);
        entry.key.store(key, Ordering::Release);
    }

    /// Whether `key` is remembered full at `now`.
    pub fn is_full(&self, key: u64, now: u64) -> bool {
        let entry = self.slot(key);
        let until = entry.until.load(Ordering::Acquire);
        entry.key.load(Ordering::Acquire) == key && now < until
    }

    /// A slot of `key` was given back through this gateway: it is not full any more, and
    /// whoever polls for it asks again now.
    pub fn freed(&self, key: u64) {
        let entry = self.slot(key);
        if entry.key.load(Ordering::Acquire) == key {
            entry.key.store(0, Ordering::Release);
        }
        if let Some((_, notify)) = self.polled.lock().get(&key) {
            notify.notify_one();
        }
    }

    /// What the request polling Redis for `key` waits on besides its timer (one poller
    /// per key: the request whose turn it is). Forgotten when the guard goes.
    pub fn poll(self: &Arc<Self>, key: u64) -> Poller {
        let id = self.next_poll.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.polled.lock().insert(key, (id, notify.clone()));
        Poller {
            keys: self.clone(),
            key,
            id,
            notify,
        }
    }
}

/// The request polling Redis for one key's slot.
pub struct Poller {
    keys: Arc<FullKeys>,
    key: u64,
    id: u64,
    pub notify: Arc<Notify>,
}

impl Drop for Poller {
    fn drop(&mut self) {
        let mut polled = self.keys.polled.lock();
        // Only its own entry: the key's next poller may have registered already.
        if polled.get(&self.key).is_some_and(|(id, _)| *id == self.id) {
            polled.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_key_is_remembered_until_its_time_or_a_local_give_back() {
        let keys = Arc::new(FullKeys::default());
        keys.remember(7, 1_000);
        assert!(keys.is_full(7, 999));
        assert!(!keys.is_full(7, 1_000), "forgotten at its time");
        keys.remember(7, 1_000);
        keys.freed(7);
        assert!(!keys.is_full(7, 0), "a slot given back here");
        assert!(!keys.is_full(8, 0));
    }

    #[tokio::test]
    async fn a_give_back_wakes_the_keys_poller() {
        let keys = Arc::new(FullKeys::default());
        let poller = keys.poll(3);
        let woken = poller.notify.clone();
        keys.freed(3);
        tokio::time::timeout(std::time::Duration::from_secs(5), woken.notified())
            .await
            .expect("woken");
        drop(poller);
        assert!(keys.polled.lock().is_empty());
    }
}
