//! The Redis side of leased slices: a request whose tiers include leased ones is decided
//! from this gateway's slices where they have units and in Redis otherwise, all or
//! nothing; a key without units fetches a new slice (one fetch at a time per key), and
//! slices left idle are given back.

use std::sync::Arc;

use arrayvec::ArrayVec;

use super::script::give_back_slice;
use super::sizing::Ask;
use super::{Slices, Taken};
use crate::limit::{Tier, Verdict, MAX_DECISIONS};
use crate::metrics::Metrics;
use crate::store::error::StoreError;
use crate::store::rate::redis::{check, ChargeTimes, Decided};
use crate::store::rate::remote::Remote;
use crate::store::redis::RedisStore;
use crate::store::tiers::RateTier;

/// The debt at which `evaluate` reports what a tier served from a slice has left: the
/// smaller of the slice and what Redis last said.
fn leased_debt(tier: &Tier, units: u64, got: &Taken) -> u64 {
    let (t, tau) = (tier.quota.interval_ns(), tier.quota.tolerance_ns());
    let left = got.local.min(got.store);
    tau.saturating_sub(left.saturating_add(units).saturating_mul(t))
}

/// The key's debt (TAT − now) that a refusal of `units` with `wait` tells: `wait` is how
/// far the TAT is beyond the room for `units`.
pub(super) fn debt_from_wait(tier: &Tier, units: u64, wait: u64) -> u64 {
    let (t, tau) = (tier.quota.interval_ns(), tier.quota.tolerance_ns());
    wait.saturating_add(tau)
        .saturating_sub(units.saturating_mul(t))
}

/// What a leased tier contributes to the verdict.
pub(super) enum Leased {
    Taken(Taken),
    Refused { wait: u64 },
}

/// Units taken from slices for one request.
type TakenUnits = ArrayVec<(u64, u64, Taken), MAX_DECISIONS>;

/// The units a request took from slices, given back unless it is admitted: refused,
/// failed, or dropped mid-check (its client gone: the request's future stops at an
/// await, and units taken before it were otherwise lost to the slice, charged in Redis
/// and never used).
struct Untaken<'s> {
    slices: &'s Slices,
    units: TakenUnits,
}

impl<'s> Untaken<'s> {
    fn new(slices: &'s Slices) -> Self {
        Self {
            slices,
            units: TakenUnits::new(),
        }
    }

    /// The request is admitted: its units are used.
    fn keep(mut self) -> TakenUnits {
        std::mem::take(&mut self.units)
    }
}

impl Drop for Untaken<'_> {
    fn drop(&mut self) {
        for (key, units, got) in &self.units {
            self.slices.untake(*key, *units, got);
        }
    }
}

impl Slices {
    /// Decides a request some of whose tiers are leased: those from this gateway's slices
    /// where they have units, the others in Redis, all or nothing. A leased key without
    /// units gets a slice of its own only when the request makes no other call: a key too
    /// cold for a slice is decided in Redis like an exact tier, and once one call is made,
    /// every key without units rides in it (a fetch of its own would be a second round
    /// trip for this request).
    ///
    /// The clock is read again right before each unit is taken: a unit's deadline is a
    /// real time, and a `now` from before a wait (another tier's fetch, the fetch lock)
    /// would let units be spent after their slots began.
    pub async fn check(
        self: &Arc<Self>,
        remote: &Remote<'_>,
        tiers: &[RateTier],
        cost: u64,
        times: &mut ChargeTimes,
    ) -> Result<Verdict, StoreError> {
        let mut decided = Decided::default();
        // Given back when this returns refused or failed, or is dropped before it returns.
        let mut untaken = Untaken::new(self);
        let in_call = self
            .take_or_fetch(remote, tiers, cost, &mut decided, &mut untaken.units)
            .await;
        let now = remote.clock.now_ns();
        let verdict = match check(remote, tiers, (cost, now), decided, times).await {
            Ok(verdict) => verdict,
            Err(e) => {
                // Let through unchecked: the slices' units are used, as the charges of
                // the groups that answered are.
                if remote.keeps_answered {
                    untaken.keep();
                }
                return Err(e);
            }
        };
        if !verdict.admitted {
            return Ok(verdict);
        }
        let taken = untaken.keep();
        for &i in &in_call {
            let tier = &tiers[i].tier;
            self.note_use(tier.key, tier.cost(cost), now);
        }
        // A key with nothing left here nor, as last heard, in Redis: the next request
        // would be refused; the requests racing behind this one are refused locally (see
        // `RefusalCache::record`), not each in a fetch.
        for (key, _, got) in &taken {
            if got.local == 0 && got.store == 0 {
                remote.refusals.remember(*key, got.p);
            }
        }
        Ok(verdict)
    }

