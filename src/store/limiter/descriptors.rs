//! A rate limit service call as the limiter decides it: one rate tier per matched
//! descriptor, each on the key its values name and at its own cost, every one at one
//! clock reading, all admitted or none charged — the same decision a route's tiers get.

use arrayvec::ArrayVec;

use super::Limiter;
use crate::clock::Clock;
use crate::config::Policy;
use crate::limit::MAX_TIERS;
use crate::store::admission::Admission;
use crate::store::rate::redis::ChargeTimes;
use crate::store::tiers::PolicyPlan;

/// One descriptor a rule matched: which policy decides it, on which key, at what cost.
pub struct Descriptor<'a> {
    /// Its index in the call (the position the outcome names).
    pub position: usize,
    pub policy: &'a Policy,
    pub plan: &'a PolicyPlan,
    /// The values that key it, in order (see `RlsRule::key_parts`).
    pub parts: ArrayVec<&'a str, MAX_TIERS>,
    /// Units charged; 0 checks without charging.
    pub cost: u64,
    /// Charged whatever the key owes (usage already spent): never refused.
    pub forced: bool,
}

impl Limiter {
    /// Decides `descriptors` into `admission`: every rate tier at one clock reading, a
    /// refusal of any leaving every key as it was; a store failure answered per
    /// `on_error` as for a request.
    pub async fn check_descriptors<'a>(
        &self,
        descriptors: impl Iterator<Item = Descriptor<'a>>,
        clock: &dyn Clock,
        admission: &mut Admission,
    ) {
        admission.reset();
        let fleet = self.keys.fleet().map(|f| f.load());
        let fleet_key = fleet.as_ref().and_then(|g| g.as_deref());
        for d in descriptors {
            admission.tiers.push_parts(
                (d.plan, fleet_key),
                &self.overrides,
                (d.position, d.policy),
                (d.parts.iter().copied(), d.cost),
                clock,
            );
            if d.forced {
                admission.tiers.force_last();
            }
        }
        drop(fleet);
        // Every tier carries its own cost (its reserve): the call's is 0.
        if self.refused_here(admission, 0, clock) {
            return;
        }
        admission.now = clock.now_ns();
        if admission.tiers.rate.is_empty() {
            return;
        }
        // No tier of a descriptor settles: no charge time is kept.
        let mut times = ChargeTimes::new();
        let _ = self
            .decide_rate_tiers(0, clock, admission, &mut times)
            .await;
    }
}
