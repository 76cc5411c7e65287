//! `[policies.NAME]`: key sources, quota, modes, overrides.

use super::*;

impl Compiler {
    pub(super) fn policy(&mut self, name: String, raw: S<RawPolicy>) -> Option<Policy> {
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
                Err(e) => self.error(raw.key.span(), e.to_string(), Some("sources: ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, route, method, path".to_owned())),
            }
        }
        let period = self.duration(&raw.period, false);
        let limit = self.positive(&raw.limit, "limit");
        let burst = self.positive(&raw.burst, "burst");
        let quota = self.quota(limit, period, burst, raw.limit.span());
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
        let mode = self.choice(
            &raw.mode,
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
            Mode::Enforce,
            "mode",
        );
        let max_delay = self.duration_or(&raw.max_delay, Duration::ZERO, true);
        let mut overrides = HashMap::new();
        if !raw.overrides.is_empty() && sources.len() != 1 {
            self.error(
                raw.key.span(),
                format!("policy `{name}` has overrides but a composed key"),
                Some("overrides apply to single-source keys only".to_owned()),
            );
        }
        for (key_text, o) in raw.overrides {
            let span = o.span();
            let o = o.into_inner();
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
            if let Some(q) = self.quota(limit, period, burst, span) {
                overrides.insert(key_text, q);
            }
        }
        let quota = quota?;
        Some(Policy {
            name,
            key,
            limit: limit?,
            period: period?,
            quota,
            missing: missing?,
            mode: mode?,
            max_delay: max_delay?,
            overrides,
        })
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
