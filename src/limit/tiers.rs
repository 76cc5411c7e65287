//! All of a request's tiers, decided with one `now`: admitted only if every enforcing
//! tier admits; otherwise every tier that moved is rolled back, so a denial leaves no trace.

use std::num::NonZeroU64;

use smallvec::SmallVec;

use super::gcra::{Decision, Quota};
use forced::forced_into;
pub use forced::MAX_FORCED_LEAD_NS;

/// Most tiers one route may name; keeps a request's verdict on the stack.
pub const MAX_TIERS: usize = 8;
/// Most keys one tier applies to in one request: a key source given with several
/// distinct values charges each value's bucket.
pub const MAX_KEYS_PER_TIER: usize = 4;
/// Most single-key decisions one request makes: every key of every tier.
pub const MAX_DECISIONS: usize = MAX_TIERS * MAX_KEYS_PER_TIER;
/// Decisions a request's state holds without allocating: routes rarely have more tiers.
pub const INLINE_DECISIONS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Enforce,
    /// Evaluated and counted, never denies.
    Shadow,
}

impl Mode {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

/// One tier of one request: the limit and the (hashed) key it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    pub quota: Quota,
    pub mode: Mode,
    pub max_delay_ns: u64,
    pub key: u64,
    /// The key every new key of this tier's policy shares when the store is too full to
    /// track one more (never by forgetting a debt): it throttles only other new keys.
    pub overflow: u64,
    /// What this tier charges at admission instead of the request's cost: the reserve of
    /// a policy whose cost is settled after the response.
    pub reserve: Option<NonZeroU64>,
    /// A calendar quota's window end, on the timeline of the `now` it is decided at: the
    /// tier is then decided at that end instead of at now (see [`super::calendar`]), and
    /// a denial waits until it.
    pub window: Option<u64>,
}

impl AsRef<Tier> for Tier {
    fn as_ref(&self) -> &Tier {
        self
    }
}

impl Tier {
    /// The units this tier charges for a request of `cost`.
    #[inline]
    pub fn cost(&self, cost: u64) -> u64 {
        self.reserve.map_or(cost, NonZeroU64::get)
    }

    /// The instant this tier's TATs are measured from at `now`: now for a rate, the
    /// window's end for a calendar quota.
    #[inline]
    pub fn basis(&self, now: u64) -> u64 {
        self.window.unwrap_or(now)
    }

    /// The stored `tat` as this tier reads it: as is for a rate; for a calendar quota,
    /// its window's end (nothing used) when it was written under another calendar.
    #[inline]
    pub fn carried(&self, tat: u64) -> u64 {
        match self.window {
            None => tat,
            Some(end) => super::calendar::carried(tat, end),
        }
    }

    /// Decides a request of `cost` units on `tat` at `now`.
    #[inline]
    pub fn decide(&self, tat: u64, now: u64, cost: u64) -> Decision {
        match self.window {
            None => self.quota.decide(tat, now, cost, self.max_delay_ns),
            Some(end) => {
                let tat = super::calendar::carried(tat, end);
                // No hold for a quota (its `max_delay` is refused), but a forced tier (a
                // usage report, `max_delay_ns` unbounded: `RequestTiers::force_last`) is
                // charged whatever it owes, its usage capped one below what would read as
                // another calendar's (which would be no usage at all).
                let mut d = self.quota.decide(tat, end, cost, self.max_delay_ns);
                d.tat = d.tat.min(super::calendar::max_tat(end));
                d.delay_ns = 0;
                // Nothing refills before the reset: a denial waits for it (forever when
                // the cost alone is more than the quota), the key is idle once it is past.
                let until_reset = end.saturating_sub(now);
                if !d.admitted && d.wait_ns != u64::MAX {
                    d.wait_ns = until_reset;
                }
                d.until_idle_ns = until_reset;
                d
            }
        }
    }
}

/// Where TATs live. Implementations make `apply` atomic per key.
pub trait TatTable {
    /// Reads the key's TAT (0 when absent), runs `decide` on it and, when the decision
    /// admits, stores `decision.tat` atomically. Returns the TAT it decided on. `decide`
    /// must be pure: it may run more than once (a lost race, or to rebuild the decision
    /// outside the atomic loop), the last time on the TAT returned.
    fn apply(&self, key: u64, decide: impl FnMut(u64) -> Decision) -> (u64, Decision);

    /// Reads the key's TAT without changing it.
    fn peek(&self, key: u64) -> u64;

    /// Undoes an admission that moved `key` from `old` to `new` at `now`.
    fn undo(&self, key: u64, old: u64, new: u64, now: u64);

