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

mod hints;
mod logging;
mod names;
mod override_keys;
mod policies;
mod policy_lints;
mod prices;
mod quotas;
pub mod ratelimit_yaml;
mod redis_bounds;
mod rlqs;
mod rls;
mod routes;
pub mod runtime;
mod server;
pub use server::MAX_PERMITS;
mod server_tls;
mod settle;
mod store;
mod telemetry;
mod upstreams;
mod values;
use super::admin_token::AdminToken;
use super::model::*;
use super::policy::*;
use super::prices::Prices;
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
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_TUNNEL_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_MAX_STREAMS: u32 = 100;
/// Requests parked or in flight at once, the whole gateway: at a few KiB each (a parked
/// request holds about 8 KiB), 20,000 of them stay within a couple of hundred MiB.
pub const DEFAULT_MAX_REQUESTS: usize = 20_000;
/// The most of a request body read for `json:` keys and price quotes, by default and at
/// most, and what all such buffers may hold at once (the whole gateway) by default.
pub const DEFAULT_MAX_KEY_BODY: usize = 64 * 1024;
pub const MAX_KEY_BODY: usize = 16 * 1024 * 1024;
pub const DEFAULT_MAX_KEY_BODY_MEMORY: usize = 64 * 1024 * 1024;
/// Admin connections open at once; beyond it, the admin listener pauses accepting.
pub const ADMIN_MAX_CONNECTIONS: usize = 512;
/// Connections to one upstream per gateway, in use and idle.
pub const DEFAULT_UPSTREAM_MAX_CONNECTIONS: usize = 1024;
/// Idle upstream connections kept per target and worker, and for how long.
pub const DEFAULT_UPSTREAM_MAX_IDLE: usize = 256;
pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// HTTP/2 upstreams: streams per connection before another opens — the concurrency RFC
/// 9113 §6.5.2 recommends a server allow at least.
pub const DEFAULT_UPSTREAM_MAX_STREAMS: usize = 100;
/// Concurrency policies: the `Retry-After` of a refusal, and how long a dead gateway's
/// Redis slot stays taken.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(1);

