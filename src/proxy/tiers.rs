//! A route's tiers for one request: each policy's key (or keys, when a key source came
//! with several distinct values) and its quota, ready for the limiter.

use arrayvec::ArrayVec;

use crate::config::{Missing, Policy, Route};
use crate::key::{KeyHasher, KeyPart, RedisKey, RedisKeyBuilder, RequestView, MAX_KEY_VALUES};
use crate::limit::{Tier, MAX_DECISIONS};
use crate::store::Limiter;

/// Every decision one request asks of the limiter.
#[derive(Default)]
pub struct RequestTiers {
    pub tiers: ArrayVec<Tier, MAX_DECISIONS>,
    /// For each tier, the position of its policy in the route (keys of one policy are
    /// consecutive).
    pub positions: ArrayVec<usize, MAX_DECISIONS>,
    /// For each tier, its Redis key; empty in memory mode.
    pub redis_keys: ArrayVec<RedisKey, MAX_DECISIONS>,
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
    hasher: KeyHasher<ahash::AHasher>,
    redis: Option<RedisKeyBuilder>,
    /// The part, for override look-ups of single-source keys.
    single: Option<KeyPart<'a>>,
}

impl<'a> Partial<'a> {
    fn add(&mut self, part: &KeyPart<'a>, single_source: bool) {
        self.hasher.part(part);
        if let Some(r) = self.redis.as_mut() {
            r.part(part);
        }
        if single_source {
            self.single = Some(part.clone());
        }
    }
}

impl RequestTiers {
    /// Builds the tiers of `route` for the request `view`.
    pub fn build(
        limiter: &Limiter,
        route: &Route,
        view: &RequestView<'_>,
    ) -> Result<Self, KeyRefusal> {
        let mut out = Self::default();
        for (position, policy) in route.policies.iter().enumerate() {
            let Some(keys) = keys_of(limiter, policy, view, position)? else {
                continue;
            };
            let max_delay_ns = u64::try_from(policy.max_delay.as_nanos()).unwrap_or(u64::MAX);
            let overflow = KeyHasher::new(limiter.key_hasher(), &policy.name).overflow();
            for key in keys {
                let quota = match &key.single {
                    Some(part) => policy.quota_for(Some(&part.as_text())),
                    None => policy.quota,
                };
                out.tiers.push(Tier {
                    quota,
                    mode: policy.mode,
                    max_delay_ns,
                    key: key.hasher.finish(),
                    overflow,
                });
                out.positions.push(position);
                out.redis_keys
                    .extend(key.redis.map(|r| r.finish(&policy.name)));
            }
        }
        Ok(out)
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
        hasher: KeyHasher::new(limiter.key_hasher(), &policy.name),
        redis: limiter.is_remote().then(RedisKeyBuilder::default),
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
                    for key in &mut keys {
                        key.hasher.missing();
                        if let Some(r) = key.redis.as_mut() {
                            r.missing();
                        }
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
