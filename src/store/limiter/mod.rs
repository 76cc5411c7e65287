//! The one door to the limiter: [`Limiter::check_request`] decides every tier of a
//! request — keys, then (with Redis) the refusal cache, then concurrency slots, then the
//! rate tiers at one clock reading —
//! and applies `on_error` in one place when the store fails. Each limit kind is a room
//! the limiter owns and calls (`rate`, `concurrency`, `slices`); a new kind is one more
//! room and one more arm in [`Limiter::check_request`]. The slot tiers are taken in
//! `slots.rs`; settling and drawing after the decision in `settle.rs`; what the admin API
//! reads in `inspect.rs`.

mod descriptors;
mod errors;
mod inspect;
mod outage;
#[cfg(test)]
mod quota_tests;
mod resets;
mod settle;
mod slots;

use std::sync::Arc;

use super::admission::{Admission, Outcome};
use super::backend::Fallback;
pub use super::backend::Store;
use super::concurrency::held::Held;
use super::concurrency::Concurrency;
use super::keys::KeyMaker;
use super::memory::MemoryStore;
use super::overrides::KeyOverrides;
use super::rate::lease::Slices;
use super::rate::redis::ChargeTimes;
use super::rate::settle::pending_settles;
use super::rate::{Rates, Remote};
use super::redis::RedisStore;
use super::tiers::{PolicyPlan, RequestTiers};
use crate::clock::Clock;
use crate::config::Route;
use crate::key::RequestView;
use crate::limit::Verdict;
use crate::metrics::Metrics;
pub use descriptors::Descriptor;
use errors::StoreErrors;
pub use settle::Settled;

/// Who decided a request's rate tiers.
enum Decided {
    /// The configured store.
    Store,
    /// This process alone, on its share (`on_error = "local"`).
    Local { share: u64 },
    /// Nobody: the store failed and `on_error = "allow"` let the request through.
    Unchecked,
    /// Nobody: the store failed and `on_error = "deny"` refuses the request.
    Refused,
}

/// The limiter a gateway decides against: its store, each limit kind's room, the runtime
/// overrides, and the metrics its failures go to.
pub struct Limiter {
    store: Store,
    keys: KeyMaker,
    rates: Rates,
    concurrency: Concurrency,
    /// The slices of leased keys this gateway holds.
    slices: Arc<Slices>,
    /// Per-key limits set through the admin API; they beat the file's overrides.
    overrides: KeyOverrides,
    metrics: Arc<Metrics>,
    errors: StoreErrors,
    /// The local store's keys reset: a settle admitted before its key's gives nothing
    /// back ([`PendingSettle::reset_mark`]).
    resets: resets::Resets,
}

impl Limiter {
    pub fn new(store: Store, metrics: Arc<Metrics>) -> Self {
        let fleet = store.remote().map(|r| r.fleet().clone());
        let areas = store.local().areas().clone();
        Self {
            store,
            keys: KeyMaker::new(fleet, areas),
            rates: Rates::default(),
            concurrency: Concurrency::new(metrics.clone()),
            slices: Arc::default(),
            overrides: KeyOverrides::default(),
            errors: StoreErrors::new(metrics.store_errors.clone()),
            metrics,
            resets: resets::Resets::default(),
        }
    }

    /// Hashes keys with `seeds` from now on (a state file's, read before any request).
    pub fn with_key_seeds(mut self, seeds: [u64; 4]) -> Self {
        self.keys = KeyMaker::seeded(self.keys.fleet().cloned(), self.keys.areas().clone(), seeds);
        self
    }

    /// The embedded store when it holds all state (memory mode); `None` with Redis, whose
    /// local fallback is [`Limiter::local`].
    pub fn memory(&self) -> Option<&MemoryStore> {
        self.store.memory()
    }

    /// The process-local store: all state in memory mode, the `local` fallback with Redis.
    pub fn local(&self) -> &MemoryStore {
        self.store.local()
    }

    pub fn remote(&self) -> Option<&Arc<RedisStore>> {
        self.store.remote()
    }

    /// How keys are made: the request path's and the admin API's alike.
    pub fn keys(&self) -> &KeyMaker {
        &self.keys
    }

    /// The runtime overrides in effect.
    pub fn overrides(&self) -> &KeyOverrides {
        &self.overrides
    }

