//! Metric handles resolved once per config version, so the request path only increments
//! sharded atomics: each route's counters, each of its tiers', and each settled tier's
//! settlement series. A reload drops the series of what it removed.

use super::labels::{
    DecisionLabels, PolicyLabels, RouteLabels, RouteStatusLabels, SettleFallback, SettleLabels,
    SettleResult, UpstreamLabels, CLASSES, OUTCOMES,
};
use super::{Histogram, Metrics, ShardedCounter};
use crate::config::{Config, Policy, Route};

#[derive(Clone)]
pub struct TierCounters {
    pub admitted: ShardedCounter,
    pub denied: ShardedCounter,
    pub shadow_denied: ShardedCounter,
    /// Decided on the policy's overflow key: the store was full of keys that owe time.
    pub overflow: ShardedCounter,
    /// Not decided: the store could not answer and `on_error = "allow"` let it through.
    pub store_unavailable_allowed: ShardedCounter,
    /// Not decided: the store could not answer and `on_error = "deny"` answered 503.
    pub store_unavailable: ShardedCounter,
    /// For a policy whose cost is settled after the response.
    pub settle: Option<SettleCounters>,
}

/// A settled policy's series: units settled, settlements by result, fallbacks by reason.
#[derive(Clone)]
pub struct SettleCounters {
    pub units: Histogram,
    results: [ShardedCounter; 3],
    fallbacks: [ShardedCounter; SettleFallback::ALL.len()],
}

impl SettleCounters {
    pub fn result(&self, result: SettleResult) -> &ShardedCounter {
        &self.results[result as usize]
    }

    pub fn fallback(&self, fallback: SettleFallback) -> &ShardedCounter {
        &self.fallbacks[fallback as usize]
    }
}

/// One route's pre-resolved metric handles.
#[derive(Clone)]
pub struct RouteMetrics {
    /// Responses by status class (1xx … 5xx), the gateway's own 429/502/504 included.
    pub responses: [ShardedCounter; 5],
    pub retry_after: Histogram,
}

impl Metrics {
    /// A route's response and `Retry-After` handles, so the request path only
    /// increments atomics.
    pub fn route_counters(&self, route: &Route) -> RouteMetrics {
        RouteMetrics {
            responses: CLASSES.map(|status| {
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
        }
    }

    /// One policy's decision (and settle) handles on `route`.
    pub fn tier_counters(&self, route: &Route, p: &Policy) -> TierCounters {
        let counter = |outcome| {
            self.decisions
                .get_or_create(&DecisionLabels {
                    route: route.name.clone(),
                    policy: p.name.clone(),
                    outcome,
                })
                .clone()
        };
        let settled = p.rate().is_some_and(|r| r.settle.is_some());
        TierCounters {
            admitted: counter("admitted"),
            denied: counter("denied"),
            shadow_denied: counter("shadow_denied"),
            overflow: counter("overflow"),
            store_unavailable_allowed: counter("store_unavailable_allowed"),
            store_unavailable: counter("store_unavailable"),
            settle: settled.then(|| self.settle_counters(&p.name)),
        }
    }

    fn settle_counters(&self, policy: &str) -> SettleCounters {
        let labels = |result| SettleLabels {
            policy: policy.to_owned(),
            result,
        };
        SettleCounters {
            units: self
                .settled_units
                .get_or_create(&PolicyLabels {
                    policy: policy.to_owned(),
                })
                .clone(),
            results: SettleResult::ALL
                .map(|r| self.settlements.get_or_create(&labels(r.name())).clone()),
            fallbacks: SettleFallback::ALL.map(|f| {
                self.settle_fallbacks
                    .get_or_create(&labels(f.name()))
                    .clone()
            }),
        }
    }

    /// Drops the series of routes, route tiers, policies and upstreams that `old` had and
    /// `new` has not, so `/metrics` describes the running config (a renamed route starts
    /// afresh either way). Requests still in flight on `old` count into handles no longer
    /// exposed.
    pub fn forget_removed(&self, old: &Config, new: &Config) {
        for route in &old.routes {
            let kept = new.routes.iter().find(|r| r.name == route.name);
            for policy in &route.policies {
                let still = kept.is_some_and(|r| r.policies.iter().any(|p| p.name == policy.name));
                if !still {
                    for outcome in OUTCOMES {
                        self.decisions.remove(&DecisionLabels {
                            route: route.name.clone(),
                            policy: policy.name.clone(),
                            outcome,
                        });
                    }
                }
            }
            if kept.is_none() {
                self.forget_route(&route.name);
            }
        }
        for policy in &old.policies {
            if !new.policies.iter().any(|p| p.name == policy.name) {
                self.forget_policy(&policy.name);
            }
        }
        self.rls.forget_removed(old, new);
        for upstream in &old.upstreams {
            if !new.upstreams.iter().any(|u| u.name == upstream.name) {
                self.upstream_open.remove(&super::UpstreamNameLabels {
                    upstream: upstream.name.clone(),
                });
                for status in CLASSES {
                    self.upstream_latency.remove(&UpstreamLabels {
                        upstream: upstream.name.clone(),
                        status,
                    });
                }
            }
        }
    }

    fn forget_route(&self, route: &str) {
        for status in CLASSES {
            self.responses.remove(&RouteStatusLabels {
                route: route.to_owned(),
                status,
            });
        }
        self.retry_after.remove(&RouteLabels {
            route: route.to_owned(),
        });
    }

    fn forget_policy(&self, policy: &str) {
        let labels = PolicyLabels {
            policy: policy.to_owned(),
        };
        self.in_flight.remove(&labels);
        self.settled_units.remove(&labels);
        let results = SettleResult::ALL.map(SettleResult::name);
        for result in results {
            self.settlements.remove(&SettleLabels {
                policy: policy.to_owned(),
                result,
            });
        }
        for result in SettleFallback::ALL.map(SettleFallback::name) {
            self.settle_fallbacks.remove(&SettleLabels {
                policy: policy.to_owned(),
                result,
            });
        }
    }
}
