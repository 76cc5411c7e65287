//! A decided request, as the request path reads it: what decided it ([`Outcome`]), and
//! per policy what to count, report in headers and name as violated. It is also the
//! handle through which whatever outlives the decision is given back: concurrency slots
//! released when the response ends, costs settled once they are known.

use smallvec::SmallVec;

mod reports;

use super::concurrency::held::Held;
use super::keys::KeyRefusal;
use super::rate::settle::PendingSettle;
use super::tiers::{PolicyTiers, RequestTiers, SlotOutcome, TierKind};
use crate::clock::Clock;
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
    /// 429: the route's cost is above the burst a runtime override gives the key of the
    /// policy at `position` (its `index`-th key): no wait admits it.
    CostAboveBurst { position: usize, index: usize },
    /// 503: the store failed and `on_error = "deny"`.
    StoreUnavailable,
}

impl From<KeyRefusal> for Outcome {
    fn from(refusal: KeyRefusal) -> Self {
        match refusal {
            KeyRefusal::Missing(position) => Outcome::MissingKey { position },
            KeyRefusal::TooManyValues(position) => Outcome::TooManyKeyValues { position },
            KeyRefusal::Unpriced(position) => Outcome::UnpricedModel { position },
            KeyRefusal::AboveBurst { position, index } => {
                Outcome::CostAboveBurst { position, index }
            }
        }
    }
}

/// What one policy's decision counts as in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Admitted,
    Denied,
    ShadowDenied,
    /// Not decided, or decided for a request another tier refused.
    Nothing,
}

/// One applied policy of a decided request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOutcome {
    pub position: usize,
    pub counted: Counted,
    /// Decided on the policy's overflow key: the store was full of keys that owe time.
    pub overflow: bool,
    /// The hash of the key it is counted under: the first of its keys that refused, else
    /// its first (a key source with several values makes one key a value) — as decided:
    /// the policy's overflow key when that key was decided on it (the store full), so a
    /// refusal of the overflow key is not put on the new key that met it.
    pub key: u64,
    /// Which of the policy's keys that is, in the order they were made (each source's
    /// values combined, the last source's fastest): what names it in the top-keys view.
    pub index: usize,
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
    /// The rate tiers were decided on this gateway's `share`-th of each limit: Redis
    /// was out and `on_error = "local"` (1 otherwise). Its settles and headers use it.
    pub(super) share: u64,
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
            share: 1,
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
        self.share = 1;
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

    /// Rate tier `tier` was settled at `now` and its key now owes `debt_ns`: the headers
    /// follow.
    pub fn settled(&mut self, tier: usize, debt_ns: u64, (now, clock): (u64, &dyn Clock)) {
        if let Some(t) = self.tiers.rate.get(tier) {
            let quota = t.tier.quota.share(self.share);
            // A quota is whole again at its reset, however much was settled: the reset of
            // the window the settle fell in (past a rollover since the admission, the
            // settle charged the new window, whose reset is a window away, not the old
            // one's a few seconds after the admission).
            // (A tier has a window only with a calendar's bounds: `place_windows`.)
            let until_idle = match &t.bounds {
                Some(bounds) => {
                    let end = clock.mono_ns_at(bounds.end_at(clock.unix_ns_at(now)));
                    end.saturating_sub(now)
                }
                None => debt_ns,
            };
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

    /// The policies that were decided, in route order (rate tiers only when the rate
    /// tiers were decided at all), with what each counts as.
    #[inline]
    pub fn per_policy(&self) -> impl Iterator<Item = PolicyOutcome> + '_ {
        let decided = self.verdict.outcomes().len();
        self.tiers
            .policies
            .iter()
            .filter(move |p| p.kind == TierKind::Concurrency || p.range.end <= decided)
            .filter(|p| !p.range.is_empty())
            .map(|p| match p.kind {
                TierKind::Rate => self.rate_outcome(p),
                TierKind::Concurrency => self.slot_outcome(p),
            })
            .chain(self.above_burst())
    }

    /// A policy that refused before deciding, the route's cost above a key's burst: counted
    /// denied under that key (in the metrics and the top-keys view).
    fn above_burst(&self) -> Option<PolicyOutcome> {
        let Outcome::CostAboveBurst { position, index } = self.outcome else {
            return None;
        };
        let p = self
            .tiers
            .policies
            .iter()
            .find(|p| p.position == position)?;
        let tier = self.tiers.rate.get(p.range.start + index)?;
        Some(PolicyOutcome {
            position,
            counted: Counted::Denied,
            overflow: false,
            key: tier.tier.key,
            index,
        })
    }

    /// A rate policy counts as denied when any of its keys denied.
    #[inline]
    fn rate_outcome(&self, p: &PolicyTiers) -> PolicyOutcome {
        let outcomes = &self.verdict.outcomes()[p.range.clone()];
        let tiers = &self.tiers.rate[p.range.clone()];
        let mut overflow = false;
        let mut refused = None;
        let mut index = 0;
        for (i, (o, t)) in outcomes.iter().zip(tiers).enumerate() {
            overflow |= o.key != t.tier.key;
            if refused.is_none() && !o.decision.admitted {
                refused = Some(o.mode);
                index = i;
            }
        }
        let counted = match refused {
            Some(Mode::Enforce) => Counted::Denied,
            Some(Mode::Shadow) => Counted::ShadowDenied,
            None if self.verdict.admitted => Counted::Admitted,
            None => Counted::Nothing,
        };
        PolicyOutcome {
            position: p.position,
            counted,
            overflow,
            key: outcomes.get(index).map_or(0, |o| o.key),
            index,
        }
    }

    /// A concurrency policy, like a rate one, counts once: denied when any of its keys
    /// found every slot taken.
    #[inline]
    fn slot_outcome(&self, p: &PolicyTiers) -> PolicyOutcome {
        let slots = &self.tiers.slots[p.range.clone()];
        let any = |o: SlotOutcome| slots.iter().any(|s| s.outcome == o);
        let taken = |s: &&super::tiers::SlotTier| {
            matches!(s.outcome, SlotOutcome::Held { .. } | SlotOutcome::Unchecked)
        };
        let counted = if any(SlotOutcome::Refused) {
            Counted::Denied
        } else if any(SlotOutcome::ShadowFull) {
            Counted::ShadowDenied
        } else if self.admitted() && slots.iter().any(|s| taken(&s)) {
            Counted::Admitted
        } else {
            Counted::Nothing
        };
        let index = match counted {
            Counted::Denied => slots.iter().position(|s| s.outcome == SlotOutcome::Refused),
            _ => None,
        }
        .unwrap_or(0);
        PolicyOutcome {
            position: p.position,
            counted,
            overflow: false,
            key: slots.get(index).map_or(0, |s| s.key),
            index,
        }
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