    /// Why the store is not ready (`/readyz`'s answer), `None` when it is.
    pub fn unready(&self) -> Option<String> {
        self.remote()
            .and_then(|r| crate::store::redis::health::unready(r))
    }

    /// `/readyz`'s verdict: [`unready`](Self::unready) has no reason.
    pub fn ready(&self) -> bool {
        self.unready().is_none()
    }

    /// Decides `route`'s tiers (`plans`: its policies', by position) for the
    /// request `view` into `admission`: first, with Redis, the refusal cache (a rate tier
    /// remembered at its limit refuses at once, before any slot is taken); then the
    /// concurrency tiers (taking a slot each, waiting for one up to `max_delay`), then
    /// every rate tier at one clock reading taken after that. A refusal anywhere leaves no
    /// slot held and no TAT moved. A store failure is counted here and answered per
    /// `on_error`.
    pub async fn check_request<P: AsRef<PolicyPlan>>(
        &self,
        (route, plans): (&Route, &[P]),
        view: &RequestView<'_>,
        clock: &dyn Clock,
        admission: &mut Admission,
    ) {
        admission.reset();
        if plans.is_empty() {
            // A route without limits: nothing to key, take or decide, only the clock
            // reading the forward picks its upstream at.
            admission.now = clock.now_ns();
            return;
        }
        // With Redis, keys are named with the fleet's key; until it is known they have no
        // Redis name, and the Redis paths fail as if Redis were unreachable.
        let fleet = self.keys.fleet().map(|f| f.load());
        let fleet_key = fleet.as_ref().and_then(|g| g.as_deref());
        let filled = admission
            .tiers
            .fill((plans, fleet_key), &self.overrides, route, view, clock);
        drop(fleet);
        if let Err(refusal) = filled {
            admission.now = clock.now_ns();
            admission.outcome = refusal.into();
            return;
        }
        // A rate tier this gateway knows Redis refuses is answered before any slot is
        // taken: a refused request costs the store nothing, whatever tiers it has.
        if self.refused_here(admission, route.cost, clock) {
            return;
        }
        if let Some(refused) = self.take_slots((route, plans), clock, admission).await {
            admission.held.clear();
            admission.now = clock.now_ns();
            admission.outcome = refused;
            return;
        }
        admission.now = clock.now_ns();
        if admission.tiers.rate.is_empty() {
            // Slots alone: their leases are what a fail-over must not lose (`replica_ack`),
            // as a rate tier's charge is.
            let leased = admission.held.iter().any(Held::in_store);
            if leased && !self.replicated().await {
                admission.held.clear();
                admission.outcome = Outcome::StoreUnavailable;
            }
            return;
        }
        // Read before the decision: a reset landing during it counts as after it.
        let marks = self.reset_marks();
        let mut times = ChargeTimes::new();
        let decided = self.decide_rate_tiers(route.cost, clock, admission, &mut times);
        let Some(in_store) = decided.await else {
            return;
        };
        let Admission {
            tiers,
            verdict,
            now,
            settles,
            share,
            ..
        } = admission;
        pending_settles(
            route,
            tiers,
            verdict,
            (*now, marks),
            (in_store, *share),
            settles,
        );
        if let Some(remote) = self.remote().filter(|_| in_store) {
            place_charges(remote, settles, (&times, *now), clock);
        }
    }

    /// Decides the filled rate tiers at `admission.now` (a request of `cost`) and sets the
    /// outcome: `Some(in_store)` when admitted (`false`: on this gateway's share, the
    /// store having failed), `None` when refused (every slot given back).
    async fn decide_rate_tiers(
        &self,
        cost: u64,
        clock: &dyn Clock,
        admission: &mut Admission,
        times: &mut ChargeTimes,
    ) -> Option<bool> {
        let now = admission.now;
        admission.tiers.place_windows(now, clock);
        let (tiers, verdict) = (&admission.tiers, &mut admission.verdict);
        let decided = self.decide_rates(tiers, (now, cost), clock, verdict, times);
        let in_store = match decided.await {
            Decided::Store => true,
            Decided::Local { share } => {
                admission.share = share;
                false
            }
            Decided::Unchecked => {
                admission.unchecked = true;
                true
            }
            Decided::Refused => {
                admission.held.clear();
                admission.outcome = Outcome::StoreUnavailable;
                return None;
            }
        };
        if in_store && admission.verdict.admitted && !self.replicated().await {
            admission.held.clear();
            admission.outcome = Outcome::StoreUnavailable;
            return None;
        }
        if !admission.verdict.admitted {
            // A rate tier refused: the slots go back, the request leaves no trace.
            admission.held.clear();
            let first = admission.verdict.first_denier;
            let position = first
                .and_then(|k| admission.tiers.rate.get(k))
                .map_or(0, |t| t.position);
            admission.outcome = Outcome::RateLimited { position };
            return None;
        }
        Some(in_store)
    }

