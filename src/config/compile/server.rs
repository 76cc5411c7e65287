//! `[server]`: addresses, connection limits and deadlines, TLS, path rules, workers.

use super::*;
use crate::request::path::{EscapedSlash, PathRules};

/// The most permits a tokio semaphore counts (`Semaphore::MAX_PERMITS`, 2^61 − 1), written
/// here so the config stays free of the runtime; a test in `workers.rs` holds them equal.
pub const MAX_PERMITS: usize = usize::MAX >> 3;

/// The `[server]` limits on one connection: how long each phase may take, and how
/// many connections and workers share the load.
struct ConnectionLimits {
    header_read_timeout: Duration,
    drain_timeout: Duration,
    body_read_timeout: Duration,
    workers: usize,
    max_connections: usize,
    max_header_bytes: usize,
}

/// The `[server]` limits on an open connection once requests flow: silences allowed
/// while sending, idle and tunnelling, and HTTP/2 streams at once.
struct StreamLimits {
    send_timeout: Duration,
    idle_timeout: Duration,
    tunnel_idle_timeout: Duration,
    max_streams: u32,
    max_requests: usize,
    max_key_body: usize,
    max_key_body_memory: usize,
}

impl Compiler {
    pub(super) fn server(&mut self, raw: S<RawServer>) -> Option<Server> {
        let raw = raw.into_inner();
        let (listen, admin_listen) = self.listen_addresses(&raw);
        let trusted_proxies = self.trusted_proxies(&raw);
        let admin_token = self.admin_token(&raw);
        if let Some(admin) = admin_listen.filter(|_| matches!(admin_token, Some(None))) {
            self.warn_exposed_admin(&raw, admin);
        }
        let overrides_file = raw
            .overrides_file
            .as_ref()
            .map(|f| self.base.join(f.get_ref()));
        let tls = raw
            .tls
            .as_ref()
            .and_then(|t| self.server_tls(t, "[server.tls]"));
        let connections = self.connection_limits(&raw);
        let paths = self.path_rules(&raw);
        let streams = self.stream_limits(&raw);
        let logging = self.logging(&raw);
        let (connections, streams, logging) = (connections?, streams?, logging?);
        Some(Server {
            listen: listen?,
            paths: paths?,
            send_timeout: streams.send_timeout,
            idle_timeout: streams.idle_timeout,
            tunnel_idle_timeout: streams.tunnel_idle_timeout,
            max_streams: streams.max_streams,
            max_requests: streams.max_requests,
            max_key_body: streams.max_key_body,
            max_key_body_memory: streams.max_key_body_memory,
            admin_listen,
            trusted_proxies,
            tls,
            header_read_timeout: connections.header_read_timeout,
            max_connections: connections.max_connections,
            max_header_bytes: connections.max_header_bytes,
            drain_timeout: connections.drain_timeout,
            access_log: logging.access_log,
            access_log_rate: logging.access_log_rate,
            log_keys: logging.log_keys,
            top_keys: raw.top_keys.unwrap_or(true),
            top_window: logging.top_window,
            watch_config: raw.watch_config.unwrap_or(false),
            workers: connections.workers,
            body_read_timeout: connections.body_read_timeout,
            admin_token: admin_token?,
            overrides_file,
        })
    }

    /// An admin listener beyond this host with no token: said by `tollgate check`, at
    /// start and in every reload's report (a reload that drops the token opens it live).
    fn warn_exposed_admin(&mut self, raw: &RawServer, admin: SocketAddr) {
        let Some(span) = raw.admin_listen.as_ref().map(S::span) else {
            return;
        };
        if admin.ip().is_loopback() {
            return;
        }
        self.warn(
            span,
            format!("admin_listen {admin} is not a loopback address and no admin_token is set: the admin API's read-only endpoints (top keys, overrides, the configuration) are open to anyone who reaches it, and its changes are refused"),
            Some("set admin_token (or admin_token_file), or listen on 127.0.0.1".to_owned()),
        );
    }

