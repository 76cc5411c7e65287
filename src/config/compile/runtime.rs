//! Runtime overrides (`PUT /admin/overrides/…` and the overrides file): one override's
//! fields checked against the running policy with the rules and hints `tollgate check`
//! gives the file's `[policies.NAME.overrides]`. The same check runs again after every
//! reload, so an override never applies numbers the running config would refuse.

use super::redis_bounds::redis_cannot_hold;
use super::*;
use crate::config::override_spec::{OverrideProblem, OverrideSpec};
use crate::config::raw::RawOverride;
use crate::config::Applied;

/// Reads an override's fields from JSON (the admin API's body, without `ttl`): unknown
/// fields and values of the wrong type are told in the config's words.
pub fn override_spec(
    fields: serde_json::Map<String, serde_json::Value>,
) -> Result<OverrideSpec, Vec<OverrideProblem>> {
    // Through TOML, so names, types and hints are exactly those of the file's overrides.
    let text = toml::to_string(&fields).map_err(|e| {
        vec![OverrideProblem {
            message: format!("unusable value: {e}"),
            hint: Some("numbers without quotes, durations as strings (\"1m\")".to_owned()),
        }]
    })?;
    let raw: RawOverride = toml::from_str(&text).map_err(|e| {
        let message = e.message().trim().to_owned();
        vec![OverrideProblem {
            hint: hints::parse_hint(&message),
            message,
        }]
    })?;
    Ok(OverrideSpec {
        limit: raw.limit.map(|v| *v.get_ref()),
        period: raw.period.map(|v| v.get_ref().clone()),
        burst: raw.burst.map(|v| *v.get_ref()),
        max_in_flight: raw.max_in_flight.map(|v| *v.get_ref()),
        quota: raw.quota.map(|v| *v.get_ref()),
    })
}

/// What `spec` makes of `policy`'s limit in `config`, or why it cannot apply.
pub fn check_override(
    config: &Config,
    policy: &Policy,
    spec: &OverrideSpec,
) -> Result<Applied, Vec<OverrideProblem>> {
    let mut c = Compiler {
        problems: Vec::new(),
        warnings: Vec::new(),
        base: PathBuf::new(),
        routed: HashSet::new(),
        prices: BTreeMap::new(),
    };
    let applied = c.runtime_override(config, policy, spec);
    match applied {
        Some(applied) if c.problems.is_empty() => Ok(applied),
        _ => Err(c
            .problems
            .into_iter()
            .map(|p| OverrideProblem {
                message: p.message,
                hint: p.hint,
            })
            .collect()),
    }
}

impl Compiler {
    fn runtime_override(
        &mut self,
        config: &Config,
        policy: &Policy,
        spec: &OverrideSpec,
    ) -> Option<Applied> {
        let name = &policy.name;
        let spanned = |v: i64| S::new(0..0, v);
        match &policy.kind {
            PolicyKind::Rate(rate) if rate.calendar.is_some() => {
                self.runtime_quota_override(policy, spec)
            }
            PolicyKind::Rate(rate) => {
                if spec.quota.is_some() {
                    self.error(
                        0..0,
                        format!("policy `{name}` is a rate policy: an override cannot set quota"),
                        Some("override limit, period or burst here".to_owned()),
                    );
                    return None;
                }
                if spec.max_in_flight.is_some() {
                    self.error(
                        0..0,
                        format!("policy `{name}` is a rate policy: an override cannot set max_in_flight"),
                        Some("override limit, period or burst here".to_owned()),
                    );
                    return None;
                }
                if spec.limit.is_none() && spec.period.is_none() && spec.burst.is_none() {
                    self.error(
                        0..0,
                        "the override sets nothing",
                        Some("give at least one of limit, period and burst".to_owned()),
                    );
                    return None;
                }
                let limit = spec
                    .limit
                    .map_or(Some(rate.limit), |l| self.positive(&spanned(l), "limit"));
                let burst = spec.burst.map_or(Some(rate.quota.burst()), |b| {
                    self.positive(&spanned(b), "burst")
                });
                let period = spec.period.as_ref().map_or(Some(rate.period), |p| {
                    self.duration(&S::new(0..0, p.clone()), false)
                });
                let quota = self.quota(limit, period, burst, 0..0)?;
                if matches!(config.store.backend, Backend::Redis { .. })
                    && redis_cannot_hold(&quota, policy.max_delay)
                {
                    self.error(
                        0..0,
                        format!("policy `{name}`: (burst + 1) × period / limit + max_delay exceeds 52 days, too long for the redis backend"),
                        Some("lower burst or period".to_owned()),
                    );
                }
                Some(Applied::Rate(quota))
            }
            PolicyKind::Concurrency(_) => self.runtime_cap_override(policy, spec),
        }
    }

