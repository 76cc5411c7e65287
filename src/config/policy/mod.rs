//! Policies as the gateway runs them: what a tier limits (a rate or requests in
//! flight), how it keys, settles and syncs, and each key's override of its numbers.

//!
//! Each kind is a room of its own (`rate`, `quota`, `concurrency`): its numbers, and what
//! the admin API, `tollgate check` and the `RateLimit-Policy` header say of them. This
//! file names the kinds and sends each question to the kind's room.

mod concurrency;
mod quota;
mod rate;

use std::time::Duration;

pub use crate::limit::calendar::{Bounds, Calendar, Period};
pub use concurrency::{concurrency_item, ConcurrencyLimit};
pub use quota::CalendarQuota;
pub use rate::{policy_item, RateLimit, Settle, SettleSource, Sync, MAX_SETTLED_DEBT_NS};

use crate::key::KeySource;
use crate::limit::Mode;

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

impl PolicyKind {
    /// The kind's numbers as `/admin/config` shows them (`kind` first); `unix_ns`: now,
    /// for a calendar quota's current window.
    pub fn describe(&self, unix_ns: u64) -> serde_json::Value {
        match self {
            PolicyKind::Rate(r) => r.describe(unix_ns),
            PolicyKind::Concurrency(c) => c.describe(),
        }
    }

    /// The kind's numbers on `tollgate check`'s line for the policy.
    pub fn numbers(&self) -> String {
        match self {
            PolicyKind::Rate(r) => r.numbers(),
            PolicyKind::Concurrency(c) => c.numbers(),
        }
    }

    /// `visitor` done to the kind's file overrides.
    pub fn visit_overrides<T: OverridesVisitor>(&mut self, visitor: T) -> T::Out {
        match self {
            PolicyKind::Rate(r) => visitor.visit(&mut r.overrides),
            PolicyKind::Concurrency(c) => visitor.visit(&mut c.overrides),
        }
    }

    /// The IETF draft's `RateLimit-Policy` item of the policy `name` on its own numbers,
    /// and the limit `X-RateLimit-Limit` states for it.
    pub fn header_item(&self, name: &str) -> (u64, Vec<u8>) {
        match self {
            PolicyKind::Rate(r) => {
                let mut item = Vec::with_capacity(name.len() + 24);
                policy_item(&mut item, name, &r.quota, None);
                (r.quota.burst(), item)
            }
            PolicyKind::Concurrency(c) => c.header_item(name),
        }
    }
}

/// What a policy's limit is for one key: the policy's own numbers, the file's override
/// for the key, or a runtime override (`/admin/overrides`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Rate(crate::limit::Quota),
    Concurrency(u32),
}

impl Applied {
    /// What it makes of its key's limit, in the units `/admin/config` uses.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Applied::Rate(q) => rate::describe_applied(q),
            Applied::Concurrency(max) => concurrency::describe_applied(*max),
        }
    }
}

/// Something done to a policy's file overrides (`[policies.NAME.overrides]`) whatever
/// the numbers each holds, so that the compiler's respelling of them names no kind.
pub trait OverridesVisitor {
    type Out;
    fn visit<V>(self, overrides: &mut std::collections::HashMap<String, V>) -> Self::Out;
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
    /// Whether the limit is held while a request is in flight and given back when it
    /// ends, rather than charged: a rate limit service call has no end to give it back
    /// at, and a key has nothing to reset (its requests hold it).
    pub fn held_in_flight(self) -> bool {
        match self {
            LimitKind::Rate | LimitKind::Quota => false,
            LimitKind::Concurrency => true,
        }
    }

    /// The field a key's limit is written in (an override's, as the operator sets it): a
    /// rate's `burst`, a calendar quota's `quota`, a cap's `max_in_flight`.
    pub fn bound_field(self) -> &'static str {
        match self {
            LimitKind::Rate => "burst",
            LimitKind::Quota => "quota",
            LimitKind::Concurrency => "max_in_flight",
        }
    }

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
    /// The sources its key is made of, as the config writes them (`header:x-tenant-id`).
    pub fn key_sources(&self) -> Vec<String> {
        self.key.iter().map(ToString::to_string).collect()
    }

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

    /// A value of this policy's key source `index` (a rate limit service descriptor's, an
    /// RLQS bucket's) as a request spells it: Envoy's `remote_address` sends the client's
    /// address as is, where an `ip/64` key is its network. Borrowed unless respelled.
    pub fn spelled<'v>(&self, index: usize, value: &'v str) -> std::borrow::Cow<'v, str> {
        self.key
            .get(index)
            .and_then(|source| source.spelled(value))
            .unwrap_or(std::borrow::Cow::Borrowed(value))
    }

    /// The values of a whole key, in order, each [`spelled`](Self::spelled).
    pub fn spelled_parts<'s, 'v: 's>(
        &'s self,
        values: impl IntoIterator<Item = &'v str> + 's,
    ) -> impl Iterator<Item = std::borrow::Cow<'v, str>> + 's {
        (values.into_iter().enumerate()).map(|(index, value)| self.spelled(index, value))
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
