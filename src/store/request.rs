//! One request as the limiter sees it: each tier's key (or keys, when a key source came
//! with several distinct values) in the store's encoding, decided with one `now`, with
//! `on_error` applied and counted when the store fails.

use arrayvec::ArrayVec;
use smallvec::SmallVec;

use super::held::Held;
use super::settle::PendingSettle;
use super::{KeyBuilder, Limiter, Outcome, StoreError};
use crate::clock::Clock;
use crate::config::compile::Applied;
use crate::config::{Missing, Policy, PolicyKind, Route};
use crate::key::{KeyPart, KeyValues, RedisKey, RequestView, MAX_KEY_VALUES};
use crate::limit::{Mode, Tier, Verdict, INLINE_DECISIONS};

/// Every decision one request asks of the limiter.
#[derive(Default)]
pub struct RequestTiers {
    pub tiers: SmallVec<[Tier; INLINE_DECISIONS]>,
    /// For each tier, the position of its policy in the route (keys of one policy are
    /// consecutive).
    pub positions: SmallVec<[usize; INLINE_DECISIONS]>,
    /// For each tier, its Redis key; empty (never allocated) in memory mode.
    pub redis_keys: Vec<RedisKey>,
    /// The concurrency tiers: slots to hold while the request is in flight.
    pub slots: SmallVec<[SlotTier; 2]>,
    /// For each concurrency tier, its Redis lease set; empty in memory mode.
    pub slot_keys: Vec<String>,
    /// One bit per tier (by index in `tiers`): decided from a leased slice.
    pub leased: u32,
    /// One bit per tier: its cost is settled after the response (its TAT may move back).
    pub settled: u32,
}

/// One concurrency decision: a slot on `key`, at most `max` held at once.
#[derive(Debug, Clone, Copy)]
pub struct SlotTier {
    pub key: u64,
    pub max: u32,
    /// The position of its policy in the route.
    pub position: usize,
    pub mode: Mode,
    /// How long the request may wait for a slot.
    pub max_delay: std::time::Duration,
    /// Redis: how long a slot of a gateway that died stays taken.
    pub lease_ttl: std::time::Duration,
}

/// Why a request cannot be keyed (400), with the position of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    /// `missing = "reject"` and the source is absent.
    Missing(usize),
    /// The key would take more than [`MAX_KEY_VALUES`] distinct values.
    TooManyValues(usize),
}

/// One composed key under construction.
#[derive(Clone)]
struct Partial<'a> {
    key: KeyBuilder,
    /// The part, for override look-ups of single-source keys.
    single: Option<KeyPart<'a>>,
}

impl<'a> Partial<'a> {
    fn add(&mut self, part: &KeyPart<'a>, single_source: bool) {
        self.key.part(part);
        if single_source {
            self.single = Some(part.clone());
        }
    }
}

/// Why a request is answered without deciding its tiers.
#[derive(Debug)]
pub enum Refusal {
    /// 400: a tier's key cannot be taken from the request.
    Key(KeyRefusal),
    /// 503: the store failed and `on_error = "deny"`.
    StoreUnavailable,
}

/// How one concurrency tier went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcome {
    /// A slot is held; `free` were left after taking it.
    Held { free: u32 },
    /// The store could not be asked and `on_error = "allow"`: admitted without a slot.
    Unchecked,
    /// Every slot was taken (after waiting, with `max_delay`): the request is refused.
    Refused,
    /// A shadow tier that would have refused: counted, not held, not refused.
    ShadowFull,
    /// Not decided: an earlier tier refused.
    Skipped,
}

/// A decided request: its tiers (for headers and metrics) and the verdict. This is the
/// handle through which whatever outlives the decision is given back: concurrency slots
/// released when the response ends, cost settled once it is known, leased capacity
/// returned. Each capability adds its part here, not a new call on the request path.
///
/// The request path owns it and [`Limiter::check_request`] fills it in place: it holds
/// every tier's key and outcome (kilobytes), which are never copied around.
pub struct Admission {
    pub tiers: RequestTiers,
    pub verdict: Verdict,
    /// The clock reading every rate tier was decided at (after any wait for a slot).
    pub now: u64,
    /// Per concurrency tier, in `tiers.slots` order.
    pub slot_outcomes: SmallVec<[SlotOutcome; 2]>,
    /// The slots this request holds: released when dropped, so whoever keeps the admission
    /// (the response body, a tunnel) decides when.
    pub held: SmallVec<[Held; 2]>,
    /// The admitted tiers whose cost is settled once the upstream has answered.
    pub settles: SmallVec<[PendingSettle; 1]>,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            tiers: RequestTiers::default(),
            verdict: Verdict::unlimited(),
            now: 0,
            slot_outcomes: SmallVec::new(),
            held: SmallVec::new(),
            settles: SmallVec::new(),
        }
    }
}

