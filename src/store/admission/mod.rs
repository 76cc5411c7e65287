//! A decided request, as the request path reads it: what decided it ([`Outcome`]), and
//! per policy what to count, report in headers and name as violated. It is also the
//! handle through which whatever outlives the decision is given back: concurrency slots
//! released when the response ends, costs settled once they are known.

use smallvec::SmallVec;

mod per_policy;
pub use per_policy::{Counted, PolicyOutcome};

use super::concurrency::held::Held;
use super::keys::KeyRefusal;
use super::rate::settle::PendingSettle;
use super::tiers::{PolicyTiers, RequestTiers, SlotOutcome, TierKind};
use crate::limit::{Mode, Quota, Verdict};

/// What decided a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every tier admitted it (or the store could not be asked and `on_error = "allow"`).
    Admitted,
    /// 429: a rate tier refused; `position` is the first enforcing policy that did.
    RateLimited { position: usize },
    /// 429: every slot of the concurrency policy at `position` (at most `max`) was taken.
    SlotsFull { position: usize, max: u32 },
    /// 400: the policy at `position` has `missing = "reject"` and its key is absent.
    MissingKey { position: usize },
    /// 400: a key source of the policy at `position` came with too many distinct values.
    TooManyKeyValues { position: usize },
    /// 400: the priced policy at `position` has no price for the model the request names.
    UnpricedModel { position: usize },
    /// 503: the store failed and `on_error = "deny"`.
    StoreUnavailable,
}

impl From<KeyRefusal> for Outcome {
    fn from(refusal: KeyRefusal) -> Self {
        match refusal {
            KeyRefusal::Missing(position) => Outcome::MissingKey { position },
            KeyRefusal::TooManyValues(position) => Outcome::TooManyKeyValues { position },
            KeyRefusal::Unpriced(position) => Outcome::UnpricedModel { position },
        }
    }
}

/// One enforcing rate policy as the rate-limit headers describe it. A policy whose key
/// came with several values speaks through the key with the fewest remaining.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierReport {
    pub position: usize,
    pub quota: Quota,
    /// Cost-1 requests this tier would admit right now.
    pub remaining: u64,
    /// Nanoseconds until this tier has its full burst again.
    pub until_full_ns: u64,
    /// A calendar quota's window length in seconds.
    pub window_s: Option<u64>,
}

/// The request path owns it and `Limiter::check_request` fills it in place: it holds
/// every tier's key and outcome (kilobytes), which are never copied around.
pub struct Admission {
    pub(super) tiers: RequestTiers,
    pub(super) verdict: Verdict,
    /// The clock reading every rate tier was decided at (after any wait for a slot).
    pub(super) now: u64,
    pub(super) outcome: Outcome,
    /// The slots this request holds: released when dropped, so whoever keeps them (the
    /// response body, a tunnel) decides when.
    pub(super) held: SmallVec<[Held; 2]>,
    /// The admitted tiers whose cost is settled once the upstream has answered.
    pub(super) settles: SmallVec<[PendingSettle; 1]>,
    /// Some tier was not decided: the store could not answer and `on_error = "allow"`
    /// let the request through unlimited there.
    pub(super) unchecked: bool,
    /// Nothing was decided into it yet: its first [`reset`](Self::reset) has nothing to
    /// clear (every proxied request's admission is a fresh one).
    fresh: bool,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            tiers: RequestTiers::default(),
            verdict: Verdict::unlimited(),
            now: 0,
            outcome: Outcome::Admitted,
            held: SmallVec::new(),
            settles: SmallVec::new(),
            unchecked: false,
            fresh: true,
        }
    }
}

impl Admission {
    /// Ready for the next decision: nothing held, nothing to settle, admitted until a
    /// tier says otherwise. A fresh admission already is: it is only marked used.
    #[inline]
    pub(super) fn reset(&mut self) {
        if !std::mem::replace(&mut self.fresh, false) {
            self.clear_decided();
        }
    }

    fn clear_decided(&mut self) {
        self.tiers.clear();
        self.verdict.clear();
        self.held.clear();
        self.settles.clear();
        self.outcome = Outcome::Admitted;
        self.unchecked = false;
    }

    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Admitted without a decision of every tier: the store could not answer and
    /// `on_error = "allow"` let the request through (logged and counted as
    /// `store_unavailable_allowed`, not `admitted`).
    pub fn unchecked(&self) -> bool {
        self.unchecked
    }

    /// The clock reading the rate tiers were decided at.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// How long to hold an admitted request before forwarding it (`max_delay`).
    pub fn delay_ns(&self) -> u64 {
        self.verdict.delay_ns
    }

    /// How long a refused request must wait until every rate tier would admit it.
    pub fn wait_ns(&self) -> u64 {
        self.verdict.wait_ns
    }

    /// Moves the held slots into `keeper` (what keeps them as long as the response
    /// lasts). A request holding none, most of them, moves nothing: the inline storage
    /// of both is hundreds of bytes.
    pub fn move_held_into(&mut self, keeper: &mut SmallVec<[Held; 2]>) {
        if !self.held.is_empty() {
            *keeper = std::mem::take(&mut self.held);
        }
    }

    /// Takes out the tiers to settle once the response tells their cost; `None`, with
    /// nothing moved, when no tier is settled.
    pub fn take_settles(&mut self) -> Option<SmallVec<[PendingSettle; 1]>> {
        (!self.settles.is_empty()).then(|| std::mem::take(&mut self.settles))
    }

    /// Rate tier `tier` was settled and its key now owes `debt_ns`: the headers follow.
    pub fn settled(&mut self, tier: usize, debt_ns: u64) {
        if let Some(t) = self.tiers.rate.get(tier) {
            let quota = t.tier.quota;
            // A quota is whole again at its reset, however much was settled.
            let until_idle = t
                .tier
                .window
                .map_or(debt_ns, |end| end.saturating_sub(self.now));
            self.verdict.settled(tier, (debt_ns, until_idle), &quota);
        }
    }

