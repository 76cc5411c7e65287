//! The validated, immutable configuration. Built only by `compile`, so every value
//! here is already known to be usable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::Method;

use super::admin_token::AdminToken;
use super::policy::Policy;
pub use super::store_settings::*;
use crate::key::TrustedProxies;
pub use crate::tls::CertFiles;

#[derive(Debug)]
pub struct Config {
    pub path: PathBuf,
    pub server: Server,
    pub store: StoreSettings,
    pub upstreams: Vec<Arc<Upstream>>,
    pub policies: Vec<Arc<Policy>>,
    /// In match order: longest path first, then host-specific, then method-specific.
    pub routes: Vec<Arc<Route>>,
    /// `[rls]`: Envoy's rate limit service, when configured.
    pub rls: Option<Rls>,
    /// `[telemetry]`: spans of sampled requests over OTLP.
    pub telemetry: Option<super::telemetry::Telemetry>,
    /// `[prices.NAME]`, by name.
    pub prices: Vec<Arc<super::prices::Prices>>,
    /// The routes' paths as a trie, so a request finds its route in the time of one walk
    /// along its path, however many routes there are.
    pub route_index: super::route_index::RouteIndex,
    /// The headers some policy keys by, which a client's `Connection` cannot strip.
    pub key_headers: crate::key::KeyHeaders,
    /// What the file says that is valid but likely not meant, one located line each
    /// (`path:line:column: warning: …`): `check` prints them, `run` and reloads log them.
    pub warnings: Vec<String>,
}

/// `access_log`: every request's line, only refusals', or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLog {
    Off,
    All,
    Refused,
}

impl AccessLog {
    pub fn enabled(self) -> bool {
        self != AccessLog::Off
    }
}

/// `log_keys`: key parts as the client sent them, or as keyed hashes (HMAC-SHA256 under
/// the fleet's secret, or this process's): the same key gives the same hash, its value
/// cannot be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKeys {
    Clear,
    Hash,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    pub trusted_proxies: TrustedProxies,
    pub tls: Option<ServerTls>,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub drain_timeout: Duration,
    /// Which requests get an access log line (target `tollgate::access`).
    pub access_log: AccessLog,
    /// At most this many access log lines a second (the rest are counted as dropped).
    pub access_log_rate: u32,
    /// How a refused request's key parts appear in its line.
    pub log_keys: LogKeys,
    /// Keep each tier's heavy hitters for `GET /admin/top`.
    pub top_keys: bool,
    /// The sliding window top keys are counted over.
    pub top_window: Duration,
    /// Reload when the config file changes (its folder watched), as on SIGHUP.
    pub watch_config: bool,
    /// Data-plane worker threads, each with its own runtime and listener.
    pub workers: usize,
    /// Longest silence allowed inside a request body (408 after it).
    pub body_read_timeout: Duration,
    /// How request paths are normalised before routing, keying and forwarding.
    pub paths: crate::request::path::PathRules,
    /// A response the client stops reading for this long is aborted.
    pub send_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// An upgraded tunnel with no bytes either way for this long is closed.
    pub tunnel_idle_timeout: Duration,
    /// HTTP/2 concurrent streams per connection.
    pub max_streams: u32,
    /// Requests parked or in flight at once, the whole gateway (each worker takes its
    /// share); past it a request is answered 503 `overloaded`.
    pub max_requests: usize,
    /// The most of a request body read for `json:` keys and price quotes (bytes), and
    /// the most all such buffers hold at once, the whole gateway.
    pub max_key_body: usize,
    pub max_key_body_memory: usize,
    /// Required as `Authorization: Bearer …` on every `/admin/*` request when set.
    pub admin_token: Option<AdminToken>,
    /// Where runtime overrides are written (atomically) and read back at start.
    pub overrides_file: Option<PathBuf>,
}

/// The data plane's TLS: the files, and the config built from them at load time.
#[derive(Clone)]
pub struct ServerTls {
    pub default: CertFiles,
    pub sni: Vec<CertFiles>,
    /// Mutual TLS: the CAs a client's certificate must be signed by.
    pub client_ca: Option<PathBuf>,
    pub config: Arc<rustls::ServerConfig>,
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.default == other.default && self.sni == other.sni && self.client_ca == other.client_ca
    }
}

impl Eq for ServerTls {}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("default", &self.default)
            .field("sni", &self.sni)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub targets: Vec<Target>,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// Connections to this upstream per gateway (in use and idle).
    pub max_connections: usize,
    /// Idle connections kept per target, per worker.
    pub max_idle: usize,
    /// An idle upstream connection is closed after this long.
    pub idle_timeout: Duration,
    pub ca: Option<PathBuf>,
    /// The certificates read from `ca`, so a reload notices a file rotated in place.
    pub ca_certs: crate::tls::TrustedCerts,
    pub sni: Option<String>,
    /// For `https://` targets: web roots, or the CAs in `ca`.
    pub tls: Arc<rustls::ClientConfig>,
    pub protocol: Protocol,
    /// HTTP/2 upstreams: streams a connection carries before the worker opens another.
    pub max_streams: usize,
}

impl Upstream {
    /// Whether `other` has the same settings (the client TLS config is built from `ca`,
    /// its certificates and `protocol`, so it is not compared itself): a pool built for
    /// one serves the other, and a reload reports no change.
    pub fn same_settings(&self, other: &Upstream) -> bool {
        self.name == other.name
            && self.targets == other.targets
            && self.connect_timeout == other.connect_timeout
            && self.timeout == other.timeout
            && self.max_connections == other.max_connections
            && self.max_idle == other.max_idle
            && self.idle_timeout == other.idle_timeout
            && self.ca == other.ca
            && self.ca_certs == other.ca_certs
            && self.sni == other.sni
            && self.protocol == other.protocol
            && self.max_streams == other.max_streams
    }
}

