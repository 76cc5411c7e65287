//! What the rate-limit headers and a rate limit service's statuses report of a decided
//! request's rate tiers: the tier `X-RateLimit-*` describe, one report per policy, each
//! tier as the request left it.

use super::{Admission, Counted, TierReport};
use crate::limit::Mode;
use crate::store::tiers::{PolicyTiers, TierKind};

impl Admission {
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
        let d = &o.decision;
        if verdict.admitted {
            return (d.remaining, d.until_idle_ns);
        }
        // The verdict's timeline is not this gateway's clock when Redis decided (its now
        // is `BASE`), so a calendar quota's window end is read from the decision — it
        // was decided at its end, and is idle at its reset — not from the tier's local
        // end (which read every quota a refusal did not cause as `r=0;t=0`).
        let (basis, until) = match tier.window {
            Some(_) => (verdict.now.saturating_add(d.until_idle_ns), d.until_idle_ns),
            None if d.admitted => (verdict.now, o.prior_tat.saturating_sub(verdict.now)),
            None => (verdict.now, d.until_idle_ns),
        };
        (tier.quota.remaining(o.prior_tat, basis), until)
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
}
