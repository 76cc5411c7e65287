//! Settling a reservation once the actual cost is known: the difference to what was
//! charged at admission is owed (a debt later requests wait off) or given back (at most
//! what of this request's reservation is still ahead of now), on the tier's own key,
//! with the `T` of the config that admitted the request. A body metered as it streams
//! draws its units ahead (`draw`), within the key's debt bound.

use std::sync::Arc;

use crate::config::Route;
use crate::config::{Policy, Settle, MAX_SETTLED_DEBT_NS};
use crate::limit::calendar;
use crate::limit::settle::{settle, Adjustment};
use crate::limit::{TatTable, Verdict};
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;
use crate::store::tiers::RequestTiers;
use smallvec::SmallVec;

/// One admitted tier whose cost is settled later.
#[derive(Debug, Clone)]
pub struct PendingSettle {
    /// The policy (its settle settings and name).
    pub policy: Arc<Policy>,
    /// The tier's index among the request's rate tiers (for its headers).
    pub tier: usize,
    /// Its policy's position in the route (for its metrics).
    pub position: usize,
    /// The key the tier was decided on (its own or its overflow key).
    pub key: u64,
    /// Its Redis key, when Redis decided it; `None` when the local store did.
    pub redis_key: Option<String>,
    /// `T` and `τ` of the admitting config (the key's own, with an override), in ns.
    pub t_ns: u64,
    pub tau_ns: u64,
    /// Units charged at admission.
    pub reserve: u64,
    /// Units a settle that learns nothing falls back to: the reserve as written (or the
    /// route's cost), even where the key's burst cut what was charged; a quote's reserve.
    pub fallback: u64,
    /// Units drawn since, as the body streamed (bytes sources).
    pub drawn: u64,
    /// Of those, the units the key's store never charged: it failed the draw, and
    /// `on_error = "allow"` granted it or the local table did (`"local"`). They cover
    /// the body, and no refund gives them back (it would come out of the key's real
    /// usage).
    pub unchecked: u64,
    /// How far the TAT was ahead of now right after the last charge (the reservation, or
    /// the latest draw), and when (local clock): what may be refunded shrinks as time
    /// passes.
    pub ahead_ns: u64,
    pub admitted_at: u64,
    /// A calendar quota's window: its end on the local clock (its TAT is measured from
    /// it, and nothing it reserved expires with time) and its bounds for Redis.
    pub window: Option<(u64, crate::limit::calendar::Bounds)>,
    /// A priced policy: the row of its table the request was quoted on.
    pub row: Option<u32>,
    /// Its quote had no bound: a usage that never comes settles at `max_cost`.
    pub unbounded: bool,
    /// Where resets stood before the decision ([`ResetMarks`]): the local store's for a
    /// key in memory, Redis's data losses for a key there. A refund after its key's
    /// reset gives nothing back, as the key's usage is then the reset's.
    pub reset_mark: u64,
    /// The Redis server's time at the charge (µs since the Unix epoch, estimated early:
    /// `RedisStore::server_unix_us_early`), which the settle script compares with the
    /// key's reset marker; 0 when unknown (any marker refuses the refund).
    pub charged_us: u64,
}

/// Where resets stood before a request's decision: the local store's count of key
/// resets, and the Redis store's data losses seen (a restart or failover lost keys, and a
/// refund would come out of the usage made since).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResetMarks {
    pub local: u64,
    pub remote: u64,
}

impl PendingSettle {
    pub fn settle(&self) -> &Settle {
        self.policy
            .rate()
            .and_then(|r| r.settle.as_ref())
            .expect("a pending settle belongs to a settled rate policy")
    }

