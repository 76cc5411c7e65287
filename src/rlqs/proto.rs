//! The messages of Envoy's quota service (`envoy.service.rate_limit_quota.v3`), written
//! once from the descriptors Envoy 1.40 carries (rlqs.proto; type/v3/ratelimit_strategy,
//! token_bucket): the stored upstream `.proto` of earlier drafts differs (a map of
//! reports, a `last_report` field), so the field numbers here are 1.40's wire contract.

use std::collections::HashMap;

/// `/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`.
pub const STREAM_RATE_LIMIT_QUOTAS: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// What Envoy sends: the usage of its buckets since its last report (every 5 s in
/// Envoy 1.40; a bucket's first report at once, with `time_elapsed` 0).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitQuotaUsageReports {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub bucket_quota_usages: Vec<BucketQuotaUsage>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketQuotaUsage {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<prost_types::Duration>,
    #[prost(uint64, tag = "3")]
    pub num_requests_allowed: u64,
    #[prost(uint64, tag = "4")]
    pub num_requests_denied: u64,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct BucketId {
    #[prost(map = "string, string", tag = "1")]
    pub bucket: HashMap<String, String>,
}

/// What the server sends: actions for buckets Envoy has reported.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitQuotaResponse {
    #[prost(message, repeated, tag = "1")]
    pub bucket_action: Vec<BucketAction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketAction {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    #[prost(oneof = "Action", tags = "2, 3")]
    pub action: Option<Action>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Action {
    #[prost(message, tag = "2")]
    QuotaAssignment(QuotaAssignmentAction),
    #[prost(message, tag = "3")]
    Abandon(AbandonAction),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaAssignmentAction {
    #[prost(message, optional, tag = "2")]
    pub assignment_time_to_live: Option<prost_types::Duration>,
    #[prost(message, optional, tag = "3")]
    pub rate_limit_strategy: Option<RateLimitStrategy>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AbandonAction {}

/// `envoy.type.v3.RateLimitStrategy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitStrategy {
    #[prost(oneof = "Strategy", tags = "1, 3")]
    pub strategy: Option<Strategy>,
}

/// The strategies Envoy 1.40 applies (it ignores `requests_per_time_unit`, tag 2).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Strategy {
    #[prost(enumeration = "BlanketRule", tag = "1")]
    BlanketRule(i32),
    #[prost(message, tag = "3")]
    TokenBucket(TokenBucket),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BlanketRule {
    AllowAll = 0,
    DenyAll = 1,
}

/// `envoy.type.v3.TokenBucket`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TokenBucket {
    #[prost(uint32, tag = "1")]
    pub max_tokens: u32,
    #[prost(message, optional, tag = "2")]
    pub tokens_per_fill: Option<u32>,
    #[prost(message, optional, tag = "3")]
    pub fill_interval: Option<prost_types::Duration>,
}