    /// Takes units for the leased tiers into `decided` and `taken`, from slices or by
    /// fetching new ones (a fetch that fails is noted in `decided`); returns the leased
    /// tiers left to ride in the request's Redis call.
    async fn take_or_fetch(
        self: &Arc<Self>,
        remote: &Remote<'_>,
        tiers: &[RateTier],
        cost: u64,
        decided: &mut Decided,
        taken: &mut TakenUnits,
    ) -> ArrayVec<usize, MAX_DECISIONS> {
        let mut missed: ArrayVec<(usize, Ask), MAX_DECISIONS> = ArrayVec::new();
        let mut call_anyway = false;
        for (i, t) in tiers.iter().enumerate() {
            if !t.leased {
                call_anyway = true;
                continue;
            }
            if earlier(tiers, i).is_some() {
                continue; // decided with the key's first occurrence
            }
            let units = key_units(tiers, i, cost);
            let now = remote.clock.now_ns();
            match self.take(&t.tier, units, now) {
                Some(got) => {
                    decided.debts.push((i, leased_debt(&t.tier, units, &got)));
                    taken.push((t.tier.key, units, got));
                }
                None => {
                    let ask = self.next_ask(t.tier.key, now, &t.tier.quota);
                    call_anyway |= ask.want <= units;
                    missed.push((i, ask));
                }
            }
        }
        if call_anyway && remote.store.is_cluster() {
            call_anyway = one_tag(tiers, &missed);
        }
        // Keys decided in Redis with the exact tiers: their use sizes their first slice.
        let mut in_call = ArrayVec::new();
        for (i, _) in missed {
            if call_anyway {
                in_call.push(i);
                continue;
            }
            let (tier, units) = (&tiers[i], key_units(tiers, i, cost));
            match self.fetch(remote, tier, units).await {
                // Its node is down: the tier is let through unread (a debt of none), as
                // an exact tier's failed group is, and the failure is the answer only if
                // no other tier refuses — a client steering a leased key onto a dead
                // master does not skip the tiers the healthy ones hold.
                Err(e) => {
                    decided.failed.get_or_insert(e);
                    decided.debts.push((i, 0));
                }
                Ok(Leased::Taken(got)) => {
                    decided
                        .debts
                        .push((i, leased_debt(&tier.tier, units, &got)));
                    taken.push((tier.tier.key, units, got));
                }
                Ok(Leased::Refused { wait }) => {
                    decided
                        .debts
                        .push((i, debt_from_wait(&tier.tier, units, wait)));
                    decided.refused = true;
                    break;
                }
            }
        }
        decide_repeats(tiers, decided, &mut in_call);
        in_call
    }

    /// Gives back the slices idle for `IDLE_NS` (all of them with `all`: reload,
    /// shutdown) and updates the held-units gauge; first, a data loss Redis was seen to
    /// have had since the last turn makes every slice serve nothing more.
    pub async fn give_back(&self, remote: &RedisStore, metrics: &Metrics, now: u64, all: bool) {
        self.follow_losses(remote.losses());
        let (returns, held) = self.retire_idle(now, all);
        metrics
            .lease_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        let total = returns.len();
        let mut given = 0;
        // One call after another, each bounded by the store's timeout, the whole by
        // `give_back_bound`: a Redis that holds every call (paused, black-holed) would
        // otherwise hold a reload (and the reloads queued behind it) or a shutdown for a
        // timeout per slice — hours for a full table. What is not given back in time
        // expires, as a dead gateway's slices do.
        let in_time = tokio::time::timeout(give_back_bound(remote), async {
            for back in returns {
                give_back_one(remote, metrics, &back).await;
                given += 1;
            }
        })
        .await;
        if in_time.is_err() {
            tracing::warn!(
                left = total - given,
                of = total,
                "slices not given back in time (the store is not answering); their units expire"
            );
        }
    }
}

