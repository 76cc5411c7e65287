//! `[server]` and `[store]`: addresses, limits, TLS, the store backend.

use super::*;
use crate::request::path::{EscapedSlash, PathRules};

impl Compiler {
    /// The Redis script keeps debts in doubles: τ + max_delay must stay below 2^52 ns.
    pub(super) fn redis_limits(
        &mut self,
        policies: &BTreeMap<String, Arc<Policy>>,
        spans: &BTreeMap<String, std::ops::Range<usize>>,
    ) {
        const REDIS_MAX_NS: u64 = 1 << 52;
        for (name, p) in policies {
            let max_delay = u64::try_from(p.max_delay.as_nanos()).unwrap_or(u64::MAX);
            let too_long = std::iter::once(&p.quota)
                .chain(p.overrides.values())
                .any(|q| {
                    q.tolerance_ns()
                        .saturating_add(max_delay)
                        .saturating_add(q.interval_ns())
                        >= REDIS_MAX_NS
                });
            if too_long {
                self.error(
                    spans.get(name).cloned().unwrap_or(0..0),
                    format!("policy `{name}`: (burst + 1) × period / limit + max_delay exceeds 52 days, too long for the redis backend"),
                    Some("lower burst or period, or use the memory backend".to_owned()),
                );
            }
        }
    }

    pub(super) fn server(&mut self, raw: S<RawServer>) -> Option<Server> {
        let raw = raw.into_inner();
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
        let tls = match raw.tls {
            None => None,
            Some(t) => {
                let span = t.span();
                let t = t.into_inner();
                let default = CertFiles {
                    names: Vec::new(),
                    cert: self.base.join(t.cert.get_ref()),
                    key: self.base.join(t.key.get_ref()),
                };
                let sni: Vec<CertFiles> = t
                    .sni
                    .iter()
                    .map(|s| CertFiles {
                        names: s.get_ref().names.clone(),
                        cert: self.base.join(&s.get_ref().cert),
                        key: self.base.join(&s.get_ref().key),
                    })
                    .collect();
                match crate::tls::server_config(&default, &sni) {
                    Ok(config) => Some(ServerTls {
                        default,
                        sni,
                        config,
                    }),
                    Err(e) => {
                        self.error(span, format!("[server.tls]: {e}"), Some("point cert and key at PEM files (relative paths start at the config file's folder)".to_owned()));
                        None
                    }
                }
            }
        };
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
        let send_timeout = self.duration_or(&raw.send_timeout, DEFAULT_SEND_TIMEOUT, false);
        let idle_timeout = self.duration_or(&raw.idle_timeout, DEFAULT_IDLE_TIMEOUT, false);
        let tunnel_idle_timeout =
            self.duration_or(&raw.tunnel_idle_timeout, DEFAULT_TUNNEL_IDLE_TIMEOUT, false);
        let max_streams = self.count_or(
            &raw.max_streams,
            u64::from(DEFAULT_MAX_STREAMS),
            "max_streams",
        );
        let defaults = PathRules::default();
        let paths = PathRules {
            normalize: raw.normalize_path.unwrap_or(defaults.normalize),
            merge_slashes: raw.merge_slashes.unwrap_or(defaults.merge_slashes),
            escaped_slash: escaped_slash?,
            allow_backslash: raw.allow_backslash.unwrap_or(defaults.allow_backslash),
        };
        Some(Server {
            listen: listen?,
            paths,
            send_timeout: send_timeout?,
            idle_timeout: idle_timeout?,
            tunnel_idle_timeout: tunnel_idle_timeout?,
            max_streams: u32::try_from(max_streams?).unwrap_or(u32::MAX),
            admin_listen: admin_listen.flatten(),
            trusted_proxies: TrustedProxies::new(nets),
            tls,
            header_read_timeout: header_read_timeout?,
            max_connections: usize::try_from(max_connections?).ok()?,
            max_header_bytes: usize::try_from(max_header_bytes?).ok()?,
            drain_timeout: drain_timeout?,
            access_log: raw.access_log.unwrap_or(true),
            workers: usize::try_from(workers?).ok()?,
            body_read_timeout: body_read_timeout?,
        })
    }

    pub(super) fn store(&mut self, raw: Option<S<RawStore>>) -> Option<StoreSettings> {
        let Some(raw) = raw.map(S::into_inner) else {
            return Some(StoreSettings {
                backend: Backend::Memory,
                timeout: DEFAULT_STORE_TIMEOUT,
                on_error: OnError::Deny,
                max_keys: DEFAULT_MAX_KEYS,
            });
        };
        let urls = raw.url.as_ref().map(|u| (u.get_ref().to_vec(), u.span()));
        let cluster = raw
            .url
            .as_ref()
            .is_some_and(|u| matches!(u.get_ref(), OneOrMany::Many(_)));
        let backend = match raw
            .backend
            .as_ref()
            .map(|b| (b.get_ref().as_str(), b.span()))
        {
            None | Some(("memory", _)) => Some(Backend::Memory),
            Some(("redis", span)) => match urls {
                None => {
                    self.error(span, "backend = \"redis\" needs `url`", Some("add url = \"redis://127.0.0.1:6379\" (a list of node URLs means Redis Cluster)".to_owned()));
                    None
                }
                Some((urls, span)) => {
                    let bad: Vec<_> = urls
                        .iter()
                        .filter(|u| !(u.starts_with("redis://") || u.starts_with("rediss://")))
                        .cloned()
                        .collect();
                    if urls.is_empty() || !bad.is_empty() {
                        self.error(
                            span,
                            format!("not a Redis URL: {bad:?}"),
                            Some("use redis://host:port or rediss://host:port".to_owned()),
                        );
                        None
                    } else {
                        Some(Backend::Redis { urls, cluster })
                    }
                }
            },
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown store backend `{other}`"),
                    Some("use \"memory\" or \"redis\"".to_owned()),
                );
                None
            }
        };
        let on_error = match raw
            .on_error
            .as_ref()
            .map(|b| (b.get_ref().as_str(), b.span()))
        {
            None | Some(("deny", _)) => Some(OnError::Deny),
            Some(("allow", _)) => Some(OnError::Allow),
            Some(("local", _)) => Some(OnError::Local),
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown on_error `{other}`"),
                    Some("use \"allow\", \"deny\" or \"local\"".to_owned()),
                );
                None
            }
        };
        let timeout = self.duration_or(&raw.timeout, DEFAULT_STORE_TIMEOUT, false);
        let max_keys = self.count_or(&raw.max_keys, DEFAULT_MAX_KEYS as u64, "max_keys");
        Some(StoreSettings {
            backend: backend?,
            timeout: timeout?,
            on_error: on_error?,
            max_keys: usize::try_from(max_keys?).ok()?,
        })
    }
}

/// How many workers to run when the config does not say: one per core.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
