//! One request's tiers as the limiter decides them: each policy of the route, in route
//! order, with the keys it applies to in this request (several when a key source came
//! with several distinct values). A policy's keys sit together by construction: each
//! [`PolicyTiers`] names the range of its kind's tiers it owns.

use std::ops::Range;
use std::time::Duration;

use smallvec::SmallVec;

use super::keys::{compose, KeyMaker, KeyRefusal, Partial, PolicyKeys};
use super::overrides::KeyOverrides;
use crate::clock::Clock;
use crate::config::Applied;
use crate::config::{Policy, PolicyKind, Route, Sync};
use crate::key::{FleetKey, KeyValues, RedisKey, RequestView};
use crate::limit::{Mode, Tier, INLINE_DECISIONS};
use crate::metrics::Metrics;

mod descriptors;

/// One rate decision: a tier on one key, and where the store keeps that key.
#[derive(Debug, Clone)]
pub struct RateTier {
    pub tier: Tier,
    /// Its policy's position in the route.
    pub position: usize,
    /// Its key in Redis; `None` when the process-local store holds it.
    pub redis: Option<RedisKey>,
    /// Decided from this gateway's leased slice (`sync = "lease"`, Redis).
    pub leased: bool,
    /// Its cost is settled after the response: its TAT may move back.
    pub settled: bool,
    /// A calendar quota's window (and the next), in Unix seconds.
    pub bounds: Option<crate::limit::calendar::Bounds>,
    /// A priced policy: the row of its price table the request was quoted on.
    pub row: Option<u32>,
    /// A priced quote the body did not bound (no output limit, or its input unknown):
    /// the reserve is not the most the request can cost, so a usage that never comes
    /// settles at `max_cost`, not at it.
    pub unbounded: bool,
}

impl RateTier {
    /// A calendar quota's window length in seconds.
    pub fn window_s(&self) -> Option<u64> {
        self.bounds
            .map(|b| u64::try_from(b.end - b.start).unwrap_or(0))
    }
}

impl AsRef<Tier> for RateTier {
    fn as_ref(&self) -> &Tier {
        &self.tier
    }
}

/// One concurrency decision: a slot on `key`, at most `max` held at once.
#[derive(Debug, Clone)]
pub struct SlotTier {
    pub key: u64,
    /// Its policy's position in the route.
    pub position: usize,
    pub max: u32,
    pub mode: Mode,
    /// How long the request may wait for a slot.
    pub max_delay: Duration,
    /// Redis: how long a slot of a gateway that died stays taken.
    pub lease_ttl: Duration,
    /// Its lease set in Redis; `None` when the process-local table holds it.
    pub redis: Option<String>,
    pub outcome: SlotOutcome,
}

impl SlotTier {
    /// Whether a request may wait for this tier's slot.
    pub fn waits(&self) -> bool {
        self.mode == Mode::Enforce && !self.max_delay.is_zero()
    }
}

/// How one concurrency tier went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcome {
    /// Not decided (yet, or an earlier tier refused).
    Skipped,
    /// A slot is held; `free` were left after taking it.
    Held { free: u32 },
    /// The store could not be asked and `on_error = "allow"`: admitted without a slot.
    Unchecked,
    /// Every slot was taken (after waiting, with `max_delay`): the request is refused.
    Refused,
    /// A shadow tier that would have refused: counted, not held, not refused.
    ShadowFull,
}

/// Which kind of tier a policy is in this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierKind {
    Rate,
    Concurrency,
}

/// One policy of the route as this request applies it: its position in the route and
/// the tiers (of its kind) that are its keys.
#[derive(Debug, Clone)]
pub struct PolicyTiers {
    pub position: usize,
    pub kind: TierKind,
    pub range: Range<usize>,
}

/// What one policy's tiers start from, worked out once per config version (on the
/// snapshot): its key identity and, for a rate policy, the tier it decides with — its own
/// quota, mode, hold, reserve and overflow key — so a request fills in only its keys.
#[derive(Clone)]
pub struct PolicyPlan {
    pub keys: PolicyKeys,
    rate: Option<RatePlan>,
    /// A concurrency policy's in-flight gauge, resolved once per config version: the
    /// request path takes a slot without looking a label up.
    pub in_flight: Option<prometheus_client::metrics::gauge::Gauge>,
}