    /// Decides `tier` at `now` like [`TatTable::apply`]: on its key, or, in a store too
    /// full to track a new key, on its overflow key. Returns the key used.
    fn apply_tier(
        &self,
        tier: &Tier,
        _now: u64,
        decide: impl FnMut(u64) -> Decision,
    ) -> (u64, u64, Decision) {
        let (prior, decision) = self.apply(tier.key, decide);
        (tier.key, prior, decision)
    }
}

/// What one tier said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierOutcome {
    /// The key the tier was decided on: its own, or its overflow key.
    pub key: u64,
    /// The TAT the tier was decided on.
    pub prior_tat: u64,
    pub decision: Decision,
    pub mode: Mode,
}

impl TierOutcome {
    fn enforcing(&self) -> bool {
        self.mode == Mode::Enforce
    }
}

/// The decision for a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub admitted: bool,
    /// Inline for the usual few tiers, so a verdict is small enough to move cheaply;
    /// at most [`MAX_DECISIONS`] (the config bounds tiers and keys per tier).
    outcomes: SmallVec<[TierOutcome; INLINE_DECISIONS]>,
    /// Index of the first enforcing tier that denied.
    pub first_denier: Option<usize>,
    /// Index of the tier whose numbers go into the response headers: on admission the
    /// enforcing tier with the fewest remaining, on denial the one with the longest wait.
    pub reporting: Option<usize>,
    /// Minimum over enforcing tiers of cost-1 requests admitted right now.
    pub remaining: u64,
    /// On denial: nanoseconds until every tier would admit the request.
    pub wait_ns: u64,
    /// On admission: nanoseconds to hold the request (`max_delay`), the largest over tiers.
    pub delay_ns: u64,
    /// The `now` the outcomes' TATs are relative to: the clock reading for the memory
    /// store, a stand-in for Redis's clock when Redis decided.
    pub now: u64,
}

impl Verdict {
    pub fn outcomes(&self) -> &[TierOutcome] {
        &self.outcomes
    }

    /// Tier `index` of this admitted request was settled and its key now owes `debt_ns`
    /// (TAT − now; a quota's usage) and is idle again in `until_idle_ns` (the debt; a
    /// quota's time to its reset): its numbers, and which tier the headers report, follow.
    pub fn settled(&mut self, index: usize, (debt_ns, until_idle_ns): (u64, u64), quota: &Quota) {
        let Some(outcome) = self.outcomes.get_mut(index) else {
            return;
        };
        outcome.decision.until_idle_ns = until_idle_ns;
        outcome.decision.remaining = quota.remaining(debt_ns, 0);
        if !self.admitted {
            return;
        }
        let tightest = self
            .outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.enforcing())
            .min_by_key(|(_, o)| o.decision.remaining);
        if let Some((i, o)) = tightest {
            self.remaining = o.decision.remaining;
            self.reporting = Some(i);
        }
    }

    /// Back to [`Verdict::unlimited`] in place: a verdict lives in the request's
    /// admission, and building a new one there would copy all of it.
    pub fn clear(&mut self) {
        self.admitted = true;
        self.outcomes.clear();
        self.first_denier = None;
        self.reporting = None;
        self.remaining = u64::MAX;
        self.wait_ns = 0;
        self.delay_ns = 0;
        self.now = 0;
    }

    /// A request on a route with no tiers.
    pub fn unlimited() -> Self {
        Self {
            admitted: true,
            outcomes: SmallVec::new(),
            first_denier: None,
            reporting: None,
            remaining: u64::MAX,
            wait_ns: 0,
            delay_ns: 0,
            now: 0,
        }
    }
}

/// Decides `tiers` (at most [`MAX_DECISIONS`]; extra tiers are ignored) for one request.
/// A tier is anything that holds one (the store's tiers carry their keys beside it).
#[inline]
pub fn evaluate<T: TatTable + ?Sized, D: AsRef<Tier>>(
    table: &T,
    tiers: &[D],
    now: u64,
    cost: u64,
) -> Verdict {
    let mut verdict = Verdict::unlimited();
    evaluate_into(table, tiers, now, cost, &mut verdict);
    verdict
}

