//! Tiers of one request on one key: charged together or not at all, so a denial waits
//! for them together.

use super::{Tier, TierOutcome, Verdict};

/// On a denial, every tier as the request found its key: a tier whose key an earlier tier
/// shares read it after that tier's charge, which the denial undid. Each then reads the
/// TAT the key's first tier read (same key, same policy, same reading of it), and a
/// denying one's own numbers (its TAT, what is left, until it is whole) are of that TAT
/// too, so what a refusal reports of the key (the `RateLimit` lists, an RLS call's
/// statuses, the Redis refusal cache) is the key untouched, not a charge down for each
/// earlier tier. Its wait stays its own: [`wait_for_shared_keys`] sets the request's.
/// Whether any key repeated (else that has nothing to do).
#[cold]
#[inline(never)]
pub(super) fn read_before_the_request<D: AsRef<Tier>>(
    outcomes: &mut [TierOutcome],
    tiers: &[D],
    now: u64,
) -> bool {
    let mut repeated = false;
    for i in 1..outcomes.len().min(tiers.len()) {
        let key = outcomes[i].key;
        let Some(prior) = outcomes[..i]
            .iter()
            .find(|o| o.key == key)
            .map(|o| o.prior_tat)
        else {
            continue;
        };
        repeated = true;
        let (outcome, tier) = (&mut outcomes[i], tiers[i].as_ref());
        outcome.prior_tat = prior;
        let d = &mut outcome.decision;
        if !d.admitted {
            d.tat = prior;
            d.remaining = tier.quota.remaining(prior, tier.basis(now));
            // A calendar quota's denial is whole again at its reset, whatever its TAT.
            if tier.window.is_none() {
                d.until_idle_ns = prior.saturating_sub(now);
            }
        }
    }
    repeated
}

/// A denied request's wait where several of its enforcing tiers share a key (an RLS call
/// naming one descriptor twice; a proxied request's key sources give distinct values, so
/// its tiers never do): they are charged together or not at all, so the request waits
/// until the key holds all of them at once — from the key's TAT before the request, their
/// costs summed — not until it holds the one that denied (5 + 5 on a drained key of 10 a
/// minute waits 60 s, not 30). Off the admitted path, and a loop only where a key
/// repeats.
#[cold]
#[inline(never)]
pub(super) fn wait_for_shared_keys<D: AsRef<Tier>>(
    verdict: &mut Verdict,
    tiers: &[D],
    (now, cost): (u64, u64),
) {
    let shared = |t: &Tier, o: &TierOutcome| o.enforcing() && t.max_delay_ns != u64::MAX;
    let pairs = || tiers.iter().map(AsRef::as_ref).zip(&verdict.outcomes);
    let mut wait = verdict.wait_ns;
    for (i, (first, outcome)) in pairs().enumerate() {
        if !shared(first, outcome) {
            continue;
        }
        let same = |(t, o): &(&Tier, &TierOutcome)| shared(t, o) && o.key == outcome.key;
        // Each key once, from its first tier.
        if pairs().take(i).any(|p| same(&p)) || pairs().filter(same).nth(1).is_none() {
            continue;
        }
        let together = pairs()
            .filter(same)
            .fold(0u64, |sum, (t, _)| sum.saturating_add(t.cost(cost)));
        // Never (together over the burst) is left to the front door: the rate limit
        // service tells no wait; a proxied 429 keeps the wait its tiers gave.
        match first.decide(outcome.prior_tat, now, together).wait_ns {
            u64::MAX => {}
            w => wait = wait.max(w),
        }
    }
    verdict.wait_ns = wait;
}
