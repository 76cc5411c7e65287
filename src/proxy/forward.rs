//! What forwarding does to a request on its way upstream (hop-by-hop headers removed,
//! X-Forwarded-* set) and how a failed exchange is classified and answered. The
//! connections themselves are in [`super::pool`].

use std::net::IpAddr;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, UPGRADE};
use http::{HeaderMap, Request, Response, StatusCode, Version};

use super::body::{BodyReadTimeout, ClientBodyError};
use super::response::{json_error, Body};
use crate::config::Target;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
static HOP_BY_HOP: [HeaderName; 8] = [
    HeaderName::from_static("connection"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("proxy-authorization"),
    HeaderName::from_static("te"),
    HeaderName::from_static("trailer"),
    HeaderName::from_static("transfer-encoding"),
];

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: super::pool::ConnectError,
    },
    #[error("all {cap} connections to {target}'s upstream are in use")]
    Busy { target: String, cap: usize },
    #[error("no response from {target} within {timeout:?}")]
    Timeout { target: String, timeout: Duration },
    /// The client's own request body failed on the way: its fault, not the upstream's.
    #[error("the client's request body {fault}: {source}")]
    ClientBody {
        fault: ClientBodyFault,
        #[source]
        source: hyper::Error,
    },
    #[error("upstream {target} failed: {source}")]
    Broken {
        target: String,
        #[source]
        source: hyper::Error,
    },
}

/// How a client's request body failed while it was being forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClientBodyFault {
    #[error("exceeded max_body")]
    TooLarge,
    #[error("stalled past body_read_timeout")]
    Stalled,
    #[error("was malformed or cut off")]
    Broken,
}

impl ForwardError {
    /// Classifies a failed exchange once, by what caused it.
    pub(super) fn classify(target: &Target, source: hyper::Error) -> Self {
        let fault = if caused_by::<http_body_util::LengthLimitError>(&source) {
            Some(ClientBodyFault::TooLarge)
        } else if caused_by::<BodyReadTimeout>(&source) {
            Some(ClientBodyFault::Stalled)
        } else if caused_by::<ClientBodyError>(&source) {
            Some(ClientBodyFault::Broken)
        } else {
            None
        };
        match fault {
            Some(fault) => ForwardError::ClientBody { fault, source },
            None => ForwardError::Broken {
                target: target.to_string(),
                source,
            },
        }
    }

    pub fn clients_fault(&self) -> bool {
        matches!(self, ForwardError::ClientBody { .. })
    }

    /// The answer the client gets: 4xx for its own faults, 502/503/504 for the upstream's.
    pub fn response(&self, upstream: &str) -> Response<Body> {
        let named = [("upstream", upstream.into())];
        let closing = |status, code| {
            let mut resp = json_error(status, code, &[]);
            resp.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            resp
        };
        match self {
            ForwardError::Busy { .. } => {
                json_error(StatusCode::SERVICE_UNAVAILABLE, "upstream_busy", &named)
            }
            ForwardError::Timeout { .. } => {
                json_error(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", &named)
            }
            ForwardError::ClientBody { fault, .. } => match fault {
                ClientBodyFault::TooLarge => {
                    json_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", &[])
                }
                ClientBodyFault::Stalled => {
                    closing(StatusCode::REQUEST_TIMEOUT, "request_body_timeout")
                }
                ClientBodyFault::Broken => closing(StatusCode::BAD_REQUEST, "bad_request_body"),
            },
            ForwardError::Connect { .. } | ForwardError::Broken { .. } => {
                json_error(StatusCode::BAD_GATEWAY, "upstream_unavailable", &named)
            }
        }
    }
}

/// Whether `E` is somewhere in the source chain of `e`.
fn caused_by<E: std::error::Error + 'static>(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<E>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Removes hop-by-hop headers and any header the Connection header names. With
/// `upgrade`, keeps `Connection: upgrade` and `Upgrade` so the tunnel can be set up.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    if headers.contains_key(CONNECTION) {
        // Copied out (on the stack for any usual value), so the named headers can be
        // removed while reading it; `remove` by `&str` builds no header name.
        let mut options: smallvec::SmallVec<[u8; 128]> = smallvec::SmallVec::new();
        for value in headers.get_all(CONNECTION) {
            options.extend_from_slice(value.as_bytes());
            options.push(b',');
        }
        for option in options.split(|&b| b == b',') {
            let Ok(name) = std::str::from_utf8(option.trim_ascii()) else {
                continue;
            };
            if name.is_empty() || (upgrade && name.eq_ignore_ascii_case("upgrade")) {
                continue;
            }
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(UPGRADE);
    }
}

/// Adds what the upstream learns from the gateway: X-Forwarded-For (every line the
/// client sent, as one list, then the peer), -Proto and -Host. The head was normalised
/// before routing (`head::normalize`), so Host and hop-by-hop headers are already right.
pub fn prepare_request(req: &mut Request<Body>, peer: IpAddr, tls: bool) {
    let headers = req.headers_mut();
    let mut chain = Vec::with_capacity(64);
    for line in headers.get_all(&X_FORWARDED_FOR) {
        let line = line.as_bytes().trim_ascii();
        if !line.is_empty() {
            chain.extend_from_slice(line);
            chain.extend_from_slice(b", ");
        }
    }
    {
        use std::io::Write;
        let _ = write!(chain, "{peer}");
    }
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(chain)) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
    headers.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if tls { "https" } else { "http" }),
    );
    if let Some(host) = headers.get(HOST).cloned() {
        headers.insert(X_FORWARDED_HOST.clone(), host);
    }
    *req.version_mut() = Version::HTTP_11;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "keep-alive, X-Secret".parse().expect("v"));
        h.insert("keep-alive", "timeout=5".parse().expect("v"));
        h.insert("x-secret", "1".parse().expect("v"));
        h.insert("te", "trailers".parse().expect("v"));
        h.insert("transfer-encoding", "chunked".parse().expect("v"));
        h.insert("upgrade", "websocket".parse().expect("v"));
        h.insert("x-keep", "yes".parse().expect("v"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-keep"], "yes");
    }

    #[test]
    fn upgrade_keeps_the_upgrade_headers() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "Upgrade".parse().expect("v"));
        h.insert(UPGRADE, "websocket".parse().expect("v"));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[UPGRADE], "websocket");
        assert_eq!(h[CONNECTION], "upgrade");
    }
}
