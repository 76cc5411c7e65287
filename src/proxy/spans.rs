//! A sampled request's spans, rendered from its trace — the same record the access log
//! line is written from (its `Answer`, deciding policy and wait) — and queued for the
//! exporter when its response body is done: the server span covers the whole answer (a
//! streamed one's last byte, not its head).

use std::sync::Arc;

use super::access_log::Trace;
use super::snapshot::{Current, Shared};
use crate::reply::ceil_millis;
use crate::telemetry::span::{spans, Ended, SpanTrace};

/// The upstream call of a sampled request begins at `now_ns`: its `traceparent` names this
/// request's client span as the parent, and a trace the caller did not carry drops the
/// caller's `tracestate` (W3C).
pub fn start_forward(span: &mut SpanTrace, headers: &mut http::HeaderMap, now_ns: u64) {
    let traceparent = crate::telemetry::span::upstream_traceparent(span);
    headers.insert(crate::telemetry::span::TRACEPARENT.clone(), traceparent);
    if span.sampled.parent_id.is_none() {
        headers.remove("tracestate");
    }
    span.forward = Some((now_ns, 0));
}

/// A sampled request's spans, waiting for its response to end. The response body holds
/// it; dropping it (the body sent, failed or abandoned) queues the spans, ended then.
pub struct PendingSpans {
    shared: Arc<Shared>,
    /// The snapshot that answered: the route and policy are named from it.
    snapshot: Current,
    span: Box<SpanTrace>,
    /// The method and path the client asked for.
    asked: (http::Method, String),
    status: u16,
    route: Option<usize>,
    policy: Option<usize>,
    decision: &'static str,
    wait_ns: u64,
    /// The answer is the upstream's, streamed: its call's span ends with it too.
    streamed: bool,
}

impl PendingSpans {
    /// What `trace` recorded of a request answered `status`, with its `span`.
    pub fn new(
        shared: &Arc<Shared>,
        snapshot: &Current,
        (trace, span): (&Trace, Box<SpanTrace>),
        asked: (http::Method, String),
        status: u16,
    ) -> Box<Self> {
        Box::new(Self {
            shared: shared.clone(),
            snapshot: snapshot.clone(),
            asked,
            status,
            route: trace.route,
            policy: trace.policy,
            decision: trace.answer.decision(),
            wait_ns: trace.wait_ns,
            streamed: !trace.by_gateway && span.forward.is_some(),
            span,
        })
    }
}

impl Drop for PendingSpans {
    /// Queues the request's server span (and its upstream call's), ended now.
    fn drop(&mut self) {
        let route = self.route.and_then(|i| self.snapshot.config.routes.get(i));
        let policy = route
            .zip(self.policy)
            .and_then(|(r, p)| r.policies.get(p))
            .map(|p| p.name.as_str());
        let shared = &*self.shared;
        let ended = Ended {
            method: self.asked.0.as_str(),
            path: &self.asked.1,
            route: route.map(|r| (r.name.as_str(), r.path.as_str())),
            status: self.status,
            decision: self.decision,
            policy,
            retry_after_ms: policy.map(|_| ceil_millis(self.wait_ns)),
            upstream: route.map(|r| r.upstream.name.as_str()),
            ended_ns: shared.clock.now_ns(),
        };
        if self.streamed {
            if let Some((_, to)) = &mut self.span.forward {
                *to = ended.ended_ns;
            }
        }
        let clock = &*shared.clock;
        for s in spans(&self.span, &ended, |ns| clock.unix_ns_at(ns)) {
            shared.spans.push(s, &shared.metrics.telemetry);
        }
    }
}
