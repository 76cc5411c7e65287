//! One `ShouldRateLimit` call as one decision: each descriptor matched to the rule of its
//! domain, every matched descriptor's policy decided by the limiter at one clock reading,
//! all charged or none. What it decided stays typed ([`Decided`]) until the answer is
//! rendered.

use arrayvec::ArrayVec;

use super::proto::RateLimitRequest;
use crate::clock::Clock;
use crate::config::policy::Missing;
use crate::config::rls::{Found, RlsRule, Unmatched};
use crate::config::Rls;
use crate::limit::{Mode, MAX_DECISIONS, MAX_TIERS};
use crate::proxy::snapshot::Snapshot;
use crate::store::limiter::Descriptor;
use crate::store::{Admission, Limiter, Outcome};

/// Why a call is not decided at all: the answer is a gRPC error, not a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("a call names at most {MAX_DECISIONS} descriptors; this one names {0}")]
    TooManyDescriptors(usize),
    #[error("descriptor {index} has {entries} entries; rules match at most {MAX_TIERS}")]
    TooManyEntries { index: usize, entries: usize },
    #[error("the call names no domain")]
    NoDomain,
    #[error("the call names no descriptors")]
    NoDescriptors,
    #[error(
        "not a RateLimitRequest: its fields cannot be read (a group, or a field past the end)"
    )]
    Unreadable,
}

/// Refuses, before it is decoded, a `RateLimitRequest` (`message`) naming more
/// descriptors, or a descriptor of more entries, than [`decide`] takes: counted on the
/// wire, since an empty descriptor is two bytes there and a hundred decoded. A message
/// whose fields the count cannot read (a group, which the decoder would skip) is refused
/// too: otherwise it would be decoded uncounted.
pub fn within_bounds(message: &[u8]) -> Result<(), CallError> {
    use crate::proto_wire::{count, each_field};
    let (mut index, mut wide, mut unreadable) = (0, None, false);
    let descriptors = each_field(message, 2, |descriptor| {
        match count(descriptor, 1) {
            None => unreadable = true,
            Some(entries) if entries > MAX_TIERS && wide.is_none() => {
                wide = Some(CallError::TooManyEntries { index, entries });
            }
            Some(_) => {}
        }
        index += 1;
    });
    let Some(descriptors) = descriptors.filter(|_| !unreadable) else {
        return Err(CallError::Unreadable);
    };
    if descriptors > MAX_DECISIONS {
        return Err(CallError::TooManyDescriptors(descriptors));
    }
    wide.map_or(Ok(()), Err)
}

/// How one descriptor of a call was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// Decided by the rule at this index of `[[rls.rules]]`.
    Rule(usize),
    /// No rule names it: answered per `on_unmatched`.
    Unmatched(Unmatched),
    /// It has no entries (Envoy's `skip_if_absent` left nothing): OK, not counted.
    Empty,
    /// The rule at this index blocks it (`requests_per_unit: 0`): over, not decided.
    Blocked(usize),
    /// The rule at this index matched, but a value its key is made of is empty, and its
    /// policy says `missing = "reject"`: over, not decided, as the HTTP door answers a
    /// request lacking the key 400 and charges nothing.
    MissingKey(usize),
}

/// A decided call: each descriptor's match, in order, and the limiter's decisions of the
/// matched ones (positions are descriptor indexes): `admission` all-or-nothing, `reports`
/// the usage reported by `reports = true` rules, charged on their own and never refused.
pub struct Decided {
    pub matched: ArrayVec<Matched, MAX_DECISIONS>,
    /// Boxed, as the proxy keeps its own per connection: a decision holds every tier's
    /// key and outcome (kilobytes), and a call's future is moved as it is polled.
    pub admission: Box<Admission>,
    pub reports: Option<Box<Admission>>,
    /// What each matched descriptor asked to be charged, by position (0 for the rest).
    pub costs: ArrayVec<u64, MAX_DECISIONS>,
}

impl Decided {
    /// Whether descriptors on one key asked more of it together than its whole burst:
    /// each alone may fit, but together (the call is all or nothing) they never pass.
    pub fn over_a_burst_together(&self) -> bool {
        let keys: ArrayVec<(usize, u64), MAX_DECISIONS> = (self.admission.per_policy())
            .map(|p| (p.position, p.key))
            .collect();
        let cost = |position: usize| self.costs.get(position).copied().unwrap_or(0);
        self.admission.rate_reports().any(|report| {
            let Some(&(_, key)) = keys.iter().find(|(p, _)| *p == report.position) else {
                return false;
            };
            let together = (keys.iter().filter(|(_, k)| *k == key))
                .fold(0u64, |sum, &(p, _)| sum.saturating_add(cost(p)));
            together > report.quota.burst()
        })
    }

    /// Whether the call is over whatever the limiter says: a descriptor no rule names
    /// (`on_unmatched = "over_limit"`), or one a blocking rule matched.
    pub fn refused_outright(&self) -> bool {
        self.matched.iter().any(|m| {
            matches!(
                m,
                Matched::Unmatched(Unmatched::OverLimit)
                    | Matched::Blocked(_)
                    | Matched::MissingKey(_)
            )
        })
    }