    /// Whether the request goes on: admitted by every tier.
    fn admitted(&self) -> bool {
        self.outcome == Outcome::Admitted
    }

    /// The positions of the policies applied to this request (a skipped one is absent).
    pub fn applied(&self) -> impl Iterator<Item = usize> + '_ {
        self.tiers.policies.iter().map(|p| p.position)
    }

    /// The shadow rate tiers that would have refused: `(position, wait)`.
    pub fn shadow_denials(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let outcomes = self.verdict.outcomes();
        (0..outcomes.len())
            .filter(move |&i| outcomes[i].mode == Mode::Shadow && !outcomes[i].decision.admitted)
            .filter_map(move |i| {
                let position = self.tiers.rate.get(i)?.position;
                Some((position, outcomes[i].decision.wait_ns))
            })
    }

    /// The tier `X-RateLimit-*` describe, all three from that one tier (its limit, its
    /// remaining, its reset): on admission the tightest, on a refusal the one with the
    /// longest wait. `None` when no enforcing rate tier was decided.
    #[inline]
    pub fn reported(&self) -> Option<TierReport> {
        let k = self.verdict.reporting?;
        let (remaining, until_full_ns) = self.tier_state(k);
        Some(TierReport {
            position: self.tiers.rate.get(k)?.position,
            quota: self.tiers.rate[k].tier.quota,
            remaining,
            until_full_ns,
            window_s: self.tiers.rate[k].window_s(),
        })
    }

    /// Rate tier `k` as the request left it: cost-1 requests it would admit now, and
    /// nanoseconds until it is whole again. On a refusal every tier is as before the
    /// request (rolled back), read from its TAT relative to the verdict's own now.
    #[inline]
    fn tier_state(&self, k: usize) -> (u64, u64) {
        let verdict = &self.verdict;
        let (o, tier) = (&verdict.outcomes()[k], &self.tiers.rate[k].tier);
        let (d, basis) = (&o.decision, tier.basis(verdict.now));
        if verdict.admitted {
            (d.remaining, d.until_idle_ns)
        } else if d.admitted {
            let left = tier.quota.remaining(o.prior_tat, basis);
            let until = match tier.window {
                Some(end) => end.saturating_sub(verdict.now),
                None => o.prior_tat.saturating_sub(verdict.now),
            };
            (left, until)
        } else {
            (tier.quota.remaining(o.prior_tat, basis), d.until_idle_ns)
        }
    }

    /// One report per enforcing rate policy, in route order (the `RateLimit` lists). On
    /// a refusal every tier is described as the request left it: rolled back, from its
    /// TAT, relative to the verdict's own now.
    #[inline]
    pub fn rate_reports(&self) -> impl Iterator<Item = TierReport> + '_ {
        let outcomes = self.verdict.outcomes();
        self.tiers
            .policies
            .iter()
            .filter(move |p| {
                p.kind == TierKind::Rate
                    && !p.range.is_empty()
                    && p.range.end <= outcomes.len()
                    && outcomes[p.range.start].mode == Mode::Enforce
            })
            .filter_map(|p| self.rate_report(p))
    }

    /// Every decided rate policy, shadow ones too, in order, with what it counts as: a
    /// rate limit service call's statuses, one per decided descriptor.
    pub fn policy_reports(&self) -> impl Iterator<Item = (TierReport, Counted)> + '_ {
        let outcomes = self.verdict.outcomes();
        self.tiers
            .policies
            .iter()
            .filter(move |p| {
                p.kind == TierKind::Rate && !p.range.is_empty() && p.range.end <= outcomes.len()
            })
            .filter_map(|p| Some((self.rate_report(p)?, self.rate_outcome(p).counted)))
    }

    /// The report of one decided rate policy: its key with the fewest remaining.
    #[inline]
    fn rate_report(&self, p: &PolicyTiers) -> Option<TierReport> {
        let state = |k: usize| self.tier_state(k);
        let mut best = p.range.start;
        let (mut remaining, mut until_full_ns) = state(best);
        for k in p.range.start + 1..p.range.end {
            let (left, until) = state(k);
            if left < remaining {
                (best, remaining, until_full_ns) = (k, left, until);
            }
        }
        Some(TierReport {
            position: p.position,
            quota: self.tiers.rate[best].tier.quota,
            remaining,
            until_full_ns,
            window_s: self.tiers.rate[best].window_s(),
        })
    }

    /// The positions of the enforcing rate policies that refused the request, in route
    /// order, each once: the problem details' `violated-policies`.
    pub fn violated(&self) -> impl Iterator<Item = usize> + '_ {
        let outcomes = self.verdict.outcomes();
        self.tiers
            .policies
            .iter()
            .filter(move |p| p.kind == TierKind::Rate && p.range.end <= outcomes.len())
            .filter(move |p| {
                outcomes[p.range.clone()]
                    .iter()
                    .any(|o| o.mode == Mode::Enforce && !o.decision.admitted)
            })
            .map(|p| p.position)
    }

    /// The enforcing concurrency tiers holding a slot: `(position, max, free)`.
    pub fn held_slots(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        self.tiers
            .policies
            .iter()
            .filter(|p| p.kind == TierKind::Concurrency)
            .flat_map(move |p| {
                self.tiers.slots[p.range.clone()]
                    .iter()
                    .map(move |slot| (p.position, slot))
            })
            .filter_map(|(position, slot)| match (slot.outcome, slot.mode) {
                (SlotOutcome::Held { free }, Mode::Enforce) => Some((position, slot.max, free)),
                _ => None,
            })
    }
}
