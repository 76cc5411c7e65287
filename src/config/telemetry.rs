//! `[telemetry]`: where sampled requests' spans go (OTLP) and how many are sampled.

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`/opentelemetry.proto.collector.trace.v1.TraceService/Export`, h2c).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`POST /v1/traces`).
    HttpProtobuf,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// The collector's host (a name or an address) and port.
    pub host: String,
    pub port: u16,
    /// A path before OTLP/HTTP's `/v1/traces` (empty for none).
    pub base_path: String,
    pub protocol: OtlpProtocol,
    /// Of the requests that come without a sampled or unsampled `traceparent`.
    pub sample_ratio: f64,
    /// Sampled requests a second at most, the gateway's whole (a second's worth at once):
    /// a caller's sampled `traceparent` is followed within it, so clients that mark every
    /// request sampled cannot make the gateway build and export spans without bound.
    pub max_sampled_per_second: u64,
    pub service_name: String,
    /// Resource attributes besides `service.name`, in name order.
    pub resource: Vec<(String, String)>,
}

impl Telemetry {
    /// `http://host:port[/path]` as written.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}{}", self.host, self.port, self.base_path)
    }
}
