//! The label sets of every metric family. Values are config names and fixed words, never
//! request data.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub route: String,
    pub policy: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteStatusLabels {
    pub route: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamNameLabels {
    pub upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettleLabels {
    pub policy: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    pub backend: &'static str,
    pub kind: &'static str,
    /// Why, in one word (`connection_refused`, `timed_out`, `readonly`, …).
    pub cause: &'static str,
}

/// The outcomes a tier's decision is counted as.
pub const OUTCOMES: [&str; 6] = [
    "admitted",
    "denied",
    "shadow_denied",
    "overflow",
    "store_unavailable_allowed",
    "store_unavailable",
];
/// Response status classes.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// How a settlement went: the cost matched the reserve, was more (a debt) or less (a
/// refund).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleResult {
    Exact,
    Debt,
    Refund,
}

impl SettleResult {
    pub const ALL: [Self; 3] = [Self::Exact, Self::Debt, Self::Refund];

    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Debt => "debt",
            Self::Refund => "refund",
        }
    }
}

/// Why a settlement used the reserve, a cap or a floor instead of the value measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleFallback {
    /// No value where one was expected.
    Missing,
    /// A value that is not a whole number.
    Invalid,
    /// Above `max_cost`.
    Capped,
    /// The upstream failed before the cost was known.
    UpstreamError,
    /// The exchange was cut short (client gone, upstream broke mid-body).
    Aborted,
    /// The store could not take the settlement.
    StoreError,
    /// The gateway cut the body where a budget (or `max_cost`) ran out.
    Budget,
    /// Below `min_cost`: raised to it.
    MinCost,
    /// A refund held: the key was reset (or Redis lost its keys) since admission, and it
    /// would have come out of the usage made after.
    Reset,
    /// The client left before the request was sent upstream: nothing used there.
    NotSent,
}

impl SettleFallback {
    pub const ALL: [Self; 10] = [
        Self::Missing,
        Self::Invalid,
        Self::Capped,
        Self::UpstreamError,
        Self::Aborted,
        Self::StoreError,
        Self::Budget,
        Self::MinCost,
        Self::Reset,
        Self::NotSent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Invalid => "invalid",
            Self::Capped => "capped",
            Self::UpstreamError => "upstream_error",
            Self::Aborted => "aborted",
            Self::StoreError => "store_error",
            Self::Budget => "budget_exhausted",
            Self::MinCost => "min_cost",
            Self::Reset => "reset",
            Self::NotSent => "not_sent",
        }
    }
}
