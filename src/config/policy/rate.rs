//! A rate policy as run: its numbers (GCRA's T and τ), how its cost settles and how a
//! fleet shares it, with what the admin API and `tollgate check` say of it.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use crate::limit::Quota;

use super::quota::CalendarQuota;
#[derive(Debug, PartialEq)]
pub struct RateLimit {
    pub limit: u64,
    pub period: Duration,
    pub quota: Quota,
    /// Per-key quotas for single-source keys, by the key's text.
    pub overrides: HashMap<String, Quota>,
    /// Set when the cost is settled after the response.
    pub settle: Option<Settle>,
    /// How a fleet shares the limit through Redis.
    pub sync: Sync,
    /// Set for a calendar quota (`quota`, `window`): `quota` above is then one unit per
    /// nanosecond with a burst of the quota, decided at the window's end.
    pub calendar: Option<std::sync::Arc<CalendarQuota>>,
}

impl RateLimit {
    /// The quota for a key: its override if it has one.
    pub fn quota_for(&self, key_text: Option<&str>) -> Quota {
        match key_text {
            Some(k) if !self.overrides.is_empty() => {
                self.overrides.get(k).copied().unwrap_or(self.quota)
            }
            _ => self.quota,
        }
    }
}

/// How gateways sharing a Redis decide a rate policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sync {
    /// Every decision is one Redis call.
    #[default]
    Exact,
    /// Each gateway takes slices of a key's capacity from Redis and admits from them
    /// locally, each unit no later than its slot (`store::lease`).
    Lease,
}

/// A rate policy whose cost is known only once the upstream has answered: `reserve` is
/// charged at admission, the difference to the actual cost settled when it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    pub source: SettleSource,
    /// Units charged at admission; `None`: the route's cost (or the quote, `priced`).
    pub reserve: Option<std::num::NonZeroU64>,
    /// `reserve = "price:NAME"`: each request is quoted from the table, and charged the
    /// most it can cost (capped by `max_cost`).
    pub priced: Option<std::sync::Arc<crate::config::prices::Prices>>,
    /// The largest settled value; larger ones are capped (and counted).
    pub max_cost: u64,
    /// `max_cost` was written: a priced request whose cost its body does not bound
    /// reserves it (else only its input's price; see `RequestTiers::quote`).
    pub max_cost_given: bool,
    /// Measured bytes are divided by this (rounded up) to make units.
    pub unit: std::num::NonZeroU64,
    /// When the upstream fails (no answer, or 5xx without the value), settle at what was
    /// measured (nothing, for a header or trailer) instead of the reserve.
    pub refund_on_upstream_error: bool,
    /// The least any request is charged once settled (an empty body, a value of 0).
    pub min_cost: u64,
    /// Bytes sources: units a key's transfers may run beyond its burst at once (its debt
    /// bound while streaming); a body that would go further is paused, then cut.
    pub max_debt: u64,
}

/// Where a settled cost comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleSource {
    ResponseHeader(http::HeaderName),
    ResponseTrailer(http::HeaderName),
    ResponseBytes,
    RequestBytes,
    /// The `usage` the answer reports (a JSON body's, or an event stream's last), priced
    /// by the table at the row the request was quoted on.
    Usage(std::sync::Arc<crate::config::prices::Prices>),
}

impl SettleSource {
    /// The config's spelling.
    pub fn describe(&self) -> String {
        match self {
            SettleSource::ResponseHeader(h) => format!("response_header:{h}"),
            SettleSource::ResponseTrailer(h) => format!("response_trailer:{h}"),
            SettleSource::ResponseBytes => "response_bytes".to_owned(),
            SettleSource::RequestBytes => "request_bytes".to_owned(),
            SettleSource::Usage(p) => format!("usage:{}", p.name),
        }
    }

    /// Whether the value is a count of body bytes (divided by `settle_unit`).
    pub fn measures_bytes(&self) -> bool {
        matches!(
            self,
            SettleSource::ResponseBytes | SettleSource::RequestBytes
        )
    }
}

/// A settled debt never takes a key's TAT further than this beyond now (about 52 days):
/// the Redis script keeps debts exactly in doubles below 2^52 ns. The same bound as a
/// usage report's forced charge.
pub const MAX_SETTLED_DEBT_NS: u64 = crate::limit::MAX_FORCED_LEAD_NS;

