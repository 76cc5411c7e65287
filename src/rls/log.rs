//! The rate limit service's line in the access log (target `tollgate::access`, with
//! `front = "rls"`): one per call, under the same `access_log` mode and `log_keys` as a
//! proxied request's line, within the service's share of `access_log_rate`. A refused call names the
//! refusing descriptor, its limit and its key parts.

use std::net::SocketAddr;

use super::decide::Decided;
use super::proto::RateLimitRequest;
use crate::config::rls::RlsRule;
use crate::config::{AccessLog, Config, LogKeys};
use crate::proxy::access_log::{logged_part, take_service_line};
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

/// Writes the line of one answered call, unless the mode leaves it out or the service's
/// budget for the second is spent.
pub fn write(
    (shared, config): (&Shared, &Config),
    call: Option<&RateLimitRequest>,
    ended: &Ended<'_>,
    peer: SocketAddr,
    started: u64,
) {
    let server = &config.server;
    // A call let through without a store is no ordinary admission: kept, as a proxied
    // request's line is.
    let quiet = ended.decision == "ok";
    if !server.access_log.enabled() || (server.access_log == AccessLog::Refused && quiet) {
        return;
    }
    let now = shared.clock.now_ns();
    if !take_service_line(&shared.service_lines, (config, &shared.metrics), now) {
        return;
    }
    let rule = refusing_rule(config, ended);
    let key = refusing_key(shared, (rule, call, ended), server.log_keys);
    let wait_ns = ended.decided.map_or(0, super::render::told_wait_ns);
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

/// The rule of the first refusing descriptor.
fn refusing_rule<'a>(config: &'a Config, ended: &Ended<'_>) -> Option<&'a RlsRule> {
    let (position, decided) = ended.refusing.zip(ended.decided)?;
    config.rls.as_ref()?.rules.get(decided.rule_at(position)?)
}

/// The refusing descriptor's key parts, as `log_keys` writes them.
fn refusing_key(
    shared: &Shared,
    (rule, call, ended): (Option<&RlsRule>, Option<&RateLimitRequest>, &Ended<'_>),
    log_keys: LogKeys,
) -> Vec<String> {
    let (Some(rule), Some(i), Some(call)) = (rule, ended.refusing, call) else {
        return Vec::new();
    };
    let fleet = shared.limiter.keys().fleet().and_then(|f| f.key());
    let values = call.descriptors[i].entries.iter().map(|e| e.value.as_str());
    rule.named_parts(values)
        .map(|p| logged_part(&p, log_keys, fleet.as_deref()))
        .collect()
}

/// A sampled call's span, rendered from the same end as its line.
pub fn export_span(
    shared: &Shared,
    config: &Config,
    (call, ended): (Option<&RateLimitRequest>, &Ended<'_>),
    mut span: crate::telemetry::span::SpanTrace,
) {
    let rule = refusing_rule(config, ended);
    let over = ended.decision == "over_limit";
    if over {
        span.key_hash = Some(refusing_key(shared, (rule, call, ended), LogKeys::Hash).join(","));
    }
    let wait = ended.decided.map_or(0, super::render::told_wait_ns);
    let clock = &*shared.clock;
    let unix = |ns| clock.unix_ns_at(ns);
    let method = super::proto::SHOULD_RATE_LIMIT.trim_start_matches('/');
    let outcome = (
        ended.decision,
        rule.filter(|_| over).map(RlsRule::limit_name),
        over.then(|| ceil_millis(wait)),
    );
    let exported =
        crate::telemetry::span::rpc_span(&span, method, outcome, (clock.now_ns(), &unix));
    shared.spans.push(exported, &shared.metrics.telemetry);
}
