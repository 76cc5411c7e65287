//! One async lock per key, held across a Redis round trip, for keys that are being locked
//! right now only: a key's entry lives while someone holds or waits for it. Unlike a fixed
//! set of striped locks, two keys never wait on each other's call.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

const SHARDS: usize = 64;

/// A key's lock and how many hold or wait for it.
struct Entry {
    lock: Arc<tokio::sync::Mutex<()>>,
    users: usize,
}

pub struct KeyLocks {
    shards: [Mutex<HashMap<u64, Entry>>; SHARDS],
}

impl Default for KeyLocks {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl KeyLocks {
    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Entry>> {
        &self.shards[(key as usize) % SHARDS]
    }

    /// Waits until `key` is free, first come first served, and holds it until the guard
    /// is dropped (the guard owns its share of the locks: it can be moved into a task that
    /// finishes a call for a request gone meanwhile). A wait given up (the future dropped)
    /// leaves no entry behind.
    pub async fn lock(self: &Arc<Self>, key: u64) -> KeyGuard {
        let lock = {
            let mut shard = self.shard(key).lock();
            let entry = shard.entry(key).or_insert_with(|| Entry {
                lock: Arc::default(),
                users: 0,
            });
            entry.users += 1;
            entry.lock.clone()
        };
        // Made before waiting, so a dropped wait counts itself out too.
        let mut guard = KeyGuard {
            locks: self.clone(),
            key,
            held: None,
        };
        guard.held = Some(lock.lock_owned().await);
        guard
    }

    /// Keys with an entry (held or waited for).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

pub struct KeyGuard {
    locks: Arc<KeyLocks>,
    key: u64,
    held: Option<OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut shard = self.locks.shard(self.key).lock();
        if let Some(entry) = shard.get_mut(&self.key) {
            entry.users -= 1;
            if entry.users == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::paused_runtime;

    #[test]
    fn keys_of_one_shard_do_not_wait_on_each_other() {
        paused_runtime().block_on(async {
            let locks = Arc::new(KeyLocks::default());
            let first = locks.lock(7).await;
            // Same shard (7 + 64), another key: at once.
            let other = tokio::time::timeout(Duration::from_secs(1), locks.lock(7 + SHARDS as u64))
                .await
                .expect("another key is not held up");
            assert_eq!(locks.len(), 2);
            drop(other);
            drop(first);
            assert_eq!(locks.len(), 0, "entries go with their last holder");
        });
    }

    #[test]
    fn one_key_is_held_by_one_at_a_time_in_order() {
        paused_runtime().block_on(async {
            let locks = Arc::new(KeyLocks::default());
            let order = Arc::new(Mutex::new(Vec::new()));
            let first = locks.lock(3).await;
            let mut waiters = Vec::new();
            for i in 0..3 {
                let (locks, order) = (locks.clone(), order.clone());
                waiters.push(tokio::spawn(async move {
                    let _held = locks.lock(3).await;
                    order.lock().push(i);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }));
                // Each waiter queued before the next is spawned.
                tokio::task::yield_now().await;
            }
            assert!(order.lock().is_empty(), "nobody gets a held key");
            drop(first);
            for w in waiters {
                w.await.expect("waiter");
            }
            assert_eq!(*order.lock(), vec![0, 1, 2]);
            assert_eq!(locks.len(), 0);
        });
    }

    #[test]
    fn a_wait_given_up_leaves_nothing_behind() {
        paused_runtime().block_on(async {
            let locks = Arc::new(KeyLocks::default());
            let first = locks.lock(5).await;
            let waiter = {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let _held = locks.lock(5).await;
                })
            };
            tokio::task::yield_now().await;
            assert_eq!(locks.len(), 1);
            waiter.abort();
            let _ = waiter.await;
            drop(first);
            assert_eq!(locks.len(), 0, "the cancelled waiter counted itself out");
            // And the key is free.
            let again = tokio::time::timeout(Duration::from_secs(1), locks.lock(5)).await;
            assert!(again.is_ok());
        });
    }
}
