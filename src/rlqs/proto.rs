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

/// A bucket's id: a `map<string, string>` on the wire, read as any bytes
/// ([`crate::wire_text`]) — Envoy builds it from a client's header bytes as they came —
/// and written back as the same bytes, by which Envoy finds its bucket.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct BucketId {
    pub bucket: HashMap<String, String>,
}

impl prost::Message for BucketId {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        use crate::wire_text::{encode, encoded_len};
        prost::encoding::hash_map::encode(
            encode,
            encoded_len,
            encode,
            encoded_len,
            1,
            &self.bucket,
            buf,
        );
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        use crate::wire_text::merge;
        match tag {
            1 => prost::encoding::hash_map::merge(merge, merge, &mut self.bucket, buf, ctx),
            _ => prost::encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        use crate::wire_text::encoded_len;
        prost::encoding::hash_map::encoded_len(encoded_len, encoded_len, 1, &self.bucket)
    }

    fn clear(&mut self) {
        self.bucket.clear();
    }
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

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// A report naming a bucket whose id holds a byte that is not UTF-8 (a client's
    /// header, as Envoy copies it) decodes — a strict `string` failed the whole report,
    /// every bucket in it uncharged — and its id goes back to Envoy byte for byte.
    #[test]
    fn a_bucket_id_with_any_bytes_decodes_and_goes_back_as_it_came() {
        // map<string, string> {"tenant": "a\xff"}: one entry message, field 1.
        let entry: &[u8] = b"\x0a\x06tenant\x12\x02a\xff";
        let mut id_wire = vec![0x0a, entry.len() as u8];
        id_wire.extend_from_slice(entry);
        let mut usage_wire = vec![0x0a, id_wire.len() as u8];
        usage_wire.extend_from_slice(&id_wire);
        usage_wire.extend_from_slice(&[0x18, 0x03]); // num_requests_allowed = 3
        let mut reports_wire = b"\x0a\x04edge".to_vec();
        reports_wire.extend_from_slice(&[0x12, usage_wire.len() as u8]);
        reports_wire.extend_from_slice(&usage_wire);
        let reports = RateLimitQuotaUsageReports::decode(&reports_wire[..]).expect("decodes");
        let usage = &reports.bucket_quota_usages[0];
        assert_eq!(usage.num_requests_allowed, 3);
        let id = usage.bucket_id.as_ref().expect("an id");
        assert_eq!(id.bucket.len(), 1);
        assert_ne!(id.bucket["tenant"], "a", "a key of its own");
        assert_eq!(id.encode_to_vec(), id_wire, "back as it came");
    }
}
