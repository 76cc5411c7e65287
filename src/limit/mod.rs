//! The pure limiter: GCRA maths and multi-tier evaluation. No I/O, no clock reads.

pub mod calendar;
pub mod gcra;
pub mod settle;
pub mod slice;
pub mod tiers;

pub use gcra::{Decision, Quota, QuotaError};
pub use tiers::{
    evaluate, evaluate_into, Mode, TatTable, Tier, TierOutcome, Verdict, INLINE_DECISIONS,
    MAX_DECISIONS, MAX_FORCED_LEAD_NS, MAX_KEYS_PER_TIER, MAX_TIERS,
};

#[cfg(test)]
pub(crate) mod model_tests;
