//! Rate tiers (GCRA): decided in the process-local table, or in Redis with the refusal
//! cache in front (a key Redis refused moments ago is refused here, without a round
//! trip) and leased slices beside it (`sync = "lease"`). Settling a reserved cost once
//! the response tells it is here too.

pub mod draw;
pub mod lease;
#[cfg(test)]
mod meter_tests;
pub mod redis;
pub mod refusals;
pub mod remote;
pub mod reset;
pub mod settle;
pub mod snapshot;

use super::memory::MemoryStore;
use super::tiers::RateTier;
use crate::limit::{evaluate_into, Verdict};
use crate::store::error::StoreError;
use lease::Slices;
use refusals::RefusalCache;
pub use remote::Remote;

/// A rate script as Redis runs it: `tat.lua` (the server's clock, a TAT's stored form and
/// a key's debt read from it) before the script's own text, so the scripts share one
/// reading of a TAT instead of each writing it out.
fn script(body: &str) -> ::redis::Script {
    ::redis::Script::new(&[include_str!("tat.lua"), body].concat())
}

/// The rate tiers' own state beside the TAT tables: what Redis last refused.
#[derive(Default)]
pub struct Rates {
    /// With Redis: refusals remembered until the wait Redis named has passed.
    pub refusals: RefusalCache,
}

impl Rates {
    /// Decides `tiers` at `now` in the process-local table, into `verdict`.
    pub fn decide_local(
        local: &MemoryStore,
        tiers: &[RateTier],
        now: u64,
        cost: u64,
        verdict: &mut Verdict,
    ) {
        evaluate_into(local, tiers, now, cost, verdict);
    }

    /// Decides `tiers` at `now` (local clock) with Redis: refused here when the refusal
    /// cache already knows the answer, otherwise in Redis, leased tiers from this
    /// gateway's slices (which read the clock again as they take their units). The
    /// settled tiers' charge times on Redis's clock go into `times`.
    pub async fn decide_remote(
        remote: &Remote<'_>,
        slices: &std::sync::Arc<Slices>,
        tiers: &[RateTier],
        (now, cost): (u64, u64),
        times: &mut redis::ChargeTimes,
    ) -> Result<Verdict, StoreError> {
        let refusals = remote.refusals;
        if let Some(v) = refusals.refuse(tiers, now, cost) {
            return Ok(v);
        }
        // A key refused moments ago: one call at a time, the rest re-check after.
        let _flight = if refusals.known(tiers, now) {
            match refusals.single_flight(tiers).await {
                Some(guard) => Some(guard),
                None => {
                    if let Some(v) = refusals.refuse(tiers, now, cost) {
                        return Ok(v);
                    }
                    None
                }
            }
        } else {
            None
        };
        let leased = tiers.iter().any(|t| t.leased);
        let verdict = if leased {
            slices.check(remote, tiers, cost, times).await?
        } else {
            let decided = redis::Decided::default();
            redis::check(remote, tiers, (cost, now), decided, times).await?
        };
        refusals.record(tiers, &verdict, now);
        Ok(verdict)
    }
}
