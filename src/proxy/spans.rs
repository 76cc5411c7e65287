//! A sampled request's spans, rendered from its trace — the same record the access log
//! line is written from (its `Answer`, deciding policy and wait) — and queued for the
//! exporter.

use super::access_log::Trace;
use super::snapshot::{Current, Shared};
use crate::reply::ceil_millis;
use crate::telemetry::span::{spans, Ended, SpanTrace};

/// Queues the request's server span (and its upstream call's) for export.
pub fn export(
    shared: &Shared,
    snapshot: &Current,
    (trace, span): (&Trace, &SpanTrace),
    (method, path): &(http::Method, String),
    status: u16,
) {
    let route = trace.route.and_then(|i| snapshot.config.routes.get(i));
    let policy = route
        .zip(trace.policy)
        .and_then(|(r, p)| r.policies.get(p))
        .map(|p| p.name.as_str());
    let ended = Ended {
        method: method.as_str(),
        path,
        route: route.map(|r| (r.name.as_str(), r.path.as_str())),
        status,
        decision: trace.answer.decision(),
        policy,
        retry_after_ms: policy.map(|_| ceil_millis(trace.wait_ns)),
        upstream: route.map(|r| r.upstream.name.as_str()),
        ended_ns: shared.clock.now_ns(),
    };
    let clock = &*shared.clock;
    for s in spans(span, &ended, |ns| clock.unix_ns_at(ns)) {
        shared.spans.push(s, &shared.metrics.telemetry);
    }
}
