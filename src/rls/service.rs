//! The gRPC side of the rate limit service: one unary method read from its
//! length-prefixed frame, decided, and answered as gRPC does (HTTP 200, the message, then
//! `grpc-status` in trailers; an error trailers-only). Anything else is a gRPC error with
//! a message that says what was wrong.

use std::sync::Arc;

use bytes::{Buf, Bytes};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use prost::Message;

use super::decide::{decide, Decided, Matched};
use super::proto::{RateLimitRequest, SHOULD_RATE_LIMIT};
use super::render;
use crate::metrics::rls::RlsRuleCounters;
use crate::proxy::grpc::{is_call, trailers_only, Code, GRPC_STATUS};
use crate::proxy::snapshot::{Shared, Snapshot};
use crate::reply::Body;
use crate::store::{Counted, Outcome};

/// The largest request message read: gRPC's own default, as the quota stream's. A call of
/// 32 descriptors of 8 entries is a few KiB, but Envoy copies a client's header into each
/// descriptor that names it (60 KiB per header by default): a smaller bound would let a
/// client with one long header push its call past it, and the error it gets is a request
/// let through by an Envoy failing open.
pub const MAX_MESSAGE_BYTES: usize = crate::grpc_frames::MAX_MESSAGE_BYTES;

/// Answers one request of the `[rls]` listener from `peer`, and logs it.
pub async fn handle(
    shared: Arc<Shared>,
    in_flight: Arc<tokio::sync::Semaphore>,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let started = shared.clock.now_ns();
    let snapshot = shared.current();
    // Envoy passes its trace in the call's metadata: a sampled call gets a span.
    let span = snapshot
        .config
        .telemetry
        .as_ref()
        .and_then(|t| shared.start_span(t, req.headers(), || started));
    let mut call = Call::default();
    // Boxed: the call's decision and the limiter's futures are kilobytes, and the
    // connection moves this future as it polls it.
    let answered = Box::pin(answer(&shared, &snapshot, in_flight, req, &mut call)).await;
    let (response, decision) = match answered {
        Ok((response, over)) => (
            response,
            if over {
                "over_limit"
            } else {
                call.quiet_word()
            },
        ),
        Err((status, why)) => {
            let calls = &shared.metrics.rls.calls;
            match status {
                Code::Unavailable => calls.unavailable.inc(),
                Code::Unimplemented => calls.unimplemented.inc(),
                Code::ResourceExhausted => calls.resource_exhausted.inc(),
                _ => calls.invalid_argument.inc(),
            };
            (trailers_only(status, &why), word(status))
        }
    };
    let ended = super::log::Ended {
        decision,
        decided: call.decided.as_ref(),
        refusing: call.refusing,
    };
    let config = &snapshot.config;
    super::log::write(
        (&shared, config),
        call.request.as_ref(),
        &ended,
        peer,
        started,
    );
    if let Some(span) = span {
        super::log::export_span(&shared, config, (call.request.as_ref(), &ended), span);
    }
    Ok(response)
}

/// What one call got to, for its log line.
#[derive(Default)]
struct Call {
    request: Option<RateLimitRequest>,
    decided: Option<Decided>,
    /// The first refusing descriptor.
    refusing: Option<usize>,
}

impl Call {
    /// An answered call that was not over: decided, or let through undecided.
    fn quiet_word(&self) -> &'static str {
        let unchecked = self
            .decided
            .as_ref()
            .is_some_and(|d| d.admissions().any(crate::store::Admission::unchecked));
        if unchecked {
            "store_unavailable_allowed"
        } else {
            "ok"
        }
    }
}

type Failed = (Code, String);

/// A gRPC error's name in the log and the metrics.
fn word(code: Code) -> &'static str {
    match code {
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::ResourceExhausted => "resource_exhausted",
        Code::Unimplemented => "unimplemented",
        Code::Unavailable => "unavailable",
    }
}