/// [`evaluate`] into a verdict that already has a home (the request's admission): it is
/// cleared and filled in place, never built elsewhere and copied there.
#[inline]
pub fn evaluate_into<T: TatTable + ?Sized, D: AsRef<Tier>>(
    table: &T,
    tiers: &[D],
    now: u64,
    cost: u64,
    verdict: &mut Verdict,
) {
    let tiers = &tiers[..tiers.len().min(MAX_DECISIONS)];
    verdict.clear();
    verdict.now = now;

    for (i, tier) in tiers.iter().map(AsRef::as_ref).enumerate() {
        let cost = tier.cost(cost);
        // By value: the closure then carries the tier's address and two numbers, not
        // addresses of them.
        let mut decide = move |tat| tier.decide(tat, now, cost);
        // A usage report's tier (which never denies) is charged apart (`forced_into`).
        if tier.max_delay_ns == u64::MAX && verdict.first_denier.is_none() {
            forced_into(table, tier, (now, cost), verdict);
            continue;
        }
        // After a denial nothing may move: later tiers are only looked at, for the wait.
        let (key, prior_tat, decision) = if verdict.first_denier.is_some() {
            let tat = table.peek(tier.key);
            (tier.key, tat, decide(tat))
        } else {
            table.apply_tier(tier, now, &mut decide)
        };
        verdict.outcomes.push(TierOutcome {
            key,
            // What the tier read: another calendar's quota TAT is no usage.
            prior_tat: tier.carried(prior_tat),
            // Rebuilt field by field: a copy of the whole value carried its padding
            // bytes too, reloaded across overlapping stores (a store-forwarding stall
            // that cost the single-key decision up to a third, by process layout).
            decision: Decision { ..decision },
            mode: tier.mode,
        });
        if !decision.admitted && tier.mode == Mode::Enforce && verdict.first_denier.is_none() {
            verdict.first_denier = Some(i);
        }
    }

    verdict.admitted = verdict.first_denier.is_none();
    let mut repeated = false;
    if !verdict.admitted {
        roll_back(table, &verdict.outcomes, tiers, now);
        // A key can repeat only among two tiers or more: a refusal of one costs no call.
        if tiers.len() > 1 {
            repeated = shared::read_before_the_request(&mut verdict.outcomes, tiers, now);
        }
    }
    summarize(verdict, tiers, now);
    // Only where a key repeats: the search above found none otherwise.
    if repeated {
        shared::wait_for_shared_keys(verdict, tiers, (now, cost));
    }
}

fn roll_back<T: TatTable + ?Sized, D: AsRef<Tier>>(
    table: &T,
    outcomes: &[TierOutcome],
    tiers: &[D],
    now: u64,
) {
    let first_denier = outcomes
        .iter()
        .position(|o| o.enforcing() && !o.decision.admitted)
        .unwrap_or(outcomes.len());
    // Last in, first out: when two tiers share a key, each undo then finds exactly the
    // value its own admission wrote and restores the one before it.
    for (outcome, tier) in outcomes.iter().zip(tiers).take(first_denier).rev() {
        if outcome.decision.admitted {
            let tier = tier.as_ref();
            let basis = tier.basis(now);
            // A quota's TAT from an earlier window means "nothing used": restoring it or
            // the window's end is the same, and from the end the increment is the cost.
            let prior = match tier.window {
                Some(end) => outcome.prior_tat.max(end),
                None => outcome.prior_tat,
            };
            table.undo(outcome.key, prior, outcome.decision.tat, basis);
        }
    }
}

#[inline]
fn summarize<D: AsRef<Tier>>(verdict: &mut Verdict, tiers: &[D], now: u64) {
    let admitted = verdict.admitted;
    let mut best: Option<(usize, u64)> = None;
    let tiers = tiers.iter().map(AsRef::as_ref);
    for (i, (outcome, tier)) in verdict.outcomes.iter().zip(tiers).enumerate() {
        if !outcome.enforcing() {
            continue;
        }
        let d = &outcome.decision;
        // On denial the state is as before the request, so remaining comes from the prior TAT.
        let remaining = if admitted {
            d.remaining
        } else {
            tier.quota.remaining(outcome.prior_tat, tier.basis(now))
        };
        verdict.remaining = verdict.remaining.min(remaining);
        if admitted {
            verdict.delay_ns = verdict.delay_ns.max(d.delay_ns);
            if best.is_none_or(|(_, r)| remaining < r) {
                best = Some((i, remaining));
            }
        } else {
            verdict.wait_ns = verdict.wait_ns.max(d.wait_ns);
            if !d.admitted && best.is_none_or(|(_, w)| d.wait_ns > w) {
                best = Some((i, d.wait_ns));
            }
        }
    }
    verdict.reporting = best.map(|(i, _)| i);
}

mod forced;
mod shared;
#[cfg(test)]
mod tests;
