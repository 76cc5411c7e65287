//! Forwarding to an upstream: a pooled client per upstream, round robin over targets,
//! passive health (a target that refuses connections rests for a cooldown), hop-by-hop
//! headers removed, X-Forwarded-* set.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, UPGRADE};
use http::uri::{PathAndQuery, Uri};
use http::{HeaderMap, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use prometheus_client::metrics::histogram::Histogram;

use super::body::{BodyReadTimeout, ClientBodyError};
use super::capped::{Capped, UpstreamBusy};
use super::response::{json_error, Body};
use crate::config::{Target, Upstream};
use crate::metrics::Metrics;

/// How long a target that refused a connection is passed over while others answer.
pub const TARGET_COOLDOWN: Duration = Duration::from_secs(5);
/// Idle pooled connections kept per target.
const POOL_IDLE_PER_HOST: usize = 256;
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Response bytes read ahead from an upstream connection (hyper's default is ~400 KiB).
const UPSTREAM_READ_BUFFER: usize = 32 * 1024;

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
        source: hyper_util::client::legacy::Error,
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
        source: hyper_util::client::legacy::Error,
    },
    #[error("upstream {target} failed: {source}")]
    Broken {
        target: String,
        #[source]
        source: hyper_util::client::legacy::Error,
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
    fn classify(target: &Target, source: hyper_util::client::legacy::Error) -> Self {
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

/// One upstream's connection pool and target health. Kept across reloads while the
/// upstream's settings do not change, so warm connections survive a reload.
pub struct UpstreamPool {
    pub upstream: Arc<Upstream>,
    /// One client (and so one connection pool) per data-plane worker: a pooled
    /// connection is driven by the worker that uses it, never by another thread.
    clients: Box<[Client<Capped<HttpsConnector<HttpConnector>>, Body>]>,
    next: AtomicUsize,
    /// Per target: clock nanoseconds until which it is passed over.
    resting_until: Box<[AtomicU64]>,
    /// Time to response headers, by status class (1xx … 5xx).
    latency: [Histogram; 5],
}

impl UpstreamPool {
    pub fn new(upstream: Arc<Upstream>, workers: usize, metrics: &Metrics) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(upstream.connect_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*upstream.tls).clone())
            .https_or_http();
        // `sni` was validated as a server name when the config was compiled.
        let sni = upstream
            .sni
            .as_ref()
            .and_then(|name| rustls::pki_types::ServerName::try_from(name.clone()).ok());
        let builder = match sni {
            Some(name) => {
                builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
            }
            None => builder,
        };
        let connector = builder.enable_http1().wrap_connector(http);
        // Waiting for a free connection ends a little before the request's own timeout,
        // so a full pool answers 503 (busy), not 504 (slow upstream).
        let busy_wait = upstream.timeout - upstream.timeout / 20;
        // The cap is shared out among workers (each drives its own connections).
        let workers = workers.max(1);
        let clients = (0..workers)
            .map(|i| {
                let share = upstream.max_connections / workers
                    + usize::from(i < upstream.max_connections % workers);
                Client::builder(TokioExecutor::new())
                    .pool_timer(TokioTimer::new())
                    .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                    .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
                    // Bounds what is read ahead from a response the client is slow to take.
                    .http1_max_buf_size(UPSTREAM_READ_BUFFER)
                    .build(Capped::new(connector.clone(), share.max(1), busy_wait))
            })
            .collect();
        let resting_until = upstream.targets.iter().map(|_| AtomicU64::new(0)).collect();
        let latency = ["1xx", "2xx", "3xx", "4xx", "5xx"]
            .map(|class| metrics.upstream_histogram(&upstream.name, class));
        Self {
            upstream,
            latency,
            clients,
            next: AtomicUsize::new(0),
            resting_until,
        }
    }

    /// Whether this pool was built for the same settings.
    pub fn serves(&self, other: &Upstream) -> bool {
        let u = &self.upstream;
        u.name == other.name
            && u.targets == other.targets
            && u.connect_timeout == other.connect_timeout
            && u.timeout == other.timeout
            && u.max_connections == other.max_connections
            && u.ca == other.ca
            && u.ca_certs == other.ca_certs
            && u.sni == other.sni
    }

    /// Records the time to an upstream's response headers.
    pub fn observe(&self, status: u16, seconds: f64) {
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.latency[class].observe(seconds);
    }

    /// Round robin over targets that are not resting; if all rest, plain round robin.
    fn pick(&self, now_ns: u64) -> usize {
        let n = self.upstream.targets.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.resting_until[i].load(Ordering::Relaxed) <= now_ns)
            .unwrap_or(start % n)
    }

    /// Sends `req` (its URI already origin-form) to a target. A connection refused by
    /// one target is retried once on another when the request has no body to replay.
    pub async fn send(
        &self,
        req: Request<Body>,
        now_ns: u64,
        replayable: bool,
    ) -> Result<Response<Incoming>, ForwardError> {
        let first = self.pick(now_ns);
        let spare = (replayable && self.upstream.targets.len() > 1).then(|| {
            let mut copy = Request::new(super::response::empty());
            *copy.method_mut() = req.method().clone();
            *copy.uri_mut() = req.uri().clone();
            *copy.version_mut() = req.version();
            *copy.headers_mut() = req.headers().clone();
            copy
        });
        let result = self.send_to(first, req, now_ns).await;
        match (result, spare) {
            (Err(e @ ForwardError::Connect { .. }), Some(copy)) => {
                let second = self.pick(now_ns);
                if second == first {
                    Err(e)
                } else {
                    self.send_to(second, copy, now_ns).await
                }
            }
            (other, _) => other,
        }
    }

    async fn send_to(
        &self,
        index: usize,
        mut req: Request<Body>,
        now_ns: u64,
    ) -> Result<Response<Incoming>, ForwardError> {
        let target = &self.upstream.targets[index];
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(target.scheme.clone());
        parts.authority = Some(target.authority.clone());
        parts.path_and_query = Some(path);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
        let timeout = self.upstream.timeout;
        let client = &self.clients[crate::conn::worker::current() % self.clients.len()];
        match tokio::time::timeout(timeout, client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) if caused_by::<UpstreamBusy>(&e) => Err(ForwardError::Busy {
                target: target.to_string(),
                cap: self.upstream.max_connections,
            }),
            Ok(Err(e)) if e.is_connect() => {
                let cooldown = u64::try_from(TARGET_COOLDOWN.as_nanos()).unwrap_or(u64::MAX);
                self.resting_until[index].store(now_ns.saturating_add(cooldown), Ordering::Relaxed);
                Err(ForwardError::Connect {
                    target: target.to_string(),
                    source: e,
                })
            }
            Ok(Err(e)) => Err(ForwardError::classify(target, e)),
            Err(_) => Err(ForwardError::Timeout {
                target: target.to_string(),
                timeout,
            }),
        }
    }
}

/// Whether `E` is somewhere in the source chain of `e`.
fn caused_by<E: std::error::Error + 'static>(e: &hyper_util::client::legacy::Error) -> bool {
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
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named {
            if !(upgrade && name == UPGRADE) {
                headers.remove(name);
            }
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
        h.insert(CONNECTION, "keep-alive, x-secret".parse().expect("v"));
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