impl RateLimit {
    /// Its numbers as `/admin/config` shows them (a calendar quota's, with its current
    /// window at `unix_ns`).
    pub(super) fn describe(&self, unix_ns: u64) -> serde_json::Value {
        if let Some(q) = &self.calendar {
            let mut quota = q.describe(unix_ns);
            quota["settle"] = serde_json::json!(self.settle.as_ref().map(|s| serde_json::json!({
                "source": s.source.describe(),
                "reserve": s.reserve.map(|r| r.get()),
            })));
            return quota;
        }
        serde_json::json!({
            "kind": "rate",
            "limit": self.limit,
            "period_ms": self.period.as_millis() as u64,
            "burst": self.quota.burst(),
            "t_ns": self.quota.interval_ns(),
            "tau_ns": self.quota.tolerance_ns(),
            "sync": if self.sync == Sync::Lease { "lease" } else { "exact" },
            "settle": self.settle.as_ref().map(|s| serde_json::json!({
                "source": s.source.describe(),
                "reserve": s.reserve.map(|r| r.get()),
                "max_cost": s.max_cost,
                "unit": s.unit.get(),
                "refund_on_upstream_error": s.refund_on_upstream_error,
            })),
        })
    }

    /// As written, then as run: T and τ, and how it settles and syncs (a calendar
    /// quota: as written), on `tollgate check`'s line.
    pub(super) fn numbers(&self) -> String {
        let settle = self
            .settle
            .as_ref()
            .map_or_else(String::new, Settle::numbers);
        if let Some(q) = &self.calendar {
            return format!("{}{settle}", q.numbers());
        }
        let human = |ns| humantime::format_duration(Duration::from_nanos(ns)).to_string();
        format!(
            "limit={} per {} burst={}  T={} τ={}{settle}{}",
            self.limit,
            humantime::format_duration(self.period),
            self.quota.burst(),
            human(self.quota.interval_ns()),
            human(self.quota.tolerance_ns()),
            if self.sync == Sync::Lease {
                "  sync=lease"
            } else {
                ""
            },
        )
    }
}

impl Settle {
    /// How far a key's TAT may run ahead of now while a settled request of it is in
    /// flight, for a key of burst tolerance `tau_ns` and interval `t_ns`: the burst, and
    /// `max_debt` units beyond it (bytes sources draw up to it). What a refund can give
    /// back is at most this, and shrinks as time passes.
    pub fn bound_ns(&self, tau_ns: u64, t_ns: u64) -> u64 {
        tau_ns.saturating_add(self.max_debt.saturating_mul(t_ns))
    }

    /// How a rate policy settles: its source and reserve, and what bounds a request: its
    /// floor (`min_cost`, which for bytes is also a bound on the request rate), its cap,
    /// and for bytes how far transfers may run past the burst.
    pub(super) fn numbers(&self) -> String {
        let reserve = match (&self.priced, self.reserve) {
            (Some(p), _) => format!("price:{} (each request's most)", p.name),
            (None, Some(r)) => r.to_string(),
            (None, None) => "the route's cost".to_owned(),
        };
        let mut out = format!(
            "  settle={} reserve={reserve} min_cost={}",
            self.source.describe(),
            self.min_cost
        );
        if self.source.measures_bytes() {
            let _ = write!(
                out,
                " max_cost={} max_debt={} (bytes metered as they stream; {})",
                self.max_cost,
                self.max_debt,
                if self.min_cost > 0 {
                    "min_cost also bounds the request rate"
                } else {
                    "warning: min_cost = 0 lets empty bodies through for free"
                }
            );
        }
        out
    }
}

/// A rate tier's `RateLimit-Policy` item: `"<policy>";q=<burst>;w=<τ in whole seconds>`,
/// or a calendar quota's: `q=<quota>;w=<its window's length in seconds>` (`window_s`).
pub fn policy_item(out: &mut Vec<u8>, name: &str, quota: &Quota, window_s: Option<u64>) {
    let tau_s = quota
        .tolerance_ns()
        .div_ceil(crate::limit::gcra::NANOS_PER_SEC);
    let window = window_s.unwrap_or(tau_s.max(1));
    let mut number = itoa::Buffer::new();
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\";q=");
    out.extend_from_slice(number.format(quota.burst()).as_bytes());
    out.extend_from_slice(b";w=");
    out.extend_from_slice(number.format(window).as_bytes());
}

/// A key's rate limit (`Applied::Rate`: the policy's own, or an override) as
/// `/admin/config` shows it.
pub(super) fn describe_applied(q: &Quota) -> serde_json::Value {
    serde_json::json!({
        "kind": "rate",
        "burst": q.burst(),
        "t_ns": q.interval_ns(),
        "tau_ns": q.tolerance_ns(),
    })
}