    /// This tier as this gateway's `n`-th of its limit (`Quota::share`): what the local
    /// table decides on while Redis is out (`on_error = "local"`), a unit costing `n`
    /// times as much of it.
    pub fn on_share(&self, n: u64) -> Self {
        let mut shared = self.clone();
        // Its `T` and `τ` as a quota of one unit per `T`, shared as any quota is.
        let burst = self.tau_ns / self.t_ns.max(1);
        if let Ok(quota) = crate::limit::Quota::new(1, self.t_ns, burst) {
            let quota = quota.share(n);
            (shared.t_ns, shared.tau_ns) = (quota.interval_ns(), quota.tolerance_ns());
        }
        shared
    }

    /// Units the body may move before it draws again: the reservation and what was drawn
    /// while streaming.
    pub fn covered(&self) -> u64 {
        self.reserve.saturating_add(self.drawn)
    }

    /// Units charged to the key so far: those covered, less those let through unchecked.
    pub fn charged(&self) -> u64 {
        self.covered().saturating_sub(self.unchecked)
    }

    /// The TAT may be at most this far ahead of now while the body streams: the burst,
    /// and `max_debt` beyond it (bytes sources).
    pub fn bound_ns(&self) -> u64 {
        self.settle().bound_ns(self.tau_ns, self.t_ns)
    }

    /// `units` were drawn at `now`, leaving the key's TAT `ahead_ns` ahead.
    pub fn drew(&mut self, units: u64, ahead_ns: u64, now: u64) {
        self.drawn = self.drawn.saturating_add(units);
        self.ahead_ns = ahead_ns;
        self.admitted_at = now;
    }

    /// `units` were let through without a charge to the key's store (it failed; `on_error`
    /// allowed them or drew them locally): they cover the body, and the key's TAT is as
    /// it was.
    pub fn let_through(&mut self, units: u64) {
        self.drawn = self.drawn.saturating_add(units);
        self.unchecked = self.unchecked.saturating_add(units);
    }

    /// What the key's TAT is measured from when settling at `now`: now for a rate; for a
    /// quota the end of the window holding now — the admitting window's, or the next one's
    /// once it has ended (then `true`: nothing reserved in it comes back).
    fn basis(&self, now: u64) -> (u64, bool) {
        match self.window {
            None => (now, false),
            Some((end, _)) if now < end => (end, false),
            Some((end, bounds)) => (next_end(end, &bounds), true),
        }
    }

    /// The window a quota's settle is measured in at `now` (its start and end on the
    /// monotonic timeline): the admitting one, or the next once it has ended.
    fn window_at(&self, now: u64) -> Option<(u64, u64)> {
        let (end, bounds) = self.window?;
        let len = |b: &crate::limit::calendar::Bounds| {
            u64::try_from(b.end.saturating_sub(b.start))
                .unwrap_or(0)
                .saturating_mul(crate::limit::gcra::NANOS_PER_SEC)
        };
        Some(match now < end {
            true => (end.saturating_sub(len(&bounds)), end),
            false => (end, next_end(end, &bounds)),
        })
    }

    /// Places a Redis-decided quota's settle in the window Redis charged, at the server's
    /// `server_unix_ns` when it decided: the tiers' window was worked out on this
    /// gateway's clock when they were filled, and a charge made across a boundary from
    /// it (filled before midnight, charged after; or Redis's clock behind) was refused
    /// its refund as ended, or refunded into the next window. A neighbouring window is
    /// taken as long as the known one (a month's next may differ by days, which only
    /// moves when the window after it is judged ended).
    pub fn charged_on(&mut self, server_unix_ns: Option<u64>, clock: &dyn crate::clock::Clock) {
        let (Some(at), Some((_, b))) = (server_unix_ns, self.window) else {
            return;
        };
        let charged = b.holding(at);
        if charged != b {
            self.window = Some((clock.mono_ns_at(charged.end_at(at)), charged));
        }
    }

    /// Whether the window after the admitting one has ended too (a quota settled two or
    /// more windows late): its units were served windows ago, and the key's TAT, if any,
    /// is a later window's usage this settle cannot place itself against — settling on
    /// the next window's end, already past, read that usage as another calendar's and
    /// overwrote it with the debt alone. Nothing is settled then.
    pub fn long_ended(&self, now: u64) -> bool {
        self.window
            .is_some_and(|(end, bounds)| now >= next_end(end, &bounds))
    }

