//! The access log: one line per request (target `tollgate::access`), from what the
//! request path noted along the way.

use crate::conn::ConnInfo;
use crate::reply::ceil_millis;

/// What the access log line and the response counters need, filled in along the way.
pub struct Trace {
    pub route: Option<usize>,
    pub client: Option<std::net::IpAddr>,
    pub decision: &'static str,
    /// The deciding policy's position in the route.
    pub policy: Option<usize>,
    pub wait_ns: u64,
    /// The normalised target, kept only when an access log line will be written.
    pub normalized: Option<http::Uri>,
}

impl Trace {
    pub fn new() -> Self {
        Self {
            route: None,
            client: None,
            decision: "unmatched",
            policy: None,
            wait_ns: 0,
            normalized: None,
        }
    }

    /// The request was refused by the policy at `position`, to wait `wait_ns`.
    pub fn refused(&mut self, decision: &'static str, position: usize, wait_ns: u64) {
        self.decision = decision;
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
}

/// Writes the access log line of one answered request.
pub fn write(
    head: &Head,
    trace: &Trace,
    config: &crate::config::Config,
    conn: &ConnInfo,
    status: u16,
    now: u64,
) {
    let route = trace.route.map(|i| &config.routes[i]);
    let policy = route
        .zip(trace.policy)
        .map(|(r, p)| r.policies[p].name.as_str());
    tracing::info!(
        target: "tollgate::access",
        method = %head.method,
        path = %trace.normalized.as_ref().unwrap_or(&head.uri).path(),
        raw_path = %head.uri.path(),
        route = route.map_or("", |r| r.name.as_str()),
        client = %trace.client.unwrap_or(conn.peer.ip()),
        decision = trace.decision,
        policy = policy.unwrap_or(""),
        wait_ms = ceil_millis(trace.wait_ns),
        status,
        elapsed_ms = now.saturating_sub(head.started) / 1_000_000,
    );
}
