//! The rate limit service's line in the access log (target `tollgate::access`, with
//! `front = "rls"`): one per call, under the same `access_log` mode, per-thread budget of
//! `access_log_rate` and `log_keys` as a proxied request's line. A refused call names the
//! refusing descriptor, its limit and its key parts.

use std::net::SocketAddr;

use super::decide::{Decided, Matched};
use super::proto::RateLimitRequest;
use crate::config::{AccessLog, Config};
use crate::proxy::access_log::{logged_part, take_line};
use crate::proxy::snapshot::Shared;
use crate::reply::ceil_millis;

/// How a call ended, as its line says it.
pub struct Ended<'a> {
    /// `ok`, `over_limit`, `store_unavailable_allowed`, or the gRPC error's name.
    pub decision: &'static str,
    pub decided: Option<&'a Decided>,
    /// The first refusing descriptor, when over.
    pub refusing: Option<usize>,
}

/// Writes the line of one answered call, unless the mode leaves it out or this thread's
/// budget for the second is spent.
pub fn write(
    (shared, config): (&Shared, &Config),
    call: Option<&RateLimitRequest>,
    ended: &Ended<'_>,
    peer: SocketAddr,
    started: u64,
) {
    let server = &config.server;
    let quiet = ended.decision == "ok" || ended.decision == "store_unavailable_allowed";
    if !server.access_log.enabled() || (server.access_log == AccessLog::Refused && quiet) {
        return;
    }
    let now = shared.clock.now_ns();
    if !take_line(config, &shared.metrics, now) {
        return;
    }
    let rls = config.rls.as_ref();
    let refusing = ended.refusing.zip(ended.decided);
    let rule = refusing.and_then(|(i, d)| match d.matched.get(i)? {
        Matched::Rule(r) => rls?.rules.get(*r),
        Matched::Unmatched(_) => None,
    });
    let key: Vec<String> = match (rule, refusing, call) {
        (Some(rule), Some((i, _)), Some(call)) => {
            let fleet = shared.limiter.keys().fleet().and_then(|f| f.key());
            let values = call.descriptors[i].entries.iter().map(|e| e.value.as_str());
            rule.key_parts(values)
                .map(|p| logged_part(p, server.log_keys, fleet.as_deref()))
                .collect()
        }
        _ => Vec::new(),
    };
    let wait_ns = ended.decided.map_or(0, |d| d.admission.wait_ns());
    tracing::info!(
        target: "tollgate::access",
        front = "rls",
        domain = call.map_or("", |c| c.domain.as_str()),
        descriptors = call.map_or(0, |c| c.descriptors.len()),
        client = %peer.ip(),
        decision = ended.decision,
        policy = rule.map_or("", |r| r.limit_name()),
        descriptor = ended.refusing.map_or(-1, |i| i64::try_from(i).unwrap_or(-1)),
        key = %serde_json::to_string(&key).unwrap_or_default(),
        wait_ms = if ended.decision == "over_limit" { ceil_millis(wait_ns) } else { 0 },
        elapsed_ms = now.saturating_sub(started) / 1_000_000,
    );
}
