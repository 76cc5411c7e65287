//! Policies as the gateway runs them: what a tier limits (a rate or requests in
//! flight), how it keys, settles and syncs, and each key's override of its numbers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use crate::limit::calendar::{Bounds, Calendar, Period};

use super::override_spec::Applied;
use crate::key::KeySource;
use crate::limit::{Mode, Quota};

/// What to do when a tier's key source is absent from a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// All such requests share one limiter.
    Shared,
    /// The tier is not applied.
    Skip,
    /// The request is refused with 400.
    Reject,
}

/// Equal when every setting is: a reload names a policy whose settings differ as changed.
#[derive(Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    pub key: Vec<KeySource>,
    pub missing: Missing,
    pub mode: Mode,
    /// Rate: how long an admitted request may be held to fit. Concurrency: how long a
    /// request may wait for a slot.
    pub max_delay: Duration,
    pub kind: PolicyKind,
}

/// What a policy limits.
#[derive(Debug, PartialEq)]
pub enum PolicyKind {
    /// Requests per period (GCRA).
    Rate(RateLimit),
    /// Requests in flight at once.
    Concurrency(ConcurrencyLimit),
}

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

/// A calendar quota: units per window of a calendar, and the current window remembered
/// (computed with the time-zone database only when a window ends).
#[derive(Debug)]
pub struct CalendarQuota {
    pub quota: u64,
    pub calendar: Calendar,
    /// `start:end` and `end:next` of the window last computed, each as two `u32` Unix
    /// seconds; read together, they agree on `end` unless a writer was between them.
    first: AtomicU64,
    second: AtomicU64,
}

/// The quota and its calendar; the window remembered is a cache, not a setting.
impl PartialEq for CalendarQuota {
    fn eq(&self, other: &Self) -> bool {
        self.quota == other.quota && self.calendar == other.calendar
    }
}

impl CalendarQuota {
    pub fn new(quota: u64, calendar: Calendar) -> Self {
        Self {
            quota,
            calendar,
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
        }
    }

    /// The window holding the instant `unix_ns` and the next: from the one remembered
    /// while it lasts.
    #[inline]
    pub fn bounds(&self, unix_ns: u64) -> Bounds {
        let unix_s = i64::try_from(unix_ns / 1_000_000_000).unwrap_or(i64::MAX);
        let (a, b) = (
            self.first.load(Ordering::Relaxed),
            self.second.load(Ordering::Relaxed),
        );
        let (start, end, end2, next) = (
            i64::from((a >> 32) as u32),
            i64::from(a as u32),
            i64::from((b >> 32) as u32),
            i64::from(b as u32),
        );
        if end == end2 && start <= unix_s && unix_s < end {
            return Bounds { start, end, next };
        }
        let fresh = self.calendar.bounds(unix_s);
        let pack = |hi: i64, lo: i64| match (u32::try_from(hi), u32::try_from(lo)) {
            (Ok(hi), Ok(lo)) => Some(u64::from(hi) << 32 | u64::from(lo)),
            _ => None,
        };
        if let (Some(a), Some(b)) = (pack(fresh.start, fresh.end), pack(fresh.end, fresh.next)) {
            self.second.store(b, Ordering::Relaxed);
            self.first.store(a, Ordering::Relaxed);
        }
        fresh
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
    pub priced: Option<std::sync::Arc<super::Prices>>,
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
    Usage(std::sync::Arc<super::Prices>),
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
/// the Redis script keeps debts exactly in doubles below 2^52 ns.
pub const MAX_SETTLED_DEBT_NS: u64 = 1 << 52;

#[derive(Debug, PartialEq)]
pub struct ConcurrencyLimit {
    pub max_in_flight: u32,
    /// Sent as `Retry-After` when refused: the real wait is unknowable.
    pub retry_after: Duration,
    /// Redis: how long a slot of a gateway that died stays taken.
    pub lease_ttl: Duration,
    /// Per-key `max_in_flight` for single-source keys, by the key's text.
    pub overrides: HashMap<String, u32>,
}

impl ConcurrencyLimit {
    /// The cap for a key: its override if it has one.
    pub fn max_for(&self, key_text: Option<&str>) -> u32 {
        match key_text {
            Some(k) if !self.overrides.is_empty() => {
                self.overrides.get(k).copied().unwrap_or(self.max_in_flight)
            }
            _ => self.max_in_flight,
        }
    }
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

/// What kind of limit a policy is: asked once, where a kind makes a difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests per period (GCRA).
    Rate,
    /// A calendar quota: a rate policy with a window (day, week, month).
    Quota,
    /// Requests in flight at once.
    Concurrency,
}

impl LimitKind {
    /// The refusal body's `limit` word (none for a rate, the contract's first kind).
    pub fn body_word(self) -> Option<&'static str> {
        match self {
            LimitKind::Rate => None,
            LimitKind::Quota => Some("quota"),
            LimitKind::Concurrency => Some("concurrency"),
        }
    }
}

impl Policy {
    /// The limit this policy puts on one key, in the one order every reader uses (the
    /// request path and the admin API alike): `runtime`, the key's runtime override if it
    /// is of this kind, else the file's override for the key's `text` (single-source keys;
    /// asked only when the policy has some, so a request pays for no text it does not
    /// need), else the policy's own numbers.
    #[inline]
    pub fn limit_for<'t>(
        &self,
        runtime: Option<Applied>,
        text: impl FnOnce() -> Option<std::borrow::Cow<'t, str>>,
    ) -> Applied {
        match (&self.kind, runtime) {
            (PolicyKind::Rate(_), Some(applied @ Applied::Rate(_)))
            | (PolicyKind::Concurrency(_), Some(applied @ Applied::Concurrency(_))) => applied,
            (PolicyKind::Rate(rate), _) if rate.overrides.is_empty() => Applied::Rate(rate.quota),
            (PolicyKind::Rate(rate), _) => Applied::Rate(rate.quota_for(text().as_deref())),
            (PolicyKind::Concurrency(cap), _) if cap.overrides.is_empty() => {
                Applied::Concurrency(cap.max_in_flight)
            }
            (PolicyKind::Concurrency(cap), _) => {
                Applied::Concurrency(cap.max_for(text().as_deref()))
            }
        }
    }

    /// Which kind of limit this is.
    pub fn kind(&self) -> LimitKind {
        match &self.kind {
            PolicyKind::Rate(r) if r.calendar.is_some() => LimitKind::Quota,
            PolicyKind::Rate(_) => LimitKind::Rate,
            PolicyKind::Concurrency(_) => LimitKind::Concurrency,
        }
    }

    /// The rate limit, for a rate policy.
    pub fn rate(&self) -> Option<&RateLimit> {
        match &self.kind {
            PolicyKind::Rate(r) => Some(r),
            PolicyKind::Concurrency(_) => None,
        }
    }

    /// The concurrency limit, for a concurrency policy.
    pub fn concurrency(&self) -> Option<&ConcurrencyLimit> {
        match &self.kind {
            PolicyKind::Concurrency(c) => Some(c),
            PolicyKind::Rate(_) => None,
        }
    }

    /// Whether overrides are set (either kind).
    pub fn override_count(&self) -> usize {
        match &self.kind {
            PolicyKind::Rate(r) => r.overrides.len(),
            PolicyKind::Concurrency(c) => c.overrides.len(),
        }
    }
}
