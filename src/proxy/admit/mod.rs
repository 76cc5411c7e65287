//! The admission phase: every tier of the route decided at once (`Limiter::check_request`),
//! each policy's decision counted, and the answer for a refused request — 429 for a
//! limit, 400 for a key that cannot be taken, 503 for a store that cannot answer.

use std::time::Duration;

mod top;

use http::{HeaderMap, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::access_log::Trace;
use super::response::{
    concurrency_refused, cost_above_burst, too_many_requests, wants_problem_json, Answer,
    PolicyAnswer, PolicyHeaders, RouteHeaders, TierItem,
};
use super::snapshot::{PolicyRuntime, RouteRuntime, Shared, Snapshot};
use crate::config::{Policy, Route};
use crate::json::BodyFacts;
use crate::key::RequestView;
use crate::limit::Quota;
use crate::metrics::RouteMetrics;
use crate::reply::{json_error, Body};
use crate::store::{Admission, Counted, Outcome, PolicyOutcome, TierReport};

/// A request's `RateLimit` items: inline for the usual few rate tiers.
pub type TierItems<'a> = smallvec::SmallVec<[TierItem<'a>; 4]>;

/// What each decided policy counts as, worked out once for the metrics and the top keys.
type Decided = smallvec::SmallVec<[PolicyOutcome; 8]>;

/// One route of one snapshot: what the phases after routing read.
pub struct Routed<'a> {
    pub snapshot: &'a Snapshot,
    pub index: usize,
    pub route: &'a Route,
}

impl<'a> Routed<'a> {
    /// What this snapshot holds of the route beside its config.
    pub fn runtime(&self) -> &'a RouteRuntime {
        &self.snapshot.routes[self.index]
    }

    pub fn metrics(&self) -> &'a RouteMetrics {
        &self.runtime().metrics
    }

    pub fn headers(&self) -> &'a RouteHeaders {
        &self.runtime().headers
    }

    /// What an answer says of the policy at `position`.
    pub fn answer(&self, position: usize) -> &'a PolicyAnswer {
        &self.runtime().policies[position].answer
    }

    /// The `RateLimit` item of a report, with the policy's constant header values when
    /// the key was decided on the policy's own quota (not an override's).
    #[inline]
    pub fn item(&self, report: &TierReport) -> TierItem<'a> {
        let policy = &self.route.policies[report.position];
        TierItem {
            policy: &policy.name,
            quota: report.quota,
            // A quota's window length changes with the window: its items are written.
            constant: constant_headers(
                policy,
                &report.quota,
                &self.answer(report.position).headers,
            )
            .filter(|_| report.window_s.is_none()),
            remaining: report.remaining,
            until_full_ns: report.until_full_ns,
            window_s: report.window_s,
        }
    }

    /// The reported tier, and the `RateLimit` items as the admission left them, put in
    /// `items` where they are read (returned, the list of inline items was copied).
    #[inline]
    pub fn reports(
        &self,
        admission: &Admission,
        items: &mut TierItems<'a>,
    ) -> Option<TierItem<'a>> {
        items.extend(admission.rate_reports().map(|r| self.item(&r)));
        admission.reported().map(|r| self.item(&r))
    }
}

fn constant_headers<'a>(
    policy: &Policy,
    quota: &Quota,
    constant: &'a PolicyHeaders,
) -> Option<&'a PolicyHeaders> {
    (Some(quota) == policy.rate().map(|r| &r.quota)).then_some(constant)
}

