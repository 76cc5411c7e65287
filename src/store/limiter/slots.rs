//! The concurrency tiers of one request: a slot taken for each, where the store keeps it,
//! `on_error` applied to a failed take.
use super::{Fallback, Limiter, Store};
use crate::clock::Clock;
use crate::config::Route;
use crate::limit::Mode;
use crate::store::admission::{Admission, Outcome};
use crate::store::error::StoreError;
use crate::store::tiers::{PolicyPlan, SlotOutcome, SlotTier};
use prometheus_client::metrics::gauge::Gauge;

impl Limiter {
    /// Takes a slot for every concurrency tier, in route order, into `admission.held`.
    /// `Some` when the request is refused (every slot taken, or the store failed under
    /// `on_error = "deny"`); the caller then gives back what was taken.
    pub(super) async fn take_slots<P: AsRef<PolicyPlan>>(
        &self,
        (route, plans): (&Route, &[P]),
        clock: &dyn Clock,
        admission: &mut Admission,
    ) -> Option<Outcome> {
        let Admission {
            tiers,
            held,
            unchecked,
            ..
        } = admission;
        for i in 0..tiers.slots.len() {
            let position = tiers.slots[i].position;
            let policy = &route.policies[position].name;
            let tier = &tiers.slots[i];
            let gauge = plans
                .get(position)
                .and_then(|p| p.as_ref().in_flight.as_ref());
            let taken = match self.take_slot(tier, (policy, gauge), clock).await {
                Ok(taken) => taken,
                Err(e) => match self.fallback(&e) {
                    Fallback::Unchecked => {
                        tiers.slots[i].outcome = SlotOutcome::Unchecked;
                        *unchecked = true;
                        continue;
                    }
                    Fallback::Refuse => return Some(Outcome::StoreUnavailable),
                    Fallback::Local => {
                        // This gateway's share of the cap (see `decide_share`).
                        let n = self.remote().map_or(1, |r| r.fleet_share());
                        let mut share = tier.clone();
                        share.max = u32::try_from(u64::from(tier.max).div_ceil(n))
                            .unwrap_or(u32::MAX)
                            .max(1);
                        let named = (policy.as_str(), gauge);
                        self.concurrency.take_local(&share, named, clock).await
                    }
                },
            };
            let tier = &mut tiers.slots[i];
            tier.outcome = match (taken, tier.mode) {
                (Some((slot, count)), _) => {
                    held.push(slot);
                    SlotOutcome::Held {
                        free: tier.max.saturating_sub(count),
                    }
                }
                (None, Mode::Enforce) => SlotOutcome::Refused,
                (None, Mode::Shadow) => SlotOutcome::ShadowFull,
            };
            if tier.outcome == SlotOutcome::Refused {
                let max = tier.max;
                return Some(Outcome::SlotsFull { position, max });
            }
        }
        None
    }

    /// One slot, where the store keeps it.
    async fn take_slot(
        &self,
        tier: &SlotTier,
        policy: (&str, Option<&Gauge>),
        clock: &dyn Clock,
    ) -> Result<Option<crate::store::concurrency::Taken>, StoreError> {
        match (&self.store, &tier.redis) {
            (Store::Redis { remote, .. }, Some(key)) => {
                // Boxed like the rate tiers' Redis path: only its requests carry its state.
                let take = self
                    .concurrency
                    .take_remote(remote, key, tier, policy, clock);
                Box::pin(take).await
            }
            // Redis mode before the fleet's key is known: no key to ask Redis about (a
            // failed call all the same: counted, toward the breaker).
            (Store::Redis { remote, .. }, None) => Err(remote.unasked(clock.now_ns())),
            (Store::Memory(_), _) => Ok(self.concurrency.take_local(tier, policy, clock).await),
        }
    }
}
