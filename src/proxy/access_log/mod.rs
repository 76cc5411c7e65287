//! The access log: one line per request (target `tollgate::access`), from what the
//! request path noted along the way, and the shadow tiers' lines. Bounded:
//! `access_log = "refused"` writes only the requests not admitted, and each worker writes
//! at most its share of `access_log_rate` lines a second (a per-thread budget, no shared
//! write), the rate limit service one more share (`budget`); the lines past it are
//! counted in `tollgate_access_log_dropped_total`, added once a budget refills. A line
//! shows a client's text cut and escaped (`escape`). So a flood costs the disk at most
//! `access_log_rate` lines a second of a bounded size.

mod budget;
mod escape;
mod tunnel;

use std::sync::OnceLock;

pub use budget::{has_line, per_worker, take_line, take_line_of, take_service_line, ServiceLines};
use escape::{Clipped, KeyPart, MAX_ID_BYTES, MAX_METHOD_BYTES};
pub use tunnel::{write_tunnel, TunnelClosed, TunnelOpened};

use crate::clip::MAX_PATH_BYTES;
use crate::config::{AccessLog, Config, LogKeys, Policy};
use crate::conn::ConnInfo;
use crate::key::fleet::{FleetKey, KeySecret};
use crate::key::RequestView;
use crate::metrics::Metrics;
use crate::proxy::response::Answer;
use crate::reply::ceil_millis;

/// What the access log line and the response counters need, filled in along the way.
pub struct Trace {
    pub route: Option<usize>,
    pub client: Option<std::net::IpAddr>,
    /// Why the request ended as it did (its `decision` word, its gRPC rendering).
    pub answer: Answer,
    /// The deciding policy's position in the route.
    pub policy: Option<usize>,
    pub wait_ns: u64,
    /// The normalised target, kept only when an access log line will be written.
    /// Boxed: most requests never take one, and the trace moves with the request.
    pub normalized: Option<Box<http::Uri>>,
    /// A refused request's key parts in the deciding policy, as `log_keys` writes them
    /// (taken only when a line will be written).
    pub key: Option<Vec<String>>,
    /// The gateway answered itself (refused, or the upstream failed): a gRPC call's answer
    /// is then rewritten as gRPC.
    pub by_gateway: bool,
    /// A sampled request's span, as it goes (`[telemetry]`); `None` for every other.
    pub span: Option<Box<crate::telemetry::span::SpanTrace>>,
}

impl Trace {
    pub fn new() -> Self {
        Self {
            route: None,
            client: None,
            answer: Answer::Unmatched,
            policy: None,
            wait_ns: 0,
            normalized: None,
            key: None,
            by_gateway: false,
            span: None,
        }
    }

    /// The request was refused by the policy at `position`, to wait `wait_ns`.
    pub fn refused(&mut self, answer: Answer, position: usize, wait_ns: u64) {
        self.answer = answer;
        self.policy = Some(position);
        self.wait_ns = wait_ns;
    }
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

/// What a request's line says of its head, taken before the request moves on: cheap
/// clones (reference-counted) and the clock reading it started at.
pub struct Head {
    pub method: http::Method,
    pub uri: http::Uri,
    pub started: u64,
    /// The client's `x-request-id` (passed upstream like any header), to name the line.
    pub request_id: Option<http::HeaderValue>,
}

/// The header a client (or a proxy before tollgate) names a request with.
pub static X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// The request id `value` as a line can show it: its text (`to_str`: visible ASCII and
/// spaces); `None` for one that is not, which the line names by an id the gateway makes.
/// The one rule for the access line, the tunnel's lines and the id a tunnel is named by.
pub fn shown_id(value: &http::HeaderValue) -> Option<&str> {
    value.to_str().ok()
}

/// A request id the gateway made for a request that carried none, before its access line
/// was written: a tunnel's, so its `101` line and its closing line share it. Carried on
/// the response.
#[derive(Debug, Clone)]
pub struct MadeRequestId(pub http::HeaderValue);

impl MadeRequestId {
    /// A fresh id, unique in this process.
    pub fn make() -> Self {
        let made = made_request_id();
        Self(http::HeaderValue::from_str(&made).unwrap_or(http::HeaderValue::from_static("-")))
    }
}

/// A line's request id when the client sent none: this process's prefix and a count, unique
/// per process and cheap (made only for a line that is written, or a tunnel's two).
fn made_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| crate::random::hex(&crate::random::bytes::<8>()));
    format!("{prefix}-{:x}", COUNT.fetch_add(1, Ordering::Relaxed))
}

