//! A tunnel's line in the access log (target `tollgate::access`, with `front =
//! "tunnel"`), written when it closes: the request that opened it has its line at the
//! 101, before a byte went through, so this one says how it ended and what moved. Under
//! the same `access_log` mode (`"refused"`: only a tunnel a tier closed) and within the
//! worker's share of `access_log_rate`, as any line — both as they were when it opened.

use super::escape::{Clipped, MAX_ID_BYTES};
use super::take_line_of;
use crate::config::AccessLog;
use std::sync::Arc;

use crate::clock::Clock;
use crate::metrics::Metrics;

/// What a tunnel's line in the access log names of the request that opened it: the
/// request's own line was written at the 101, before a byte went through.
pub struct TunnelOpened {
    /// The access log's mode and this worker's share of `access_log_rate` as it opened
    /// (numbers, not the config: a tunnel may outlive many reloads).
    pub mode: AccessLog,
    pub lines_per_second: u64,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    pub route: Box<str>,
    pub client: std::net::IpAddr,
    /// The client's `x-request-id`, or the id made for the tunnel when it sent none a
    /// line can show: the 101's line shows it too.
    pub request_id: Option<http::HeaderValue>,
    /// The clock reading it opened at.
    pub at_ns: u64,
}

/// How a tunnel ended: why (the `result` of `tollgate_tunnels_closed_total`), the tier
/// that closed it, and the bytes each side sent into it.
pub struct TunnelClosed {
    pub result: &'static str,
    pub policy: Option<Arc<crate::config::Policy>>,
    pub from_client: u64,
    pub from_upstream: u64,
}

/// Writes the line of a tunnel that closed `closed`, unless the mode leaves it out or
/// this worker's budget for the second is spent.
pub fn write_tunnel(opened: &TunnelOpened, closed: &TunnelClosed) {
    let mode = opened.mode;
    if !mode.enabled() || (mode == AccessLog::Refused && closed.policy.is_none()) {
        return;
    }
    let now = opened.clock.now_ns();
    if !take_line_of(opened.lines_per_second, &opened.metrics, now) {
        return;
    }
    let request_id = opened.request_id.as_ref().and_then(super::shown_id);
    tracing::info!(
        target: "tollgate::access",
        front = "tunnel",
        request_id = %Clipped(request_id.unwrap_or(""), MAX_ID_BYTES),
        route = &*opened.route,
        client = %opened.client,
        result = closed.result,
        policy = closed.policy.as_ref().map_or("", |p| p.name.as_str()),
        bytes_from_client = closed.from_client,
        bytes_from_upstream = closed.from_upstream,
        elapsed_ms = now.saturating_sub(opened.at_ns) / 1_000_000,
    );
}
