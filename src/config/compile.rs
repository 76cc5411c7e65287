//! From the serde mirror to a validated [`Config`]: every problem in the file is
//! collected, located and reported at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Scheme, Uri};
use http::Method;
use ipnet::IpNet;

use super::error::{locate, ConfigError, Problem};
use super::model::*;
use super::raw::{OneOrMany, RawConfig, RawPolicy, RawRoute, RawServer, RawStore, RawUpstream, S};
use crate::key::{KeySource, TrustedProxies};
use crate::limit::{Mode, Quota, MAX_TIERS};

pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(50);
pub const DEFAULT_MAX_KEYS: usize = 10_000_000;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads and compiles the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    compile(path, &text)
}

/// Compiles `text`, read from `path` (relative TLS paths resolve against its folder).
pub fn compile(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let invalid = |problems| ConfigError::Invalid {
        path: path.to_owned(),
        problems: locate(text, problems),
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        invalid(vec![Problem {
            span: e.span().unwrap_or(0..0),
            message: e.message().trim().to_owned(),
            hint: None,
        }])
    })?;
    let base = path.parent().map(Path::to_owned).unwrap_or_default();
    let mut c = Compiler {
        problems: Vec::new(),
        base,
    };
    let config = c.config(path, raw);
    match config {
        Some(config) if c.problems.is_empty() => Ok(config),
        _ => Err(invalid(c.problems)),
    }
}

/// Every name the file defines, valid or not, so a broken definition is reported once
/// and not again as "unknown" wherever it is used.
struct Defined {
    upstreams: HashSet<String>,
    policies: HashSet<String>,
}

struct Compiler {
    problems: Vec<Problem>,
    base: PathBuf,
}

impl Compiler {
    fn error(
        &mut self,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
        hint: impl Into<Option<String>>,
    ) {
        self.problems.push(Problem {
            span,
            message: message.into(),
            hint: hint.into(),
        });
    }

    fn config(&mut self, path: &Path, raw: RawConfig) -> Option<Config> {
        let server = self.server(raw.server);
        let store = self.store(raw.store);
        let defined = Defined {
            upstreams: raw.upstreams.keys().cloned().collect(),
            policies: raw.policies.keys().cloned().collect(),
        };
        for (kind, name, span) in raw
            .policies
            .iter()
            .map(|(n, p)| ("policy", n, p.span()))
            .chain(raw.upstreams.iter().map(|(n, u)| ("upstream", n, u.span())))
            .chain(
                raw.routes
                    .iter()
                    .map(|r| ("route", r.get_ref().name.get_ref(), r.get_ref().name.span())),
            )
        {
            if !valid_name(name) {
                self.error(span, format!("{kind} name `{name}` has characters that cannot go into headers, JSON and metric labels unescaped"), Some("use letters, digits and _ . : - only".to_owned()));
            }
        }
        let upstreams: BTreeMap<String, Arc<Upstream>> = raw
            .upstreams
            .into_iter()
            .filter_map(|(name, u)| Some((name.clone(), Arc::new(self.upstream(name, u)?))))
            .collect();
        let raw_policy_spans: BTreeMap<String, std::ops::Range<usize>> = raw
            .policies
            .iter()
            .map(|(name, p)| (name.clone(), p.span()))
            .collect();
        let policies: BTreeMap<String, Arc<Policy>> = raw
            .policies
            .into_iter()
            .filter_map(|(name, p)| Some((name.clone(), Arc::new(self.policy(name, p)?))))
            .collect();
        let mut names = HashSet::new();
        let mut routes = Vec::new();
        for (index, r) in raw.routes.into_iter().enumerate() {
            if !names.insert(r.get_ref().name.get_ref().clone()) {
                let name = &r.get_ref().name;
                self.error(
                    name.span(),
                    format!("duplicate route name `{}`", name.get_ref()),
                    Some("give every [[routes]] entry its own name".to_owned()),
                );
            }
            if let Some(route) = self.route(r, &upstreams, &policies, &defined) {
                routes.push((index, route));
            }
        }
        routes.sort_by_key(|(index, r)| {
            (
                std::cmp::Reverse(r.path.len()),
                r.host.is_none(),
                r.methods.is_none(),
                *index,
            )
        });
        if let (Some(store), true) = (&store, !policies.is_empty()) {
            if matches!(store.backend, Backend::Redis { .. }) {
                self.redis_limits(&policies, &raw_policy_spans);
            }
        }
        Some(Config {
            path: path.to_owned(),
            server: server?,
            store: store?,
            upstreams: upstreams.into_values().collect(),
            policies: policies.into_values().collect(),
            routes: routes.into_iter().map(|(_, r)| Arc::new(r)).collect(),
        })
    }

