//! Every metric tollgate exports, defined once. Label values are config names and fixed
//! words, never request data, so cardinality stays bounded by the config.

mod sharded;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

pub use sharded::{ShardedCounter, ShardedHistogram};

/// What the request path writes: sharded per worker (see `sharded`).
type Histogram = ShardedHistogram;

use crate::config::Config;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub route: String,
    pub policy: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatusLabels {
    pub route: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettleLabels {
    pub policy: String,
    pub result: &'static str,
}

/// How a settlement went: the cost matched the reserve, was more (a debt) or less (a
/// refund); or, for the fallbacks, why the reserve or a cap was used instead of a value.
pub const SETTLE_RESULTS: [&str; 3] = ["exact", "debt", "refund"];
pub const SETTLE_FALLBACKS: [&str; 6] = [
    "missing",
    "invalid",
    "capped",
    "upstream_error",
    "aborted",
    "store_error",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    pub backend: &'static str,
    pub kind: &'static str,
}

fn wait_histogram() -> Histogram {
    // 1 ms … ~9 h: waits span from one emission interval of a fast API to a daily quota.
    Histogram::new(exponential_buckets(0.001, 4.0, 13))
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … 65 s: past the default 30 s upstream timeout.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

pub struct Metrics {
    registry: Registry,
    pub decisions: Family<DecisionLabels, ShardedCounter>,
    pub retry_after: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub requests_unmatched: ShardedCounter,
    pub responses: Family<RouteStatusLabels, ShardedCounter>,
    pub upstream_latency: Family<UpstreamLabels, Histogram, fn() -> Histogram>,
    pub store_errors: Family<StoreLabels, Counter>,
    pub store_breaker_open: Gauge,
    pub reloads: Family<ResultLabels, Counter>,
    pub keys_tracked: Gauge<i64, AtomicI64Compat>,
    pub open_connections: Gauge,
    /// Slots held per concurrency policy.
    pub in_flight: Family<PolicyLabels, Gauge>,
    /// How long requests waited in a concurrency queue (admitted or not).
    pub queue_wait: Histogram,
    /// Settled costs, in units, per settled policy.
    pub settled_units: Family<PolicyLabels, Histogram, fn() -> Histogram>,
    /// Settlements by policy and result (`SETTLE_RESULTS`).
    pub settlements: Family<SettleLabels, Counter>,
    /// Settlements that could not use the value as reported (`SETTLE_FALLBACKS`).
    pub settle_fallbacks: Family<SettleLabels, Counter>,
    /// `sync = "lease"`: calls for slices by result, units by fate, units held now.
    pub lease_call_count: Family<ResultLabels, Counter>,
    pub lease_unit_count: Family<ResultLabels, Counter>,
    pub lease_held: Gauge,
}

fn units_histogram() -> Histogram {
    // 1 … 4^12 ≈ 16.7 M units: from a request count to a large response in bytes.
    Histogram::new(exponential_buckets(1.0, 4.0, 13))
}

/// prometheus-client's default gauge atomic.
pub type AtomicI64Compat = std::sync::atomic::AtomicI64;

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate");
        let decisions = Family::<DecisionLabels, ShardedCounter>::default();
        registry.register(
            "decisions",
            "Limiter decisions by route, policy (tier) and outcome",
            decisions.clone(),
        );
        let retry_after = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            wait_histogram as fn() -> Histogram,
        );
        registry.register(
            "retry_after_seconds",
            "Wait told to denied clients (Retry-After), by route",
            retry_after.clone(),
        );
        let requests_unmatched = ShardedCounter::default();
        registry.register(
            "requests_unmatched",
            "Requests that matched no route (404)",
            requests_unmatched.clone(),
        );
        let responses = Family::<RouteStatusLabels, ShardedCounter>::default();
        registry.register(
            "responses",
            "Responses by route and status class, the gateway's own 429/502/504 included",
            responses.clone(),
        );
        let upstream_latency =
            Family::<UpstreamLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        registry.register(
            "upstream_duration_seconds",
            "Time to the upstream's response headers, by upstream and status class",
            upstream_latency.clone(),
        );
        let store_errors = Family::<StoreLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Store calls that failed, by backend and kind",
            store_errors.clone(),
        );
        let store_breaker_open = Gauge::default();
        registry.register(
            "store_breaker_open",
            "1 while the store circuit breaker is open",
            store_breaker_open.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads by result",
            reloads.clone(),
        );
        let keys_tracked = Gauge::<i64, AtomicI64Compat>::default();
        registry.register(
            "keys_tracked",
            "Keys held by the embedded store",
            keys_tracked.clone(),
        );
        let open_connections = Gauge::default();
        registry.register(
            "open_connections",
            "Open data-plane connections",
            open_connections.clone(),
        );
        let in_flight = Family::<PolicyLabels, Gauge>::default();
        registry.register(
            "in_flight",
            "Requests holding a slot of a concurrency policy (max_in_flight), by policy",
            in_flight.clone(),
        );
        let queue_wait = ShardedHistogram::new(exponential_buckets(0.001, 4.0, 9));
        registry.register(
            "queue_wait_seconds",
            "Time requests waited for a concurrency slot (max_delay), admitted or refused",
            queue_wait.clone(),
        );
        let settled_units =
            Family::<PolicyLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                units_histogram as fn() -> Histogram,
            );
        registry.register(
            "settled_units",
            "Costs settled after the response, in units, by policy",
            settled_units.clone(),
        );
        let settlements = Family::<SettleLabels, Counter>::default();
        registry.register(
            "settlements",
            "Settlements by policy and result: exact (the reserve), debt (more), refund (less)",
            settlements.clone(),
        );
        let settle_fallbacks = Family::<SettleLabels, Counter>::default();
        registry.register(
            "settle_fallbacks",
            "Settlements that used the reserve or a cap instead of the reported value, by policy and reason",
            settle_fallbacks.clone(),
        );
        let lease_call_count = Family::<ResultLabels, Counter>::default();
        registry.register(
            "lease_calls",
            "Redis calls for slices of leased keys (sync = \"lease\"), by result: granted, refused, error, given_back",
            lease_call_count.clone(),
        );
        let lease_unit_count = Family::<ResultLabels, Counter>::default();
        registry.register(
            "lease_units",
            "Units of leased slices: granted by Redis, given back unused",
            lease_unit_count.clone(),
        );
        let lease_held = Gauge::default();
        registry.register(
            "lease_units_held",
            "Units of leased slices this gateway holds now: at most what a crash would lose",
            lease_held.clone(),
        );
        Self {
            lease_call_count,
            lease_unit_count,
            lease_held,
            settled_units,
            settlements,
            settle_fallbacks,
            in_flight,
            queue_wait,
            registry,
            decisions,
            retry_after,
            requests_unmatched,
            responses,
            upstream_latency,
            store_errors,
            store_breaker_open,
            reloads,
            keys_tracked,
            open_connections,
        }
    }

    /// Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counter handles for one config, so the request path only increments atomics.
    pub fn route_handles(&self, config: &Config) -> Vec<RouteMetrics> {
        config
            .routes
            .iter()
            .map(|route| RouteMetrics {
                tiers: route
                    .policies
                    .iter()
                    .map(|p| {
                        let counter = |outcome| {
                            self.decisions
                                .get_or_create(&DecisionLabels {
                                    route: route.name.clone(),
                                    policy: p.name.clone(),
                                    outcome,
                                })
                                .clone()
                        };
                        TierCounters {
                            admitted: counter("admitted"),
                            denied: counter("denied"),
                            shadow_denied: counter("shadow_denied"),
                            overflow: counter("overflow"),
                        }
                    })
                    .collect(),
                responses: ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|status| {
                    self.responses
                        .get_or_create(&RouteStatusLabels {
                            route: route.name.clone(),
                            status,
                        })
                        .clone()
                }),
                retry_after: self
                    .retry_after
                    .get_or_create(&RouteLabels {
                        route: route.name.clone(),
                    })
                    .clone(),
            })
            .collect()
    }

    /// Drops the series of routes, route tiers, policies and upstreams that `old` had and
    /// `new` has not, so `/metrics` describes the running config (a renamed route starts
    /// afresh either way). Requests still in flight on `old` count into handles no longer
    /// exposed.
    pub fn forget_removed(&self, old: &Config, new: &Config) {
        const OUTCOMES: [&str; 4] = ["admitted", "denied", "shadow_denied", "overflow"];
        const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
        for route in &old.routes {
            let kept = new.routes.iter().find(|r| r.name == route.name);
            for policy in &route.policies {
                let still = kept.is_some_and(|r| r.policies.iter().any(|p| p.name == policy.name));
                if still {
                    continue;
                }
                for outcome in OUTCOMES {
                    self.decisions.remove(&DecisionLabels {
                        route: route.name.clone(),
                        policy: policy.name.clone(),
                        outcome,
                    });
                }
            }
            if kept.is_none() {
                for status in CLASSES {
                    self.responses.remove(&RouteStatusLabels {
                        route: route.name.clone(),
                        status,
                    });
                }
                self.retry_after.remove(&RouteLabels {
                    route: route.name.clone(),
                });
            }
        }
        for policy in &old.policies {
            if !new.policies.iter().any(|p| p.name == policy.name) {
                let labels = PolicyLabels {
                    policy: policy.name.clone(),
                };
                self.in_flight.remove(&labels);
                self.settled_units.remove(&labels);
                for result in SETTLE_RESULTS {
                    self.settlements.remove(&SettleLabels {
                        policy: policy.name.clone(),
                        result,
                    });
                }
                for result in SETTLE_FALLBACKS {
                    self.settle_fallbacks.remove(&SettleLabels {
                        policy: policy.name.clone(),
                        result,
                    });
                }
            }
        }
        for upstream in &old.upstreams {
            if !new.upstreams.iter().any(|u| u.name == upstream.name) {
                for status in CLASSES {
                    self.upstream_latency.remove(&UpstreamLabels {
                        upstream: upstream.name.clone(),
                        status,
                    });
                }
            }
        }
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

#[derive(Clone)]
pub struct TierCounters {
    pub admitted: ShardedCounter,
    pub denied: ShardedCounter,
    pub shadow_denied: ShardedCounter,
    /// Decided on the policy's overflow key: the store was full of keys that owe time.
    pub overflow: ShardedCounter,
}

/// One route's pre-resolved metric handles.
#[derive(Clone)]
pub struct RouteMetrics {
    pub tiers: Vec<TierCounters>,
    /// Responses by status class (1xx … 5xx), the gateway's own 429/502/504 included.
    pub responses: [ShardedCounter; 5],
    pub retry_after: Histogram,
}
