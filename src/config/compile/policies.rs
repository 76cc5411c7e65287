//! `[policies.NAME]`: key sources, quota, modes, overrides.

use super::*;
use crate::config::raw::RawOverride;

impl Compiler {
    pub(super) fn policy(&mut self, name: String, raw: S<RawPolicy>) -> Option<Policy> {
        let span = raw.span();
        let raw = raw.into_inner();
        let mut key = Vec::new();
        let sources = raw.key.get_ref().to_vec();
        if sources.is_empty() {
            self.error(
                raw.key.span(),
                format!("policy `{name}` has an empty key"),
                Some("name at least one source, e.g. key = \"ip\"".to_owned()),
            );
        }
        for s in &sources {
            match s.parse::<KeySource>() {
                Ok(src) => key.push(src),
                Err(e) => self.error(raw.key.span(), e.to_string(), Some("sources: ip, ip/64 (IPv6 by network), header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, route, method, path, json:POINTER".to_owned())),
            }
        }
        let missing = self.choice(
            &raw.missing,
            &[
                ("shared", Missing::Shared),
                ("skip", Missing::Skip),
                ("reject", Missing::Reject),
            ],
            Missing::Shared,
            "missing",
        );
        self.lint_missing(&name, &key, &raw);
        let mode = self.choice(
            &raw.mode,
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
            Mode::Enforce,
            "mode",
        );
        let max_delay = self.duration_or(&raw.max_delay, Duration::ZERO, true);
        if !raw.overrides.is_empty() && sources.len() != 1 {
            self.error(
                raw.key.span(),
                format!("policy `{name}` has overrides but a composed key"),
                Some("overrides apply to single-source keys only".to_owned()),
            );
        }
        let calendar = raw.quota.is_some() || raw.window.is_some();
        let key_span = raw.key.span();
        let mut kind = match &raw.max_in_flight {
            Some(_) => self.concurrency_limit(&name, raw, span),
            None if calendar => self.quota_limit(&name, raw, span),
            None => self.rate_limit(&name, raw, span),
        };
        if let (Some(kind), [source]) = (kind.as_mut(), &key[..]) {
            self.spell_overrides(&name, source, kind, key_span);
        }
        Some(Policy {
            name,
            key,
            missing: missing?,
            mode: mode?,
            max_delay: max_delay?,
            kind: kind?,
        })
    }

    /// `limit` per `period` with `burst`, and per-key overrides of them.
    fn rate_limit(
        &mut self,
        name: &str,
        raw: RawPolicy,
        span: std::ops::Range<usize>,
    ) -> Option<PolicyKind> {
        self.refuse_fields(
            [
                ("retry_after", raw.retry_after.as_ref().map(S::span)),
                ("lease_ttl", raw.lease_ttl.as_ref().map(S::span)),
            ],
            |field| format!("policy `{name}`: `{field}` applies to concurrency policies only"),
            "remove it, or make the policy a concurrency cap with max_in_flight instead of limit/period/burst",
        );
        self.refuse_fields(
            [
                ("timezone", raw.timezone.as_ref().map(S::span)),
                ("anchor", raw.anchor.as_ref().map(S::span)),
            ],
            |field| format!("policy `{name}`: `{field}` applies to calendar quotas only"),
            "a calendar quota has quota and window (\"day\", \"week\", \"month\"); a rate has limit, period and burst",
        );
        let (Some(raw_limit), Some(raw_period), Some(raw_burst)) =
            (&raw.limit, &raw.period, &raw.burst)
        else {
            self.missing_rate_fields(name, &raw, span);
            return None;
        };
        let period = self.duration(raw_period, false);
        self.lint_period(name, raw_period, raw_limit);
        let limit = self.positive(raw_limit, "limit");
        let burst = self.positive(raw_burst, "burst");
        let quota = self.quota(limit, period, burst, raw_limit.span());
        self.lint_rounding(name, quota.as_ref(), (limit, period), raw_limit.span());
        let max_delay = raw
            .max_delay
            .as_ref()
            .and_then(|d| humantime::parse_duration(d.get_ref().trim()).ok());
        let settle = self.settle(name, &raw, quota.as_ref(), max_delay);
        let sync = self.sync(name, &raw);
        let overrides = self.rate_overrides(name, raw.overrides, limit, period, burst);
        Some(PolicyKind::Rate(RateLimit {
            limit: limit?,
            period: period?,
            quota: quota?,
            overrides,
            settle: settle?,
            sync: sync?,
            calendar: None,
        }))
    }