    /// A runtime override of a concurrency cap: `max_in_flight` only.
    fn runtime_cap_override(&mut self, policy: &Policy, spec: &OverrideSpec) -> Option<Applied> {
        let max = spec.max_in_flight;
        let max = self.only_field(policy, "concurrency cap", ("max_in_flight", max), spec)?;
        self.in_flight(&max).map(Applied::Concurrency)
    }

    /// The one number a runtime override of a policy of `kind` may set (`field`, given as
    /// `value`), every other field of `spec` refused.
    pub(super) fn only_field(
        &mut self,
        policy: &Policy,
        kind: &str,
        (field, value): (&str, Option<i64>),
        spec: &OverrideSpec,
    ) -> Option<S<i64>> {
        let name = &policy.name;
        let given = |other: &str, set: bool| (set && other != field).then_some(0..0);
        self.refuse_fields(
            [
                ("limit", given("limit", spec.limit.is_some())),
                ("period", given("period", spec.period.is_some())),
                ("burst", given("burst", spec.burst.is_some())),
                ("quota", given("quota", spec.quota.is_some())),
                (
                    "max_in_flight",
                    given("max_in_flight", spec.max_in_flight.is_some()),
                ),
            ],
            |other| format!("policy `{name}` is a {kind}: an override cannot set `{other}`"),
            &format!("override {field} here"),
        );
        let Some(value) = value else {
            self.error(
                0..0,
                format!("the override sets no {field}"),
                Some(format!("give {field} = 1 or more")),
            );
            return None;
        };
        Some(S::new(0..0, value))
    }
}

/// The routes listing `policy` that refuse a key under `applied` (a runtime override)
/// whenever it comes: an unsettled route whose cost is above its burst (`429
/// cost_above_burst`). A settled policy's key reserves at most its burst and pays the
/// rest when it settles (`RequestTiers::cap_reserves`); a shadow policy refuses nothing.
/// The file's own overrides never do: `check` refuses them.
pub fn refused_routes(config: &Config, policy: &Policy, applied: &Applied) -> Vec<String> {
    let Applied::Rate(quota) = applied else {
        return Vec::new();
    };
    if policy.mode == crate::limit::Mode::Shadow || policy.rate().is_none_or(|r| r.settle.is_some())
    {
        return Vec::new();
    }
    let lists = |route: &Route| route.policies.iter().any(|p| p.name == policy.name);
    config
        .routes
        .iter()
        .filter(|route| lists(route) && route.cost > quota.burst())
        .map(|route| route.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: &str, settle: &str) -> Config {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:1\"]\n[policies.p]\nkey = \"ip\"\nlimit = 1\nperiod = \"1s\"\nburst = 5\n{mode}{settle}\n[[routes]]\nname = \"light\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"p\"]\n[[routes]]\nname = \"heavy\"\npath = \"/heavy\"\nupstream = \"api\"\npolicies = [\"p\"]\ncost = 3\n"
        );
        crate::config::compile(std::path::Path::new("t.toml"), &text).expect("valid")
    }

    fn refused(config: &Config, burst: i64) -> Vec<String> {
        let policy = config.policy("p").expect("p");
        let spec = OverrideSpec {
            burst: Some(burst),
            ..OverrideSpec::default()
        };
        let applied = check_override(config, policy, &spec).expect("an override it takes");
        refused_routes(config, policy, &applied)
    }

    #[test]
    fn a_route_refuses_a_key_whose_override_is_below_its_cost_unless_shadow_or_settled() {
        let enforced = config("", "");
        assert_eq!(refused(&enforced, 2), ["heavy"]);
        assert!(
            refused(&enforced, 3).is_empty(),
            "a burst of the cost admits it"
        );
        // A shadow policy refuses nothing; a settled one reserves at most the burst.
        assert!(refused(&config("mode = \"shadow\"\n", ""), 2).is_empty());
        let settled = "settle = \"response_header:x-used\"\n";
        assert!(refused(&config("", settled), 2).is_empty());
    }
}
