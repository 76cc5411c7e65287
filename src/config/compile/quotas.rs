//! Calendar quota policies: `quota` units per `window` of a `timezone`, starting on an
//! `anchor`, and per-key overrides of the quota.

use super::*;
use crate::config::override_spec::OverrideSpec;
use crate::config::raw::RawOverride;
use crate::config::Applied;
use crate::limit::calendar::{self, Calendar, Period, MAX_QUOTA};

impl Compiler {
    /// A calendar quota: decided as a GCRA of one unit per nanosecond at the window's end
    /// (see `limit::calendar`), so it shares the rate tiers' store, rollback and overrides.
    pub(super) fn quota_limit(
        &mut self,
        name: &str,
        raw: RawPolicy,
        span: std::ops::Range<usize>,
    ) -> Option<PolicyKind> {
        self.refuse_fields(
            [
                ("limit", raw.limit.as_ref().map(S::span)),
                ("period", raw.period.as_ref().map(S::span)),
                ("burst", raw.burst.as_ref().map(S::span)),
                ("retry_after", raw.retry_after.as_ref().map(S::span)),
                ("lease_ttl", raw.lease_ttl.as_ref().map(S::span)),
                ("max_delay", raw.max_delay.as_ref().map(S::span)),
            ],
            |field| format!("policy `{name}` is a calendar quota (quota, window): `{field}` does not apply to it"),
            "a quota charges the route's cost per admitted request and refills only at the window's reset; for a rate, make a second policy with limit, period and burst and list both in the route",
        );
        if raw.sync.as_ref().is_some_and(|s| s.get_ref() == "lease") {
            self.error(
                raw.sync.as_ref().map_or(span.clone(), S::span),
                format!("policy `{name}`: a calendar quota is decided exactly (sync = \"exact\")"),
                Some("remove sync = \"lease\"".to_owned()),
            );
        }
        let Some(raw_window) = &raw.window else {
            self.error(
                span,
                format!("policy `{name}` has a quota but no window"),
                Some("add window = \"day\", \"week\" or \"month\"".to_owned()),
            );
            return None;
        };
        let Some(raw_quota) = &raw.quota else {
            self.error(
                raw_window.span(),
                format!("policy `{name}` has a window but no quota"),
                Some("add quota = N, the units each window allows".to_owned()),
            );
            return None;
        };
        let quota = self.quota_units(raw_quota);
        let calendar = self.calendar(name, &raw);
        let gcra = quota.and_then(units);
        let settle = self.settle(name, &raw, gcra.as_ref(), None);
        if let (Some(Some(s)), Some(at)) = (&settle, &raw.settle) {
            if s.source.measures_bytes() {
                self.error(
                    at.span(),
                    format!("policy `{name}`: a calendar quota settles from a response header or trailer, not from {}", s.source.describe()),
                    Some("bytes are metered as the body streams against a refilling rate: settle them on a rate policy listed in the same route".to_owned()),
                );
            }
        }
        let overrides = self.quota_overrides(name, raw.overrides);
        let (quota, calendar) = (quota?, calendar?);
        Some(PolicyKind::Rate(RateLimit {
            limit: quota,
            period: Duration::from_secs(86_400),
            quota: gcra?,
            overrides,
            settle: settle?,
            sync: Sync::Exact,
            calendar: Some(std::sync::Arc::new(CalendarQuota::new(quota, calendar))),
        }))
    }

    pub(super) fn quota_units(&mut self, raw: &S<i64>) -> Option<u64> {
        let q = self.positive(raw, "quota")?;
        if q > MAX_QUOTA {
            self.error(
                raw.span(),
                format!("quota {q} is more than a window can count ({MAX_QUOTA})"),
                Some("lower the quota, or count in larger units with the route's cost".to_owned()),
            );
            return None;
        }
        Some(q)
    }