/// Reads, decides and renders one call (`call` keeps what it got to); `Ok((response,
/// over))`, or the gRPC error to answer.
async fn answer(
    shared: &Shared,
    snapshot: &Snapshot,
    in_flight: Arc<tokio::sync::Semaphore>,
    req: Request<Incoming>,
    call: &mut Call,
) -> Result<(Response<Body>, bool), Failed> {
    let Ok(_permit) = in_flight.try_acquire() else {
        let why = "overloaded: [server] max_requests calls are in flight";
        return Err((Code::ResourceExhausted, why.to_owned()));
    };
    let request = call.request.insert(read(snapshot, req).await?);
    let Some(rls) = snapshot.config.rls.as_ref() else {
        return Err((
            Code::Unavailable,
            "the configuration in effect has no [rls] table".to_owned(),
        ));
    };
    let clock = &*shared.clock;
    let decided = decide((snapshot, rls), &shared.limiter, clock, request)
        .await
        .map_err(|e| (Code::InvalidArgument, e.to_string()))?;
    let decided = call.decided.insert(decided);
    count(snapshot, &shared.metrics.rls.calls, decided);
    if let Some(top) = &snapshot.top {
        super::top::record(top, (&snapshot.config, rls), request, decided);
    }
    let unavailable = |a: &crate::store::Admission| a.outcome() == Outcome::StoreUnavailable;
    // A call refused whatever the store says (a blocked or unmatched descriptor) is over
    // the limit even when the store failed: an Envoy failing open on errors would
    // otherwise let it through.
    if !decided.refused_outright() && decided.admissions().any(unavailable) {
        return Err((
            Code::Unavailable,
            "the limiter's store cannot answer (on_error = \"deny\")".to_owned(),
        ));
    }
    let response = render::response(rls, decided);
    let over = response.overall_code == super::proto::Code::OverLimit as i32;
    call.refusing = response
        .statuses
        .iter()
        .position(|s| s.code == super::proto::Code::OverLimit as i32);
    if over {
        shared.metrics.rls.calls.over_limit.inc();
    } else {
        shared.metrics.rls.calls.ok.inc();
    }
    Ok((
        ok(crate::grpc_frames::frame(&response.encode_to_vec())),
        over,
    ))
}

/// The most a call's message may take to arrive after its head (or `body_read_timeout`,
/// when shorter). Envoy sends both together and gives up on the answer after 20 ms by
/// default: a caller slower than a second is parking the call, holding one of the
/// listener's `max_requests` places (and up to 64 KiB) that Envoy's calls need.
const MESSAGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// The call's message: the one method, gRPC, read whole within [`MESSAGE_DEADLINE`] and
/// the size bound, decoded.
async fn read(snapshot: &Snapshot, req: Request<Incoming>) -> Result<RateLimitRequest, Failed> {
    if req.uri().path() != SHOULD_RATE_LIMIT {
        return Err((
            Code::Unimplemented,
            format!(
                "unknown method {}; this listener serves {SHOULD_RATE_LIMIT}",
                req.uri().path()
            ),
        ));
    }
    if !is_call(req.headers()) {
        return Err((
            Code::InvalidArgument,
            "content-type must be application/grpc".to_owned(),
        ));
    }
    let timeout = snapshot
        .config
        .server
        .body_read_timeout
        .min(MESSAGE_DEADLINE);
    let body = Limited::new(req.into_body(), MAX_MESSAGE_BYTES + 5);
    let bytes = match tokio::time::timeout(timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err((
                Code::ResourceExhausted,
                format!("the request message is over {MAX_MESSAGE_BYTES} bytes"),
            ));
        }
        Ok(Err(e)) => {
            return Err((
                Code::InvalidArgument,
                format!("reading the request failed: {e}"),
            ))
        }
        Err(_) => {
            return Err((
                Code::InvalidArgument,
                format!(
                    "the request message did not arrive within {}",
                    humantime::format_duration(timeout)
                ),
            ))
        }
    };
    let message = unframe(bytes)?;
    super::decide::within_bounds(&message).map_err(|e| (Code::InvalidArgument, e.to_string()))?;
    let request = RateLimitRequest::decode(message).map_err(|e| {
        (
            Code::InvalidArgument,
            format!("not a RateLimitRequest: {e}"),
        )
    })?;
    Ok(request)
}

