//! Who the rate limit service limits: each decided descriptor counted in the top-keys
//! sketches under its rule, as a proxied request's tiers are under their route — the
//! rules are one more "route" after the config's own (`Snapshot::build`), so
//! `GET /admin/top` and `tollgate top` list RLS keys beside proxied ones.

use super::decide::{Decided, Matched};
use super::proto::RateLimitRequest;
use crate::config::{Config, Rls};
use crate::store::Counted;
use crate::top::TopKeys;

/// Counts `decided`'s descriptors of `call`; a key's parts are written only when it
/// enters a sketch.
pub fn record(
    top: &TopKeys,
    (config, rls): (&Config, &Rls),
    call: &RateLimitRequest,
    decided: &Decided,
) {
    let worker = crate::conn::worker::current();
    let route = config.routes.len();
    for admission in decided.admissions() {
        let now = admission.now();
        top.on_route(worker, route, |tiers| {
            for outcome in admission.per_policy() {
                let refused = match outcome.counted {
                    Counted::Denied => true,
                    Counted::Admitted => false,
                    _ => continue,
                };
                let Some(Matched::Rule(rule_index)) = decided.matched.get(outcome.position) else {
                    continue;
                };
                let (Some(rule), Some(d)) = (
                    rls.rules.get(*rule_index),
                    call.descriptors.get(outcome.position),
                ) else {
                    continue;
                };
                tiers.record(*rule_index, outcome.key, refused, now, |text| {
                    let values = d.entries.iter().map(|e| e.value.as_str());
                    for (i, part) in rule.named_parts(values).enumerate() {
                        text.push_part(i, &part);
                    }
                });
            }
        });
    }
}