#[derive(Clone)]
struct RatePlan {
    tier: Tier,
    /// `sync = "lease"`.
    leased: bool,
    settled: bool,
    calendar: Option<std::sync::Arc<crate::config::CalendarQuota>>,
    /// `reserve = "price:NAME"`: the table each request is quoted from.
    priced: Option<super::quote::PricedPlan>,
}

impl AsRef<PolicyPlan> for PolicyPlan {
    fn as_ref(&self) -> &PolicyPlan {
        self
    }
}

impl PolicyPlan {
    /// The plan of one policy.
    pub fn of(keys: &KeyMaker, policy: &Policy, metrics: &Metrics) -> Self {
        let in_flight = policy
            .concurrency()
            .map(|_| metrics.in_flight_gauge(&policy.name));
        let keys = keys.policy(&policy.name);
        let rate = policy.rate().map(|rate| RatePlan {
            tier: Tier {
                window: None,
                reserve: rate.settle.as_ref().and_then(|s| s.reserve),
                quota: rate.quota,
                mode: policy.mode,
                max_delay_ns: u64::try_from(policy.max_delay.as_nanos()).unwrap_or(u64::MAX),
                key: 0,
                overflow: keys.overflow,
            },
            leased: rate.sync == Sync::Lease,
            settled: rate.settle.is_some(),
            calendar: rate.calendar.clone(),
            priced: rate.settle.as_ref().and_then(|s| {
                Some(super::quote::PricedPlan {
                    prices: s.priced.clone()?,
                    min_cost: s.min_cost.max(1),
                    max_cost: s.max_cost.max(1),
                    max_cost_given: s.max_cost_given,
                })
            }),
        });
        Self {
            keys,
            rate,
            in_flight,
        }
    }
}

/// Every decision one request asks of the limiter.
#[derive(Default)]
pub struct RequestTiers {
    pub rate: SmallVec<[RateTier; INLINE_DECISIONS]>,
    pub slots: SmallVec<[SlotTier; 2]>,
    /// The applied policies in route order (a skipped one is absent).
    pub policies: SmallVec<[PolicyTiers; INLINE_DECISIONS]>,
}

impl RequestTiers {
    /// Fills these tiers, empty (an admission's reset empties them), with the tiers of
    /// `route` for the request `view`; `plans` hold the route's policies' plans, by
    /// position ([`PolicyPlan::of`]), and `fleet` the fleet's key the Redis keys are made
    /// with (`None`: no Redis keys).
    pub(in crate::store) fn fill<P: AsRef<PolicyPlan>>(
        &mut self,
        (plans, fleet): (&[P], Option<&FleetKey>),
        overrides: &KeyOverrides,
        route: &Route,
        view: &RequestView<'_>,
        clock: &dyn Clock,
    ) -> Result<(), KeyRefusal> {
        debug_assert!(self.rate.is_empty() && self.slots.is_empty() && self.policies.is_empty());
        let mut partials = arrayvec::ArrayVec::new();
        let mut values = KeyValues::new();
        let plans = plans.iter().map(AsRef::as_ref);
        for ((position, policy), plan) in route.policies.iter().enumerate().zip(plans) {
            if !compose(
                (&plan.keys, fleet),
                policy,
                view,
                position,
                &mut partials,
                &mut values,
            )? {
                continue;
            }
            let kind = match &policy.kind {
                PolicyKind::Rate(_) => TierKind::Rate,
                PolicyKind::Concurrency(_) => TierKind::Concurrency,
            };
            let start = self.len_of(kind);
            for partial in partials.drain(..) {
                self.push(plan, overrides, (position, policy), partial, clock);
            }
            let range = start..self.len_of(kind);
            let mut above_burst = None;
            match &plan.rate {
                Some(RatePlan {
                    priced: Some(priced),
                    ..
                }) => self
                    .quote(priced, view, range.clone())
                    .map_err(|_| KeyRefusal::Unpriced(position))?,
                Some(rate) if rate.settled => self.cap_reserves(route.cost, range.clone()),
                // A runtime override below the route's cost (nothing else can be: `check`
                // refuses it in the file): refused whenever it comes, before any store
                // work; the policy's tiers kept, to count the key that refused.
                Some(_) if overrides.any() && policy.mode == Mode::Enforce => {
                    above_burst = self.above_burst(route.cost, &range);
                }
                _ => {}
            }
            self.policies.push(PolicyTiers {
                position,
                kind,
                range,
            });
            if let Some(index) = above_burst {
                return Err(KeyRefusal::AboveBurst { position, index });
            }
        }
        Ok(())
    }