    /// One error naming every one of `limit`, `period` and `burst` that is absent.
    fn missing_rate_fields(&mut self, name: &str, raw: &RawPolicy, span: std::ops::Range<usize>) {
        let absent: Vec<&str> = [
            ("limit", raw.limit.is_none()),
            ("period", raw.period.is_none()),
            ("burst", raw.burst.is_none()),
        ]
        .iter()
        .filter(|(_, absent)| *absent)
        .map(|(field, _)| *field)
        .collect();
        self.error(
            span,
            format!("policy `{name}` has no {}", absent.join(", ")),
            Some("a rate policy needs limit, period and burst (e.g. limit = 100, period = \"1m\", burst = 20); a concurrency cap needs max_in_flight instead".to_owned()),
        );
    }

    /// Per-key quotas: each override takes the policy's `limit`, `period` and `burst`
    /// for what it does not set.
    fn rate_overrides(
        &mut self,
        name: &str,
        raw: BTreeMap<String, S<RawOverride>>,
        limit: Option<u64>,
        period: Option<Duration>,
        burst: Option<u64>,
    ) -> HashMap<String, Quota> {
        let mut overrides = HashMap::new();
        for (key_text, o) in raw {
            let span = o.span();
            let o = o.into_inner();
            if let Some(q) = &o.quota {
                self.error(
                    q.span(),
                    format!("policy `{name}` is a rate policy: an override cannot set quota"),
                    Some("override limit, period or burst here".to_owned()),
                );
                continue;
            }
            if let Some(m) = &o.max_in_flight {
                self.error(
                    m.span(),
                    format!(
                        "policy `{name}` is a rate policy: an override cannot set max_in_flight"
                    ),
                    Some("override limit, period or burst here".to_owned()),
                );
                continue;
            }
            let limit = o
                .limit
                .as_ref()
                .map_or(limit, |l| self.positive(l, "limit"));
            let burst = o
                .burst
                .as_ref()
                .map_or(burst, |b| self.positive(b, "burst"));
            let period = o
                .period
                .as_ref()
                .map_or(period, |p| self.duration(p, false));
            if let Some(q) = self.quota(limit, period, burst, span.clone()) {
                let what = format!("{name}` override `{key_text}");
                self.lint_rounding(&what, Some(&q), (limit, period), span);
                overrides.insert(key_text, q);
            }
        }
        overrides
    }