    /// The Redis script keeps debts in doubles: τ + max_delay must stay below 2^52 ns.
    fn redis_limits(
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

    fn server(&mut self, raw: S<RawServer>) -> Option<Server> {
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
        let workers = self.count_or(
            &raw.workers,
            crate::workers::default_count() as u64,
            "workers",
        );
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
        Some(Server {
            listen: listen?,
            admin_listen: admin_listen.flatten(),
            trusted_proxies: TrustedProxies::new(nets),
            tls,
            header_read_timeout: header_read_timeout?,
            max_connections: usize::try_from(max_connections?).ok()?,
            max_header_bytes: usize::try_from(max_header_bytes?).ok()?,
            drain_timeout: drain_timeout?,
            access_log: raw.access_log.unwrap_or(true),
            workers: usize::try_from(workers?).ok()?,
        })
    }

    fn store(&mut self, raw: Option<S<RawStore>>) -> Option<StoreSettings> {
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

    fn upstream(&mut self, name: String, raw: S<RawUpstream>) -> Option<Upstream> {
        let raw = raw.into_inner();
        if raw.targets.get_ref().is_empty() {
            self.error(
                raw.targets.span(),
                format!("upstream `{name}` has no targets"),
                Some("add targets = [\"http://127.0.0.1:3000\"]".to_owned()),
            );
        }
        let mut targets = Vec::new();
        for t in raw.targets.get_ref() {
            match parse_target(t.get_ref()) {
                Ok(target) => targets.push(target),
                Err(why) => self.error(
                    t.span(),
                    format!("bad upstream target `{}`: {why}", t.get_ref()),
                    Some(
                        "write it as http://host:port or https://host:port, without a path"
                            .to_owned(),
                    ),
                ),
            }
        }
        if let Some(sni) = &raw.sni {
            if rustls::pki_types::ServerName::try_from(sni.get_ref().as_str()).is_err() {
                self.error(
                    sni.span(),
                    format!("`{}` is not a valid TLS server name", sni.get_ref()),
                    Some("write a DNS name such as \"api.internal\"".to_owned()),
                );
            }
        }
        let ca = raw.ca.as_ref().map(|c| self.base.join(c.get_ref()));
        let tls = match crate::tls::upstream_client_config(ca.as_deref()) {
            Ok(tls) => Some(tls),
            Err(e) => {
                let span = raw.ca.as_ref().map_or(raw.targets.span(), S::span);
                self.error(
                    span,
                    format!("upstream `{name}`: {e}"),
                    Some("ca must be a PEM file of CA certificates".to_owned()),
                );
                None
            }
        };
        let connect_timeout =
            self.duration_or(&raw.connect_timeout, DEFAULT_CONNECT_TIMEOUT, false);
        let timeout = self.duration_or(&raw.timeout, DEFAULT_UPSTREAM_TIMEOUT, false);
        (!targets.is_empty() && targets.len() == raw.targets.get_ref().len()).then_some(())?;
        Some(Upstream {
            name,
            targets,
            connect_timeout: connect_timeout?,
            timeout: timeout?,
            ca,
            sni: raw.sni.map(|s| s.into_inner()),
            tls: tls.as_ref()?.0.clone(),
            ca_certs: tls?.1,
        })
    }

    fn policy(&mut self, name: String, raw: S<RawPolicy>) -> Option<Policy> {
        let raw = raw.into_inner();
        let mut key = Vec::new();
        let sources = raw.key.get_ref().to_vec();
        if sources.is_empty() {
            self.error(
                raw.key.span(),
                format!("policy `{name}` has an empty key"),
                Some("name at least one source, e.g. key = \"ip\"".to_owned()),
            );
        }
        for s in &sources {
            match s.parse::<KeySource>() {
                Ok(src) => key.push(src),
                Err(e) => self.error(raw.key.span(), e.to_string(), Some("sources: ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, route, method, path".to_owned())),
            }
        }
        let period = self.duration(&raw.period, false);
        let limit = self.positive(&raw.limit, "limit");
        let burst = self.positive(&raw.burst, "burst");
        let quota = self.quota(limit, period, burst, raw.limit.span());
        let missing = self.choice(
            &raw.missing,
            &[
                ("shared", Missing::Shared),
                ("skip", Missing::Skip),
                ("reject", Missing::Reject),
            ],
            Missing::Shared,
            "missing",
        );
        let mode = self.choice(
            &raw.mode,
            &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
            Mode::Enforce,
            "mode",
        );
        let max_delay = self.duration_or(&raw.max_delay, Duration::ZERO, true);
        let mut overrides = HashMap::new();
        if !raw.overrides.is_empty() && sources.len() != 1 {
            self.error(
                raw.key.span(),
                format!("policy `{name}` has overrides but a composed key"),
                Some("overrides apply to single-source keys only".to_owned()),
            );
        }
        for (key_text, o) in raw.overrides {
            let span = o.span();
            let o = o.into_inner();
            let limit = o
                .limit
                .as_ref()
                .map_or(limit, |l| self.positive(l, "limit"));
            let burst = o
                .burst
                .as_ref()
                .map_or(burst, |b| self.positive(b, "burst"));
            let period = o
                .period
                .as_ref()
                .map_or(period, |p| self.duration(p, false));
            if let Some(q) = self.quota(limit, period, burst, span) {
                overrides.insert(key_text, q);
            }
        }
        let quota = quota?;
        Some(Policy {
            headers: crate::proxy::response::PolicyHeaders::new(&name, &quota),
            name,
            key,
            limit: limit?,
            period: period?,
            quota,
            missing: missing?,
            mode: mode?,
            max_delay: max_delay?,
            overrides,
        })
    }

    fn quota(
        &mut self,
        limit: Option<u64>,
        period: Option<Duration>,
        burst: Option<u64>,
        span: std::ops::Range<usize>,
    ) -> Option<Quota> {
        let period_ns = u64::try_from(period?.as_nanos()).unwrap_or(u64::MAX);
        match Quota::new(limit?, period_ns, burst?) {
            Ok(q) => Some(q),
            Err(e) => {
                let hint = match e {
                    crate::limit::QuotaError::IntervalTooSmall => {
                        "raise period or lower limit so that period / limit is at least 1 ns"
                    }
                    crate::limit::QuotaError::ToleranceOverflow => {
                        "burst × period / limit must stay below about 584 years"
                    }
                    _ => "limit and burst must be at least 1",
                };
                self.error(span, e.to_string(), Some(hint.to_owned()));
                None
            }
        }
    }

    fn route(
        &mut self,
        raw: S<RawRoute>,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
    ) -> Option<Route> {
        let raw = raw.into_inner();
        let name = raw.name.get_ref().clone();
        if name.is_empty() {
            self.error(
                raw.name.span(),
                "route name is empty",
                Some("name it, e.g. name = \"search\"; names label metrics and logs".to_owned()),
            );
        }
        let path = raw.path.get_ref().clone();
        if !path.starts_with('/') {
            self.error(
                raw.path.span(),
                format!("route path `{path}` must start with `/`"),
                Some(format!(
                    "write path = \"/{}\"",
                    path.trim_start_matches('/')
                )),
            );
        }
        let upstream = match upstreams.get(raw.upstream.get_ref()) {
            Some(u) => Some((
                u.clone(),
                upstreams
                    .keys()
                    .position(|k| k == raw.upstream.get_ref())
                    .unwrap_or(0),
            )),
            // Defined but invalid: its own errors are already reported.
            None if defined.upstreams.contains(raw.upstream.get_ref()) => None,
            None => {
                let hint = suggest(raw.upstream.get_ref(), upstreams.keys(), "[upstreams.");
                self.error(
                    raw.upstream.span(),
                    format!(
                        "route `{name}` names unknown upstream `{}`",
                        raw.upstream.get_ref()
                    ),
                    hint,
                );
                None
            }
        };
        let cost = match &raw.cost {
            Some(c) => self.positive(c, "cost"),
            None => Some(1),
        };
        let mut tiers = Vec::new();
        let mut seen = HashSet::new();
        for p in &raw.policies {
            if !seen.insert(p.get_ref().as_str()) {
                self.error(
                    p.span(),
                    format!("policy `{}` is listed twice", p.get_ref()),
                    Some("a tier applies once; remove the repeat".to_owned()),
                );
                continue;
            }
            match policies.get(p.get_ref()) {
                Some(policy) => {
                    if let Some(cost) = cost {
                        let too_small = std::iter::once(policy.quota.burst())
                            .chain(policy.overrides.values().map(Quota::burst))
                            .any(|b| cost > b);
                        if too_small {
                            let span = raw.cost.as_ref().map_or(p.span(), S::span);
                            self.error(span, format!("cost {cost} of route `{name}` exceeds the burst of policy `{}` (or one of its overrides)", p.get_ref()), Some("such a request could never be admitted: lower cost or raise burst".to_owned()));
                        }
                    }
                    tiers.push(policy.clone());
                }
                None if defined.policies.contains(p.get_ref()) => {}
                None => {
                    let hint = suggest(p.get_ref(), policies.keys(), "[policies.");
                    self.error(
                        p.span(),
                        format!("route `{name}` names unknown policy `{}`", p.get_ref()),
                        hint,
                    );
                }
            }
        }
        if raw.policies.len() > MAX_TIERS {
            self.error(
                raw.name.span(),
                format!(
                    "route `{name}` has {} tiers; at most {MAX_TIERS} are allowed",
                    raw.policies.len()
                ),
                Some("merge tiers or split the route".to_owned()),
            );
        }
        if let Some(h) = &raw.host {
            let text = h.get_ref();
            if text.is_empty()
                || text.contains(['/', ' '])
                || text
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                    && !text.ends_with(']')
            {
                self.error(h.span(), format!("route host `{text}` can never match"), Some("write the bare host name without port or scheme, e.g. host = \"api.example.com\" (the request's port is ignored)".to_owned()));
            }
        }
        if let Some(ms) = &raw.methods {
            if ms.is_empty() {
                self.error(
                    raw.name.span(),
                    format!("route `{name}` has methods = [], which matches nothing"),
                    Some("remove `methods` to match every method".to_owned()),
                );
            }
        }
        let host = raw.host.as_ref().map(|h| h.get_ref().to_ascii_lowercase());
        let methods = raw.methods.as_ref().map(|ms| {
            ms.iter()
                .filter_map(|m| {
                    match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                        Ok(method) => Some(method),
                        Err(_) => {
                            self.error(
                                m.span(),
                                format!("`{}` is not an HTTP method", m.get_ref()),
                                Some("write methods = [\"GET\", \"POST\"]".to_owned()),
                            );
                            None
                        }
                    }
                })
                .collect()
        });
        let max_body = match &raw.max_body {
            Some(b) => Some(self.positive(b, "max_body")?),
            None => None,
        };
        Some(Route {
            name,
            path,
            host,
            methods,
            upstream: upstream.clone()?.0,
            upstream_index: upstream?.1,
            policies: tiers,
            cost: cost?,
            max_body,
        })
    }

    fn socket_addr(&mut self, raw: &S<String>) -> Option<SocketAddr> {
        match raw.get_ref().parse() {
            Ok(a) => Some(a),
            Err(_) => {
                self.error(
                    raw.span(),
                    format!("`{}` is not a socket address", raw.get_ref()),
                    Some("write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::]:8080\"".to_owned()),
                );
                None
            }
        }
    }

    fn duration(&mut self, raw: &S<String>, zero_ok: bool) -> Option<Duration> {
        match humantime::parse_duration(raw.get_ref().trim()) {
            Ok(d) if zero_ok || !d.is_zero() => Some(d),
            Ok(_) => {
                self.error(
                    raw.span(),
                    "duration must be greater than zero",
                    Some("write e.g. \"1s\"".to_owned()),
                );
                None
            }
            Err(e) => {
                self.error(
                    raw.span(),
                    format!("`{}` is not a duration: {e}", raw.get_ref()),
                    Some(
                        "use a number and a unit: \"250ms\", \"1s\", \"5m\", \"1h\", \"1d\""
                            .to_owned(),
                    ),
                );
                None
            }
        }
    }

    fn duration_or(
        &mut self,
        raw: &Option<S<String>>,
        default: Duration,
        zero_ok: bool,
    ) -> Option<Duration> {
        raw.as_ref()
            .map_or(Some(default), |r| self.duration(r, zero_ok))
    }

    fn positive(&mut self, raw: &S<i64>, what: &str) -> Option<u64> {
        match u64::try_from(*raw.get_ref()) {
            Ok(v) if v > 0 => Some(v),
            _ => {
                self.error(
                    raw.span(),
                    format!(
                        "{what} must be a whole number of at least 1, not {}",
                        raw.get_ref()
                    ),
                    Some(format!("write {what} = 1 or more, without quotes")),
                );
                None
            }
        }
    }

    fn count_or(&mut self, raw: &Option<S<i64>>, default: u64, what: &str) -> Option<u64> {
        raw.as_ref()
            .map_or(Some(default), |r| self.positive(r, what))
    }

    fn choice<T: Copy>(
        &mut self,
        raw: &Option<S<String>>,
        options: &[(&str, T)],
        default: T,
        what: &str,
    ) -> Option<T> {
        let Some(raw) = raw else { return Some(default) };
        match options.iter().find(|(name, _)| *name == raw.get_ref()) {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
                self.error(
                    raw.span(),
                    format!("unknown {what} `{}`", raw.get_ref()),
                    Some(format!("use one of {}", names.join(", "))),
                );
                None
            }
        }
    }
}

/// Names appear in headers (`RateLimit-Policy: "name"`), JSON bodies and metric labels.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

fn parse_target(text: &str) -> Result<Target, String> {
    let uri: Uri = text.parse().map_err(|e| format!("{e}"))?;
    let scheme = uri.scheme().cloned().ok_or("no scheme")?;
    if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
        return Err(format!("scheme `{scheme}` is not http or https"));
    }
    let authority = uri.authority().cloned().ok_or("no host")?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("a path or query is not allowed".to_owned());
    }
    Ok(Target { scheme, authority })
}

/// "did you mean …" for a misspelt name.
fn suggest<'a>(name: &str, known: impl Iterator<Item = &'a String>, table: &str) -> Option<String> {
    let known: Vec<&String> = known.collect();
    let best = known
        .iter()
        .map(|k| (strsim::levenshtein(name, k), *k))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, k)) if d <= 3 => Some(format!("did you mean `{k}`?")),
        _ if known.is_empty() => Some(format!("define it in a {table}{name}] table")),
        _ => Some(format!(
            "known: {}",
            known
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

impl OneOrMany {
    pub fn is_empty(&self) -> bool {
        matches!(self, OneOrMany::Many(v) if v.is_empty())
    }
}