impl Admission {
    /// The concurrency tier that refused the request, as an index into `tiers.slots`.
    pub fn refused_slot(&self) -> Option<usize> {
        self.slot_outcomes
            .iter()
            .position(|o| *o == SlotOutcome::Refused)
    }

    /// Takes the held slots out, to keep them as long as the response lasts.
    pub fn take_slots(&mut self) -> SmallVec<[Held; 2]> {
        std::mem::take(&mut self.held)
    }
}

impl Limiter {
    /// Decides `route`'s tiers for the request `view` into `admission`: first the
    /// concurrency tiers (taking a slot each, waiting for one up to `max_delay`), then
    /// every rate tier at one clock reading taken after that. A refusal anywhere leaves no
    /// slot held and no TAT moved. A store failure is counted here and answered per
    /// `on_error`.
    pub async fn check_request(
        &self,
        route: &Route,
        view: &RequestView<'_>,
        clock: &dyn Clock,
        admission: &mut Admission,
    ) -> Result<(), Refusal> {
        admission
            .tiers
            .fill(self, route, view, clock)
            .map_err(Refusal::Key)?;
        if !admission.tiers.slots.is_empty() && !self.take_slots(route, clock, admission).await? {
            admission.now = clock.now_ns();
            admission.verdict = Verdict::unlimited();
            return Ok(());
        }
        let now = clock.now_ns();
        admission.now = now;
        let Admission {
            tiers,
            verdict,
            held,
            settles,
            ..
        } = admission;
        if tiers.tiers.is_empty() {
            *verdict = Verdict::unlimited();
            return Ok(());
        }
        let released = |verdict: &Verdict, held: &mut SmallVec<[Held; 2]>| {
            if !verdict.admitted {
                // A rate tier refused: the slots go back, the request leaves no trace.
                held.clear();
            }
        };
        let outcome = self.check(tiers, now, route.cost, clock, verdict).await;
        match outcome {
            Outcome::Decided => {
                released(verdict, held);
                pending_settles(route, tiers, verdict, now, true, settles);
                Ok(())
            }
            Outcome::Local(e) => {
                self.failed(&e);
                released(verdict, held);
                pending_settles(route, tiers, verdict, now, false, settles);
                Ok(())
            }
            Outcome::FailedOpen(e) => {
                self.failed(&e);
                *verdict = Verdict::unlimited();
                Ok(())
            }
            Outcome::FailedClosed(e) => {
                self.failed(&e);
                held.clear();
                Err(Refusal::StoreUnavailable)
            }
        }
    }

    pub(super) fn failed(&self, e: &StoreError) {
        self.metrics
            .store_errors
            .get_or_create(&crate::metrics::StoreLabels {
                backend: "redis",
                kind: e.kind(),
            })
            .inc();
        self.metrics
            .store_breaker_open
            .set(i64::from(!self.ready()));
        tracing::debug!(error = %e, "store call failed; applying on_error");
    }
}

/// The admitted tiers of settled policies, to settle once the cost is known. `in_store`:
/// decided by the configured store (Redis keys apply), not by the local fallback.
fn pending_settles(
    route: &Route,
    tiers: &RequestTiers,
    verdict: &Verdict,
    now: u64,
    in_store: bool,
    out: &mut SmallVec<[PendingSettle; 1]>,
) {
    out.clear();
    if !verdict.admitted {
        return;
    }
    for (i, (tier, outcome)) in tiers.tiers.iter().zip(verdict.outcomes()).enumerate() {
        let policy = &route.policies[tiers.positions[i]];
        let settled = policy.rate().is_some_and(|r| r.settle.is_some());
        if !settled || !outcome.decision.admitted {
            continue;
        }
        out.push(PendingSettle {
            policy: policy.clone(),
            tier: i,
            key: outcome.key,
            redis_key: in_store
                .then(|| tiers.redis_keys.get(i).map(|k| k.key.clone()))
                .flatten(),
            t_ns: tier.quota.interval_ns(),
            reserve: tier.cost(route.cost),
            ahead_ns: outcome.decision.until_idle_ns,
            admitted_at: now,
        });
    }
}

