//! What each policy of a decided request counts as — in the metrics, the access log and
//! the top-keys view — and under which of its keys.

use super::Admission;
use crate::limit::Mode;
use crate::store::tiers::{PolicyTiers, SlotOutcome, TierKind};

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
    /// its first (a key source with several values makes one key a value).
    pub key: u64,
    /// Which of the policy's keys that is, in the order they were made (each source's
    /// values combined, the last source's fastest): what names it in the top-keys view.
    pub index: usize,
}

impl Admission {
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
    }

    /// A rate policy counts as denied when any of its keys denied.
    #[inline]
    pub(super) fn rate_outcome(&self, p: &PolicyTiers) -> PolicyOutcome {
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
            key: tiers.get(index).map_or(0, |t| t.tier.key),
            index,
        }
    }

    /// A concurrency policy, like a rate one, counts once: denied when any of its keys
    /// found every slot taken.
    #[inline]
    fn slot_outcome(&self, p: &PolicyTiers) -> PolicyOutcome {
        let slots = &self.tiers.slots[p.range.clone()];
        let any = |o: SlotOutcome| slots.iter().any(|s| s.outcome == o);
        let taken = |s: &&crate::store::tiers::SlotTier| {
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
}
