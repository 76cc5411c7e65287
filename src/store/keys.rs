//! Limiter keys in the store's own encoding: the keyed 64-bit hash every store uses, and
//! for Redis the fleet-wide key name as well; and how one request's key sources compose
//! into each tier's keys. Only the store decides which encoding it needs.

use arrayvec::ArrayVec;

use std::sync::Arc;

use super::memory::areas::{area_of, in_area, Areas};
use crate::clock::Clock;
use crate::config::{Config, Missing, Policy};
use crate::key::{
    FleetKey, FleetSecret, KeyHasher, KeyPart, KeyValues, RedisKey, RedisKeyBuilder, RequestView,
    MAX_KEY_VALUES,
};

/// Why a request cannot be keyed or decided (400; 429 for a cost no wait admits), with the
/// position of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    /// `missing = "reject"` and the source is absent.
    Missing(usize),
    /// The key would take more than [`MAX_KEY_VALUES`] distinct values.
    TooManyValues(usize),
    /// A priced policy's table has no row for the model the request names (and no
    /// `default`).
    Unpriced(usize),
    /// The route's cost is above the burst a runtime override gives this key (set so, or
    /// left so by a reload that raised the cost): no request of the route is ever
    /// admitted for the key (429, no wait to tell); `index`: which of the policy's keys.
    AboveBurst { position: usize, index: usize },
}

/// One (policy, key parts) as the store identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreKey {
    pub hash: u64,
    /// The Redis key, when the store is Redis.
    pub redis: Option<RedisKey>,
}

/// Each calendar quota policy's area of the embedded store, with the end of the window the
/// policy is in now ([`KeyMaker::window_ends`]).
pub struct WindowEnds(Vec<(usize, u64)>);

impl WindowEnds {
    /// The end of the window `area`'s policy is in; `None` for an area no quota policy
    /// of the config holds.
    pub fn of(&self, area: usize) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(a, _)| a == area)
            .map(|&(_, end)| end)
    }
}

/// Makes the keys of one gateway: hashes seeded once per process with random keys (so
/// clients cannot aim collisions, and stable across reloads), and Redis keys, keyed by
/// the fleet's secret, when the store is Redis.
pub struct KeyMaker {
    hasher: ahash::RandomState,
    /// The hasher's seeds: a state file keeps them, so keys hash the same next time.
    seeds: [u64; 4],
    /// The fleet's secret, when the store is Redis.
    fleet: Option<Arc<FleetSecret>>,
    /// The embedded store's areas: a quota policy's hashes name its own.
    areas: Arc<Areas>,
}

impl KeyMaker {
    pub fn new(fleet: Option<Arc<FleetSecret>>, areas: Arc<Areas>) -> Self {
        let random = crate::random::bytes::<32>();
        let mut seeds = [0u64; 4];
        for (seed, chunk) in seeds.iter_mut().zip(random.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            *seed = u64::from_le_bytes(w);
        }
        Self::seeded(fleet, areas, seeds)
    }

    /// Keys hashed with `seeds` (a state file's, so they hash as they did before).
    pub fn seeded(fleet: Option<Arc<FleetSecret>>, areas: Arc<Areas>, seeds: [u64; 4]) -> Self {
        let [a, b, c, d] = seeds;
        Self {
            hasher: ahash::RandomState::with_seeds(a, b, c, d),
            seeds,
            fleet,
            areas,
        }
    }

    /// The embedded store's areas these keys are placed in.
    pub fn areas(&self) -> &Arc<Areas> {
        &self.areas
    }

    /// Gives `config`'s calendar quota policies their areas of the embedded store (see
    /// [`Areas::arrange`]): before any of their keys is made, at start and at reload.
    pub fn arrange(&self, config: &Config) {
        let quotas: Vec<(&str, String)> = config
            .policies
            .iter()
            .filter_map(|p| {
                let calendar = &p.rate()?.calendar.as_ref()?.calendar;
                Some((
                    p.name.as_str(),
                    format!("{:?} {}", calendar.period, calendar.zone_name),
                ))
            })
            .collect();
        self.areas.arrange(&quotas);
        let other_kinds = (config.policies.iter())
            .map(|p| p.name.as_str())
            .filter(|name| !quotas.iter().any(|(q, _)| q == name));
        self.areas.forget_turned(other_kinds);
    }