    /// `listen`, and `admin_listen` when given and valid: never the data plane's address.
    fn listen_addresses(&mut self, raw: &RawServer) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let listen = self.socket_addr(&raw.listen);
        let admin_listen = raw.admin_listen.as_ref().map(|a| self.socket_addr(a));
        if let (Some(l), Some((Some(a), span))) = (
            listen,
            admin_listen.zip(raw.admin_listen.as_ref().map(S::span)),
        ) {
            let overlapping = l.port() == a.port()
                && (l.ip() == a.ip() || l.ip().is_unspecified() || a.ip().is_unspecified());
            if overlapping && a.port() != 0 {
                self.error(
                    span,
                    format!("admin_listen {a} is the same address as listen"),
                    Some(
                        "the admin API is never served on the data plane: pick another port"
                            .to_owned(),
                    ),
                );
            }
        }
        (listen, admin_listen.flatten())
    }

    /// `trusted_proxies`: addresses and CIDRs whose forwarding headers are believed.
    fn trusted_proxies(&mut self, raw: &RawServer) -> TrustedProxies {
        let mut nets = Vec::new();
        for entry in &raw.trusted_proxies {
            let text = entry.get_ref().trim();
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from));
            match net {
                Ok(net) => nets.push(net),
                Err(_) => self.error(
                    entry.span(),
                    format!("`{text}` is not an IP address or CIDR"),
                    Some("write e.g. \"10.0.0.0/8\" or \"127.0.0.1\"".to_owned()),
                ),
            }
        }
        TrustedProxies::new(nets)
    }

    /// Header, drain and body deadlines, `workers`, `max_connections`, `max_header_bytes`.
    fn connection_limits(&mut self, raw: &RawServer) -> Option<ConnectionLimits> {
        let header_read_timeout =
            self.duration_or(&raw.header_read_timeout, DEFAULT_HEADER_READ_TIMEOUT, false);
        let drain_timeout = self.duration_or(&raw.drain_timeout, DEFAULT_DRAIN_TIMEOUT, true);
        let body_read_timeout =
            self.duration_or(&raw.body_read_timeout, DEFAULT_BODY_READ_TIMEOUT, false);
        let workers = self.count_or(&raw.workers, default_workers() as u64, "workers");
        let max_connections = self.count_or(
            &raw.max_connections,
            DEFAULT_MAX_CONNECTIONS as u64,
            "max_connections",
        );
        let max_header_bytes = self.count_or(
            &raw.max_header_bytes,
            DEFAULT_MAX_HEADER_BYTES as u64,
            "max_header_bytes",
        );
        if let Some(m) = &raw.max_header_bytes {
            if *m.get_ref() < 8192 {
                self.error(
                    m.span(),
                    "max_header_bytes must be at least 8192",
                    Some("HTTP/1.1 needs room for a request line and headers".to_owned()),
                );
            }
        }
        Some(ConnectionLimits {
            header_read_timeout: header_read_timeout?,
            drain_timeout: drain_timeout?,
            body_read_timeout: body_read_timeout?,
            workers: usize::try_from(workers?).ok()?,
            // Past what a semaphore counts (2^61 − 1) is no bound: clamped, not a panic.
            max_connections: usize::try_from(max_connections?).ok()?.min(MAX_PERMITS),
            max_header_bytes: usize::try_from(max_header_bytes?).ok()?,
        })
    }

    /// How request paths are normalised and routed: `normalize_path`, `merge_slashes`,
    /// `escaped_slashes`, `allow_backslash`, `ignore_path_case`.
    fn path_rules(&mut self, raw: &RawServer) -> Option<PathRules> {
        let escaped_slash = self.choice(
            &raw.escaped_slashes,
            &[
                ("refuse", EscapedSlash::Refuse),
                ("keep", EscapedSlash::Keep),
                ("decode", EscapedSlash::Decode),
            ],
            EscapedSlash::Refuse,
            "escaped_slashes",
        );
        let defaults = PathRules::default();
        Some(PathRules {
            normalize: raw.normalize_path.unwrap_or(defaults.normalize),
            merge_slashes: raw.merge_slashes.unwrap_or(defaults.merge_slashes),
            escaped_slash: escaped_slash?,
            allow_backslash: raw.allow_backslash.unwrap_or(defaults.allow_backslash),
            ignore_case: raw.ignore_path_case.unwrap_or(defaults.ignore_case),
        })
    }

    /// Send, idle and tunnel deadlines, `max_streams` and `max_requests`.
    fn stream_limits(&mut self, raw: &RawServer) -> Option<StreamLimits> {
        let send_timeout = self.duration_or(&raw.send_timeout, DEFAULT_SEND_TIMEOUT, false);
        let idle_timeout = self.duration_or(&raw.idle_timeout, DEFAULT_IDLE_TIMEOUT, false);
        let tunnel_idle_timeout =
            self.duration_or(&raw.tunnel_idle_timeout, DEFAULT_TUNNEL_IDLE_TIMEOUT, false);
        let max_streams = self.count_or(
            &raw.max_streams,
            u64::from(DEFAULT_MAX_STREAMS),
            "max_streams",
        );
        let max_requests = self.count_or(
            &raw.max_requests,
            DEFAULT_MAX_REQUESTS as u64,
            "max_requests",
        );
        let (max_key_body, max_key_body_memory) = self.key_body_limits(raw);
        Some(StreamLimits {
            max_key_body: max_key_body?,
            max_key_body_memory: max_key_body_memory?,
            send_timeout: send_timeout?,
            idle_timeout: idle_timeout?,
            tunnel_idle_timeout: tunnel_idle_timeout?,
            max_streams: u32::try_from(max_streams?).unwrap_or(u32::MAX),
            max_requests: usize::try_from(max_requests?)
                .unwrap_or(usize::MAX)
                .min(MAX_PERMITS),
        })
    }

    /// `max_key_body` (at most 16 MiB) and `max_key_body_memory` (at least one body).
    fn key_body_limits(&mut self, raw: &RawServer) -> (Option<usize>, Option<usize>) {
        let body = self.count_or(
            &raw.max_key_body,
            DEFAULT_MAX_KEY_BODY as u64,
            "max_key_body",
        );
        if let (Some(b), Some(r)) = (body, &raw.max_key_body) {
            if b > MAX_KEY_BODY as u64 {
                let hint = "a key or a price is near the top of a request: 64 KiB is the default";
                self.error(
                    r.span(),
                    format!("max_key_body {b} is above {MAX_KEY_BODY} (16 MiB)"),
                    Some(hint.to_owned()),
                );
            }
        }
        let memory = self.count_or(
            &raw.max_key_body_memory,
            DEFAULT_MAX_KEY_BODY_MEMORY as u64,
            "max_key_body_memory",
        );
        if let (Some(b), Some(m), Some(r)) = (body, memory, &raw.max_key_body_memory) {
            if m < b {
                self.error(
                    r.span(),
                    format!("max_key_body_memory {m} is less than one body (max_key_body {b})"),
                    Some("raise max_key_body_memory, or lower max_key_body".to_owned()),
                );
            }
        }
        let size = |v: Option<u64>| v.map(|v| usize::try_from(v).unwrap_or(usize::MAX));
        (size(body), size(memory))
    }

    /// `admin_token`, or the contents of `admin_token_file` (read at every load, so a
    /// rotated secret applies on reload).
    fn admin_token(&mut self, raw: &RawServer) -> Option<Option<AdminToken>> {
        let Some((text, span)) = self.secret_text(
            ("admin_token", &raw.admin_token),
            ("admin_token_file", &raw.admin_token_file),
        )?
        else {
            return Some(None);
        };
        match AdminToken::parse(&text) {
            Ok(token) => Some(Some(token)),
            Err(problem) => {
                self.error(
                    span,
                    problem,
                    Some("generate one with e.g. `openssl rand -hex 32`".to_owned()),
                );
                None
            }
        }
    }
}

/// How many workers to run when the config does not say: one per core.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
