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
    /// A failed call lets the request through unchecked (`on_error = "allow"`): the
    /// charges of the Cluster groups that answered stay, so a client that steers one key
    /// onto a master that is down does not skip the tiers the others hold.
    pub keeps_answered: bool,
}