    /// Each of `config`'s calendar quota policies that has an area: the area and the end
    /// of the window the policy is in now, on `clock`'s monotonic timeline. A key of the
    /// area whose usage is not of that window was written under another calendar: a
    /// reload that changed the calendar, or a state file written before, drops it.
    pub fn window_ends(&self, config: &Config, clock: &dyn Clock) -> WindowEnds {
        let unix_now = clock.unix_ns_at(clock.now_ns());
        let ends = config
            .policies
            .iter()
            .filter_map(|p| {
                let quota = p.rate()?.calendar.as_deref()?;
                let area = area_of(self.areas.tag(&p.name));
                let end = quota.bounds(unix_now).end_at(unix_now);
                (area != 0).then(|| (area, clock.mono_ns_at(end)))
            })
            .collect();
        WindowEnds(ends)
    }

    /// The key hasher's seeds.
    pub fn seeds(&self) -> [u64; 4] {
        self.seeds
    }

    /// The fleet's secret, when the store is Redis.
    pub fn fleet(&self) -> Option<&Arc<FleetSecret>> {
        self.fleet.as_ref()
    }

    /// `policy`'s key identity, worked out once per config version (the request path
    /// then hashes only a key's parts, never the policy's name again).
    pub fn policy(&self, policy: &str) -> PolicyKeys {
        let start = KeyHasher::new(self.hasher.build_hasher(), policy);
        PolicyKeys {
            // New keys of a quota policy never overflow (its area makes room): only rate
            // keys use it, in the rate keys' area.
            overflow: start.clone().overflow(),
            area: self.areas.tag(policy),
            start,
        }
    }

    /// The store hash of the key named by `parts` (their text, as an operator types them).
    pub fn hash_of(&self, policy: &str, parts: &[String]) -> u64 {
        let mut key = self.policy(policy).builder(None);
        for p in parts {
            key.part(&KeyPart::Bytes(p.as_bytes().into()));
        }
        key.finish(policy).hash
    }

    /// The key named by `parts` (their text, as an operator types them), for inspection
    /// and runtime overrides. With Redis and the fleet's secret not known yet, it has no
    /// Redis key.
    pub fn key_of(&self, policy: &str, parts: &[String]) -> StoreKey {
        let fleet = self.fleet.as_ref().and_then(|f| f.key());
        let mut key = self.policy(policy).builder(fleet.as_deref());
        for p in parts {
            key.part(&KeyPart::Bytes(p.as_bytes().into()));
        }
        key.finish(policy)
    }
}

use std::hash::BuildHasher as _;

/// One policy's key identity under a [`KeyMaker`]: the hash state after its name, and the
/// key every new key of it shares when the store is too full to track one.
#[derive(Clone)]
pub struct PolicyKeys {
    start: KeyHasher<ahash::AHasher>,
    pub overflow: u64,
    /// The area of the embedded store its keys are placed in (hash bits).
    area: u64,
}

impl PolicyKeys {
    /// A key of this policy, to be given its parts; with a Redis key too when `fleet`
    /// (the fleet's key, Redis mode) is given.
    pub fn builder(&self, fleet: Option<&FleetKey>) -> KeyBuilder {
        KeyBuilder {
            hasher: self.start.clone(),
            area: self.area,
            redis: fleet.map(|f| Box::new(RedisKeyBuilder::new(f))),
        }
    }
}

/// Builds a [`StoreKey`] part by part.
#[derive(Clone)]
pub struct KeyBuilder {
    hasher: KeyHasher<ahash::AHasher>,
    area: u64,
    /// Boxed: the keyed hash's state is large, and memory mode (no Redis key) should not
    /// carry it.
    redis: Option<Box<RedisKeyBuilder>>,
}