/// Decides every tier of `req` on `routed` into `admission` and answers a refusal (see
/// [`answer`]).
pub async fn admit(
    shared: &Shared,
    routed: &Routed<'_>,
    (req, client_ip, body): (&Request<Incoming>, std::net::IpAddr, Option<&BodyFacts<'_>>),
    admission: &mut Admission,
    trace: &mut Trace,
) -> Option<Response<Body>> {
    if body.is_some_and(BodyFacts::over_memory) {
        shared.metrics.requests_overloaded.inc();
        return Some(super::response::overloaded());
    }
    let route = routed.route;
    let view = RequestView {
        method: req.method(),
        uri: req.uri(),
        headers: req.headers(),
        client_ip,
        route: &route.name,
        body,
    };
    let policies = &routed.runtime().policies;
    shared
        .limiter
        .check_request((route, policies), &view, &*shared.clock, admission)
        .await;
    let asked = (req.headers(), body);
    let decided: Decided = admission.per_policy().collect();
    let refused = answer(routed, (admission, &decided), asked, trace);
    // Most requests have no shadow denial: nothing more to do for them.
    let mut denials = admission.shadow_denials().peekable();
    if denials.peek().is_some() {
        let at = (&*routed.snapshot.config, &*shared.metrics, admission.now());
        super::access_log::write_shadow(at, routed.route, denials, client_ip);
    }
    if let Some(top) = &routed.snapshot.top {
        top::record(top, routed, (admission, &decided), &view);
    }
    // The deciding tier's key parts, for a line that will be written, and as a keyed hash
    // for a sampled request's span (admitted: the tier nearest to refusing it).
    let spanned = match refused {
        Some(_) => trace.policy,
        None => trace
            .span
            .as_ref()
            .and_then(|_| nearest_policy(route, admission)),
    };
    if let (Some(position), Some(span)) = (spanned, &mut trace.span) {
        if refused.is_none() {
            span.nearest = Some(route.policies[position].name.clone());
        }
        let fleet = shared.limiter.keys().fleet().and_then(|f| f.key());
        let parts = super::access_log::key_parts(
            &route.policies[position],
            &view,
            crate::config::LogKeys::Hash,
            fleet.as_deref(),
        );
        span.key_hash = Some(parts.join(","));
    }
    if let (Some(_), Some(position)) = (&refused, trace.policy) {
        let config = &routed.snapshot.config;
        if super::access_log::has_line(config, shared.clock.now_ns()) {
            let fleet = shared.limiter.keys().fleet().and_then(|f| f.key());
            trace.key = Some(super::access_log::key_parts(
                &route.policies[position],
                &view,
                config.server.log_keys,
                fleet.as_deref(),
            ));
        }
    }
    refused
}

/// Counts the admission's decisions (`decided`: its per-policy outcomes); returns the
/// answer when the request is refused. `headers` and `body`: the request's, for the
/// refusal's body form.
fn answer(
    routed: &Routed<'_>,
    (admission, decided): (&Admission, &[PolicyOutcome]),
    (headers, body): (&HeaderMap, Option<&BodyFacts<'_>>),
    trace: &mut Trace,
) -> Option<Response<Body>> {
    let route = routed.route;
    if route.policies.is_empty() {
        trace.answer = Answer::Admitted;
        return None; // an unlimited route: nothing decided, nothing to count
    }
    // A JSON-RPC refusal only where a policy reads the body for itself (a `json:` key, a
    // price): a `query:` key reads a body too, and its 429 keeps the contract's body.
    let body = body.filter(|_| route.body_always);
    count((admission, decided), &routed.runtime().policies);
    let policy_name = |position: usize| route.policies[position].name.as_str();
    match admission.outcome() {
        Outcome::Admitted => {
            trace.answer = if admission.unchecked() {
                // Let through unlimited: not an admission of the limits.
                Answer::StoreUnavailableAllowed
            } else {
                Answer::Admitted
            };
            trace.wait_ns = admission.delay_ns();
            None
        }
        Outcome::RateLimited { position } => {
            trace.refused(Answer::Denied, position, admission.wait_ns());
            Some(rate_refusal(routed, admission, (headers, body)))
        }
        Outcome::SlotsFull { position, max } => Some(slots_refusal(
            routed,
            (position, max),
            (headers, body),
            trace,
        )),
        Outcome::MissingKey { position }
        | Outcome::TooManyKeyValues { position }
        | Outcome::UnpricedModel { position } => {
            let answer = match admission.outcome() {
                Outcome::MissingKey { .. } => Answer::MissingKey,
                Outcome::UnpricedModel { .. } => Answer::UnpricedModel,
                _ => Answer::TooManyKeyValues,
            };
            // The body's error word is the access log's decision.
            let code = answer.decision();
            trace.refused(answer, position, 0);
            let policy = [("policy", policy_name(position).into())];
            Some(json_error(StatusCode::BAD_REQUEST, code, &policy))
        }
        Outcome::CostAboveBurst { position, .. } => {
            trace.refused(Answer::CostAboveBurst, position, 0);
            let rpc = body.and_then(BodyFacts::json_rpc_id);
            let form = (wants_problem_json(headers), rpc.as_ref());
            Some(cost_above_burst(policy_name(position), form))
        }
        Outcome::StoreUnavailable => {
            trace.answer = Answer::StoreUnavailable;
            Some(json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                &[],
            ))
        }
    }
}

/// The 429 of a concurrency refusal: every slot of the policy at `position` (at most
/// `max`) was taken; its `Retry-After` is the policy's hint.
fn slots_refusal(
    routed: &Routed<'_>,
    (position, max): (usize, u32),
    (headers, body): (&HeaderMap, Option<&BodyFacts<'_>>),
    trace: &mut Trace,
) -> Response<Body> {
    let policy = &routed.route.policies[position];
    let retry_after = policy
        .concurrency()
        .map_or(Duration::from_secs(1), |c| c.retry_after);
    let wait = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
    trace.refused(Answer::Denied, position, wait);
    let answer = routed.answer(position);
    let own = slot_headers(policy, max, &answer.headers);
    let rpc = body.and_then(BodyFacts::json_rpc_id);
    let form = (wants_problem_json(headers), rpc.as_ref());
    concurrency_refused(&policy.name, &answer.refusal_body, retry_after, &own, form)
}

/// The 429 of a rate refusal: headers describe every tier as the refusal left it.
fn rate_refusal(
    routed: &Routed<'_>,
    admission: &Admission,
    (headers, body): (&HeaderMap, Option<&BodyFacts<'_>>),
) -> Response<Body> {
    let route = routed.route;
    let mut items = TierItems::new();
    let reported = routed.reports(admission, &mut items);
    let first = match admission.outcome() {
        Outcome::RateLimited { position } => Some((
            route.policies[position].name.as_str(),
            routed.answer(position),
        )),
        _ => None,
    };
    routed
        .metrics()
        .retry_after
        .observe(admission.wait_ns() as f64 / 1e9);
    let violated: Option<smallvec::SmallVec<[&str; 4]>> = wants_problem_json(headers).then(|| {
        admission
            .violated()
            .map(|position| route.policies[position].name.as_str())
            .collect()
    });
    too_many_requests(
        admission.wait_ns(),
        first,
        reported.as_ref(),
        &items,
        routed.headers(),
        violated.as_deref(),
        body.and_then(BodyFacts::json_rpc_id).as_ref(),
    )
}

/// A concurrency tier's header values: the policy's constant ones, or, for a key with an
/// override, ones naming its own cap.
pub fn slot_headers<'a>(
    policy: &Policy,
    max: u32,
    constant: &'a PolicyHeaders,
) -> std::borrow::Cow<'a, PolicyHeaders> {
    match policy.concurrency() {
        Some(c) if c.max_in_flight != max => {
            std::borrow::Cow::Owned(PolicyHeaders::concurrency(&policy.name, max))
        }
        _ => std::borrow::Cow::Borrowed(constant),
    }
}

/// Counts one decision per applied policy.
#[inline]
fn count((admission, decided): (&Admission, &[PolicyOutcome]), policies: &[PolicyRuntime]) {
    if admission.unchecked() {
        for p in admission.applied() {
            policies[p].counters.store_unavailable_allowed.inc();
        }
        return;
    }
    if admission.outcome() == Outcome::StoreUnavailable {
        for p in admission.applied() {
            policies[p].counters.store_unavailable.inc();
        }
        return;
    }
    for p in decided {
        let counters = &policies[p.position].counters;
        if p.overflow {
            counters.overflow.inc();
        }
        match p.counted {
            Counted::Admitted => counters.admitted.inc(),
            Counted::Denied => counters.denied.inc(),
            Counted::ShadowDenied => counters.shadow_denied.inc(),
            Counted::Nothing => {}
        }
    }
}

/// The enforcing rate policy with the fewest requests left after an admission (the one
/// its `RateLimit` headers report), by position.
fn nearest_policy(route: &crate::config::Route, admission: &Admission) -> Option<usize> {
    admission
        .policy_reports()
        .filter(|(report, counted)| {
            *counted == crate::store::Counted::Admitted
                && route.policies.get(report.position).map(|p| p.mode)
                    == Some(crate::limit::Mode::Enforce)
        })
        .min_by_key(|(report, _)| report.remaining)
        .map(|(report, _)| report.position)
}
