//! `sync = "lease"`: the slices of keys' capacity this gateway holds, taken from Redis
//! ahead of use and admitted from without a round trip (`limit::slice` has the rules).
//! A key's first request, and a key that uses little, asks Redis every time (a slice of
//! one unit); a hot key gets slices sized to about [`SLICE_WINDOW`] of its local traffic,
//! at most a quarter of its burst. Slices left idle are given back; so is every slice on
//! reload and shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use arrayvec::ArrayVec;

use super::key_locks::KeyLocks;
use super::redis::{Decided, RedisStore, SliceAnswer, SliceAsk};
use super::{Limiter, StoreError};
use crate::key::RedisKey;
use crate::limit::slice::Slice;
use crate::limit::{Quota, Tier, Verdict, MAX_DECISIONS};

/// How much of a key's local traffic one slice is sized to carry.
pub const SLICE_WINDOW_NS: u64 = 50_000_000;
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
    fetches: KeyLocks,
    /// Slices held, kept beside the shards so sizing never locks them all.
    count: AtomicUsize,
    next_id: AtomicU64,
}

impl Default for Slices {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
            seen: std::array::from_fn(|_| Mutex::default()),
            seen_count: AtomicUsize::new(0),
            fetches: KeyLocks::default(),
            count: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slices {
    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Held>> {
        &self.shards[(key as usize) % SHARDS]
    }

    /// Takes `cost` units of `tier`'s slice at `now`, when it has them. A slice taken
    /// under other numbers (an override set or removed since) serves nothing: the next
    /// fetch gives it back.
    pub fn take(&self, tier: &Tier, cost: u64, now: u64) -> Option<Taken> {
        let key = tier.key;
        let mut shard = lock(self.shard(key));
        let held = shard.get_mut(&key)?;
        if held.quota != tier.quota {
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
        if let Some(held) = lock(self.shard(key)).get_mut(&key) {
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
        let (back, sizing) = match lock(self.shard(key)).get_mut(&key) {
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
            lock(self.seen_shard(key))
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
        if let Some(h) = lock(self.shard(key)).get(&key) {
            return Ask::sized(h.uses, now.saturating_sub(h.since), quota);
        }
        match lock(self.seen_shard(key)).get(&key) {
            Some(s) => Ask::sized(s.uses, now.saturating_sub(s.since), quota),
            None => Ask::ONE,
        }
    }

    /// Records `units` of `key` used at `now` without a slice (decided in Redis).
    fn note_use(&self, key: u64, units: u64, now: u64) {
        if let Some(h) = lock(self.shard(key)).get_mut(&key) {
            h.uses += units;
            h.last_use = now;
            return;
        }
        let mut seen = lock(self.seen_shard(key));
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
        let mut shard = lock(self.shard(key));
        if shard.insert(key, held).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        drop(shard);
        if lock(self.seen_shard(key)).remove(&key).is_some() {
            self.seen_count.fetch_sub(1, Ordering::Relaxed);
        }
        id
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
    /// counts the usable units still held.
    pub fn retire_idle(&self, now: u64, all: bool) -> (Vec<Return>, u64) {
        let mut out = Vec::new();
        let mut held_units = 0;
        let mut still_used = Vec::new();
        for shard in &self.shards {
            let mut shard = lock(shard);
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
            held_units += shard.values().map(|h| h.slice.usable(now)).sum::<u64>();
        }
        for (key, uses, since, last_use) in still_used {
            let mut seen = lock(self.seen_shard(key));
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
            let mut seen = lock(seen);
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

/// The next slice of a key: its size and how far ahead its slots should begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ask {
    want: u64,
    lead: u64,
}

impl Ask {
    /// A key's first request, or one with too little traffic to lease: exact.
    const ONE: Self = Self { want: 1, lead: 0 };

    /// Sized from `uses` units used locally over `elapsed`: the units a
    /// [`SLICE_WINDOW_NS`] of that traffic uses (at most a quarter of the burst), with the
    /// first slot placed as far ahead as serving them at that pace takes (at most a
    /// quarter of the burst's time), so none expires before its turn.
    fn sized(uses: u64, elapsed: u64, quota: &Quota) -> Self {
        let elapsed = elapsed.max(1);
        let per_window = u128::from(uses) * u128::from(SLICE_WINDOW_NS) / u128::from(elapsed);
        let want = u64::try_from(per_window)
            .unwrap_or(u64::MAX)
            .clamp(1, (quota.burst() / 4).max(1));
        // The last of `want` units is used about (want − 1) local gaps from now, and its
        // slot begins (want − 1)·T after the first: the lead covers the difference.
        let gap = elapsed / uses.max(1);
        let lead = (want - 1)
            .saturating_mul(gap.saturating_sub(quota.interval_ns()))
            .min(SLICE_WINDOW_NS)
            .min(quota.tolerance_ns() / 4);
        Self { want, lead }
    }
}

/// The debt at which `evaluate` reports what a tier served from a slice has left: the
/// smaller of the slice and what Redis last said.
fn leased_debt(tier: &Tier, units: u64, got: &Taken) -> u64 {
    let (t, tau) = (tier.quota.interval_ns(), tier.quota.tolerance_ns());
    let left = got.local.min(got.store);
    tau.saturating_sub(left.saturating_add(units).saturating_mul(t))
}

/// What a leased tier contributes to the verdict.
enum Leased {
    Taken(Taken),
    Refused { wait: u64 },
}

impl Limiter {
    /// Decides a request some of whose tiers (`leased`, a bit per tier) are leased: those
    /// from this gateway's slices where they have units, the others in Redis, all or
    /// nothing. A leased key without units gets a slice of its own only when the request
    /// makes no other call: a key too cold for a slice is decided in Redis like an exact
    /// tier, and once one call is made, every key without units rides in it (a fetch of
    /// its own would be a second round trip for this request).
    ///
    /// The clock is read again right before each unit is taken: a unit's deadline is a
    /// real time, and a `now` from before a wait (another tier's fetch, the fetch lock)
    /// would let units be spent after their slots began.
    pub(super) async fn check_leased(
        &self,
        remote: &RedisStore,
        tiers: &[Tier],
        keys: &[RedisKey],
        cost: u64,
        clock: &dyn crate::clock::Clock,
        leased: u32,
    ) -> Result<Verdict, StoreError> {
        let mut decided = Decided::default();
        let mut taken: ArrayVec<(u64, u64, Taken), MAX_DECISIONS> = ArrayVec::new();
        let untake = |taken: &ArrayVec<(u64, u64, Taken), MAX_DECISIONS>| {
            for (key, units, got) in taken {
                self.slices.untake(*key, *units, got);
            }
        };
        let mut missed: ArrayVec<(usize, Ask), MAX_DECISIONS> = ArrayVec::new();
        let mut call_anyway = false;
        for (i, tier) in tiers.iter().enumerate() {
            if leased & (1 << i) == 0 {
                call_anyway = true;
                continue;
            }
            let units = tier.cost(cost);
            let now = clock.now_ns();
            match self.slices.take(tier, units, now) {
                Some(got) => {
                    decided.debts.push((i, leased_debt(tier, units, &got)));
                    taken.push((tier.key, units, got));
                }
                None => {
                    let ask = self.slices.next_ask(tier.key, now, &tier.quota);
                    call_anyway |= ask.want <= units;
                    missed.push((i, ask));
                }
            }
        }
        // On a Cluster a call spanning several hash tags is rolled back group by group when a
        // later group refuses, by subtracting its increments: a leased key must never be in
        // such a call, or a slice another gateway took meanwhile would be moved under its
        // slots. Leased keys ride only in a call of one group.
        if call_anyway && remote.is_cluster() {
            let mut tags = tiers
                .iter()
                .enumerate()
                .filter(|(i, _)| leased & (1 << i) == 0 || missed.iter().any(|(m, _)| m == i))
                .map(|(i, _)| keys[i].tag.as_str());
            let first = tags.next();
            call_anyway = tags.all(|t| Some(t) == first);
        }
        // Keys decided in Redis with the exact tiers: their use sizes their first slice.
        let mut in_call: ArrayVec<usize, MAX_DECISIONS> = ArrayVec::new();
        for (i, _) in missed {
            if call_anyway {
                in_call.push(i);
                continue;
            }
            let (tier, units) = (&tiers[i], tiers[i].cost(cost));
            match self.fetch_slice(remote, tier, &keys[i], units, clock).await {
                Ok(Leased::Taken(got)) => {
                    decided.debts.push((i, leased_debt(tier, units, &got)));
                    taken.push((tier.key, units, got));
                }
                Ok(Leased::Refused { wait }) => {
                    let (t, tau) = (tier.quota.interval_ns(), tier.quota.tolerance_ns());
                    let debt = wait
                        .saturating_add(tau)
                        .saturating_sub(units.saturating_mul(t));
                    decided.debts.push((i, debt));
                    decided.refused = true;
                    break;
                }
                Err(e) => {
                    untake(&taken);
                    return Err(e);
                }
            }
        }
        let now = clock.now_ns();
        match remote.check_with(tiers, keys, cost, now, &decided).await {
            Ok(verdict) => {
                if verdict.admitted {
                    for &i in &in_call {
                        self.slices.note_use(tiers[i].key, tiers[i].cost(cost), now);
                    }
                    // A key with nothing left here nor, as last heard, in Redis: the next
                    // request would be refused; the requests racing behind this one are
                    // refused locally (see `RefusalCache::record`), not each in a fetch.
                    if let Some(refusals) = self.refusals() {
                        for (key, _, got) in &taken {
                            if got.local == 0 && got.store == 0 {
                                refusals.remember(*key, got.p);
                            }
                        }
                    }
                } else {
                    untake(&taken);
                }
                Ok(verdict)
            }
            Err(e) => {
                untake(&taken);
                Err(e)
            }
        }
    }

    /// Asks Redis for a slice of `tier`'s key, giving back what is left of the old one,
    /// and takes `units` from it.
    async fn fetch_slice(
        &self,
        remote: &RedisStore,
        tier: &Tier,
        key: &RedisKey,
        units: u64,
        clock: &dyn crate::clock::Clock,
    ) -> Result<Leased, StoreError> {
        let _one_fetch = self.slices.fetches.lock(tier.key).await;
        // Another request may have fetched one meanwhile, or been refused: over the limit,
        // the requests queued here are then refused without a call each.
        let now = clock.now_ns();
        if let Some(t) = self.slices.take(tier, units, now) {
            return Ok(Leased::Taken(t));
        }
        let refusals = self.refusals();
        if let Some(v) = refusals.and_then(|r| r.refuse(std::slice::from_ref(tier), now, units)) {
            return Ok(Leased::Refused { wait: v.wait_ns });
        }
        let (back, ask) = self
            .slices
            .retire(tier.key, now, &tier.quota, self.slices.len());
        let ask = SliceAsk {
            want: ask.want.max(units),
            need: units,
            lead: ask.lead,
        };
        let answer = remote
            .slice(
                &key.key,
                &tier.quota,
                ask,
                back.as_ref().map(|b| (b.ns, b.end.as_str())),
                now,
            )
            .await;
        let metrics = &self.metrics;
        match answer {
            Ok(SliceAnswer::Granted {
                granted,
                ahead,
                left,
                end,
            }) => {
                metrics.lease_calls("granted");
                metrics.lease_units("granted", granted);
                let mut slice = Slice::new(now, ahead, granted, tier.quota.interval_ns(), 0);
                let local = slice.take(units, now).ok_or(StoreError::Reply)?;
                // A full table takes no more: the request used what it was granted (one
                // request's worth, when full), and the key stays exact.
                let full = local == 0 && self.slices.len() >= MAX_SLICES;
                let id = if full {
                    0
                } else {
                    self.slices.install(
                        tier.key,
                        Held {
                            id: 0,
                            quota: tier.quota,
                            slice,
                            redis_key: key.key.clone(),
                            end,
                            left,
                            last_use: now,
                            uses: units,
                            since: now,
                        },
                    )
                };
                Ok(Leased::Taken(Taken {
                    local,
                    store: left,
                    slice: id,
                    last: units,
                    p: now.saturating_add(ahead),
                }))
            }
            Ok(SliceAnswer::Refused { wait }) => {
                metrics.lease_calls("refused");
                if let Some(refusals) = refusals {
                    // The key's TAT, as the refusal tells it: `wait` is how far it is
                    // beyond the room for `units`.
                    let (t, tau) = (tier.quota.interval_ns(), tier.quota.tolerance_ns());
                    let debt = wait
                        .saturating_add(tau)
                        .saturating_sub(units.saturating_mul(t));
                    refusals.remember(tier.key, now.saturating_add(debt));
                }
                Ok(Leased::Refused { wait })
            }
            Err(e) => {
                metrics.lease_calls("error");
                Err(e)
            }
        }
    }

    /// Gives back the slices idle for [`IDLE_NS`] (all of them with `all`: reload,
    /// shutdown) and updates the held-units gauge.
    pub async fn give_back_slices(&self, now: u64, all: bool) {
        let Some(remote) = self.remote() else {
            return;
        };
        let (returns, held) = self.slices.retire_idle(now, all);
        self.metrics
            .lease_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        for back in returns {
            let mut given = remote
                .give_back_slice(&back.redis_key, back.ns, &back.end)
                .await;
            if given.is_err() {
                // A connection that broke meanwhile is reconnected by the manager on the
                // next call. (At shutdown the workers, one of whose runtimes may drive the
                // connection, are kept running until this is done: `Gateway::shutdown`.)
                given = remote
                    .give_back_slice(&back.redis_key, back.ns, &back.end)
                    .await;
            }
            match given {
                Ok(()) => {
                    self.metrics.lease_calls("given_back");
                    self.metrics.lease_units("given_back", back.units);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "a slice could not be given back; its units expire")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn quota(limit: u64, burst: u64) -> Quota {
        Quota::new(limit, 1_000 * MS, burst).expect("quota")
    }

    #[test]
    fn a_key_served_slower_than_its_rate_gets_its_slots_ahead() {
        // 100 uses a second at this gateway, of a key allowed a million a second.
        let ask = Ask::sized(5, 50 * MS, &quota(1_000_000, 1_000_000));
        assert_eq!(ask.want, 5);
        assert_eq!(
            ask.lead,
            4 * (10 * MS - 1_000),
            "four gaps, less the slots' own spacing"
        );
    }

    #[test]
    fn a_key_served_at_its_rate_needs_no_lead_and_the_burst_caps_the_size() {
        // 1,000 uses a second of a key allowed 100 a second (T = 10 ms), burst 100.
        let ask = Ask::sized(50, 50 * MS, &quota(100, 100));
        assert_eq!(ask, Ask { want: 25, lead: 0 });
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

    #[test]
    fn the_lead_takes_at_most_a_quarter_of_the_burst() {
        // 500 uses a second of a key allowed 10,000 a second, burst 100 (τ = 10 ms).
        let q = quota(10_000, 100);
        let ask = Ask::sized(50, 100 * MS, &q);
        assert_eq!(ask.want, 25);
        assert_eq!(ask.lead, q.tolerance_ns() / 4);
        // A key used once in a long while stays exact.
        assert_eq!(Ask::sized(1, 10_000 * MS, &q), Ask::ONE);
    }
}
