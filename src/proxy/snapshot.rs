//! The running gateway's shared state: the current config snapshot (swapped whole on
//! reload), the limiter store, the clock and the metrics.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::pool::UpstreamPool;
use super::response::{PolicyAnswer, RouteHeaders};
use crate::clock::Clock;
use crate::config::{Config, Route};
use crate::metrics::{Metrics, RouteMetrics, TierCounters};
use crate::store::Limiter;
use crate::store::PolicyPlan;

/// Everything one request needs from one config version. A request loads it once, so a
/// reload never mixes two versions within a request.
pub struct Snapshot {
    pub config: Arc<Config>,
    /// By upstream index.
    pub pools: Vec<Arc<UpstreamPool>>,
    /// By route index: what a request of the route needs beside its config.
    pub routes: Box<[RouteRuntime]>,
    /// Requests each worker may hold at once: its share of `max_requests`.
    pub request_share: usize,
    /// Who is limited: each tier's heavy hitters, per worker (`None`: `top_keys = false`).
    pub top: Option<crate::top::TopKeys>,
    /// By `[[rls.rules]]` index: what each rule's policy's tiers start from, and its
    /// decision counters.
    pub rls_plans: Box<[Option<PolicyPlan>]>,
    /// Each `[[rlqs.buckets]]` entry's policy plan, by the entry's index.
    pub rlqs_plans: Box<[Option<PolicyPlan>]>,
    pub rls_metrics: Box<[crate::metrics::rls::RlsRuleCounters]>,
}

/// One route's runtime record, made once per config version: one record per policy, and
/// what belongs to the route as a whole.
pub struct RouteRuntime {
    /// By the policy's position in the route.
    pub policies: Box<[PolicyRuntime]>,
    /// The route's response and `Retry-After` series.
    pub metrics: RouteMetrics,
    /// The route's joined `RateLimit-Policy` list.
    pub headers: RouteHeaders,
}

/// Everything the request path holds of one policy of one route, made once per config
/// version: what its tiers start from, what an answer says of it, and its decision series.
pub struct PolicyRuntime {
    pub plan: PolicyPlan,
    pub answer: PolicyAnswer,
    pub counters: TierCounters,
}

impl AsRef<PolicyPlan> for PolicyRuntime {
    fn as_ref(&self) -> &PolicyPlan {
        &self.plan
    }
}

impl RouteRuntime {
    fn new(route: &Route, metrics: &Metrics, keys: &crate::store::KeyMaker) -> Self {
        let policies: Box<[PolicyRuntime]> = route
            .policies
            .iter()
            .map(|policy| PolicyRuntime {
                plan: PolicyPlan::of(keys, policy, metrics),
                answer: PolicyAnswer::new(policy),
                counters: metrics.tier_counters(route, policy),
            })
            .collect();
        let headers = RouteHeaders::new(route, policies.iter().map(|p| &p.answer));
        Self {
            policies,
            metrics: metrics.route_counters(route),
            headers,
        }
    }
}

impl Snapshot {
    /// Builds a snapshot for `config` at `now_ns`, reusing the pools of `previous` whose
    /// upstream settings did not change so their warm connections survive.
    pub fn build(
        config: Arc<Config>,
        previous: Option<&Snapshot>,
        (metrics, keys): (&Metrics, &crate::store::KeyMaker),
        now_ns: u64,
    ) -> Self {
        // Quota policies' areas first: their plans' keys are placed in them.
        keys.arrange(&config);
        let pools = config
            .upstreams
            .iter()
            .map(|u| {
                previous
                    .and_then(|p| p.pools.iter().find(|pool| pool.serves(u)))
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(UpstreamPool::new(u.clone(), config.server.workers, metrics))
                    })
            })
            .collect();
        let routes = config
            .routes
            .iter()
            .map(|route| RouteRuntime::new(route, metrics, keys))
            .collect();
        let request_share =
            crate::conn::load::share(config.server.max_requests, config.server.workers);
        let top = config.server.top_keys.then(|| {
            // The rate limit service's rules count as one more route, after the real ones
            // (see `rls::top`): its tiers are the rules; the quota service's buckets one
            // more after them (`rlqs::top`).
            let rules = config.rls.as_ref().map_or(0, |r| r.rules.len());
            let buckets = config.rls.as_ref().map_or(0, |r| r.buckets.iter().len());
            let tiers: Vec<usize> = config
                .routes
                .iter()
                .map(|r| r.policies.len())
                .chain([rules, buckets])
                .collect();
            let window = u64::try_from(config.server.top_window.as_nanos()).unwrap_or(u64::MAX);
            crate::top::TopKeys::new(config.server.workers, &tiers, window, now_ns)
        });
        let rls_plans = config.rls.as_ref().map_or_else(Box::default, |rls| {
            rls.rules
                .iter()
                .map(|rule| {
                    let policy = rule.policy.as_ref()?;
                    Some(PolicyPlan::of(keys, policy, metrics))
                })
                .collect()
        });
        let rlqs_plans = config.rls.as_ref().map_or_else(Box::default, |rls| {
            rls.buckets
                .iter()
                .map(|b| Some(PolicyPlan::of(keys, b.rule.policy.as_ref()?, metrics)))
                .collect()
        });
        let rls_metrics = metrics.rls.rules(&config);
        Self {
            rls_plans,
            rlqs_plans,
            rls_metrics,
            config,
            pools,
            routes,
            request_share,
            top,
        }
    }
}

