//! What the Redis backend can keep: its scripts hold a key's debt exactly in doubles,
//! so every rate's longest debt (τ + T + max_delay) stays below 2^52 ns (about 52 days).

use super::*;

impl Compiler {
    /// The Redis script keeps debts in doubles: τ + max_delay must stay below 2^52 ns.
    /// (`yaml`: the policies of envoyproxy/ratelimit's YAML, which has no burst or period
    /// to lower.)
    pub(super) fn redis_limits(
        &mut self,
        policies: &BTreeMap<String, Arc<Policy>>,
        (spans, yaml): (&BTreeMap<String, std::ops::Range<usize>>, &HashSet<String>),
    ) {
        for (name, p) in policies {
            let Some(rate) = p.rate() else {
                continue; // concurrency caps: leases, no debt to bound
            };
            let too_long = std::iter::once(&rate.quota)
                .chain(rate.overrides.values())
                .any(|q| redis_cannot_hold(q, p.max_delay));
            if !too_long {
                continue;
            }
            let (message, hint) = if yaml.contains(name) {
                let unit = super::ratelimit_yaml::unit_name(rate.period.as_secs());
                (
                    format!("ratelimit_config: the limit `{name}`, {} per {unit}, keeps a key's debt up to one {unit} and one request: past the 52 days the redis backend keeps", rate.limit),
                    "envoyproxy/ratelimit counts fixed windows, tollgate a rate (GCRA). On Redis write this limit as a calendar quota ([policies.NAME] quota = N, window = \"day\", \"week\" or \"month\": a year's allowance as a month's twelfth) named by an [[rls.rules]] of the same descriptor, or use the memory backend",
                )
            } else {
                (
                    format!("policy `{name}`: (burst + 1) × period / limit + max_delay exceeds 52 days, too long for the redis backend"),
                    "lower burst or period, or use the memory backend",
                )
            };
            let at = spans.get(name).cloned().unwrap_or(0..0);
            self.error(at, message, Some(hint.to_owned()));
        }
    }
}

/// Whether a quota's longest debt (τ + T + max_delay) is beyond what the Redis script
/// keeps exactly (doubles: 2^52 ns).
pub(super) fn redis_cannot_hold(q: &Quota, max_delay: Duration) -> bool {
    const REDIS_MAX_NS: u64 = 1 << 52;
    let max_delay = u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX);
    q.tolerance_ns()
        .saturating_add(max_delay)
        .saturating_add(q.interval_ns())
        >= REDIS_MAX_NS
}
