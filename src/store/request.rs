//! One request as the limiter sees it: each tier's key (or keys, when a key source came
//! with several distinct values) in the store's encoding, decided with one `now`, with
//! `on_error` applied and counted when the store fails.

use arrayvec::ArrayVec;
use smallvec::SmallVec;

use super::{KeyBuilder, Limiter, Outcome, StoreError};
use crate::config::{Missing, Policy, Route};
use crate::key::{KeyPart, RedisKey, RequestView, MAX_KEY_VALUES};
use crate::limit::{Tier, Verdict, INLINE_DECISIONS};

/// Every decision one request asks of the limiter.
#[derive(Default)]
pub struct RequestTiers {
    pub tiers: SmallVec<[Tier; INLINE_DECISIONS]>,
    /// For each tier, the position of its policy in the route (keys of one policy are
    /// consecutive).
    pub positions: SmallVec<[usize; INLINE_DECISIONS]>,
    /// For each tier, its Redis key; empty (never allocated) in memory mode.
    pub redis_keys: Vec<RedisKey>,
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
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            tiers: RequestTiers::default(),
            verdict: Verdict::unlimited(),
        }
    }
}

impl Limiter {
    /// Decides `route`'s tiers for the request `view` at `now` (local clock, one reading
    /// for every tier), into `admission`. A store failure is counted here and answered per
    /// `on_error`.
    pub async fn check_request(
        &self,
        route: &Route,
        view: &RequestView<'_>,
        now: u64,
        admission: &mut Admission,
    ) -> Result<(), Refusal> {
        let Admission { tiers, verdict } = admission;
        tiers.fill(self, route, view).map_err(Refusal::Key)?;
        if tiers.tiers.is_empty() {
            *verdict = Verdict::unlimited();
            return Ok(());
        }
        match self
            .check(&tiers.tiers, &tiers.redis_keys, now, route.cost, verdict)
            .await
        {
            Outcome::Decided => Ok(()),
            Outcome::Local(e) => {
                self.failed(&e);
                Ok(())
            }
            Outcome::FailedOpen(e) => {
                self.failed(&e);
                *verdict = Verdict::unlimited();
                Ok(())
            }
            Outcome::FailedClosed(e) => {
                self.failed(&e);
                Err(Refusal::StoreUnavailable)
            }
        }
    }

    fn failed(&self, e: &StoreError) {
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

impl RequestTiers {
    /// Replaces the contents with the tiers of `route` for the request `view`.
    pub fn fill(
        &mut self,
        limiter: &Limiter,
        route: &Route,
        view: &RequestView<'_>,
    ) -> Result<(), KeyRefusal> {
        self.tiers.clear();
        self.positions.clear();
        self.redis_keys.clear();
        let out = self;
        for (position, policy) in route.policies.iter().enumerate() {
            let Some(keys) = keys_of(limiter, policy, view, position)? else {
                continue;
            };
            let max_delay_ns = u64::try_from(policy.max_delay.as_nanos()).unwrap_or(u64::MAX);
            let overflow = limiter.overflow_key(&policy.name);
            for partial in keys {
                let quota = match &partial.single {
                    Some(part) => policy.quota_for(Some(&part.as_text())),
                    None => policy.quota,
                };
                let key = partial.key.finish(&policy.name);
                out.tiers.push(Tier {
                    quota,
                    mode: policy.mode,
                    max_delay_ns,
                    key: key.hash,
                    overflow,
                });
                out.positions.push(position);
                out.redis_keys.extend(key.redis);
            }
        }
        Ok(())
    }
}

/// The keys `policy` applies to in this request; `None` when the tier is skipped.
fn keys_of<'a>(
    limiter: &Limiter,
    policy: &Policy,
    view: &RequestView<'a>,
    position: usize,
) -> Result<Option<ArrayVec<Partial<'a>, MAX_KEY_VALUES>>, KeyRefusal> {
    let mut keys: ArrayVec<Partial<'a>, MAX_KEY_VALUES> = ArrayVec::new();
    keys.push(Partial {
        key: limiter.key_builder(&policy.name),
        single: None,
    });
    let too_many = KeyRefusal::TooManyValues(position);
    for source in &policy.key {
        let values = source.extract(view).map_err(|_| too_many)?;
        if values.is_empty() {
            match policy.missing {
                Missing::Skip => return Ok(None),
                Missing::Reject => return Err(KeyRefusal::Missing(position)),
                Missing::Shared => {
                    for partial in &mut keys {
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
        let single_source = policy.key.len() == 1 && !policy.overrides.is_empty();
        if let [part] = values.as_slice() {
            // The common case: extend every key in place, no copies.
            for key in &mut keys {
                key.add(part, single_source);
            }
            continue;
        }
        let so_far = std::mem::take(&mut keys);
        for key in &so_far {
            for part in &values {
                let mut next = key.clone();
                next.add(part, single_source);
                keys.push(next);
            }
        }
    }
    Ok(Some(keys))
}