/// How the gateway speaks to an upstream's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1, one request at a time per connection (`http://` or `https://`).
    Http1,
    /// HTTP/2 with prior knowledge over plain TCP (`http://` targets).
    H2c,
    /// HTTP/2 over TLS, agreed by ALPN (`https://` targets).
    H2,
}

impl Protocol {
    /// Whether requests share connections as HTTP/2 streams.
    pub fn multiplexed(self) -> bool {
        self != Protocol::Http1
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::H2c => "h2c",
            Protocol::H2 => "h2",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    pub authority: Authority,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

#[derive(Debug)]
pub struct Route {
    pub name: String,
    pub path: String,
    /// Lower-case host without port.
    pub host: Option<String>,
    pub methods: Option<Vec<Method>>,
    pub upstream: Arc<Upstream>,
    /// Position of `upstream` in [`Config::upstreams`].
    pub upstream_index: usize,
    /// Tiers in evaluation order.
    pub policies: Vec<Arc<Policy>>,
    pub cost: u64,
    /// Largest request body in bytes; larger ones get 413.
    pub max_body: Option<u64>,
    /// The JSON pointers its policies read from the request body (keys, price quotes
    /// and, for a `query:` key, the member of its name), each once. Whether a body is read
    /// at all is [`Route::body_readings`]'s: a body no policy reads is forwarded unread.
    pub body_pointers: Box<[Arc<crate::json::JsonPointer>]>,
    /// Every request body is read before the decision: a policy keys or prices by it.
    pub body_always: bool,
    /// A policy keys by a query parameter, which frameworks also read from a form, a
    /// multipart or a JSON body (`request::form`): such a body is read before the decision.
    pub query_in_body: bool,
    /// A key is read from the query or the body (`query:`, `json:`, a price, a `jwt:`
    /// key's `access_token` parameter): what some upstreams decode in the charset a
    /// request's `Content-Type` names (`request::charset`).
    pub keys_by_params: bool,
}

impl Route {
    /// How `req`'s body is read before its decision: `None` when it is not (see
    /// [`Route::query_in_body`]); else how frameworks read parameters from it, worked out
    /// once for the gate and the read (`request::form::readings`: `None` inside when its
    /// `Content-Type` lines name more readings than are read).
    #[inline]
    pub fn body_readings<B: http_body::Body>(
        &self,
        req: &http::Request<B>,
    ) -> Option<Option<crate::request::form::Readings>> {
        let ended = req.body().is_end_stream();
        if !self.body_always && (!self.query_in_body || ended) {
            return None;
        }
        let readings = match ended {
            true => Some(crate::request::form::Readings::new()),
            false => crate::request::form::readings(req.method(), req.headers()),
        };
        let read = self.body_always || readings.as_ref().is_none_or(|r| !r.is_empty());
        read.then_some(readings)
    }
}

impl Config {
    /// The route for a request: exact host (if the route names one, port ignored),
    /// longest path prefix (of the lower-cased path with `ignore_path_case`), then methods (`GET` also admits `HEAD`, as frameworks serve
    /// HEAD with the GET handler). `routes` is kept in that order.
    pub fn find_route(&self, host: Option<&str>, path: &str, method: &Method) -> Option<usize> {
        let host = host.map(|h| {
            let h = strip_port(h);
            h.strip_suffix('.').unwrap_or(h)
        });
        // Upstreams that match routes without case serve `/V1/Search` as `/v1/search`.
        let folded;
        let path = if self.server.paths.ignore_case {
            folded = crate::request::path::fold_case(path);
            &*folded
        } else {
            path
        };
        self.route_index.find(path, |i| {
            let r = &self.routes[i];
            r.host
                .as_deref()
                .is_none_or(|h| host.is_some_and(|req| req.eq_ignore_ascii_case(h)))
                && r.methods.as_ref().is_none_or(|m| {
                    m.contains(method) || (method == Method::HEAD && m.contains(&Method::GET))
                })
        })
    }

    pub fn policy(&self, name: &str) -> Option<&Arc<Policy>> {
        self.policies.iter().find(|p| p.name == name)
    }
}

/// `example.com:8080` → `example.com`, `[::1]:80` → `[::1]`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
}

/// `[rls]`: Envoy's rate limit service on a listener of its own.
#[derive(Debug, Clone)]
pub struct Rls {
    pub listen: SocketAddr,
    pub tls: Option<ServerTls>,
    pub on_unmatched: super::rls::Unmatched,
    pub refusal_body: super::rls::RefusalBody,
    pub rules: super::rls::RlsRules,
    /// `ratelimit_config`, resolved: envoyproxy/ratelimit's YAML file or folder.
    pub ratelimit_config: Option<PathBuf>,
    /// `[[rlqs.buckets]]`: Envoy's quota service, answered on this listener.
    pub buckets: super::rlqs::RlqsBuckets,
    /// Quota streams open at once on the listener (an Envoy holds one per domain);
    /// beyond, a new one is answered `RESOURCE_EXHAUSTED`. Read at start.
    pub max_quota_streams: usize,
    /// Quota buckets tracked at once, every stream's together (and their ids' bytes, at
    /// most 256 each on average); beyond, a new bucket is charged and refused a while,
    /// not tracked. Read at start.
    pub max_quota_buckets: usize,
}