    /// `window`, `timezone` (default UTC) and `anchor`.
    fn calendar(&mut self, name: &str, raw: &RawPolicy) -> Option<Calendar> {
        let window = raw.window.as_ref()?;
        let zone_name = raw
            .timezone
            .as_ref()
            .map_or("UTC", |z| z.get_ref().as_str());
        let zone = match jiff::tz::TimeZone::get(zone_name) {
            Ok(z) => Some(z),
            Err(_) => {
                let at = raw.timezone.as_ref().map_or(window.span(), S::span);
                self.error(
                    at,
                    format!("policy `{name}`: `{zone_name}` is not a time zone of the IANA database"),
                    Some("write an IANA name such as \"UTC\", \"Europe/Berlin\" or \"America/New_York\"".to_owned()),
                );
                None
            }
        };
        let anchor = raw.anchor.as_ref();
        let anchor_span = anchor.map_or(window.span(), S::span);
        let period = match window.get_ref().as_str() {
            "day" => {
                if anchor.is_some() {
                    self.error(
                        anchor_span,
                        format!("policy `{name}`: a daily window starts at local midnight and takes no anchor"),
                        Some("remove anchor".to_owned()),
                    );
                }
                Some(Period::Day)
            }
            "week" => match anchor.map(|a| a.get_ref()) {
                None => Some(Period::Week(jiff::civil::Weekday::Monday)),
                Some(toml::Value::String(day)) => match calendar::weekday(day) {
                    Some(d) => Some(Period::Week(d)),
                    None => self.bad_anchor(name, anchor_span, "week"),
                },
                Some(_) => self.bad_anchor(name, anchor_span, "week"),
            },
            "month" => match anchor.map(|a| a.get_ref()) {
                None => Some(Period::Month(1)),
                Some(toml::Value::Integer(d)) if (1..=28).contains(d) => {
                    Some(Period::Month(i8::try_from(*d).unwrap_or(1)))
                }
                Some(_) => self.bad_anchor(name, anchor_span, "month"),
            },
            other => {
                self.error(
                    window.span(),
                    format!("policy `{name}`: window `{other}` is not a calendar window"),
                    Some("window = \"day\", \"week\" or \"month\"".to_owned()),
                );
                None
            }
        };
        Some(Calendar {
            period: period?,
            zone: zone?,
            zone_name: zone_name.to_owned(),
        })
    }

    fn bad_anchor(
        &mut self,
        name: &str,
        at: std::ops::Range<usize>,
        window: &str,
    ) -> Option<Period> {
        let hint = match window {
            "week" => "anchor = \"monday\" … \"sunday\": the weekday a week starts on (default monday)",
            _ => "anchor = 1 … 28: the day of the month a window starts on, a billing day (default 1; 29–31 are not in every month)",
        };
        self.error(
            at,
            format!("policy `{name}`: this anchor does not fit a {window}ly window"),
            Some(hint.to_owned()),
        );
        None
    }

    /// A runtime override of a calendar quota: `quota` only.
    pub(super) fn runtime_quota_override(
        &mut self,
        policy: &Policy,
        spec: &OverrideSpec,
    ) -> Option<Applied> {
        let q = self.only_field(policy, "calendar quota", ("quota", spec.quota), spec)?;
        let quota = self.quota_units(&q).and_then(quotas::units)?;
        Some(Applied::Rate(quota))
    }

    /// Per-key quotas: `quota` only (the window is the policy's).
    fn quota_overrides(
        &mut self,
        name: &str,
        raw: BTreeMap<String, S<RawOverride>>,
    ) -> HashMap<String, Quota> {
        let mut overrides = HashMap::new();
        for (key_text, o) in raw {
            let o = o.into_inner();
            self.refuse_fields(
                [
                    ("limit", o.limit.as_ref().map(S::span)),
                    ("period", o.period.as_ref().map(S::span)),
                    ("burst", o.burst.as_ref().map(S::span)),
                    ("max_in_flight", o.max_in_flight.as_ref().map(S::span)),
                ],
                |field| {
                    format!("policy `{name}` is a calendar quota: an override cannot set {field}")
                },
                "override quota here",
            );
            if let Some(q) = o.quota.as_ref().and_then(|q| self.quota_units(q)) {
                if let Some(q) = units(q) {
                    overrides.insert(key_text, q);
                }
            }
        }
        overrides
    }
}

/// A quota of `n` units as the GCRA the store decides it with: one unit a nanosecond,
/// a burst of `n`.
pub fn units(n: u64) -> Option<Quota> {
    Quota::new(n, n, n).ok()
}