impl KeyBuilder {
    pub fn part(&mut self, part: &KeyPart<'_>) {
        self.hasher.part(part);
        if let Some(r) = self.redis.as_mut() {
            r.part(part);
        }
    }

    /// An absent part under `missing = "shared"`.
    pub fn missing(&mut self) {
        self.hasher.missing();
        if let Some(r) = self.redis.as_mut() {
            r.missing();
        }
    }

    pub fn finish(self, policy: &str) -> StoreKey {
        StoreKey {
            hash: in_area(self.hasher.finish(), self.area),
            redis: self.redis.map(|r| r.finish(policy)),
        }
    }
}

/// Whether `parts` name a key of `policy`: one non-empty part per key source. `Err`: the
/// sources expected, as `header:x-tenant-id/header:x-user-id`.
/// A part that cannot be a value of its source (under `ip/64`, text that is no address)
/// is the wrong shape too.
pub fn key_shape(policy: &Policy, parts: &[String]) -> Result<(), String> {
    let fits = |(part, source): (&String, &crate::key::KeySource)| {
        !part.is_empty() && source.spelled(part).is_some()
    };
    if parts.len() == policy.key.len() && parts.iter().zip(&policy.key).all(fits) {
        return Ok(());
    }
    let expected: Vec<String> = policy.key.iter().map(ToString::to_string).collect();
    Err(expected.join("/"))
}

/// `parts` of a key of `policy` (its shape checked) in the spelling requests make the key
/// in: an address typed `2001:DB8::1` is the key of `2001:db8::1`, and under `ip/64` any
/// address of a network names that network's key.
pub fn spelled_key(policy: &Policy, parts: &mut [String]) {
    for (index, part) in parts.iter_mut().enumerate() {
        if let std::borrow::Cow::Owned(spelled) = policy.spelled(index, part) {
            *part = spelled;
        }
    }
}

/// One composed key under construction.
#[derive(Clone)]
pub struct Partial<'a> {
    pub key: KeyBuilder,
    /// The part, for override look-ups of single-source keys.
    pub single: Option<KeyPart<'a>>,
}

impl<'a> Partial<'a> {
    fn add(&mut self, part: &KeyPart<'a>, single_source: bool) {
        self.key.part(part);
        if single_source {
            self.single = Some(part.clone());
        }
    }
}

/// Fills `keys` with the keys `policy` applies to in this request; `false` when the tier is
/// skipped. `keys` and `values` are the caller's buffers, reused from tier to tier (moving
/// them out of every call cost more than composing the keys).
#[inline]
pub fn compose<'a>(
    (start, fleet): (&PolicyKeys, Option<&FleetKey>),
    policy: &Policy,
    view: &RequestView<'a>,
    position: usize,
    keys: &mut ArrayVec<Partial<'a>, MAX_KEY_VALUES>,
    values: &mut KeyValues<'a>,
) -> Result<bool, KeyRefusal> {
    keys.clear();
    keys.push(Partial {
        key: start.builder(fleet),
        single: None,
    });
    let too_many = KeyRefusal::TooManyValues(position);
    // Override look-ups need the part of a single-source key.
    let single_source = policy.key.len() == 1 && policy.override_count() > 0;
    for source in &policy.key {
        source.extract_into(view, values).map_err(|_| too_many)?;
        if values.is_empty() {
            match policy.missing {
                Missing::Skip => return Ok(false),
                Missing::Reject => return Err(KeyRefusal::Missing(position)),
                Missing::Shared => keys.iter_mut().for_each(|k| k.key.missing()),
            }
            continue;
        }
        // Each value of this source combines with each key so far.
        if keys.len() * values.len() > MAX_KEY_VALUES {
            return Err(too_many);
        }
        if let [part] = values.as_slice() {
            // The common case: extend every key in place, no copies.
            keys.iter_mut().for_each(|k| k.add(part, single_source));
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