/// The key parts `policy` takes from the request, as `log_keys` writes them: the text as
/// sent (the line escapes it), or a keyed hash of each part — under the fleet's secret
/// when there is one (the same hash on every gateway), else this process's.
pub fn key_parts(
    policy: &Policy,
    view: &RequestView<'_>,
    log_keys: LogKeys,
    fleet: Option<&FleetKey>,
) -> Vec<String> {
    let mut parts = Vec::new();
    for source in &policy.key {
        let Ok(values) = source.extract(view) else {
            // One token, as any part is (see `escape::KeyPart`).
            parts.push("(too-many-values)".to_owned());
            continue;
        };
        for value in values.iter() {
            parts.push(logged_part(&value.as_text(), log_keys, fleet));
        }
    }
    parts
}

/// One key part as `log_keys` writes it: as sent, or its keyed hash (see [`key_parts`]).
pub fn logged_part(text: &str, log_keys: LogKeys, fleet: Option<&FleetKey>) -> String {
    static OWN: OnceLock<FleetKey> = OnceLock::new();
    match log_keys {
        LogKeys::Clear => KeyPart(text).to_string(),
        LogKeys::Hash => {
            let key =
                fleet.unwrap_or_else(|| OWN.get_or_init(|| FleetKey::new(KeySecret::random())));
            key.field(text.as_bytes())
        }
    }
}

/// Writes the access log line of one answered request, unless its mode leaves it out or
/// this worker's budget for the second is spent.
pub fn write(
    (head, trace): (&Head, &Trace),
    config: &Config,
    metrics: &Metrics,
    conn: &ConnInfo,
    status: u16,
    now: u64,
) {
    if config.server.access_log == AccessLog::Refused && trace.answer.admitted() {
        return;
    }
    if !take_line(config, metrics, now) {
        return;
    }
    let route = trace.route.map(|i| &config.routes[i]);
    let policy = route
        .zip(trace.policy)
        .map(|(r, p)| r.policies[p].name.as_str());
    // JSON text, so the JSON log can carry the parts as a list (see `JsonLines`); the text
    // log shows the same `["part", …]`.
    let key = serde_json::to_string(trace.key.as_deref().unwrap_or(&[])).unwrap_or_default();
    let request_id = match head.request_id.as_ref().and_then(shown_id) {
        Some(id) => std::borrow::Cow::Borrowed(id),
        None => std::borrow::Cow::Owned(made_request_id()),
    };
    tracing::info!(
        target: "tollgate::access",
        request_id = %Clipped(&request_id, MAX_ID_BYTES),
        method = %Clipped(head.method.as_str(), MAX_METHOD_BYTES),
        path = %Clipped(trace.normalized.as_deref().unwrap_or(&head.uri).path(), MAX_PATH_BYTES),
        raw_path = %Clipped(head.uri.path(), MAX_PATH_BYTES),
        route = route.map_or("", |r| r.name.as_str()),
        client = %trace.client.unwrap_or(conn.peer.ip()),
        decision = trace.answer.decision(),
        policy = policy.unwrap_or(""),
        key = %key,
        wait_ms = ceil_millis(trace.wait_ns),
        status,
        elapsed_ms = now.saturating_sub(head.started) / 1_000_000,
    );
}

/// One line for each shadow tier that would have refused (`denials`: its position and
/// the wait it would have imposed), within `access_log_rate`: a client can make a shadow
/// tier refuse every request it sends, and past the budget its lines are counted as
/// dropped, as access lines are.
pub fn write_shadow(
    (config, metrics, now): (&Config, &Metrics, u64),
    route: &crate::config::Route,
    denials: impl Iterator<Item = (usize, u64)>,
    client: std::net::IpAddr,
) {
    for (position, wait_ns) in denials {
        // A wait no time ends (a cost above the key's burst) is told as none, as the
        // `cost_above_burst` refusal's line and the rate limit service tell it.
        let wait_ns = if wait_ns == u64::MAX { 0 } else { wait_ns };
        if take_line(config, metrics, now) {
            tracing::info!(target: "tollgate::shadow", route = %route.name, policy = %route.policies[position].name, client = %client, wait_ms = ceil_millis(wait_ns), "shadow tier would deny");
        }
    }
}
