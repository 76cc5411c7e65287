//! A priced policy's tiers charged the request's quote (`reserve = "price:NAME"`): the
//! most it can cost on its model's row, within the policy's bounds.

use std::ops::Range;

use super::tiers::RequestTiers;
use crate::key::RequestView;

/// How a priced policy's requests are quoted, worked out once per config version.
#[derive(Clone)]
pub(super) struct PricedPlan {
    pub prices: std::sync::Arc<crate::config::Prices>,
    /// The bounds of a quote.
    pub min_cost: u64,
    pub max_cost: u64,
    /// `max_cost` was written: what a request the body does not bound reserves.
    pub max_cost_given: bool,
}

impl RequestTiers {
    /// Charges the tiers in `range` (a priced policy's keys) the request's quote: the
    /// most it can cost, within `min_cost` and `max_cost`. A request whose cost the body
    /// does not bound (no output limit, no `max_output`) reserves `max_cost` when it was
    /// written (at most a key's whole burst), else its input's price: its usage is
    /// charged when the answer reports it.
    pub(super) fn quote(
        &mut self,
        plan: &PricedPlan,
        view: &RequestView<'_>,
        range: Range<usize>,
    ) -> Result<(), crate::config::Unpriced> {
        let quote = plan.prices.quote(view)?;
        for t in &mut self.rate[range] {
            let units = match quote.most {
                Some(most) => most.min(plan.max_cost),
                None if plan.max_cost_given => plan.max_cost.min(t.tier.quota.burst()),
                None => quote.input.min(plan.max_cost),
            };
            t.tier.reserve = std::num::NonZeroU64::new(units.max(plan.min_cost).max(1));
            t.row = Some(quote.row);
            t.unbounded = quote.most.is_none();
        }
        Ok(())
    }
}
