//! The messages of Envoy's rate limit service (`envoy.service.ratelimit.v3`), written once
//! from its `.proto` files (rls.proto, common/ratelimit/v3/ratelimit.proto,
//! type/v3/ratelimit_unit.proto, config/core/v3/base.proto's `HeaderValue`): the few
//! messages the service reads and writes, so no protoc runs at build time. Field numbers
//! are the wire contract; the tests talk to a real Envoy through them.

/// `/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Units the call costs (0: unset, which means 1).
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A limit Envoy's route names instead of the server's: not honoured (the server's
    /// policies decide), read so a descriptor carrying one still decodes.
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// This descriptor's own cost; set to 0 it checks without charging.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<u64>,
    /// `hits_addend` is a refund (Envoy 1.40's `is_negative_hits`).
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

/// A descriptor's entry: `string`s on the wire, read as any bytes ([`crate::wire_text`]):
/// Envoy puts a client's header bytes in them as they came.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

impl prost::Message for Entry {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        for (tag, text) in [(1, &self.key), (2, &self.value)] {
            if !text.is_empty() {
                crate::wire_text::encode(tag, text, buf);
            }
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => crate::wire_text::merge(wire_type, &mut self.key, buf, ctx),
            2 => crate::wire_text::merge(wire_type, &mut self.value, buf, ctx),
            _ => prost::encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        [(1, &self.key), (2, &self.value)]
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .map(|(tag, text)| crate::wire_text::encoded_len(tag, text))
            .sum()
    }

    fn clear(&mut self) {
        self.key.clear();
        self.value.clear();
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitOverride {
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<HeaderValue>,
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
    #[prost(message, optional, tag = "6")]
    pub dynamic_metadata: Option<prost_types::Struct>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    Unknown = 0,
    Ok = 1,
    OverLimit = 2,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<prost_types::Duration>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `RateLimitResponse.RateLimit.Unit` (and `envoy.type.v3.RateLimitUnit`, numbered alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    Unknown = 0,
    Second = 1,
    Minute = 2,
    Hour = 3,
    Day = 4,
    Month = 5,
    Year = 6,
    Week = 7,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}
