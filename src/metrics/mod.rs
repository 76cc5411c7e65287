//! Every metric tollgate exports, defined once. Label values are config names and fixed
//! words, never request data, so cardinality stays bounded by the config (`labels`).
//! What the request path writes is sharded per worker (`sharded`) and reached through
//! handles resolved once per config version (`handles`).

mod handles;
pub mod labels;
pub mod rlqs;
pub mod rls;
mod sharded;
pub mod telemetry;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::{Metric, Registry};

pub use handles::{RouteMetrics, SettleCounters, TierCounters};
pub use labels::*;
pub use sharded::{ShardedCounter, ShardedHistogram};

/// What the request path writes: sharded per worker (see `sharded`).
type Histogram = ShardedHistogram;
/// A family of histograms, each built by the family's constructor.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn wait_histogram() -> Histogram {
    // 1 ms … ~9 h: waits span from one emission interval of a fast API to a daily quota.
    Histogram::new(exponential_buckets(0.001, 4.0, 13))
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … 65 s: past the default 30 s upstream timeout.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

fn units_histogram() -> Histogram {
    // 1 … 4^12 ≈ 16.7 M units: from a request count to a large response in bytes.
    Histogram::new(exponential_buckets(1.0, 4.0, 13))
}

/// prometheus-client's default gauge atomic.
pub type AtomicI64Compat = std::sync::atomic::AtomicI64;

pub struct Metrics {
    registry: Registry,
    pub decisions: Family<DecisionLabels, ShardedCounter>,
    pub retry_after: Histograms<RouteLabels>,
    pub requests_unmatched: ShardedCounter,
    /// Requests refused past `max_requests` (503 `overloaded`).
    pub requests_overloaded: ShardedCounter,
    /// Access log lines not written: past `access_log_rate`.
    pub access_log_dropped: ShardedCounter,
    pub responses: Family<RouteStatusLabels, ShardedCounter>,
    pub upstream_latency: Histograms<UpstreamLabels>,
    /// Connections open to each upstream.
    pub upstream_open: Family<UpstreamNameLabels, Gauge>,
    pub store_errors: Family<StoreLabels, Counter>,
    /// Redis data-loss events this gateway saw, by kind (restart, failover).
    pub store_events: Family<EventLabels, Counter>,
    pub store_breaker_open: Gauge,
    pub reloads: Family<ResultLabels, Counter>,
    /// 1 while the last reload applied its file (or none was asked since the start), 0
    /// after one was refused: what an alert waits on (the counter only says one failed).
    pub config_last_reload_ok: Gauge,
    /// When the file in effect was applied (the start or the last good reload), in Unix
    /// seconds.
    pub config_applied_at: Gauge,
    pub keys_tracked: Gauge<i64, AtomicI64Compat>,
    pub open_connections: Gauge,
    /// Upgraded tunnels closed, by why ([`tunnel_end`]).
    pub tunnels_closed: Family<ResultLabels, Counter>,
    /// Slots held per concurrency policy.
    pub in_flight: Family<PolicyLabels, Gauge>,
    /// How long requests waited in a concurrency queue (admitted or not).
    pub queue_wait: Histogram,
    /// Settled costs, in units, per settled policy.
    pub settled_units: Histograms<PolicyLabels>,
    /// Settlements by policy and result ([`SettleResult`]).
    pub settlements: Family<SettleLabels, ShardedCounter>,
    /// Settlements that could not use the value as reported ([`SettleFallback`]).
    pub settle_fallbacks: Family<SettleLabels, ShardedCounter>,
    /// `sync = "lease"`: calls for slices by result, units by fate, units held now.
    pub lease_call_count: Family<ResultLabels, Counter>,
    pub lease_unit_count: Family<ResultLabels, Counter>,
    pub lease_held: Gauge,
    /// The rate limit service's decisions and calls.
    pub rls: rls::RlsFamilies,
    pub rlqs: rlqs::RlqsFamilies,
    pub telemetry: telemetry::TelemetryFamilies,
}

/// Why a tunnel closed, as `tollgate_tunnels_closed_total` counts it.
pub mod tunnel_end {
    pub const ENDED: &str = "ended";
    pub const IDLE: &str = "idle";
    pub const BUDGET: &str = "budget";
    pub const MAX_COST: &str = "max_cost";
    pub const STORE: &str = "store";
}

/// A family of histograms built by `f`.
fn histograms<L>(f: fn() -> Histogram) -> Histograms<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    Histograms::new_with_constructor(f)
}