/// Reads and compiles the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = crate::read_file::read_text_bounded(path).map_err(|source| ConfigError::Read {
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
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim().to_owned();
        let hint = hints::parse_hint(&message);
        let message = match text.get(span.clone()).and_then(table_named) {
            Some(table) if message.starts_with("missing field") => format!("{table}: {message}"),
            _ => message,
        };
        invalid(vec![Problem {
            span,
            hint,
            message,
        }])
    })?;
    let base = path.parent().map(Path::to_owned).unwrap_or_default();
    let mut c = Compiler {
        problems: Vec::new(),
        warnings: Vec::new(),
        base,
        routed: HashSet::new(),
        prices: BTreeMap::new(),
    };
    let config = c.config(path, raw);
    match config {
        Some(mut config) if c.problems.is_empty() => {
            config.warnings = locate(text, c.warnings)
                .into_iter()
                .map(|w| {
                    let hint = w
                        .hint
                        .map(|h| format!("\n    hint: {h}"))
                        .unwrap_or_default();
                    format!(
                        "{}:{}:{}: warning: {}{hint}",
                        path.display(),
                        w.line,
                        w.column,
                        w.message
                    )
                })
                .collect();
            Ok(config)
        }
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
    warnings: Vec<Problem>,
    base: PathBuf,
    /// The policies some route names: what only proxied requests do (a missing key)
    /// is said of these alone.
    routed: HashSet<String>,
    /// `[prices.NAME]`, compiled before the policies that name them.
    prices: BTreeMap<String, Arc<Prices>>,
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

    /// Valid, but likely not what the author meant: reported, never refused.
    fn warn(
        &mut self,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
        hint: impl Into<Option<String>>,
    ) {
        self.warnings.push(Problem {
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
        self.check_names(&raw.policies, &raw.upstreams, &raw.routes);
        self.routed = raw
            .routes
            .iter()
            .flat_map(|r| r.get_ref().policies.iter().map(|p| p.get_ref().clone()))
            .collect();
        let upstreams: BTreeMap<String, Arc<Upstream>> = raw
            .upstreams
            .into_iter()
            .filter_map(|(name, u)| Some((name.clone(), Arc::new(self.upstream(name, u)?))))
            .collect();
        let mut raw_policy_spans: BTreeMap<String, std::ops::Range<usize>> = raw
            .policies
            .iter()
            .map(|(name, p)| (name.clone(), p.span()))
            .collect();
        self.prices = raw
            .prices
            .into_iter()
            .filter_map(|(name, p)| Some((name.clone(), Arc::new(self.price_table(name, p)?))))
            .collect();
        let mut policies: BTreeMap<String, Arc<Policy>> = raw
            .policies
            .into_iter()
            .filter_map(|(name, p)| Some((name.clone(), Arc::new(self.policy(name, p)?))))
            .collect();
        let paths = server.as_ref().map(|s| (s.paths, s.max_key_body));
        let routes = self.routes(raw.routes, &upstreams, &policies, &defined, paths);
        let data_plane = server.as_ref().map(|s| s.listen);
        let has_rls = raw.rls.is_some();
        let buckets = raw
            .rlqs
            .map(|r| self.rlqs(r, has_rls, (&policies, &defined)))
            .unwrap_or_default();
        let (rls, yaml_policies) = match raw.rls {
            Some(r) => {
                let (mut rls, from_yaml, span) = self.rls(r, &policies, &defined, data_plane)?;
                let (all, spans) = (&mut policies, &mut raw_policy_spans);
                let yaml = Self::add_yaml_policies((from_yaml, span), all, spans);
                rls.buckets = buckets;
                (Some(rls), yaml)
            }
            None => (None, HashSet::new()),
        };
        if let (Some(store), true) = (&store, !policies.is_empty()) {
            let named = (&routes[..], rls.as_ref());
            let spans = (&raw_policy_spans, &yaml_policies);
            self.check_store_holds(store, &policies, named, spans);
        }
        let telemetry = match &raw.telemetry {
            Some(t) => Some(self.telemetry(t)?),
            None => None,
        };
        let route_index =
            crate::config::route_index::RouteIndex::new(routes.iter().map(|r| r.path.as_str()));
        let key_headers = crate::key::KeyHeaders::of(policies.values().flat_map(|p| &p.key));
        Some(Config {
            route_index,
            key_headers,
            path: path.to_owned(),
            server: server?,
            store: store?,
            upstreams: upstreams.into_values().collect(),
            policies: policies.into_values().collect(),
            routes,
            rls,
            telemetry,
            prices: self.prices.values().cloned().collect(),
            warnings: Vec::new(),
        })
    }

    /// The routes, each named once, in match order: longest path first, then
    /// host-specific, then method-specific, then as written.
    fn routes(
        &mut self,
        raw: Vec<S<RawRoute>>,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
        paths: Option<(crate::request::path::PathRules, usize)>,
    ) -> Vec<Arc<Route>> {
        let mut names = HashSet::new();
        let mut routes = Vec::new();
        for (index, r) in raw.into_iter().enumerate() {
            if !names.insert(r.get_ref().name.get_ref().clone()) {
                let name = &r.get_ref().name;
                self.error(
                    name.span(),
                    format!("duplicate route name `{}`", name.get_ref()),
                    Some("give every [[routes]] entry its own name".to_owned()),
                );
            }
            if let Some(route) = self.route(r, upstreams, policies, defined, paths) {
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
        routes.into_iter().map(|(_, r)| Arc::new(r)).collect()
    }

    /// What the backend cannot keep: debts too long for Redis, or leases without Redis;
    /// keys a client can invent held for hours (`named`: the routes and rules that name
    /// the policies).
    fn check_store_holds(
        &mut self,
        store: &StoreSettings,
        policies: &BTreeMap<String, Arc<Policy>>,
        (routes, rls): (&[Arc<Route>], Option<&Rls>),
        (spans, yaml): (&BTreeMap<String, std::ops::Range<usize>>, &HashSet<String>),
    ) {
        if matches!(store.backend, Backend::Redis { .. }) {
            self.redis_limits(policies, (spans, yaml));
            self.lint_held(policies, (routes, rls), spans, true);
            return;
        }
        self.lint_held(policies, (routes, rls), spans, false);
        if store.state_file.is_none() {
            let quota = policies.iter().find(|(_, p)| p.kind() == LimitKind::Quota);
            if let Some((name, _)) = quota {
                self.warn(
                    spans.get(name).cloned().unwrap_or(0..0),
                    format!("policy `{name}` is a calendar quota on the memory backend without a state_file: a restart forgets every key's usage this window"),
                    Some("add [store] state_file = \"/var/lib/tollgate/state\" (or use backend = \"redis\")".to_owned()),
                );
            }
        }
        for (name, p) in policies {
            let quota = p.kind() == LimitKind::Quota;
            if let Some(source) = p.key.iter().find(|s| s.client_chosen()).filter(|_| quota) {
                self.warn(
                    spans.get(name).cloned().unwrap_or(0..0),
                    format!("policy `{name}` is a calendar quota keyed on `{source}`, a value clients choose: on the memory backend each invented value holds a key until the window ends, and once the policy's share of max_keys is full its new keys start at the usage of the least-used keys dropped to make room"),
                    Some("key the quota on a value the gateway can trust (an authenticated API key checked before tollgate, jwt only behind a verifier), size max_keys for your real customers (docs/algorithm.md § quota keys), or use backend = \"redis\"".to_owned()),
                );
            }
            if p.rate().is_some_and(|r| r.sync == Sync::Lease) {
                self.error(
                    spans.get(name).cloned().unwrap_or(0..0),
                    format!("policy `{name}`: sync = \"lease\" needs the redis backend"),
                    Some("leases share a limit among gateways through Redis; with the memory backend every decision is already local".to_owned()),
                );
            }
        }
    }
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

/// Which table the text of a TOML error's span is, in the config's words: "route
/// `search`" for a `[[routes]]` entry with that name, "[upstreams.api]" for a table.
fn table_named(spanned: &str) -> Option<String> {
    let mut lines = spanned.lines().map(str::trim);
    let header = lines.next()?;
    if header == "[[routes]]" {
        let name = lines.find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches(['"', '\'']).to_owned())
        });
        return Some(name.map_or_else(
            || "a [[routes]] entry".to_owned(),
            |n| format!("route `{n}`"),
        ));
    }
    (header.starts_with('[') && header.ends_with(']')).then(|| header.to_owned())
}
