//! Why a metered body was cut: the error the body carries out to whoever answers for it
//! (the forwarding's error mapping turns it into a 413, a 503 or a reset). With the answers,
//! not the meter, so that the upstream pool and the answer read it without importing the
//! settlement.

use std::sync::Arc;

use crate::config::Policy;

/// Why a body was cut.
#[derive(Debug, thiserror::Error)]
#[error("policy `{}`: {}", policy.name, match why { CutReason::Budget => "the key's budget ran out while the body streamed", CutReason::MaxCost => "the body reached max_cost", CutReason::Store => "the store could not meter the body" })]
pub struct BudgetExhausted {
    pub policy: Arc<Policy>,
    pub why: CutReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// The key is at its bound and refills later than `max_delay` allows to wait.
    Budget,
    /// The body would move more than `max_cost`.
    MaxCost,
    /// The store failed and `on_error = "deny"`.
    Store,
}