/// What one reload came to, shared by every caller that joined it.
pub type ReloadOutcome =
    Result<crate::config::reload_report::ReloadReport, crate::config::reload_report::ReloadError>;

/// Reloads the config file and says what came of it: the wiring's `reload::reload`,
/// handed down in [`Shared::reload`] so that the admin API (an adapter) asks for one
/// without importing the layer above it.
pub type Reload =
    for<'a> fn(&'a Arc<Shared>) -> Pin<Box<dyn Future<Output = ReloadOutcome> + Send + 'a>>;

pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    /// How a reload is asked for (see [`Reload`]).
    pub reload: Reload,
    pub limiter: Limiter,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub config_path: PathBuf,
    /// Reloads one at a time, at most one waiting: two SIGHUPs at once cannot
    /// interleave, and callers cannot queue them without bound.
    pub reloads: crate::coalesce::Coalescing<ReloadOutcome>,
    /// Per-key limits set through the admin API.
    pub overrides: crate::overrides::Overrides,
    /// Sampled requests' spans, on their way to the OTLP exporter.
    pub spans: crate::telemetry::export::Spans,
    /// The bound on sampled requests a second (`max_sampled_per_second`).
    pub sampling: crate::telemetry::sampler::Budget,
    /// The rate limit service's share of `access_log_rate`, held by all the threads
    /// that answer its calls.
    pub service_lines: super::access_log::ServiceLines,
    /// Keys whose state the admin API changed, as their holders' key
    /// (`rlqs::keys::holder_key`), and whether it was reset (else an override set or
    /// removed): a quota stream holding a share of one re-sizes it at once rather than at
    /// Envoy's next report.
    pub key_changes: tokio::sync::broadcast::Sender<(Arc<str>, KeyChange)>,
}

/// How the admin API changed a key (what a quota stream's re-size of it sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChange {
    /// Reset: the key is whole again, and so is each holder's new bucket.
    Reset,
    /// An override set or removed: new numbers, each holder's bucket re-sized at Envoy's
    /// fill ratio (its spending since its last report is not charged yet, so a bucket
    /// started full would hand it out again).
    Renumbered,
}

impl Shared {
    /// The trace of a request or call with `headers` when `telemetry` samples it, within
    /// the gateway's bound on sampled requests a second (past it: counted, not built; a
    /// caller's own sampled flag has half the bound at most). `now_ns` is read only for a
    /// sampled one.
    pub fn start_span(
        &self,
        telemetry: &crate::config::telemetry::Telemetry,
        headers: &http::HeaderMap,
        now_ns: impl FnOnce() -> u64,
    ) -> Option<crate::telemetry::span::SpanTrace> {
        let capped = &self.metrics.telemetry.over_rate;
        crate::telemetry::span::start(telemetry, &self.sampling, headers, now_ns, capped)
    }

    pub fn config(&self) -> Arc<Config> {
        self.snapshot.load().config.clone()
    }

    /// The current snapshot for a request on this thread. Every worker holds the snapshot
    /// through a handle of its own, so taking it costs a reference count that only this
    /// worker writes; cloning the shared `Arc` per request would bounce its count between
    /// cores. The handle is replaced on the first request after a reload.
    pub fn current(&self) -> Current {
        let latest = self.snapshot.load();
        CURRENT.with(|cell| {
            let mut cell = cell.borrow_mut();
            match &*cell {
                Some(handle) if Arc::ptr_eq(&handle.0.snapshot, &*latest) => handle.clone(),
                _ => {
                    let handle = Current(Arc::new(WorkerHandle {
                        snapshot: Arc::clone(&latest),
                    }));
                    *cell = Some(handle.clone());
                    handle
                }
            }
        })
    }
}

/// One worker's handle on a snapshot (see [`Shared::current`]).
#[derive(Clone)]
pub struct Current(Arc<WorkerHandle>);

/// The allocation whose reference count only one worker writes.
pub struct WorkerHandle {
    snapshot: Arc<Snapshot>,
}

impl std::ops::Deref for Current {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.0.snapshot
    }
}

thread_local! {
    static CURRENT: std::cell::RefCell<Option<Current>> = const { std::cell::RefCell::new(None) };
}
