//! `sync = "lease"`: the slices of keys' capacity this gateway holds, taken from Redis
//! ahead of use and admitted from without a round trip (`limit::slice` has the rules;
//! `protocol` the Redis side, `sizing` how big a slice is).
//! A key's first request, and a key that uses little, asks Redis every time (a slice of
//! one unit); a hot key gets slices sized to about 50 ms of its local traffic,
//! at most a quarter of its burst. Slices left idle are given back; so is every slice on
//! reload and shutdown.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

mod fetch;
pub mod protocol;
mod script;
mod sizing;

use crate::limit::slice::Slice;
use crate::limit::{Quota, Tier};
use crate::store::key_locks::KeyLocks;
use sizing::{Ask, SLICE_WINDOW_NS};
/// A slice unused for this long is given back.
pub const IDLE_NS: u64 = 200_000_000;
/// The use of a key without a slice is counted over windows of about this length.
const SEEN_WINDOW_NS: u64 = 4 * SLICE_WINDOW_NS;
/// Slices held at once; beyond, keys are decided one unit at a time and no new slice is
/// kept, so a flood of fresh keys cannot grow the table.
pub const MAX_SLICES: usize = 65_536;
const SHARDS: usize = 64;

/// One key's slice and how it has been used.
struct Held {
    /// Which slice this is: units are put back only into the slice they came from.
    id: u64,
    /// The numbers it was taken under.
    quota: Quota,
    /// The table's epoch when it was asked for: a slice of an older one serves nothing.
    epoch: u64,
    slice: Slice,
    redis_key: String,
    /// The TAT Redis stored for it: a give-back applies only while it is still that.
    end: String,
    /// Units Redis still had free after granting it.
    left: u64,
    last_use: u64,
    /// Units used since `since` (sizes the next slice).
    uses: u64,
    since: u64,
}

/// A leased key decided in Redis without a slice (too cold for one, or riding along in a
/// call the request made anyway): how much this gateway used it, to size its first slice.
struct Seen {
    uses: u64,
    since: u64,
    last_use: u64,
}

/// Units taken for one tier: what is left locally and, as last heard, in Redis.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub local: u64,
    pub store: u64,
    /// The slice they came from, and the last unit taken.
    pub slice: u64,
    pub last: u64,
    /// When the slice's reservation ends (local clock): the key's TAT is at least this.
    pub p: u64,
}

/// A slice to give back: its key, unused units and their time, and its end stamp.
pub struct Return {
    pub redis_key: String,
    pub units: u64,
    pub ns: u64,
    pub end: String,
}

pub struct Slices {
    shards: [Mutex<HashMap<u64, Held>>; SHARDS],
    /// Keys used without a slice, sharded the same way; at most [`MAX_SLICES`], forgotten
    /// once idle for [`IDLE_NS`].
    seen: [Mutex<HashMap<u64, Seen>>; SHARDS],
    seen_count: AtomicUsize,
    /// One fetch at a time per key: concurrent requests for a key with no usable slice
    /// wait for the one call instead of each making their own.
    fetches: Arc<KeyLocks>,
    /// Slices held, kept beside the shards so sizing never locks them all.
    count: AtomicUsize,
    next_id: AtomicU64,
    /// Moved when the state the slices were taken from may have changed (a key reset, an
    /// override changed, here or elsewhere: `Limiter::forget_refusals`; Redis lost data).
    epoch: AtomicU64,
    /// Redis's data losses seen so far (`RedisStore::losses`).
    losses_seen: AtomicU64,
}

impl Default for Slices {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
            seen: std::array::from_fn(|_| Mutex::default()),
            seen_count: AtomicUsize::new(0),
            fetches: Arc::default(),
            count: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            losses_seen: AtomicU64::new(0),
        }
    }
}

impl Slices {
    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Held>> {
        &self.shards[(key as usize) % SHARDS]
    }

