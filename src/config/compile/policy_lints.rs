//! Warnings about policies that are valid but likely not what was meant: a rate period
//! in months (a calendar quota's job, or a minute mistyped), a client-chosen key whose
//! absent value shares one bucket, and a rate whose one request holds a key a client can
//! invent for hours.

use super::*;

impl Compiler {
    /// `missing = "shared"` by default on a key every source of which the client picks.
    pub(super) fn lint_missing(&mut self, name: &str, key: &[KeySource], raw: &RawPolicy) {
        // Said when the default decided it: writing missing = "shared" says it is meant.
        // A policy no route names keys no proxied request (an RLS-only policy).
        let defaulted = raw.missing.is_none() && self.routed.contains(name);
        if defaulted && !key.is_empty() && key.iter().all(KeySource::client_chosen) {
            self.warn(
                raw.key.span(),
                format!("policy `{name}`: every request without its key ({}) shares one bucket (missing = \"shared\", the default): one client can use it up for all of them, and a client can choose that bucket by leaving the key out", key.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
                Some("set missing = \"skip\" and limit such requests with an ip tier on the same route, or missing = \"reject\" (400); or write missing = \"shared\" when one bucket for them all is meant".to_owned()),
            );
        }
    }

    /// A rate whose interval (period / limit) loses more than 1 % to whole nanoseconds:
    /// the GCRA keeps one, so the policy admits more than it says (600,000,000 a second
    /// is kept as one a nanosecond: 1e9 a second, 67 % more).
    pub(super) fn lint_rounding(
        &mut self,
        name: &str,
        quota: Option<&crate::limit::Quota>,
        (limit, period): (Option<u64>, Option<Duration>),
        span: std::ops::Range<usize>,
    ) {
        let (Some(q), Some(limit), Some(period)) = (quota, limit, period) else {
            return;
        };
        let written = period.as_nanos() as f64 / limit as f64;
        let more = written / q.interval_ns() as f64 - 1.0;
        if more > 0.01 {
            self.warn(
                span,
                format!("policy `{name}`: period / limit is {written:.3} ns, kept as {} ns (whole nanoseconds): the policy admits {:.0} % more than {limit} per {}", q.interval_ns(), more * 100.0, humantime::format_duration(period)),
                Some("count in larger units (a cost of thousands of tokens or bytes: `settle_unit`, a price table's units) so that period / limit is 100 ns or more".to_owned()),
            );
        }
    }

    /// A rate's period written in months or years.
    pub(super) fn lint_period(&mut self, name: &str, raw_period: &S<String>, raw_limit: &S<i64>) {
        if let Some(unit) = calendar_unit(raw_period.get_ref()) {
            let text = raw_period.get_ref();
            // `M` is a month and `m` a minute: a capital M on a small limit is almost
            // always a minute meant (60 a month is two a day).
            let mixed_up = text.trim_start_matches(|c: char| c.is_ascii_digit()) == "M"
                && raw_limit.get_ref().unsigned_abs() < MINUTES_A_DAY;
            if mixed_up {
                self.warn(
                    raw_period.span(),
                    format!("policy `{name}`: period `{text}` is {text} month(s) (`M`), not minutes (`m`): {} requests a month is fewer than one every ten minutes", raw_limit.get_ref()),
                    Some(format!("for a minute write period = \"{}m\"; for a monthly allowance use a calendar quota (quota = …, window = \"month\")", text.trim_end_matches('M'))),
                );
            } else {
                self.warn(
                    raw_period.span(),
                    format!("policy `{name}`: period `{text}` counts a {unit} as a fixed length (30.44 days a month, 365.25 days a year) and refills continuously; it is not a calendar window"),
                    Some("write the period in days (\"30d\") to say so; limit = 1000000, period = \"30d\" is a continuous rate, not a monthly allowance".to_owned()),
                );
            }
        }
    }
}

impl Compiler {
    /// On the memory backend, each rate (not a calendar quota) one request of which can
    /// hold its key for over [`HELD_LONG`] (its interval times the most a request can be
    /// charged: a route's `cost`, or a settle's `max_cost`), keyed by something a client
    /// can invent (a header, a query parameter, … or an IPv6 client's address under `ip`
    /// or `ip/N` narrower than /64): the store keeps a key until its debt is paid and
    /// never drops one that owes (a fresh burst for whoever is dropped), so invented keys
    /// fill the room every rate policy's keys share for as long, and new keys then share
    /// one overflow key a policy. Policies no route, rate limit service rule or RLQS
    /// bucket names are not said.
    ///
    /// On Redis (`redis`), the same rate policies are told, and every calendar quota keyed
    /// so: Redis keeps each key to its expiry (a quota's to its window's end, up to a
    /// month), so invented keys fill its memory, and then either evict other keys (the
    /// rate keys first under `volatile-ttl`: their debts forgiven) or every write fails
    /// (`noeviction`).
    pub(super) fn lint_held(
        &mut self,
        policies: &BTreeMap<String, Arc<Policy>>,
        (routes, rls): (&[Arc<Route>], Option<&crate::config::Rls>),
        spans: &BTreeMap<String, std::ops::Range<usize>>,
        redis: bool,
    ) {
        // The most one request (or call: one unit at least) of each named policy costs.
        let mut costs: HashMap<&str, u64> = HashMap::new();
        for route in routes {
            for p in &route.policies {
                let most = costs.entry(p.name.as_str()).or_default();
                *most = (*most).max(route.cost);
            }
        }
        if let Some(rls) = rls {
            let rules = rls.rules.iter().chain(rls.buckets.iter().map(|b| &b.rule));
            for p in rules.filter_map(|r| r.policy.as_ref()) {
                costs.entry(p.name.as_str()).or_insert(1);
            }
        }
        for (name, p) in policies {
            let (Some(rate), Some(&cost)) = (p.rate(), costs.get(name.as_str())) else {
                continue;
            };
            let Some(source) = p.key.iter().find(|s| invented(s)) else {
                continue;
            };
            if rate.calendar.is_some() {
                // On the memory backend a quota's keys have a room of their own.
                if redis {
                    self.warn(
                        spans.get(name).cloned().unwrap_or(0..0),
                        format!("policy `{name}`: a calendar quota keyed by `{source}`, which a client can invent: on Redis each key lives until its window ends, so keys invented at a rate the other tiers let through fill Redis's memory for as long; past maxmemory, volatile-ttl or allkeys-lru evict other keys (rate debts forgiven) and noeviction fails every decision"),
                        Some("put an ip/64 tier on its routes to bound how fast keys are invented, key it by something a client cannot invent, and watch Redis's used_memory (docs/redis.md)".to_owned()),
                    );
                }
                continue;
            }
            let most = rate
                .settle
                .as_ref()
                .map_or(cost, |s| most_settled(s, rate).max(cost));
            let held = Duration::from_nanos(rate.quota.interval_ns().saturating_mul(most.max(1)));
            if held <= HELD_LONG {
                continue;
            }
            let shown = Duration::from_secs(held.as_secs());
            let fills = match redis {
                true => "on Redis, keys invented at a rate the other tiers let through fill its memory for as long; past maxmemory, other keys are evicted (their debts forgiven) or, under noeviction, every decision fails",
                false => "on the memory backend, keys invented at a rate the other tiers let through fill the store's room for rate keys (max_keys) for as long, and new keys of every rate policy then share one overflow key each",
            };
            self.warn(
                spans.get(name).cloned().unwrap_or(0..0),
                format!("policy `{name}`: one request can hold its key for {} (period / limit, times the most a request is charged), and a client can invent keys of `{source}`: {fills}", humantime::format_duration(shown)),
                Some(match redis {
                    true => "key it by something a client cannot invent (an IPv6 client by its network: ip/64), or put an ip/64 tier on its routes to bound how fast keys are invented; watch Redis's used_memory (docs/redis.md)",
                    false => "key it by something a client cannot invent (an IPv6 client by its network: ip/64), put an ip/64 tier on its routes to bound how fast keys are invented, or make it a calendar quota (quota = …, window = \"day\"): its keys have a room of their own, which drops its least-used keys when full",
                }.to_owned()),
            );
        }
    }
}

/// The most one request of a settling rate is charged: `max_cost` (a value that never
/// came, the client gone, settles at it), and for metered bytes no more than the burst
/// and the debt a key's transfers may run to, where a body is cut.
fn most_settled(settle: &Settle, rate: &RateLimit) -> u64 {
    if settle.source.measures_bytes() {
        let cut = rate.quota.burst().saturating_add(settle.max_debt);
        return settle.max_cost.min(cut);
    }
    settle.max_cost
}

/// Whether a client can make up values of `source` at will: what it sends, or the
/// address of an IPv6 client (which holds a /64) finer than its network.
fn invented(source: &KeySource) -> bool {
    match source {
        KeySource::Ip => true,
        KeySource::IpPrefix(len) => *len > 64,
        other => other.client_chosen(),
    }
}

/// How long one request may hold a key a client can invent before a policy is warned of:
/// a rate under one an hour (`limit = 10, period = "1d"` holds a key 2 h 24 m).
const HELD_LONG: Duration = Duration::from_secs(3_600);

/// A day's minutes: a limit a month below this is less than one request every ten
/// minutes (30 days hold 43,200 minutes), far likelier a per-minute limit mistyped.
const MINUTES_A_DAY: u64 = 1_440;

/// The calendar unit (month or year) a duration is written in, if any: humantime reads
/// `M`, `month(s)`, `y` and `year(s)` as fixed lengths.
fn calendar_unit(text: &str) -> Option<&'static str> {
    text.split(|c: char| c.is_ascii_digit() || c.is_whitespace())
        .find_map(|unit| match unit {
            "M" | "month" | "months" => Some("month"),
            "y" | "year" | "years" => Some("year"),
            _ => None,
        })
}
