//! What a rate decision with Redis talks to.

use super::refusals::RefusalCache;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::redis::RedisStore;

/// What a decision with Redis talks to: Redis, the refusal cache it keeps current, the
/// metrics of slice calls, and the clock leased units are taken by.
pub struct Remote<'a> {
    pub store: &'a std::sync::Arc<RedisStore>,
    pub refusals: &'a RefusalCache,
    pub metrics: &'a std::sync::Arc<Metrics>,
    pub clock: &'a dyn Clock,
}