    /// With Redis, refuses the request from the refusal cache when its rate tiers' keys are
    /// remembered at their limit: `true` when it did (the verdict and outcome are set).
    fn refused_here(&self, admission: &mut Admission, cost: u64, clock: &dyn Clock) -> bool {
        if self.remote().is_none() || admission.tiers.rate.is_empty() {
            return false;
        }
        let now = clock.now_ns();
        admission.tiers.place_windows(now, clock);
        let Some(verdict) = self.rates.refusals.refuse(&admission.tiers.rate, now, cost) else {
            return false;
        };
        admission.now = now;
        let position = verdict
            .first_denier
            .and_then(|k| admission.tiers.rate.get(k))
            .map_or(0, |t| t.position);
        admission.verdict = verdict;
        admission.outcome = Outcome::RateLimited { position };
        true
    }

    /// Decides the rate tiers at `now` into `verdict`: by the configured store, or what
    /// `on_error` made of its failure (Redis's charge times in `times`).
    async fn decide_rates(
        &self,
        tiers: &RequestTiers,
        (now, cost): (u64, u64),
        clock: &dyn Clock,
        verdict: &mut Verdict,
        times: &mut ChargeTimes,
    ) -> Decided {
        let rate = &tiers.rate[..];
        let remote = match &self.store {
            Store::Memory(m) => {
                Rates::decide_local(m, rate, now, cost, verdict);
                return Decided::Store;
            }
            Store::Redis { remote, .. } => remote,
        };
        let remote = Remote {
            store: remote,
            refusals: &self.rates.refusals,
            metrics: &self.metrics,
            clock,
            keeps_answered: matches!(self.store.fallback(), Fallback::Unchecked),
        };
        let decided = if rate.iter().any(|t| t.redis.is_none()) {
            // The fleet's key is not known yet: no key to ask Redis about.
            Err(remote.store.unasked(now))
        } else {
            // Boxed: the Redis path's state (its groups, replies, slices) is tens of
            // kilobytes, and every request's future — a parked one too — would otherwise
            // carry it.
            Box::pin(Rates::decide_remote(
                &remote,
                &self.slices,
                rate,
                (now, cost),
                times,
            ))
            .await
        };
        match decided {
            Ok(decided) => {
                *verdict = decided;
                Decided::Store
            }
            Err(e) => match self.fallback(&e) {
                Fallback::Unchecked => Decided::Unchecked,
                Fallback::Refuse => Decided::Refused,
                Fallback::Local => {
                    let share = self.decide_share(rate, now, cost, verdict);
                    Decided::Local { share }
                }
            },
        }
    }
}

/// Places each Redis-charged settle at its charge: the time the script that charged it
/// ran, on the clock of the node holding its key (`times`); a tier its slice decided, at
/// the estimate of that clock at `now`.
fn place_charges(
    remote: &RedisStore,
    settles: &mut [crate::store::rate::settle::PendingSettle],
    (times, now): (&ChargeTimes, u64),
    clock: &dyn Clock,
) {
    for s in settles.iter_mut() {
        let Some(key) = &s.redis_key else { continue };
        let charged = times.iter().find(|&&(i, _)| i == s.tier);
        let (server_ns, charged_us) = match charged {
            Some(&(_, at)) => (Some(at), at / 1_000),
            None => {
                let tag = crate::key::redis_key::tag_of(key);
                (
                    remote.server_unix_ns_at(tag, now),
                    remote.server_unix_us_early(tag, now),
                )
            }
        };
        s.charged_on(server_ns, clock);
        s.charged_us = charged_us;
    }
}