    /// The rule at `position` (a matched or blocked descriptor).
    pub fn rule_at(&self, position: usize) -> Option<usize> {
        match self.matched.get(position)? {
            Matched::Rule(rule) | Matched::Blocked(rule) | Matched::MissingKey(rule) => Some(*rule),
            Matched::Unmatched(_) | Matched::Empty => None,
        }
    }

    /// Each decision of the call: the all-or-nothing one, then the reports'.
    pub fn admissions(&self) -> impl Iterator<Item = &Admission> {
        std::iter::once(&*self.admission).chain(self.reports.as_deref())
    }
}

/// Decides `call` under `rls` (the snapshot's `[rls]`): the matched descriptors at their
/// costs (the descriptor's `hits_addend`, else the call's, else 1), or, when a descriptor
/// no rule names refuses the call, every matched one only checked (nothing is charged).
/// Usage reports (a `reports = true` rule's descriptor with a cost) are charged first, on
/// their own: a refusal of the rest does not undo usage already spent.
pub async fn decide(
    (snapshot, rls): (&Snapshot, &Rls),
    limiter: &Limiter,
    clock: &dyn Clock,
    call: &RateLimitRequest,
) -> Result<Decided, CallError> {
    let mut matched = match_descriptors(rls, call)?;
    let replaced = replaced_names(rls, &mut matched);
    let is_replaced = |rule: &RlsRule| names_one_of(rule, &replaced);
    let call_cost = match call.hits_addend {
        0 => 1,
        n => u64::from(n),
    };
    let costs = asked_costs(call, &matched, call_cost);
    let mut decided = Decided {
        matched,
        admission: Box::default(),
        reports: None,
        costs,
    };
    let check_only = decided.refused_outright();
    let descriptors = |reports: bool| {
        let is_replaced = &is_replaced;
        decided
            .matched
            .iter()
            .enumerate()
            .filter_map(move |(position, m)| {
                let Matched::Rule(rule_index) = *m else {
                    return None;
                };
                let rule = rls.rules.get(rule_index)?;
                if is_replaced(rule) {
                    return None;
                }
                // An unlimited rule has neither policy nor plan: not decided.
                let policy = rule.policy.as_deref()?;
                let plan = snapshot.rls_plans.get(rule_index)?.as_ref()?;
                let d = &call.descriptors[position];
                // A key with an empty value under `missing = "skip"`: this limit does not
                // apply to the descriptor, as to a request lacking the key.
                if lacking(rule, d) == Some(Missing::Skip) {
                    return None;
                }
                let cost = asked_cost(d, call_cost);
                let report = rule.reports && cost > 0;
                (report == reports).then(|| Descriptor {
                    position,
                    policy,
                    plan,
                    parts: rule
                        .key_parts(d.entries.iter().map(|e| e.value.as_str()))
                        .collect(),
                    cost: if check_only && !report { 0 } else { cost },
                    forced: report,
                })
            })
    };
    if descriptors(true).next().is_some() {
        let mut reports = Box::<Admission>::default();
        limiter
            .check_descriptors(descriptors(true), clock, &mut reports)
            .await;
        let failed = reports.outcome() == Outcome::StoreUnavailable;
        decided.reports = Some(reports);
        if failed {
            // The call fails (on_error = "deny"): nothing else of it is charged.
            return Ok(decided);
        }
    }
    let mut admission = Box::<Admission>::default();
    limiter
        .check_descriptors(descriptors(false), clock, &mut admission)
        .await;
    decided.admission = admission;
    Ok(decided)
}

/// What each matched descriptor of `call` asks to be charged, by position (0 for the rest).
fn asked_costs(
    call: &RateLimitRequest,
    matched: &[Matched],
    call_cost: u64,
) -> ArrayVec<u64, MAX_DECISIONS> {
    (call.descriptors.iter().zip(matched))
        .map(|(d, m)| match m {
            Matched::Rule(_) => asked_cost(d, call_cost),
            _ => 0,
        })
        .collect()
}

/// What descriptor `d` asks to be charged: its `hits_addend`, else the call's. A refund
/// (Envoy's `is_negative_hits`) is only a check: nothing is given back on a caller's word
/// (see docs/rls.md).
fn asked_cost(d: &super::proto::RateLimitDescriptor, call_cost: u64) -> u64 {
    match d.is_negative_hits {
        true => 0,
        false => d.hits_addend.unwrap_or(call_cost),
    }
}

/// What `rule`'s policy does with a key it lacks, when a value `d` gives one of the key's
/// parts is empty (spaces and tabs around it removed, as the HTTP door reads a header:
/// Envoy sends an empty header's value as `""`); `None` when the key is whole. Under
/// `"shared"` the empty part is the HTTP door's missing marker (`RequestTiers::push_parts`).
fn lacking(rule: &RlsRule, d: &super::proto::RateLimitDescriptor) -> Option<Missing> {
    let policy = rule.policy.as_deref()?;
    rule.key_parts(d.entries.iter().map(|e| e.value.as_str()))
        .any(|part| crate::key::source::trim_ows_text(part).is_empty())
        .then_some(policy.missing)
}

