//! A serde mirror of the TOML file. No logic: every value keeps its span so that
//! `compile` can point at the exact line and column of a mistake.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: S<RawServer>,
    #[serde(default)]
    pub store: Option<S<RawStore>>,
    #[serde(default)]
    pub upstreams: BTreeMap<String, S<RawUpstream>>,
    #[serde(default)]
    pub policies: BTreeMap<String, S<RawPolicy>>,
    #[serde(default)]
    pub routes: Vec<S<RawRoute>>,
    /// Envoy's rate limit service (RLS v3) on a listener of its own.
    pub rls: Option<S<RawRls>>,
    /// Envoy's quota service (RLQS), served on the `[rls]` listener.
    /// Not spanned: written only as `[[rlqs.buckets]]`, the table is implicit, and toml
    /// gives an implicit table no span.
    pub rlqs: Option<RawRlqs>,
    /// Spans of sampled requests, exported over OTLP.
    pub telemetry: Option<S<RawTelemetry>>,
    /// Price tables: `model`, `default` and one row per model name, read in `compile`.
    #[serde(default)]
    pub prices: BTreeMap<String, S<BTreeMap<String, S<toml::Value>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: S<String>,
    pub admin_listen: Option<S<String>>,
    #[serde(default)]
    pub trusted_proxies: Vec<S<String>>,
    pub tls: Option<S<RawTls>>,
    pub header_read_timeout: Option<S<String>>,
    pub max_connections: Option<S<i64>>,
    pub max_header_bytes: Option<S<i64>>,
    pub drain_timeout: Option<S<String>>,
    pub access_log: Option<S<BoolOrText>>,
    pub access_log_rate: Option<S<i64>>,
    pub log_keys: Option<S<String>>,
    pub top_keys: Option<bool>,
    pub top_window: Option<S<String>>,
    pub watch_config: Option<bool>,
    pub workers: Option<S<i64>>,
    pub body_read_timeout: Option<S<String>>,
    pub normalize_path: Option<bool>,
    pub merge_slashes: Option<bool>,
    pub escaped_slashes: Option<S<String>>,
    pub allow_backslash: Option<bool>,
    pub ignore_path_case: Option<bool>,
    pub send_timeout: Option<S<String>>,
    pub idle_timeout: Option<S<String>>,
    pub tunnel_idle_timeout: Option<S<String>>,
    pub max_streams: Option<S<i64>>,
    /// Requests parked or in flight, the whole gateway.
    pub max_requests: Option<S<i64>>,
    /// The most of a request body read for `json:` keys and quotes, and what all such
    /// buffers may hold at once, the whole gateway.
    pub max_key_body: Option<S<i64>>,
    pub max_key_body_memory: Option<S<i64>>,
    /// Bearer token every `/admin/*` request must present (or a file holding it).
    pub admin_token: Option<S<String>>,
    pub admin_token_file: Option<S<String>>,
    /// Where runtime overrides (`PUT /admin/overrides/…`) are kept across restarts.
    pub overrides_file: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: S<String>,
    pub key: S<String>,
    /// More certificates, chosen by the client's SNI.
    #[serde(default)]
    pub sni: Vec<S<RawSniCert>>,
    /// Mutual TLS: only clients with a certificate these CAs signed.
    pub client_ca: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSniCert {
    pub names: Vec<S<String>>,
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<S<String>>,
    pub url: Option<S<OneOrMany>>,
    pub timeout: Option<S<String>>,
    pub on_error: Option<S<String>>,
    pub max_keys: Option<S<i64>>,
    /// Redis Sentinel: the Sentinels' URLs and the master's name.
    pub sentinels: Option<S<Vec<String>>>,
    pub master: Option<S<String>>,
    /// The fleet's secret Redis key names are keyed with.
    pub key_secret: Option<S<String>>,
    pub key_secret_file: Option<S<String>>,
    /// Gateways in the fleet, for `on_error = "local"`'s share (else counted in Redis).
    pub fleet_size: Option<S<i64>>,
    /// Replicas that must acknowledge each admission (`WAIT`).
    pub replica_ack: Option<S<i64>>,
    /// The memory backend's state across restarts, and how often it is written.
    pub state_file: Option<S<String>>,
    pub state_interval: Option<S<String>>,
}

/// A value written either as a boolean or as a word (`access_log = "refused"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum BoolOrText {
    Bool(bool),
    Text(String),
}

/// A number, or a string naming where the number comes from (`reserve = "price:llm"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum IntOrText {
    Int(i64),
    Text(String),
}

