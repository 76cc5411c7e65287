//! `[telemetry]`: the OTLP endpoint, its protocol, the sampling ratio, the resource.

use super::*;
use crate::config::raw::RawTelemetry;
use crate::config::telemetry::{OtlpProtocol, Telemetry};

/// Sampled requests a second by default: a hundred thousand requests a second at the
/// default ratio, far above what one gateway serves, so only forced sampling meets it.
const DEFAULT_MAX_SAMPLED_PER_SECOND: u64 = 1_000;

impl Compiler {
    pub(super) fn telemetry(&mut self, raw: &S<RawTelemetry>) -> Option<Telemetry> {
        let raw = raw.get_ref();
        let endpoint = self.otlp_endpoint(&raw.otlp_endpoint);
        let protocol = match &raw.otlp_protocol {
            Some(p) => self.choice(
                &Some(p.clone()),
                &[
                    ("grpc", OtlpProtocol::Grpc),
                    ("http/protobuf", OtlpProtocol::HttpProtobuf),
                ],
                OtlpProtocol::Grpc,
                "otlp_protocol",
            ),
            // OTLP's own ports first; elsewhere a path (`…/v1/traces`) is OTLP/HTTP's, as
            // a gRPC endpoint has none.
            None => endpoint.as_ref().map(|e| match e.port {
                4317 => OtlpProtocol::Grpc,
                4318 => OtlpProtocol::HttpProtobuf,
                _ if e.path_written => OtlpProtocol::HttpProtobuf,
                _ => OtlpProtocol::Grpc,
            }),
        };
        let sample_ratio = match &raw.sample_ratio {
            Some(r) if (0.0..=1.0).contains(r.get_ref()) => Some(*r.get_ref()),
            Some(r) => {
                self.error(
                    r.span(),
                    format!("sample_ratio {} is not between 0 and 1", r.get_ref()),
                    Some("0.01 samples one request in a hundred; a sampled traceparent is always followed".to_owned()),
                );
                None
            }
            None => Some(0.01),
        };
        let max_sampled_per_second = self.count_or(
            &raw.max_sampled_per_second,
            DEFAULT_MAX_SAMPLED_PER_SECOND,
            "max_sampled_per_second",
        );
        let service_name = raw
            .service_name
            .as_ref()
            .map_or_else(|| "tollgate".to_owned(), |s| s.get_ref().clone());
        let resource = raw
            .resource
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect();
        let Endpoint {
            host,
            port,
            base_path,
            ..
        } = endpoint?;
        Some(Telemetry {
            host,
            port,
            base_path,
            protocol: protocol?,
            sample_ratio: sample_ratio?,
            max_sampled_per_second: max_sampled_per_second?,
            service_name,
            resource,
        })
    }

    /// `http://HOST:PORT[/PATH]`: a collector beside the gateway (an agent or sidecar).
    fn otlp_endpoint(&mut self, raw: &S<String>) -> Option<Endpoint> {
        let hint = || {
            Some("write the collector's address, e.g. \"http://127.0.0.1:4317\" (OTLP/gRPC) or \"http://127.0.0.1:4318\" (OTLP/HTTP); TLS to the collector is not supported: run a collector beside the gateway".to_owned())
        };
        let uri: Option<http::Uri> = raw.get_ref().parse().ok();
        let Some(uri) = uri.filter(|u| u.scheme_str() == Some("http") && u.host().is_some()) else {
            self.error(
                raw.span(),
                format!("otlp_endpoint `{}` is not an http:// URL", raw.get_ref()),
                hint(),
            );
            return None;
        };
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_owned();
        let port = uri.port_u16().unwrap_or(4317);
        let path = uri.path().trim_end_matches('/');
        // A per-signal endpoint (`…/v1/traces`, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT's
        // form) is its base plus the path OTLP/HTTP adds: not added twice.
        let base_path = path.strip_suffix("/v1/traces").unwrap_or(path).to_owned();
        Some(Endpoint {
            host,
            port,
            base_path,
            path_written: !path.is_empty(),
        })
    }
}

/// `otlp_endpoint` as read.
struct Endpoint {
    host: String,
    port: u16,
    /// What OTLP/HTTP's `/v1/traces` is added to.
    base_path: String,
    /// The URL names a path (a gRPC endpoint has none).
    path_written: bool,
}

#[cfg(test)]
mod tests {
    use crate::config::telemetry::OtlpProtocol;

    fn telemetry(body: &str) -> Result<crate::config::Config, String> {
        let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n[telemetry]\n{body}\n");
        crate::config::compile(std::path::Path::new("t.toml"), &text).map_err(|e| e.to_string())
    }

    #[test]
    fn the_protocol_follows_the_port_or_a_path_unless_it_is_written() {
        for (body, protocol) in [
            ("otlp_endpoint = \"http://c:4317\"", OtlpProtocol::Grpc),
            (
                "otlp_endpoint = \"http://c:4318\"",
                OtlpProtocol::HttpProtobuf,
            ),
            ("otlp_endpoint = \"http://c:9000\"", OtlpProtocol::Grpc),
            ("otlp_endpoint = \"http://c:9000/\"", OtlpProtocol::Grpc),
            (
                "otlp_endpoint = \"http://c:4317/v1/traces\"",
                OtlpProtocol::Grpc,
            ),
            (
                "otlp_endpoint = \"http://c:9000/v1/traces\"",
                OtlpProtocol::HttpProtobuf,
            ),
            (
                "otlp_endpoint = \"http://c:9000/otlp\"",
                OtlpProtocol::HttpProtobuf,
            ),
            (
                "otlp_endpoint = \"http://c:9000\"\notlp_protocol = \"http/protobuf\"",
                OtlpProtocol::HttpProtobuf,
            ),
            (
                "otlp_endpoint = \"http://c:4318\"\notlp_protocol = \"grpc\"",
                OtlpProtocol::Grpc,
            ),
        ] {
            let config = telemetry(body).expect(body);
            let t = config.telemetry.expect("telemetry");
            assert_eq!(t.protocol, protocol, "{body}");
        }
        for (endpoint, base) in [
            ("http://c:4318/v1/traces", ""),
            ("http://c:4318/otlp/v1/traces/", "/otlp"),
            ("http://c:4318/otlp", "/otlp"),
        ] {
            let config = telemetry(&format!("otlp_endpoint = \"{endpoint}\"")).expect(endpoint);
            assert_eq!(
                config.telemetry.expect("telemetry").base_path,
                base,
                "{endpoint}"
            );
        }
        let e = telemetry("otlp_endpoint = \"http://c:4317\"\notlp_protocol = \"http/json\"")
            .expect_err("not a protocol");
        assert!(e.contains("otlp_protocol"), "{e}");
    }
}