    /// Takes `cost` units of `tier`'s slice at `now`, when it has them. A slice taken
    /// under other numbers (an override set or removed since) or before the table's epoch
    /// moved serves nothing: the next fetch gives it back.
    pub fn take(&self, tier: &Tier, cost: u64, now: u64) -> Option<Taken> {
        let key = tier.key;
        let epoch = self.epoch();
        let mut shard = self.shard(key).lock();
        let held = shard.get_mut(&key)?;
        if held.quota != tier.quota || held.epoch != epoch {
            return None;
        }
        let local = held.slice.take(cost, now)?;
        held.last_use = now;
        held.uses += cost;
        Some(Taken {
            local,
            store: held.left,
            slice: held.id,
            last: held.slice.last_taken(),
            p: held.slice.p,
        })
    }

    /// Puts `cost` units taken from `key`'s slice `slice` back (a later tier refused);
    /// when that slice was replaced meanwhile, they are simply not used.
    pub fn untake(&self, key: u64, cost: u64, taken: &Taken) {
        if let Some(held) = self.shard(key).lock().get_mut(&key) {
            if held.id == taken.slice {
                held.slice.untake(cost, taken.last);
            }
        }
    }

    /// Empties `key`'s slice before a fetch: the units to give back, and what to ask
    /// for next. The record stays (its units gone), so requests arriving during the fetch
    /// still see a key in use and wait for the fetch instead of each asking Redis.
    fn retire(
        &self,
        key: u64,
        now: u64,
        quota: &Quota,
        held_total: usize,
    ) -> (Option<Return>, Ask) {
        let (back, sizing) = match self.shard(key).lock().get_mut(&key) {
            Some(held) => {
                let back = held.slice.give_back(now).map(|b| Return {
                    redis_key: std::mem::take(&mut held.redis_key),
                    units: held.slice.usable(now),
                    ns: b.ns,
                    end: std::mem::take(&mut held.end),
                });
                held.slice.drain();
                (back, Some((held.uses, held.since)))
            }
            None => (None, None),
        };
        let sizing = sizing.or_else(|| {
            self.seen_shard(key)
                .lock()
                .get(&key)
                .map(|s| (s.uses, s.since))
        });
        let ask = match sizing {
            Some((uses, since)) if held_total < MAX_SLICES => {
                Ask::sized(uses, now.saturating_sub(since), quota)
            }
            _ => Ask::ONE,
        };
        (back, ask)
    }

    fn seen_shard(&self, key: u64) -> &Mutex<HashMap<u64, Seen>> {
        &self.seen[(key as usize) % SHARDS]
    }

    /// What a slice of `key` would be asked for now (nothing is taken).
    fn next_ask(&self, key: u64, now: u64, quota: &Quota) -> Ask {
        if self.len() >= MAX_SLICES {
            return Ask::ONE;
        }
        if let Some(h) = self.shard(key).lock().get(&key) {
            return Ask::sized(h.uses, now.saturating_sub(h.since), quota);
        }
        match self.seen_shard(key).lock().get(&key) {
            Some(s) => Ask::sized(s.uses, now.saturating_sub(s.since), quota),
            None => Ask::ONE,
        }
    }