/// How long giving back slices may take in all: four store timeouts, five seconds at least.
fn give_back_bound(remote: &RedisStore) -> std::time::Duration {
    (remote.timeout() * 4).max(std::time::Duration::from_secs(5))
}

/// Gives back one slice (tried twice: a connection that broke meanwhile is reconnected by
/// the manager on the next call; at shutdown the workers, one of whose runtimes may drive
/// the connection, are kept running until this is done: `Gateway::shutdown`).
async fn give_back_one(remote: &RedisStore, metrics: &Metrics, back: &super::Return) {
    let mut given = give_back_slice(remote, &back.redis_key, back.ns, &back.end).await;
    if given.is_err() {
        given = give_back_slice(remote, &back.redis_key, back.ns, &back.end).await;
    }
    match given {
        Ok(()) => {
            metrics.lease_calls("given_back");
            metrics.lease_units("given_back", back.units);
        }
        Err(e) => {
            tracing::debug!(error = %e, "a slice could not be given back; its units expire")
        }
    }
}

/// The leased tier before `i` on the same key, if the request names the key again (the
/// same descriptor twice in a rate limit service call).
fn earlier(tiers: &[RateTier], i: usize) -> Option<usize> {
    let key = tiers[i].tier.key;
    tiers[..i]
        .iter()
        .position(|t| t.leased && t.tier.key == key)
}

/// The units a leased key's first occurrence at `i` takes: its own and every later
/// occurrence's, in one take. Taken one occurrence at a time, the verdict would read the
/// key's debt as the last take left it and count the earlier units twice — a request the
/// slice covers refused, and the first take's units lost.
fn key_units(tiers: &[RateTier], i: usize, cost: u64) -> u64 {
    let key = tiers[i].tier.key;
    tiers[i..]
        .iter()
        .filter(|t| t.leased && t.tier.key == key)
        .fold(0u64, |sum, t| sum.saturating_add(t.tier.cost(cost)))
}

/// A repeated leased key's later occurrences, decided with its first: the same debt (the
/// key's before the request, which the verdict adds each occurrence's units to), or a
/// ride in the same Redis call.
fn decide_repeats(
    tiers: &[RateTier],
    decided: &mut Decided,
    in_call: &mut ArrayVec<usize, MAX_DECISIONS>,
) {
    for j in 0..tiers.len() {
        let Some(first) = tiers[j].leased.then(|| earlier(tiers, j)).flatten() else {
            continue;
        };
        if let Some(&(_, debt)) = decided.debts.iter().find(|(i, _)| *i == first) {
            decided.debts.push((j, debt));
        } else if in_call.contains(&first) {
            in_call.push(j);
        }
    }
}

/// On a Cluster a call spanning several hash tags is rolled back group by group when a
/// later group refuses, by subtracting its increments: a leased key must never be in such
/// a call, or a slice another gateway took meanwhile would be moved under its slots.
/// Leased keys ride only in a call of one group: whether the exact tiers and the `missed`
/// leased ones share one tag.
fn one_tag(tiers: &[RateTier], missed: &[(usize, Ask)]) -> bool {
    let mut tags = tiers
        .iter()
        .enumerate()
        .filter(|(i, t)| !t.leased || missed.iter().any(|(m, _)| m == i))
        .map(|(_, t)| t.redis.as_ref().map(|k| k.tag.as_str()));
    let first = tags.next();
    tags.all(|t| Some(t) == first)
}