impl RequestTiers {
    /// Replaces the contents with the tiers of `route` for the request `view`.
    pub fn fill(
        &mut self,
        limiter: &Limiter,
        route: &Route,
        view: &RequestView<'_>,
        clock: &dyn Clock,
    ) -> Result<(), KeyRefusal> {
        self.tiers.clear();
        self.positions.clear();
        self.redis_keys.clear();
        self.slots.clear();
        self.slot_keys.clear();
        self.leased = 0;
        self.settled = 0;
        let out = self;
        let mut keys = ArrayVec::new();
        let mut values = KeyValues::new();
        for (position, policy) in route.policies.iter().enumerate() {
            if !keys_of(limiter, policy, view, position, &mut keys, &mut values)? {
                continue;
            }
            let rate = match &policy.kind {
                PolicyKind::Rate(rate) => rate,
                PolicyKind::Concurrency(cap) => {
                    for partial in keys.drain(..) {
                        let key = partial.key.finish(&policy.name);
                        let max = match limiter.overrides.get(key.hash, clock) {
                            Some(Applied::Concurrency(max)) => max,
                            _ => {
                                cap.max_for(partial.single.as_ref().map(|p| p.as_text()).as_deref())
                            }
                        };
                        out.slots.push(SlotTier {
                            key: key.hash,
                            max,
                            position,
                            mode: policy.mode,
                            max_delay: policy.max_delay,
                            lease_ttl: cap.lease_ttl,
                        });
                        if let Some(redis) = key.redis {
                            out.slot_keys.push(format!("{}:in-flight", redis.key));
                        }
                    }
                    continue;
                }
            };
            let max_delay_ns = u64::try_from(policy.max_delay.as_nanos()).unwrap_or(u64::MAX);
            let overflow = limiter.overflow_key(&policy.name);
            for partial in keys.drain(..) {
                let key = partial.key.finish(&policy.name);
                let quota = match (limiter.overrides.get(key.hash, clock), &partial.single) {
                    (Some(Applied::Rate(quota)), _) => quota,
                    (_, Some(part)) => rate.quota_for(Some(&part.as_text())),
                    (_, None) => rate.quota,
                };
                out.tiers.push(Tier {
                    reserve: rate.settle.as_ref().and_then(|s| s.reserve),
                    quota,
                    mode: policy.mode,
                    max_delay_ns,
                    key: key.hash,
                    overflow,
                });
                if rate.sync == crate::config::Sync::Lease && key.redis.is_some() {
                    out.leased |= 1 << (out.tiers.len() - 1);
                }
                if rate.settle.is_some() {
                    out.settled |= 1 << (out.tiers.len() - 1);
                }
                out.positions.push(position);
                out.redis_keys.extend(key.redis);
            }
        }
        Ok(())
    }
}

/// Fills `keys` with the keys `policy` applies to in this request; `false` when the tier is
/// skipped. `keys` and `values` are the caller's buffers, reused from tier to tier (moving
/// them out of every call cost more than composing the keys).
fn keys_of<'a>(
    limiter: &Limiter,
    policy: &Policy,
    view: &RequestView<'a>,
    position: usize,
    keys: &mut ArrayVec<Partial<'a>, MAX_KEY_VALUES>,
    values: &mut KeyValues<'a>,
) -> Result<bool, KeyRefusal> {
    keys.clear();
    keys.push(Partial {
        key: limiter.key_builder(&policy.name),
        single: None,
    });
    let too_many = KeyRefusal::TooManyValues(position);
    for source in &policy.key {
        source.extract_into(view, values).map_err(|_| too_many)?;
        if values.is_empty() {
            match policy.missing {
                Missing::Skip => return Ok(false),
                Missing::Reject => return Err(KeyRefusal::Missing(position)),
                Missing::Shared => {
                    for partial in keys.iter_mut() {
                        partial.key.missing();
                    }
                }
            }
            continue;
        }
        // Each value of this source combines with each key so far.
        if keys.len() * values.len() > MAX_KEY_VALUES {
            return Err(too_many);
        }
        // Override look-ups need the part of a single-source key.
        let single_source = policy.key.len() == 1 && policy.override_count() > 0;
        if let [part] = values.as_slice() {
            // The common case: extend every key in place, no copies.
            for key in keys.iter_mut() {
                key.add(part, single_source);
            }
            continue;
        }
        let so_far = std::mem::take(keys);
        for key in &so_far {
            for part in values.iter() {
                let mut next = key.clone();
                next.add(part, single_source);
                keys.push(next);
            }
        }
    }
    Ok(true)
}