    /// The most a settle may leave the key owing past its basis: a quota's usage stays
    /// below what would read as another calendar's TAT.
    fn max_debt_ns(&self) -> u64 {
        match self.window {
            None => MAX_SETTLED_DEBT_NS,
            Some(_) => MAX_SETTLED_DEBT_NS.min(calendar::CARRY_NS - 1),
        }
    }

    /// The change from what was charged to `units`, as seen at `now`; `None` when they
    /// are equal.
    fn adjustment(&self, units: u64, now: u64) -> Option<Adjustment> {
        let charged = self.charged();
        match units.cmp(&charged) {
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(Adjustment::Debt {
                ns: (units - charged).saturating_mul(self.t_ns),
            }),
            std::cmp::Ordering::Less => Some(Adjustment::Refund {
                ns: (charged - units).saturating_mul(self.t_ns),
                room_ns: match self.window {
                    // A quota's reservation does not run out with time: all of it may
                    // come back.
                    Some(_) => charged.saturating_mul(self.t_ns),
                    None => self
                        .ahead_ns
                        .saturating_sub(now.saturating_sub(self.admitted_at)),
                },
            }),
        }
    }
}

/// The end of the window after the one ending at `end` (on the monotonic timeline),
/// `bounds` being that window's.
fn next_end(end: u64, bounds: &crate::limit::calendar::Bounds) -> u64 {
    let next_ns = u64::try_from(bounds.next.saturating_sub(bounds.end))
        .unwrap_or(0)
        .saturating_mul(crate::limit::gcra::NANOS_PER_SEC);
    end.saturating_add(next_ns)
}

/// Settles `pending` at `units` in the process-local table, at `now`: the debt (TAT −
/// now; for a quota, TAT − its window's end: the units used) after.
pub fn settle_local(local: &MemoryStore, pending: &PendingSettle, units: u64, now: u64) -> u64 {
    if pending.long_ended(now) {
        return 0;
    }
    let (basis, ended) = pending.basis(now);
    let carried = |tat: u64| match pending.window {
        Some(_) => calendar::carried(tat, basis),
        None => tat,
    };
    let adjustment = match pending.adjustment(units, now) {
        // A reservation of a window that has ended gives nothing back to a later one.
        Some(Adjustment::Refund { .. }) if ended => None,
        adjustment => adjustment,
    };
    // The key's TAT is another calendar's (the policy's changed since admission): the
    // usage it holds is not this settle's to move.
    let window = pending.window_at(now);
    let foreign = |tat: u64| window.is_some_and(|w| calendar::foreign(tat, now, w));
    let Some(adjustment) = adjustment else {
        return carried(local.peek(pending.key)).saturating_sub(basis);
    };
    let max_debt = pending.max_debt_ns();
    let (prior, decision) = local.apply(pending.key, |tat| {
        let after = match foreign(tat) {
            true => tat,
            false => settle(carried(tat), basis, adjustment, max_debt),
        };
        crate::limit::Decision {
            admitted: after != tat,
            tat: after,
            remaining: 0,
            wait_ns: 0,
            delay_ns: 0,
            until_idle_ns: 0,
        }
    });
    let tat = if decision.admitted {
        decision.tat
    } else {
        carried(prior)
    };
    tat.saturating_sub(basis)
}

