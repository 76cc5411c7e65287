//! Usage reports: a forced tier's charge, capped as the Redis script caps it.

use super::{TatTable, Tier, TierOutcome, Verdict};

/// The furthest a forced charge (a usage report) takes a key's TAT past now: about 52
/// days, what the Redis script keeps exactly in doubles (2^52 ns).
pub const MAX_FORCED_LEAD_NS: u64 = 1 << 52;

/// A forced tier (a usage report, `max_delay_ns` unbounded:
/// `RequestTiers::force_last`) is charged whatever it owes; a rate's, up to what takes its
/// key [`MAX_FORCED_LEAD_NS`] past now (to within one interval), as the Redis script caps
/// it — or, for a rate longer than that (the memory backend keeps them), a whole burst and
/// one more, so a report still uses the key up: reports add up, and uncut, each absurd one
/// would push the key another 52 days on. A key already that far is charged nothing more
/// (and not refunded). Decided apart from the other tiers, its outcome pushed here (it
/// never denies): a cut in their closure, or a decision merged with theirs, spilled every
/// decision to the stack.
#[cold]
#[inline(never)]
pub(super) fn forced_into<T: TatTable + ?Sized>(
    table: &T,
    tier: &Tier,
    (now, cost): (u64, u64),
    verdict: &mut Verdict,
) {
    let (key, prior_tat, decision) = if tier.window.is_some() {
        // A quota's usage is capped in its own decision (`Tier::decide`).
        table.apply_tier(tier, now, &mut |tat| tier.decide(tat, now, cost))
    } else {
        let q = &tier.quota;
        let most = MAX_FORCED_LEAD_NS.max(q.tolerance_ns().saturating_add(q.interval_ns()));
        table.apply_tier(tier, now, &mut |tat: u64| {
            let room = now.saturating_add(most).saturating_sub(tat.max(now));
            let cost = cost.min(room / q.interval_ns());
            tier.decide(tat, now, cost)
        })
    };
    verdict.outcomes.push(TierOutcome {
        key,
        prior_tat: tier.carried(prior_tat),
        decision,
        mode: tier.mode,
    });
}