    /// Records `units` of `key` used at `now` without a slice (decided in Redis).
    fn note_use(&self, key: u64, units: u64, now: u64) {
        if let Some(h) = self.shard(key).lock().get_mut(&key) {
            h.uses += units;
            h.last_use = now;
            return;
        }
        let mut seen = self.seen_shard(key).lock();
        if let Some(s) = seen.get_mut(&key) {
            if now.saturating_sub(s.since) > SEEN_WINDOW_NS {
                // Sized from recent traffic only: a key whose rate jumps gets a slice as
                // soon as the window shows it, not once its whole history averages it.
                s.uses = 0;
                s.since = s.last_use;
            }
            s.uses += units;
            s.last_use = now;
        } else if self.seen_count.load(Ordering::Relaxed) < MAX_SLICES {
            seen.insert(
                key,
                Seen {
                    uses: units,
                    since: now,
                    last_use: now,
                },
            );
            self.seen_count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn install(&self, key: u64, mut held: Held) -> u64 {
        held.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let id = held.id;
        // Counted under the shard's lock, as removals are: the count never dips below
        // what the shards hold.
        let mut shard = self.shard(key).lock();
        if shard.insert(key, held).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        drop(shard);
        if self.seen_shard(key).lock().remove(&key).is_some() {
            self.seen_count.fetch_sub(1, Ordering::Relaxed);
        }
        id
    }

    /// Every slice held now serves nothing more (see [`Slices::epoch`]).
    pub fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Every slice serves nothing more once Redis is seen to have lost data (a restart
    /// without persistence, a fail-over to a replica that lagged): they were carved from
    /// state that is gone, and spent on top of the fresh burst Redis now grants, the fleet
    /// would admit a burst more than the limit. `losses`: `RedisStore::losses`.
    pub fn follow_losses(&self, losses: u64) {
        if self.losses_seen.swap(losses, Ordering::Relaxed) != losses {
            self.invalidate();
        }
    }

    /// The table's epoch: a slice asked for under an older one serves nothing.
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Slices held now.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the slices idle since before `now − IDLE_NS` (or all, with `all`) and
    /// those used up, and returns what to give back. A used-up slice of a key still in
    /// use leaves its record of uses, so the key's next slice is sized as before. Also
    /// counts the usable units still held (of slices that still serve).
    pub fn retire_idle(&self, now: u64, all: bool) -> (Vec<Return>, u64) {
        let epoch = self.epoch();
        let mut out = Vec::new();
        let mut held_units = 0;
        let mut still_used = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            let idle: Vec<u64> = shard
                .iter()
                .filter(|(_, h)| {
                    all || now.saturating_sub(h.last_use) >= IDLE_NS || h.slice.usable(now) == 0
                })
                .map(|(k, _)| *k)
                .collect();
            for key in idle {
                let Some(held) = shard.remove(&key) else {
                    continue;
                };
                self.count.fetch_sub(1, Ordering::Relaxed);
                if !all && now.saturating_sub(held.last_use) < IDLE_NS {
                    still_used.push((key, held.uses, held.since, held.last_use));
                }
                if let Some(back) = give_back(held, now) {
                    out.push(back);
                }
            }
            held_units += (shard.values())
                .filter(|h| h.epoch == epoch)
                .map(|h| h.slice.usable(now))
                .sum::<u64>();
        }
        for (key, uses, since, last_use) in still_used {
            let mut seen = self.seen_shard(key).lock();
            if self.seen_count.load(Ordering::Relaxed) < MAX_SLICES
                && seen
                    .insert(
                        key,
                        Seen {
                            uses,
                            since,
                            last_use,
                        },
                    )
                    .is_none()
            {
                self.seen_count.fetch_add(1, Ordering::Relaxed);
            }
        }
        for seen in &self.seen {
            let mut seen = seen.lock();
            let before = seen.len();
            seen.retain(|_, s| !all && now.saturating_sub(s.last_use) < IDLE_NS);
            self.seen_count
                .fetch_sub(before - seen.len(), Ordering::Relaxed);
        }
        (out, held_units)
    }
}

fn give_back(held: Held, now: u64) -> Option<Return> {
    let back = held.slice.give_back(now)?;
    Some(Return {
        redis_key: held.redis_key,
        units: held.slice.usable(now),
        ns: back.ns,
        end: held.end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const MS: u64 = 1_000_000;

    /// `limit` a second, `burst` at once: the quota the lease tests (sizing's too) use.
    pub(super) fn quota(limit: u64, burst: u64) -> Quota {
        Quota::new(limit, 1_000 * MS, burst).expect("quota")
    }

    #[test]
    fn a_key_without_a_slice_is_sized_from_its_recent_use() {
        let slices = Slices::default();
        let q = quota(1_000_000, 1_000_000);
        let mut now = 0;
        // An hour at 30 a second: about one use in 50 ms, no slice.
        for _ in 0..30 * 3600 {
            slices.note_use(7, 1, now);
            now += 33 * MS;
        }
        assert_eq!(slices.next_ask(7, now, &q).want, 1);
        // Then 5,000 a second: within a window the slice is sized from that.
        for _ in 0..1_000 {
            slices.note_use(7, 1, now);
            now += MS / 5;
        }
        let ask = slices.next_ask(7, now, &q);
        assert!(ask.want >= 100, "{ask:?}");
    }
}