    /// A concurrency cap with rate fields: one error, at the line that makes it a cap.
    fn refuse_rate_fields(&mut self, name: &str, raw: &RawPolicy) {
        let rate_fields: Vec<&str> = [
            ("limit", raw.limit.is_some()),
            ("period", raw.period.is_some()),
            ("burst", raw.burst.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect();
        if let (false, Some(max)) = (rate_fields.is_empty(), &raw.max_in_flight) {
            // One error, at the line that makes it a concurrency cap.
            self.error(
                max.span(),
                format!(
                    "policy `{name}` sets max_in_flight and {}: a policy is a concurrency cap or a rate, not both",
                    rate_fields.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
                ),
                Some(format!("make two policies (e.g. [policies.{name}_rate] with limit, period, burst and [policies.{name}_in_flight] with max_in_flight) and list both in the route")),
            );
        }
    }

    /// `max_in_flight` requests at once, and per-key overrides of it.
    fn concurrency_limit(
        &mut self,
        name: &str,
        raw: RawPolicy,
        span: std::ops::Range<usize>,
    ) -> Option<PolicyKind> {
        self.refuse_rate_fields(name, &raw);
        self.refuse_fields(
            [
                ("sync", raw.sync.as_ref().map(S::span)),
                ("settle", raw.settle.as_ref().map(S::span)),
                ("reserve", raw.reserve.as_ref().map(S::span)),
                ("max_cost", raw.max_cost.as_ref().map(S::span)),
                ("settle_unit", raw.settle_unit.as_ref().map(S::span)),
                ("min_cost", raw.min_cost.as_ref().map(S::span)),
                ("max_debt", raw.max_debt.as_ref().map(S::span)),
                ("quota", raw.quota.as_ref().map(S::span)),
                ("window", raw.window.as_ref().map(S::span)),
                ("timezone", raw.timezone.as_ref().map(S::span)),
                ("anchor", raw.anchor.as_ref().map(S::span)),
            ],
            |field| format!("policy `{name}` is a concurrency cap: `{field}` applies to rate policies"),
            "one slot per request whatever its cost; settle a cost on a rate policy listed in the same route",
        );
        let max = raw.max_in_flight.as_ref().unwrap_or_else(|| unreachable!());
        let max_in_flight = self.in_flight(max);
        let retry_after = self.duration_or(&raw.retry_after, DEFAULT_RETRY_AFTER, false);
        let lease_ttl = self.duration_or(&raw.lease_ttl, DEFAULT_LEASE_TTL, false);
        if let Some(ttl) = lease_ttl {
            if ttl < MIN_LEASE_TTL {
                let at = raw.lease_ttl.as_ref().map_or(span, S::span);
                self.error(
                    at,
                    format!("policy `{name}`: lease_ttl must be at least 1s"),
                    Some(
                        "leases are refreshed every third of lease_ttl; \"10s\" is usual"
                            .to_owned(),
                    ),
                );
            }
        }
        let mut overrides = HashMap::new();
        for (key_text, o) in raw.overrides {
            let o = o.into_inner();
            self.refuse_fields(
                [
                    ("limit", o.limit.as_ref().map(S::span)),
                    ("period", o.period.as_ref().map(S::span)),
                    ("burst", o.burst.as_ref().map(S::span)),
                    ("quota", o.quota.as_ref().map(S::span)),
                ],
                |field| {
                    format!(
                        "policy `{name}` is a concurrency cap: an override cannot set `{field}`"
                    )
                },
                "override max_in_flight here",
            );
            if let Some(m) = &o.max_in_flight {
                if let Some(v) = self.in_flight(m) {
                    overrides.insert(key_text, v);
                }
            }
        }
        Some(PolicyKind::Concurrency(ConcurrencyLimit {
            max_in_flight: max_in_flight?,
            retry_after: retry_after?,
            lease_ttl: lease_ttl?,
            overrides,
        }))
    }

    /// One error per field given where it does not belong (`spans` holds where each was
    /// written, `None` when absent).
    pub(super) fn refuse_fields<const N: usize>(
        &mut self,
        spans: [(&str, Option<std::ops::Range<usize>>); N],
        message: impl Fn(&str) -> String,
        hint: &str,
    ) {
        for (field, given) in spans {
            if let Some(at) = given {
                self.error(at, message(field), Some(hint.to_owned()));
            }
        }
    }

    /// `sync`: `"exact"` (default) or `"lease"`, which needs what it can keep exact.
    fn sync(&mut self, name: &str, raw: &RawPolicy) -> Option<Sync> {
        let sync = self.choice(
            &raw.sync,
            &[("exact", Sync::Exact), ("lease", Sync::Lease)],
            Sync::Exact,
            "sync",
        )?;
        if let (Sync::Lease, Some(at)) = (sync, raw.sync.as_ref().map(S::span)) {
            let delay = raw
                .max_delay
                .as_ref()
                .and_then(|d| humantime::parse_duration(d.get_ref().trim()).ok())
                .is_some_and(|d| !d.is_zero());
            let conflicts = [
                (raw.settle.is_some(), "settle", "a settled cost moves the TAT after the response, which a gateway's slice cannot follow exactly; keep sync = \"exact\""),
                (delay, "max_delay", "a held request would use its unit after the unit's slot; use max_delay with sync = \"exact\""),
                (raw.mode.as_ref().is_some_and(|m| m.get_ref() == "shadow"), "mode = \"shadow\"", "shadow tiers are evaluated exactly; remove sync or the shadow mode"),
            ];
            for (conflict, what, hint) in conflicts {
                if conflict {
                    self.error(
                        at.clone(),
                        format!("policy `{name}`: sync = \"lease\" cannot be combined with {what}"),
                        Some(hint.to_owned()),
                    );
                }
            }
        }
        Some(sync)
    }

    pub(super) fn in_flight(&mut self, raw: &S<i64>) -> Option<u32> {
        let v = self.positive(raw, "max_in_flight")?;
        match u32::try_from(v) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(
                    raw.span(),
                    format!("max_in_flight {v} is too large"),
                    Some("at most 4294967295".to_owned()),
                );
                None
            }
        }
    }

    pub(super) fn quota(
        &mut self,
        limit: Option<u64>,
        period: Option<Duration>,
        burst: Option<u64>,
        span: std::ops::Range<usize>,
    ) -> Option<Quota> {
        let period_ns = u64::try_from(period?.as_nanos()).unwrap_or(u64::MAX);
        match Quota::new(limit?, period_ns, burst?) {
            Ok(q) => Some(q),
            Err(e) => {
                let hint = match e {
                    crate::limit::QuotaError::IntervalTooSmall => {
                        "raise period or lower limit so that period / limit is at least 1 ns"
                    }
                    crate::limit::QuotaError::ToleranceOverflow => {
                        "burst × period / limit must stay below about 584 years"
                    }
                    _ => "limit and burst must be at least 1",
                };
                self.error(span, e.to_string(), Some(hint.to_owned()));
                None
            }
        }
    }
}
