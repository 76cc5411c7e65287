//! The rate limit service's series: decisions per rule (domain, policy, outcome) and
//! calls by the code they were answered with, resolved once per config version (rules)
//! or once per process (calls), so a call increments counters without a label look-up.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::config::Config;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlsDecisionLabels {
    pub domain: String,
    pub policy: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RlsCallLabels {
    pub code: &'static str,
}

/// One rule's decisions by outcome.
#[derive(Clone)]
pub struct RlsRuleCounters {
    pub ok: Counter,
    pub over_limit: Counter,
    /// A shadow policy that would have refused: answered OK.
    pub shadow_over_limit: Counter,
    /// Not decided: the store could not answer and `on_error = "allow"` answered OK.
    pub store_unavailable_allowed: Counter,
    /// Not decided: the store could not answer and `on_error = "deny"` failed the call.
    pub store_unavailable: Counter,
}

/// Calls by how they were answered.
#[derive(Clone)]
pub struct RlsCallCounters {
    pub ok: Counter,
    pub over_limit: Counter,
    pub unavailable: Counter,
    pub invalid_argument: Counter,
    pub unimplemented: Counter,
    /// Overloaded, or a message too large.
    pub resource_exhausted: Counter,
    /// Descriptors no rule names.
    pub unmatched: Counter,
}

/// The families, registered once.
pub struct RlsFamilies {
    pub decisions: Family<RlsDecisionLabels, Counter>,
    pub calls: RlsCallCounters,
}

impl RlsFamilies {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let decisions = Family::<RlsDecisionLabels, Counter>::default();
        registry.register(
            "rls_decisions",
            "Rate limit service decisions by domain, policy and outcome (ok, over_limit, shadow_over_limit, store_unavailable_allowed, store_unavailable)",
            decisions.clone(),
        );
        let calls = Family::<RlsCallLabels, Counter>::default();
        registry.register(
            "rls_calls",
            "Rate limit service calls by the answer's code (ok, over_limit, unavailable, invalid_argument, unimplemented, resource_exhausted), and descriptors no rule names (unmatched)",
            calls.clone(),
        );
        let call = |code| calls.get_or_create(&RlsCallLabels { code }).clone();
        Self {
            decisions,
            calls: RlsCallCounters {
                ok: call("ok"),
                over_limit: call("over_limit"),
                unavailable: call("unavailable"),
                invalid_argument: call("invalid_argument"),
                unimplemented: call("unimplemented"),
                resource_exhausted: call("resource_exhausted"),
                unmatched: call("unmatched"),
            },
        }
    }

    /// Each `[[rls.rules]]` entry's counters, by rule index.
    pub fn rules(&self, config: &Config) -> Box<[RlsRuleCounters]> {
        let Some(rls) = &config.rls else {
            return Box::new([]);
        };
        rls.rules
            .iter()
            .map(|rule| {
                let get = |outcome| {
                    self.decisions
                        .get_or_create(&RlsDecisionLabels {
                            domain: rule.domain.clone(),
                            policy: rule.limit_name().to_owned(),
                            outcome,
                        })
                        .clone()
                };
                RlsRuleCounters {
                    ok: get("ok"),
                    over_limit: get("over_limit"),
                    shadow_over_limit: get("shadow_over_limit"),
                    store_unavailable_allowed: get("store_unavailable_allowed"),
                    store_unavailable: get("store_unavailable"),
                }
            })
            .collect()
    }

    /// Drops the series of rules `old` had and `new` has not (by domain and limit name),
    /// so a limit removed from the YAML or the TOML leaves `/metrics` with it.
    pub fn forget_removed(&self, old: &Config, new: &Config) {
        let names = |config: &Config| -> Vec<(String, String)> {
            config
                .rls
                .iter()
                .flat_map(|rls| rls.rules.iter())
                .map(|r| (r.domain.clone(), r.limit_name().to_owned()))
                .collect()
        };
        let kept = names(new);
        for (domain, policy) in names(old) {
            if kept.contains(&(domain.clone(), policy.clone())) {
                continue;
            }
            for outcome in OUTCOMES {
                self.decisions.remove(&RlsDecisionLabels {
                    domain: domain.clone(),
                    policy: policy.clone(),
                    outcome,
                });
            }
        }
    }
}

/// Every outcome a rule's decisions are counted under.
const OUTCOMES: [&str; 5] = [
    "ok",
    "over_limit",
    "shadow_over_limit",
    "store_unavailable_allowed",
    "store_unavailable",
];