/// Registers `metric` as `name` and hands it back.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate");
        Self {
            decisions: registered(&mut registry, "decisions", "Limiter decisions by route, policy (tier) and outcome", Family::default()),
            retry_after: registered(&mut registry, "retry_after_seconds", "Wait told to denied clients (Retry-After), by route", histograms(wait_histogram)),
            requests_unmatched: registered(&mut registry, "requests_unmatched", "Requests that matched no route (404)", ShardedCounter::default()),
            requests_overloaded: registered(
                &mut registry,
                "requests_overloaded",
                "Requests refused because the gateway held max_requests already, or the memory of bodies read before their decision (503 overloaded)",
                ShardedCounter::default(),
            ),
            access_log_dropped: registered(
                &mut registry,
                "access_log_dropped",
                "Access log lines not written because access_log_rate lines had been written that second",
                ShardedCounter::default(),
            ),
            responses: registered(&mut registry, "responses", "Responses by route and status class, the gateway's own 429/502/504 included", Family::default()),
            upstream_latency: registered(&mut registry, "upstream_duration_seconds", "Time to the upstream's response headers, by upstream and status class", histograms(latency_histogram)),
            upstream_open: registered(
                &mut registry,
                "upstream_connections",
                "Connections open to each upstream (in use and idle), every worker's",
                Family::default(),
            ),
            store_errors: registered(&mut registry, "store_errors", "Store calls that failed, by backend and kind", Family::default()),
            store_events: registered(&mut registry, "store_events", "Redis data-loss events seen (a restart, a failover), by kind", Family::default()),
            store_breaker_open: registered(&mut registry, "store_breaker_open", "1 while a store circuit breaker is open (with a Cluster: that of any group of hash slots)", Gauge::default()),
            reloads: registered(&mut registry, "config_reloads", "Configuration reloads by result", Family::default()),
            config_last_reload_ok: registered(&mut registry, "config_last_reload_successful", "1 while the last reload applied its file (or none was asked since the start), 0 after one was refused", Gauge::default()),
            config_applied_at: registered(&mut registry, "config_last_reload_success_timestamp_seconds", "When the configuration in effect was applied (the start or the last good reload), in Unix seconds", Gauge::default()),
            keys_tracked: registered(&mut registry, "keys_tracked", "Keys held by the embedded store", Gauge::default()),
            open_connections: registered(&mut registry, "open_connections", "Open data-plane connections", Gauge::default()),
            tunnels_closed: registered(&mut registry, "tunnels_closed", "Upgraded tunnels closed, by why: ended (a side closed or failed), idle (tunnel_idle_timeout), budget, max_cost or store (a bytes tier closed it)", Family::default()),
            in_flight: registered(&mut registry, "in_flight", "Requests holding a slot of a concurrency policy (max_in_flight), by policy", Family::default()),
            queue_wait: registered(&mut registry, "queue_wait_seconds", "Time requests waited for a concurrency slot (max_delay), admitted or refused", ShardedHistogram::new(exponential_buckets(0.001, 4.0, 9))),
            settled_units: registered(&mut registry, "settled_units", "Costs settled after the response, in units, by policy", histograms(units_histogram)),
            settlements: registered(&mut registry, "settlements", "Settlements by policy and result: exact (the reserve), debt (more), refund (less)", Family::default()),
            settle_fallbacks: registered(&mut registry, "settle_fallbacks", "Settlements that used the reserve or a cap instead of the reported value, by policy and reason", Family::default()),
            lease_call_count: registered(&mut registry, "lease_calls", "Redis calls for slices of leased keys (sync = \"lease\"), by result: granted, refused, error, given_back", Family::default()),
            lease_unit_count: registered(&mut registry, "lease_units", "Units of leased slices: granted by Redis, given back unused", Family::default()),
            lease_held: registered(&mut registry, "lease_units_held", "Units of leased slices this gateway holds now: at most what a crash would lose", Gauge::default()),
            rls: rls::RlsFamilies::register(&mut registry),
            rlqs: rlqs::RlqsFamilies::register(&mut registry),
            telemetry: telemetry::TelemetryFamilies::register(&mut registry),
            registry,
        }
    }

    /// Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts a Redis call for a slice.
    pub fn lease_calls(&self, result: &'static str) {
        self.lease_call_count
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts `n` units of leased slices.
    pub fn lease_units(&self, result: &'static str, n: u64) {
        self.lease_unit_count
            .get_or_create(&ResultLabels { result })
            .inc_by(n);
    }

    /// The in-flight gauge of a concurrency policy.
    pub fn in_flight_gauge(&self, policy: &str) -> Gauge {
        self.in_flight
            .get_or_create(&PolicyLabels {
                policy: policy.to_owned(),
            })
            .clone()
    }

    /// The gauge of connections open to `upstream`.
    pub fn upstream_connections(&self, upstream: &str) -> Gauge {
        self.upstream_open
            .get_or_create(&UpstreamNameLabels {
                upstream: upstream.to_owned(),
            })
            .clone()
    }

    pub fn upstream_histogram(&self, upstream: &str, status: &'static str) -> Histogram {
        self.upstream_latency
            .get_or_create(&UpstreamLabels {
                upstream: upstream.to_owned(),
                status,
            })
            .clone()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