/// A value written either as one string or as a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub targets: S<Vec<S<String>>>,
    /// PEM CA bundle that `https://` targets must chain to (instead of the web roots).
    pub ca: Option<S<String>>,
    /// Server name to send and verify instead of the target's host.
    pub sni: Option<S<String>>,
    pub connect_timeout: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub max_connections: Option<S<i64>>,
    /// Idle connections kept per target, per worker.
    pub max_idle: Option<S<i64>>,
    pub idle_timeout: Option<S<String>>,
    /// "http1" (default), "h2c" or "h2".
    pub protocol: Option<S<String>>,
    /// HTTP/2 streams per upstream connection before another is opened.
    pub max_streams: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub key: S<OneOrMany>,
    /// Rate policies: `limit` per `period`, `burst` at once.
    pub limit: Option<S<i64>>,
    pub period: Option<S<String>>,
    pub burst: Option<S<i64>>,
    /// Concurrency policies: requests in flight at once, instead of limit/period/burst.
    pub max_in_flight: Option<S<i64>>,
    pub retry_after: Option<S<String>>,
    pub lease_ttl: Option<S<String>>,
    pub missing: Option<S<String>>,
    pub mode: Option<S<String>>,
    pub max_delay: Option<S<String>>,
    /// Rate policies whose cost is known after the response: where to read it, what to
    /// charge at admission, a cap, and the unit measured bytes are divided by.
    pub settle: Option<S<String>>,
    pub reserve: Option<S<IntOrText>>,
    pub max_cost: Option<S<i64>>,
    pub settle_unit: Option<S<i64>>,
    pub refund_on_upstream_error: Option<S<bool>>,
    /// The least a settled request is charged, and (bytes) how far beyond its burst a
    /// key's transfers may run.
    pub min_cost: Option<S<i64>>,
    pub max_debt: Option<S<i64>>,
    /// Rate policies with Redis: `"exact"` (every decision in Redis) or `"lease"`.
    pub sync: Option<S<String>>,
    /// Calendar quotas: units per `window` (day, week, month) of `timezone`, starting on
    /// `anchor` (a day of the month, or a weekday).
    pub quota: Option<S<i64>>,
    pub window: Option<S<String>>,
    pub timezone: Option<S<String>>,
    pub anchor: Option<S<toml::Value>>,
    #[serde(default)]
    pub overrides: BTreeMap<String, S<RawOverride>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOverride {
    pub limit: Option<S<i64>>,
    pub period: Option<S<String>>,
    pub burst: Option<S<i64>>,
    pub max_in_flight: Option<S<i64>>,
    pub quota: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: S<String>,
    pub path: S<String>,
    pub host: Option<S<String>>,
    pub methods: Option<Vec<S<String>>>,
    pub upstream: S<String>,
    #[serde(default)]
    pub policies: Vec<S<String>>,
    pub cost: Option<S<i64>>,
    pub max_body: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRls {
    pub listen: S<String>,
    pub tls: Option<S<RawTls>>,
    /// A descriptor no rule names: "ok" (not counted) or "over_limit".
    pub on_unmatched: Option<S<String>>,
    /// envoyproxy/ratelimit's YAML: a file, or a folder of them.
    pub ratelimit_config: Option<S<String>>,
    /// The body Envoy's 429 carries (`raw_body`): none, the contract's JSON, or RFC 9457.
    pub refusal_body: Option<S<String>>,
    /// Quota (RLQS) streams open at once on the listener.
    pub max_quota_streams: Option<S<i64>>,
    /// Quota buckets tracked at once, every stream's together.
    pub max_quota_buckets: Option<S<i64>>,
    #[serde(default)]
    pub rules: Vec<S<RawRlsRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRlsRule {
    pub domain: S<String>,
    /// Entry keys in order; an entry written `{ key = "value" }` pins its value.
    pub descriptor: S<Vec<RawRlsEntry>>,
    pub policy: S<String>,
    /// A non-zero `hits_addend` is usage already spent (Envoy's `apply_on_stream_done`
    /// report): charged even over the limit. 0 still checks.
    pub reports: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub otlp_endpoint: S<String>,
    /// "grpc" or "http/protobuf"; by default from the port (4318: HTTP, else gRPC).
    pub otlp_protocol: Option<S<String>>,
    pub sample_ratio: Option<S<f64>>,
    /// Sampled requests a second at most, whoever asked for them.
    pub max_sampled_per_second: Option<S<i64>>,
    pub service_name: Option<S<String>>,
    #[serde(default)]
    pub resource: BTreeMap<String, S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRlqs {
    #[serde(default)]
    pub buckets: Vec<S<RawRlqsBucket>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRlqsBucket {
    pub domain: S<String>,
    /// Bucket id keys in order; a key written `{ key = "value" }` pins its value.
    pub bucket: S<Vec<RawRlsEntry>>,
    pub policy: S<String>,
    pub assignment_ttl: Option<S<String>>,
}

/// One descriptor entry of a rule: a key (any value) or a key with its pinned value.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawRlsEntry {
    Key(String),
    Pinned(BTreeMap<String, String>),
}