    /// Empties the tiers (an admission's reset, before they are filled again).
    pub(in crate::store) fn clear(&mut self) {
        self.rate.clear();
        self.slots.clear();
        self.policies.clear();
    }

    /// Puts each calendar quota's window end on the monotonic timeline for a decision at
    /// `now`: the end of the window `now` falls in (the next one, past a boundary crossed
    /// since the tiers were filled).
    #[inline]
    pub fn place_windows(&mut self, now: u64, clock: &dyn Clock) {
        for t in self.rate.iter_mut() {
            if let Some(bounds) = &t.bounds {
                let end = bounds.end_at(clock.unix_ns_at(now));
                t.tier.window = Some(clock.mono_ns_at(end));
            }
        }
    }

    /// Charges the tiers in `range` (a priced policy's keys) the request's quote
    /// ([`PricedPlan::reserve`]), on the row it was quoted on.
    fn quote(
        &mut self,
        plan: &super::quote::PricedPlan,
        view: &RequestView<'_>,
        range: Range<usize>,
    ) -> Result<(), crate::config::Unpriced> {
        let quote = plan.prices.quote(view)?;
        for t in &mut self.rate[range] {
            let units = plan.reserve(&quote, t.tier.quota.burst());
            t.tier.reserve = std::num::NonZeroU64::new(units);
            t.row = Some(quote.row);
            t.unbounded = !plan.bounds(&quote, units);
        }
        Ok(())
    }

    /// A settled policy's tiers in `range` reserve at most their key's whole burst, as a
    /// priced quote does: a runtime override set below the policy's reserve (or the
    /// route's cost) before a reload raised it would otherwise never admit — or, set
    /// aside, lift the key's restriction. What the request uses past it is charged when
    /// it settles, and a settle that learns nothing falls back to the reserve as written
    /// (`PendingSettle::fallback`). One comparison a settled tier.
    fn cap_reserves(&mut self, cost: u64, range: Range<usize>) {
        for t in &mut self.rate[range] {
            let burst = t.tier.quota.burst();
            if t.tier.cost(cost) > burst {
                t.tier.reserve = std::num::NonZeroU64::new(burst);
            }
        }
    }

    /// The first tier in `range` whose burst is below `cost`, by its index among them. One
    /// comparison an unsettled tier, asked only while a runtime override is set.
    fn above_burst(&self, cost: u64, range: &Range<usize>) -> Option<usize> {
        self.rate[range.clone()]
            .iter()
            .position(|t| t.tier.quota.burst() < cost)
    }

    fn len_of(&self, kind: TierKind) -> usize {
        match kind {
            TierKind::Rate => self.rate.len(),
            TierKind::Concurrency => self.slots.len(),
        }
    }

    /// Adds `policy`'s tier on one composed key.
    #[inline]
    fn push(
        &mut self,
        plan: &PolicyPlan,
        overrides: &KeyOverrides,
        (position, policy): (usize, &Policy),
        partial: Partial<'_>,
        clock: &dyn Clock,
    ) {
        let key = partial.key.finish(&policy.name);
        let runtime = overrides.get(key.hash, clock);
        let single = partial.single.as_ref();
        let applied = policy.limit_for(runtime, || single.map(|p| p.as_text()));
        match (&policy.kind, applied, &plan.rate) {
            (PolicyKind::Rate(_), Applied::Rate(quota), Some(rate)) => self.rate.push(RateTier {
                tier: Tier {
                    window: None,
                    quota,
                    key: key.hash,
                    ..rate.tier
                },
                position,
                bounds: rate
                    .calendar
                    .as_ref()
                    .map(|c| c.bounds(clock.unix_ns_at(clock.now_ns()))),
                leased: rate.leased && key.redis.is_some(),
                settled: rate.settled,
                redis: key.redis,
                row: None,
                unbounded: false,
            }),
            (PolicyKind::Concurrency(cap), Applied::Concurrency(max), _) => {
                self.slots.push(SlotTier {
                    key: key.hash,
                    position,
                    max,
                    mode: policy.mode,
                    max_delay: policy.max_delay,
                    lease_ttl: cap.lease_ttl,
                    redis: key.redis.map(|r| format!("{}:in-flight", r.key)),
                    outcome: SlotOutcome::Skipped,
                })
            }
            // `limit_for` answers in the policy's own kind (and a rate policy has a plan).
            (PolicyKind::Rate(_), ..) | (PolicyKind::Concurrency(_), ..) => {}
        }
    }
}
