//! When the store fails: what `on_error` makes of a failed call (counted by its cause),
//! the rate tiers decided on this gateway's share of each limit while Redis is out
//! (`on_error = "local"`), and the replicas' acknowledgement `replica_ack` waits for.

use super::{Fallback, Limiter};
use crate::limit::Verdict;
use crate::store::error::StoreError;
use crate::store::rate::Rates;

impl Limiter {
    /// The cause a failed request is counted under: its own error's, or for a timeout or
    /// an open breaker (which say little) the last cause the store saw.
    pub(super) fn cause_of(&self, e: &StoreError) -> &'static str {
        let own = crate::store::redis::health::cause(e);
        match e {
            StoreError::Timeout(_) | StoreError::BreakerOpen => self
                .remote()
                .and_then(|r| r.health.last_cause())
                .unwrap_or(own),
            _ => own,
        }
    }

    /// With `[store] replica_ack`, waits until the replicas acknowledge the admission just
    /// written; `false` when they did not in time and `on_error = "deny"` refuses it (the
    /// key keeps the charge: a refusal never admits more).
    pub(super) async fn replicated(&self) -> bool {
        let Some(acker) = self.remote().and_then(|r| r.acker()) else {
            return true;
        };
        match Box::pin(acker.acked()).await {
            Ok(()) => true,
            Err(e) => !matches!(self.fallback(&e), Fallback::Refuse),
        }
    }

    /// `on_error = "local"`: decides the rate tiers in this process alone, on this
    /// gateway's share of each limit (1/N of the rate and the burst, N the fleet's
    /// gateways), so that an outage admits no more than the limits across the fleet.
    /// Returns N.
    pub(super) fn decide_share(
        &self,
        rate: &[crate::store::tiers::RateTier],
        now: u64,
        cost: u64,
        verdict: &mut Verdict,
    ) -> u64 {
        let n = self.fleet_share();
        if n <= 1 {
            Rates::decide_local(self.local(), rate, now, cost, verdict);
            return 1;
        }
        let shares: arrayvec::ArrayVec<crate::limit::Tier, { crate::limit::MAX_DECISIONS }> = rate
            .iter()
            .take(crate::limit::MAX_DECISIONS)
            .map(|t| crate::limit::Tier {
                // A quota's window stays: its share is 1/N of its units, still reset at
                // the window's end.
                quota: t.tier.quota.share(n),
                ..t.tier
            })
            .collect();
        crate::limit::evaluate_into(self.local(), &shares, now, cost, verdict);
        n
    }

    /// How many gateways share each limit while Redis is out (`on_error = "local"`); 1
    /// with the memory store.
    pub(super) fn fleet_share(&self) -> u64 {
        self.remote().map_or(1, |r| r.fleet_share())
    }

    /// What `on_error` makes of a failed store call (`Store::fallback`: the one place it
    /// is read). The failure is counted.
    pub(super) fn fallback(&self, e: &StoreError) -> Fallback {
        self.failed(e);
        self.store.fallback()
    }

    /// Counts a failed store call.
    pub(super) fn failed(&self, e: &StoreError) {
        self.errors.inc(e, self.cause_of(e));
        // Written when it changes only: a shared line every failing request would write.
        let open = self
            .remote()
            .map_or(0, |r| i64::from(r.breakers.any_open()));
        if self.metrics.store_breaker_open.get() != open {
            self.metrics.store_breaker_open.set(open);
        }
        tracing::debug!(error = %e, "store call failed; applying on_error");
    }
}
