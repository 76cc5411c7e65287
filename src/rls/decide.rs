//! One `ShouldRateLimit` call as one decision: each descriptor matched to the rule of its
//! domain, every matched descriptor's policy decided by the limiter at one clock reading,
//! all charged or none. What it decided stays typed ([`Decided`]) until the answer is
//! rendered.

use arrayvec::ArrayVec;

use super::proto::RateLimitRequest;
use crate::clock::Clock;
use crate::config::rls::{Rls, Unmatched};
use crate::limit::{MAX_DECISIONS, MAX_TIERS};
use crate::proxy::snapshot::Snapshot;
use crate::store::limiter::Descriptor;
use crate::store::{Admission, Limiter};

/// Why a call is not decided at all: the answer is a gRPC error, not a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("a call names at most {MAX_DECISIONS} descriptors; this one names {0}")]
    TooManyDescriptors(usize),
    #[error("descriptor {0} has no entries")]
    EmptyDescriptor(usize),
    #[error("descriptor {index} has {entries} entries; rules match at most {MAX_TIERS}")]
    TooManyEntries { index: usize, entries: usize },
    #[error("the call names no domain")]
    NoDomain,
}

/// How one descriptor of a call was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// Decided by the rule at this index of `[[rls.rules]]`.
    Rule(usize),
    /// No rule names it: answered per `on_unmatched`.
    Unmatched(Unmatched),
}

/// A decided call: each descriptor's match, in order, and the limiter's decision of the
/// matched ones (positions are descriptor indexes).
pub struct Decided {
    pub matched: ArrayVec<Matched, MAX_DECISIONS>,
    pub admission: Admission,
}

impl Decided {
    /// Whether a descriptor no rule names refuses the call (`on_unmatched = "over_limit"`).
    pub fn unmatched_refuses(&self) -> bool {
        self.matched
            .contains(&Matched::Unmatched(Unmatched::OverLimit))
    }
}

/// Decides `call` under `rls` (the snapshot's `[rls]`): the matched descriptors at their
/// costs (the descriptor's `hits_addend`, else the call's, else 1), or, when a descriptor
/// no rule names refuses the call, every matched one only checked (nothing is charged).
pub async fn decide(
    (snapshot, rls): (&Snapshot, &Rls),
    limiter: &Limiter,
    clock: &dyn Clock,
    call: &RateLimitRequest,
) -> Result<Decided, CallError> {
    if call.domain.is_empty() {
        return Err(CallError::NoDomain);
    }
    if call.descriptors.len() > MAX_DECISIONS {
        return Err(CallError::TooManyDescriptors(call.descriptors.len()));
    }
    let mut matched = ArrayVec::new();
    for (index, d) in call.descriptors.iter().enumerate() {
        match d.entries.len() {
            0 => return Err(CallError::EmptyDescriptor(index)),
            n if n > MAX_TIERS => return Err(CallError::TooManyEntries { index, entries: n }),
            _ => {}
        }
        let entries = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        matched.push(match rls.rules.find(&call.domain, entries) {
            Some(rule) => Matched::Rule(rule),
            None => Matched::Unmatched(rls.on_unmatched),
        });
    }
    let mut decided = Decided {
        matched,
        admission: Admission::default(),
    };
    let check_only = decided.unmatched_refuses();
    let call_cost = match call.hits_addend {
        0 => 1,
        n => u64::from(n),
    };
    let descriptors = decided
        .matched
        .iter()
        .enumerate()
        .filter_map(|(position, m)| {
            let Matched::Rule(rule_index) = *m else {
                return None;
            };
            let rule = rls.rules.get(rule_index)?;
            let plan = snapshot.rls_plans.get(rule_index)?;
            let d = &call.descriptors[position];
            // A refund (Envoy's `is_negative_hits`) is only a check: nothing is given back
            // on a caller's word (see docs/rls.md).
            let cost = match d.is_negative_hits {
                true => 0,
                false => d.hits_addend.unwrap_or(call_cost),
            };
            Some(Descriptor {
                position,
                policy: &rule.policy,
                plan,
                parts: rule
                    .key_parts(d.entries.iter().map(|e| e.value.as_str()))
                    .collect(),
                cost: if check_only { 0 } else { cost },
            })
        });
    limiter
        .check_descriptors(descriptors, clock, &mut decided.admission)
        .await;
    Ok(decided)
}