/// Settles `pending` at `units` on its Redis key `key`, on Redis's clock: the debt (TAT −
/// now) after, and whether a refund was held by the key's reset marker.
pub async fn settle_remote(
    remote: &RedisStore,
    key: &str,
    pending: &PendingSettle,
    units: u64,
    now: u64,
) -> Result<(u64, bool), StoreError> {
    let (op, ns, room) = match pending.adjustment(units, now) {
        None => ("refund", 0, 0),
        Some(Adjustment::Debt { ns }) => ("debt", ns, 0),
        Some(Adjustment::Refund { ns, room_ns }) => ("refund", ns, room_ns),
    };
    let mut call = SETTLE_SCRIPT.prepare_invoke();
    let window = pending
        .window
        .map(|(_, b)| b.script_arg())
        .unwrap_or_default();
    call.key(key);
    // A debt reads the key alone: sent with one key, it is served while its slot migrates
    // between Cluster nodes (a call naming a key that is not there, the marker almost
    // always, is refused TRYAGAIN then, and the debt was lost).
    if op == "refund" {
        call.key(super::reset::marker(key));
        if ns > 0 && remote.is_cluster() {
            // Once only: the Cluster client may send it again after a dropped connection.
            call.key(once(key));
        }
    }
    call.arg(op)
        .arg(ns)
        .arg(room)
        .arg(pending.max_debt_ns())
        .arg(window)
        .arg(pending.charged_us)
        .arg(once_ms(remote));
    let (debt, held): (i64, i64) = remote.invoke(&call).await?;
    Ok((
        u64::try_from(debt).map_err(|_| StoreError::Reply)?,
        held == 1,
    ))
}

/// A one-time key beside `key` (in its slot): a script given it runs its write once.
pub fn once(key: &str) -> String {
    format!("{key}:once:{}", crate::random::suffix())
}

/// How long a one-time key is kept (ms): ten store timeouts, and a second at least. The
/// client's retries (two, each bounded by the timeout, after a reconnect bounded by it
/// too) come within that even when the call that asked has given up (a key a refund: at
/// 10,000 refunds a second, 10,000 keys at once with the default timeout).
pub fn once_ms(remote: &RedisStore) -> u64 {
    u64::try_from(remote.timeout().as_millis().saturating_mul(10))
        .unwrap_or(u64::MAX)
        .max(1_000)
}

/// The admitted tiers of settled policies, to settle once the cost is known. `in_store`:
/// decided by the configured store (Redis keys apply), not by the local fallback, whose
/// decision was on this gateway's `share` of each limit (1/N: `Quota::share`), and so is
/// what it settles.
pub fn pending_settles(
    route: &Route,
    tiers: &RequestTiers,
    verdict: &Verdict,
    (now, marks): (u64, ResetMarks),
    (in_store, share): (bool, u64),
    settles: &mut SmallVec<[PendingSettle; 1]>,
) {
    for p in tiers.policies.iter() {
        let policy = &route.policies[p.position];
        let Some(settle) = policy.rate().and_then(|r| r.settle.as_ref()) else {
            continue;
        };
        for i in p.range.clone() {
            let (t, Some(outcome)) = (&tiers.rate[i], verdict.outcomes().get(i)) else {
                continue; // not decided (the store failed open)
            };
            if !outcome.decision.admitted {
                continue;
            }
            let redis_key = in_store
                .then(|| t.redis.as_ref().map(|k| k.key.clone()))
                .flatten();
            let quota = match in_store {
                true => t.tier.quota,
                false => t.tier.quota.share(share),
            };
            settles.push(PendingSettle {
                policy: policy.clone(),
                tier: i,
                position: p.position,
                key: outcome.key,
                reset_mark: match redis_key {
                    Some(_) => marks.remote,
                    None => marks.local,
                },
                redis_key,
                t_ns: quota.interval_ns(),
                tau_ns: quota.tolerance_ns(),
                reserve: t.tier.cost(route.cost),
                fallback: match (t.row, &settle.reserve) {
                    (Some(_), _) => t.tier.cost(route.cost),
                    (None, reserve) => reserve.map_or(route.cost, std::num::NonZeroU64::get),
                },
                drawn: 0,
                unchecked: 0,
                ahead_ns: outcome.decision.until_idle_ns,
                admitted_at: now,
                window: t.tier.window.zip(t.bounds),
                row: t.row,
                unbounded: t.unbounded,
                charged_us: 0,
            });
        }
    }
}

static SETTLE_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| super::script(include_str!("settle.lua")));
