//! What a priced policy's tier reserves for a request's quote (`reserve =
//! "price:NAME"`): the most it can cost on its model's row, within the policy's bounds.

use crate::config::Quote;

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

impl PricedPlan {
    /// The units a tier whose key has `burst` reserves for `quote`: the most the request
    /// can cost, within `min_cost` and `max_cost`, and at most the key's whole burst (a
    /// larger reserve could never be taken: the request would be refused whenever it
    /// came, while it may well use less; what it uses past the burst is charged when it
    /// settles, as any usage). A request whose cost the body does not bound (no output
    /// limit, no `max_output`) reserves `max_cost` when it was written, else its input's
    /// price: its usage is charged when the answer reports it (and `max_cost` if it never
    /// does).
    ///
    /// `min_cost` raises a reserve, but not past the burst either: a key whose override
    /// made its burst smaller than `min_cost` would otherwise be refused for good.
    pub fn reserve(&self, quote: &Quote, burst: u64) -> u64 {
        let units = match quote.most {
            Some(most) => most.min(self.max_cost),
            None if self.max_cost_given => self.max_cost,
            None => quote.input.min(self.max_cost),
        };
        units.max(self.min_cost).min(burst).max(1)
    }

    /// Whether `reserved` units bound what a request quoted `quote` can cost: its quote
    /// had a bound, and the reserve was not cut below it by the key's burst. A settle that
    /// falls back to the reserve (no usage came) falls back to `max_cost` instead when it
    /// does not: a quote of 2,100 reserved as a burst of 100 would pay 100 for 1,150.
    pub fn bounds(&self, quote: &Quote, reserved: u64) -> bool {
        quote
            .most
            .is_some_and(|most| reserved >= most.min(self.max_cost))
    }
}