/// The message of one gRPC frame: a flag byte (0: not compressed), a 4-byte length,
/// exactly that many bytes.
fn unframe(mut bytes: Bytes) -> Result<Bytes, Failed> {
    if bytes.len() < 5 {
        return Err((
            Code::InvalidArgument,
            "the request is not one gRPC message".to_owned(),
        ));
    }
    let compressed = bytes.get_u8();
    let length = bytes.get_u32() as usize;
    if compressed != 0 {
        return Err((
            Code::Unimplemented,
            "compressed messages are not supported: send them uncompressed".to_owned(),
        ));
    }
    if length != bytes.len() {
        return Err((
            Code::InvalidArgument,
            format!(
                "the frame says {length} bytes, {} came (one message per call)",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// The message, then `grpc-status: 0` in trailers.
fn ok(message: Bytes) -> Response<Body> {
    let mut trailers = HeaderMap::new();
    trailers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("0"));
    let body = Full::new(message)
        .map_err(|never| match never {})
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed_unsync();
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

/// Counts each descriptor under its rule, and the unmatched ones.
fn count(snapshot: &Snapshot, calls: &crate::metrics::rls::RlsCallCounters, decided: &Decided) {
    let counters = |position: usize| -> Option<&RlsRuleCounters> {
        snapshot.rls_metrics.get(decided.rule_at(position)?)
    };
    // What the limiter did not decide still counts under its rule: a blocked descriptor
    // over (in shadow mode, what it would have done), an unlimited or replaced one OK.
    let mut decided_here = [false; crate::limit::MAX_DECISIONS];
    for position in decided.admissions().flat_map(|a| a.applied()) {
        if let Some(d) = decided_here.get_mut(position) {
            *d = true;
        }
    }
    let rules = snapshot.config.rls.as_ref().map(|r| &r.rules);
    let shadow_block = |rule: usize| {
        let rule = rules.and_then(|r| r.get(rule));
        rule.is_some_and(|r| {
            r.blocked
                .is_some_and(|(_, m)| m == crate::limit::Mode::Shadow)
        })
    };
    // A call whose reports could not be charged failed whole (`on_error = "deny"`): what
    // it decided nothing of was not answered OK either.
    let failed = decided
        .reports
        .as_ref()
        .is_some_and(|r| r.outcome() == Outcome::StoreUnavailable);
    // A call refused whatever the limiter says: what it would have admitted counts under
    // neither, as a descriptor admitted in a call the limiter refused does.
    let refused = decided.refused_outright();
    for (position, m) in decided.matched.iter().enumerate() {
        if decided_here.get(position) == Some(&true) {
            continue;
        }
        match (m, counters(position)) {
            (Matched::Blocked(_) | Matched::MissingKey(_), Some(c)) => c.over_limit.inc(),
            (Matched::Rule(r), Some(c)) if shadow_block(*r) => c.shadow_over_limit.inc(),
            (Matched::Rule(_), Some(_)) if refused => 0,
            (Matched::Rule(_), Some(c)) if failed => c.store_unavailable.inc(),
            (Matched::Rule(_), Some(c)) => c.ok.inc(),
            _ => 0,
        };
    }
    let unmatched = decided
        .matched
        .iter()
        .filter(|m| matches!(m, Matched::Unmatched(_)))
        .count();
    calls.unmatched.inc_by(unmatched as u64);
    let descriptors = decided.matched.len();
    count_decision(&counters, &decided.admission, (descriptors, refused));
    if let Some(reports) = &decided.reports {
        count_decision(&counters, reports, (descriptors, false));
    }
}

/// Counts one decision's descriptors under their rules; `refused`: the call is over
/// whatever this decision says (what it admitted counts under neither).
fn count_decision<'a>(
    counters: &impl Fn(usize) -> Option<&'a RlsRuleCounters>,
    admission: &crate::store::Admission,
    (descriptors, refused): (usize, bool),
) {
    if admission.outcome() == Outcome::StoreUnavailable || admission.unchecked() {
        if refused {
            // Over whatever the store says: neither let through nor refused for it.
            return;
        }
        let deny = admission.outcome() == Outcome::StoreUnavailable;
        for position in admission.applied().take(descriptors) {
            if let Some(c) = counters(position) {
                if deny {
                    &c.store_unavailable
                } else {
                    &c.store_unavailable_allowed
                }
                .inc();
            }
        }
        return;
    }
    for outcome in admission.per_policy() {
        let Some(c) = counters(outcome.position) else {
            continue;
        };
        match outcome.counted {
            Counted::Admitted if refused => {}
            Counted::Admitted => {
                c.ok.inc();
            }
            Counted::Denied => {
                c.over_limit.inc();
            }
            Counted::ShadowDenied => {
                c.shadow_over_limit.inc();
            }
            // Admitted here, but another descriptor refused the call.
            Counted::Nothing => {}
        }
    }
}