/// The names of the limits another matched limit of the call replaces (the YAML's
/// `replaces`, of limits it names): they are not decided, but answered OK without a
/// limit, so a blocked match of one (or one lacking its key) is let through here.
fn replaced_names<'r>(rls: &'r Rls, matched: &mut [Matched]) -> Vec<&'r str> {
    let rule_of = |m: &Matched| match m {
        Matched::Rule(i) | Matched::Blocked(i) | Matched::MissingKey(i) => rls.rules.get(*i),
        Matched::Unmatched(_) | Matched::Empty => None,
    };
    let replaced: Vec<&str> = matched
        .iter()
        .filter_map(rule_of)
        .flat_map(|r| r.replaces.iter().map(String::as_str))
        .collect();
    for m in matched.iter_mut() {
        if let Matched::Blocked(i) | Matched::MissingKey(i) = *m {
            if rls.rules.get(i).is_some_and(|r| names_one_of(r, &replaced)) {
                *m = Matched::Rule(i); // not decided: OK
            }
        }
    }
    replaced
}

/// Whether `rule` is a named limit among `names`.
fn names_one_of(rule: &RlsRule, names: &[&str]) -> bool {
    rule.named && rule.name.as_deref().is_some_and(|n| names.contains(&n))
}

/// Each descriptor of `call` matched to its rule, or unmatched; a call that cannot be
/// decided is an error.
fn match_descriptors(
    rls: &Rls,
    call: &RateLimitRequest,
) -> Result<ArrayVec<Matched, MAX_DECISIONS>, CallError> {
    if call.domain.is_empty() {
        return Err(CallError::NoDomain);
    }
    if call.descriptors.is_empty() {
        return Err(CallError::NoDescriptors);
    }
    if call.descriptors.len() > MAX_DECISIONS {
        return Err(CallError::TooManyDescriptors(call.descriptors.len()));
    }
    let mut matched = ArrayVec::new();
    for (index, d) in call.descriptors.iter().enumerate() {
        match d.entries.len() {
            // What Envoy sends for a descriptor whose only action found nothing to say
            // (`skip_if_absent` and the header absent): nothing to limit, OK whatever
            // `on_unmatched` says, as envoyproxy/ratelimit answers it. An error would
            // undo the call's other descriptors for a client leaving a header out.
            0 => {
                matched.push(Matched::Empty);
                continue;
            }
            n if n > MAX_TIERS => return Err(CallError::TooManyEntries { index, entries: n }),
            _ => {}
        }
        let entries = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        matched.push(match rls.rules.find(&call.domain, entries) {
            Found::Rule(i) => match rls.rules.get(i) {
                Some(rule) if rule.blocked.is_some_and(|(_, m)| m == Mode::Enforce) => {
                    Matched::Blocked(i)
                }
                Some(rule) if lacking(rule, d) == Some(Missing::Reject) => Matched::MissingKey(i),
                Some(_) => Matched::Rule(i),
                None => Matched::Unmatched(rls.on_unmatched),
            },
            // Written without a limit: OK, as envoyproxy/ratelimit answers it.
            Found::Exempt => Matched::Unmatched(Unmatched::Ok),
            Found::Unnamed => Matched::Unmatched(rls.on_unmatched),
        });
    }
    Ok(matched)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::rls::proto::{Entry, RateLimitDescriptor, RateLimitRequest};

    fn call(descriptors: &[usize]) -> Vec<u8> {
        let entry = |i: usize| Entry {
            key: format!("k{i}"),
            value: "v".repeat(i),
        };
        let descriptor = |&n: &usize| RateLimitDescriptor {
            entries: (0..n).map(entry).collect(),
            ..RateLimitDescriptor::default()
        };
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: descriptors.iter().map(descriptor).collect(),
            hits_addend: 7,
        };
        request.encode_to_vec()
    }

    /// What the wire count refuses is what `decide` refuses once decoded, in its words.
    #[test]
    fn the_wire_count_refuses_what_the_decoded_call_would_be_refused_for() {
        assert_eq!(within_bounds(&call(&[MAX_TIERS; MAX_DECISIONS])), Ok(()));
        assert_eq!(within_bounds(&call(&[0, 1, 2])), Ok(()));
        assert_eq!(
            within_bounds(&call(&[1; MAX_DECISIONS + 1])),
            Err(CallError::TooManyDescriptors(MAX_DECISIONS + 1))
        );
        // A group (wire type 3, then its end, 4), which the decoder would skip over.
        let mut grouped = call(&[1; MAX_DECISIONS + 1]);
        grouped.extend([15 << 3 | 3, 15 << 3 | 4]);
        assert_eq!(within_bounds(&grouped), Err(CallError::Unreadable));
        assert!(
            RateLimitRequest::decode(&grouped[..]).is_ok(),
            "prost skips it"
        );
        assert_eq!(
            within_bounds(&call(&[1, MAX_TIERS + 1, MAX_TIERS + 2])),
            Err(CallError::TooManyEntries {
                index: 1,
                entries: MAX_TIERS + 1
            })
        );
    }
}
