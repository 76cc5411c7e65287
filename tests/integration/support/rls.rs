//! A real gRPC client (tonic's channel) of Envoy's rate limit service, with the messages
//! written out here from rls.proto and ratelimit.proto by hand — apart from the gateway's
//! own, so a wrong field number on either side shows as a failing test.

use std::net::SocketAddr;

use http::uri::PathAndQuery;
use tonic::{Request, Status};
use tonic_prost::ProstCodec;

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RlsDescriptor>,
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<RlsEntry>,
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<u64>,
    #[prost(bool, tag = "4")]
    pub is_negative_hits: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsEntry {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsResponse {
    #[prost(int32, tag = "1")]
    pub overall_code: i32,
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<RlsStatus>,
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<RlsHeader>,
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
    #[prost(message, optional, tag = "6")]
    pub dynamic_metadata: Option<prost_types::Struct>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RlsLimit>,
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<prost_types::Duration>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsLimit {
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    #[prost(int32, tag = "2")]
    pub unit: i32,
    #[prost(string, tag = "3")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RlsHeader {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;
pub const SECOND: i32 = 1;
pub const MINUTE: i32 = 2;
pub const HOUR: i32 = 3;
pub const DAY: i32 = 4;
pub const MONTH: i32 = 5;

impl RlsResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.response_headers_to_add
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    pub fn metadata(&self, field: &str) -> Option<&prost_types::value::Kind> {
        self.dynamic_metadata
            .as_ref()?
            .fields
            .get(field)?
            .kind
            .as_ref()
    }

    /// `(code, remaining)` of each status, in order.
    pub fn codes(&self) -> Vec<(i32, u32)> {
        self.statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect()
    }
}

/// A descriptor from `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RlsDescriptor {
    RlsDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| RlsEntry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RlsDescriptor::default()
    }
}

/// The same, with its own `hits_addend`.
pub fn descriptor_costing(entries: &[(&str, &str)], hits: u64) -> RlsDescriptor {
    RlsDescriptor {
        hits_addend: Some(hits),
        ..descriptor(entries)
    }
}

pub struct RlsClient {
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl RlsClient {
    pub async fn connect(addr: SocketAddr) -> Self {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
            .expect("connect to the rate limit service");
        Self {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    /// Over TLS with a client certificate (`identity`: certificate and key PEM), or
    /// without one; `None` when the channel cannot be made.
    pub async fn try_connect_tls(
        addr: SocketAddr,
        ca_pem: &str,
        identity: Option<(&str, &str)>,
    ) -> Option<Self> {
        let mut tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
            .domain_name("localhost");
        if let Some((cert, key)) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        let channel = tonic::transport::Channel::from_shared(format!("https://{addr}"))
            .expect("url")
            .tls_config(tls)
            .expect("tls config")
            .connect_timeout(std::time::Duration::from_secs(5))
            .connect()
            .await
            .ok()?;
        Some(Self {
            grpc: tonic::client::Grpc::new(channel),
        })
    }

    /// Over TLS, trusting `ca_pem`, naming the server `localhost`.
    pub async fn connect_tls(addr: SocketAddr, ca_pem: &str) -> Self {
        Self::try_connect_tls(addr, ca_pem, None)
            .await
            .expect("connect to the rate limit service over TLS")
    }

    pub async fn call(&mut self, req: RlsRequest) -> Result<RlsResponse, Status> {
        self.call_with(Request::new(req)).await
    }

    /// A call with the metadata `req` carries (a `traceparent`, say).
    pub async fn call_with(&mut self, req: Request<RlsRequest>) -> Result<RlsResponse, Status> {
        self.call_message(req).await
    }

    /// A call whose message is of the test's own type (bytes where Envoy's are strings).
    pub async fn call_message<M: prost::Message + Send + Sync + 'static>(
        &mut self,
        req: Request<M>,
    ) -> Result<RlsResponse, Status> {
        self.grpc.ready().await.expect("channel ready");
        let path = PathAndQuery::from_static(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        );
        self.grpc
            .unary(req, path, ProstCodec::default())
            .await
            .map(tonic::Response::into_inner)
    }

    /// One call of `descriptors` in `domain` at the default cost.
    pub async fn ask(&mut self, domain: &str, descriptors: Vec<RlsDescriptor>) -> RlsResponse {
        self.call(RlsRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend: 0,
        })
        .await
        .expect("the call is answered")
    }
}
