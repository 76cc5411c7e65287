//! A rate limit service's descriptors (and a quota stream's reports) as tiers: each on
//! the key its values name, at the call's own cost, never held; a report forced through
//! whatever its key owes.

use std::borrow::Cow;

use super::{PolicyPlan, PolicyTiers, RequestTiers, TierKind};
use crate::clock::Clock;
use crate::config::{Policy, MAX_SETTLED_DEBT_NS};
use crate::key::{FleetKey, KeyPart};
use crate::store::keys::Partial;
use crate::store::overrides::KeyOverrides;

impl RequestTiers {
    /// Adds rate `policy`'s tier at `position` on the key named by `parts` (their text,
    /// as [`KeyMaker::key_of`](crate::store::keys::KeyMaker::key_of) names a key, so a proxied request keyed by the same values
    /// shares it), charging `cost` units: a rate limit service's descriptor. A cost of 0
    /// checks without charging.
    pub fn push_parts<'a>(
        &mut self,
        (plan, fleet): (&PolicyPlan, Option<&FleetKey>),
        overrides: &KeyOverrides,
        (position, policy): (usize, &Policy),
        (parts, cost): (impl Iterator<Item = &'a str>, u64),
        clock: &dyn Clock,
    ) {
        let mut key = plan.keys.builder(fleet);
        let mut single = None;
        // Spaces and tabs around a value removed, as the HTTP door reads a header: `acme `
        // is `acme`'s bucket, not one of its own.
        for part in policy.spelled_parts(parts.map(crate::key::source::trim_ows_text)) {
            if part.is_empty() {
                // An empty value is a missing key, as an empty header on the HTTP door:
                // under `missing = "shared"` the one bucket of all such requests (`"skip"`
                // and `"reject"` never get here: `rls::decide`).
                key.missing();
                single = None;
                continue;
            }
            let part = match part {
                Cow::Owned(spelled) => KeyPart::Bytes(Cow::Owned(spelled.into_bytes())),
                Cow::Borrowed(part) => KeyPart::Bytes(part.as_bytes().into()),
            };
            key.part(&part);
            single = Some(part);
        }
        let single = single.filter(|_| policy.key.len() == 1);
        let start = self.rate.len();
        self.push(
            plan,
            overrides,
            (position, policy),
            Partial { key, single },
            clock,
        );
        for t in &mut self.rate[start..] {
            // The call's own cost; nothing is settled after it.
            t.tier.reserve = std::num::NonZeroU64::new(cost);
            t.settled = false;
            // A check (cost 0) reads what the key owes, which a leased slice cannot say:
            // decided exactly in the store, never from the slice.
            t.leased &= cost > 0;
            // No hold: the caller is not held, it is answered at once (Envoy's RLS
            // timeout is 20 ms), so a `max_delay` would pass the held part of the
            // allowance all at once. Past the burst a call is refused, as without it.
            t.tier.max_delay_ns = 0;
        }
        self.policies.push(PolicyTiers {
            position,
            kind: TierKind::Rate,
            range: start..self.rate.len(),
        });
    }

    /// The last policy's tiers admit whatever their keys owe: no allowance bounds the
    /// charge (usage already spent, reported after the fact). A charge is cut to what
    /// takes a key at most `MAX_SETTLED_DEBT_NS` (about 52 days) ahead, as a settle's
    /// is: an absurd report leaves the key used up for that long, in numbers every store
    /// keeps exactly (a Redis script's doubles are exact below 2^53 and its integer
    /// replies end at 2^63, which an uncut 3,000,000,000 × one hour passes).
    pub fn force_last(&mut self) {
        if let Some(p) = self.policies.last() {
            for t in &mut self.rate[p.range.clone()] {
                t.tier.max_delay_ns = u64::MAX;
                // Charged whatever the key owes, which only the store's own script
                // does (a slice refuses what it cannot hold, and the charge was lost).
                t.leased = false;
                let most = (MAX_SETTLED_DEBT_NS / t.tier.quota.interval_ns().max(1)).max(1);
                // `most` and a reserve are at least 1: the least of them is one too.
                t.tier.reserve = t
                    .tier
                    .reserve
                    .and_then(|r| std::num::NonZeroU64::new(r.get().min(most)));
            }
        }
    }
}
