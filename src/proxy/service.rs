//! The request path, top to bottom, as its phases: take the snapshot once → normalise the
//! head → match the route → decide every tier (`admit`) → hold, forward (`forward`) →
//! settle and describe the limits (`respond`) → log (`access_log`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::access_log::Trace;
use super::admit::Routed;
use super::forward::{forward, Sent, Upgrade};
use super::record::Record;
use super::response::{overloaded, unsupported_charset, Answer};
use super::response_body::{HeldSlots, ResponseBody};
use super::settle::Settlement;
use super::snapshot::{Current, Shared};
use crate::conn::ConnInfo;
use crate::reply::{json_error, Body};
use crate::store::Admission;

/// What a connection's requests share: the gateway's state and the connection's facts, in
/// one allocation per connection, so a request takes one reference that only its own
/// worker writes (not the gateway-wide count of `Shared`, which every worker would bounce).
pub struct Downstream {
    pub shared: Arc<Shared>,
    pub conn: ConnInfo,
}

/// Serves one data-plane request. Never fails: every problem is an HTTP answer.
pub async fn handle(
    downstream: Arc<Downstream>,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let Downstream { shared, conn } = &*downstream;
    // Counted until the response body is done, so the connection is not idle meanwhile.
    let in_flight = crate::conn::InFlight::new(conn.activity.clone());
    let snapshot = shared.current();
    let grpc = super::grpc::is_call(req.headers());
    // Past this worker's share of `max_requests`: refused before anything else is spent.
    let Some(load) = crate::conn::load::Load::enter(snapshot.request_share) else {
        shared.metrics.requests_overloaded.inc();
        let mut resp = overloaded();
        if grpc {
            let trace = Trace {
                answer: Answer::Overloaded,
                ..Trace::new()
            };
            resp = as_grpc(resp, &snapshot, &trace);
        }
        return Ok(resp.map(|body| ResponseBody::new(body, in_flight, None, HeldSlots::new())));
    };
    // `head` too: the head's normalising upper-cases the method it forwards.
    let is_head = req.method().as_str().eq_ignore_ascii_case("HEAD");
    let mut record = Record::open(shared, &snapshot, conn, &req);
    let mut slots = HeldSlots::new();
    let trace = &mut record.trace;
    let resp = serve(shared, &snapshot, conn, req, grpc, trace, &mut slots).await;
    if trace.by_gateway {
        // What the forwarding answered itself, named where it was answered.
        if let Some(answer) = resp.extensions().get::<Answer>() {
            trace.answer = answer.clone();
        }
    }
    if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        // The tunnel's id, made for it: its 101's line names it too.
        if let Some(made) = resp.extensions().get::<super::access_log::MadeRequestId>() {
            record.name_if_unnamed(&made.0);
        }
    }
    // Logged and counted by what the gateway decided (a 429), sent as gRPC asks (a 200).
    // A sampled request's spans end with its response body.
    let spans = record.close(resp.status().as_u16());
    let trace = &record.trace;
    let resp = if grpc && trace.by_gateway {
        as_grpc(resp, &snapshot, trace)
    } else {
        resp
    };
    // A HEAD answer carries no body, whoever made it (HTTP/2 would send one otherwise).
    let resp = if is_head {
        resp.map(|_| crate::reply::empty())
    } else {
        resp
    };
    Ok(resp.map(|body| ResponseBody::new(body, in_flight, Some(load), slots).ending_spans(spans)))
}

/// The gateway's own answer to a gRPC call, as gRPC (see `grpc`).
fn as_grpc(resp: Response<Body>, snapshot: &Current, trace: &Trace) -> Response<Body> {
    let policy = trace
        .route
        .zip(trace.policy)
        .and_then(|(route, position)| snapshot.config.routes.get(route)?.policies.get(position))
        .map(|policy| policy.name.as_str());
    let why = super::grpc::Refusal {
        policy,
        wait_ns: trace.wait_ns,
        answer: &trace.answer,
    };
    super::grpc::answer(resp, &why)
}

/// The gateway's answer to a body it would not read (a coding, a charset, a batch, a
/// stall, or past the worker's share of `max_key_body_memory`: counted as overloaded).
fn body_refused(shared: &Shared, answer: Response<Body>, trace: &mut Trace) -> Response<Body> {
    trace.by_gateway = true;
    if matches!(answer.extensions().get(), Some(Answer::Overloaded)) {
        shared.metrics.requests_overloaded.inc();
    }
    answer
}

/// The request path proper; `trace` collects what the log line reports, `slots` the
/// concurrency slots the response body holds until it is done.
async fn serve(
    shared: &Arc<Shared>,
    snapshot: &Current,
    conn: &ConnInfo,
    mut req: Request<Incoming>,
    grpc: bool,
    trace: &mut Trace,
    slots: &mut HeldSlots,
) -> Response<Body> {
    let mut arrived = match arrive(shared, snapshot, conn, &mut req, trace) {
        Ok(arrived) => arrived,
        Err(answer) => {
            trace.by_gateway = true;
            return *answer;
        }
    };
    let routed = &arrived.routed;
    // The body, read before the decision where a key or a price needs it (`body_readings`),
    // behind the check: a future made even to return nothing is moved into this one's
    // state on every request.
    let key_body = if let Some(readings) = routed.route.body_readings(&req) {
        let read_for = (&snapshot.config.server, routed.route, readings);
        match super::key_body::read(&mut req, read_for).await {
            Ok(read) => Some(Box::new(read)),
            Err(answer) => return body_refused(shared, *answer, trace),
        }
    } else {
        None
    };
    let mut admission = Admission::default();
    // The body's facts (~800 bytes) end with the block, where they lie: a `drop` of
    // them moved them into its argument first, a copy on every request.
    let refused = {
        let facts = key_body.as_ref().map(|b| b.facts(routed.route));
        let asked = (&req, arrived.client_ip, facts.as_ref());
        super::admit::admit(shared, routed, asked, &mut admission, trace).await
    };
    if let Some(refused) = refused {
        trace.by_gateway = true;
        return refused;
    }
    let (settlement, uploaded) =
        begin_settling((shared, snapshot), &arrived, &mut admission, &mut req);
    if admission.delay_ns() > 0 {
        tokio::time::sleep(Duration::from_nanos(admission.delay_ns())).await;
    }
    admission.move_held_into(slots);
    let pool = &snapshot.pools[routed.route.upstream_index];
    // A gRPC call waits no longer than its own deadline.
    let deadline = grpc.then(|| super::grpc::timeout(req.headers())).flatten();
    let sent = Sent {
        config: &snapshot.config,
        route: routed.route,
        pool,
        timeout: deadline.map_or(pool.upstream.timeout, |d| d.min(pool.upstream.timeout)),
        conn,
        now: admission.now(),
        ask_trailers: settlement.as_ref().is_some_and(Settlement::reads_trailers),
        ask_identity: settlement.as_ref().is_some_and(Settlement::reads_usage),
        key_body,
        host: arrived.host.take(),
    };
    if let Some(span) = trace.span.as_deref_mut() {
        super::spans::start_forward(span, req.headers_mut(), shared.clock.now_ns());
    }
    // A tunnel takes the slots it needs; what it leaves is held until the body is done.
    let forwarded = forward(shared, sent, req, arrived.upgrade, slots, uploaded).await;
    if let Some(span) = trace.span.as_deref_mut() {
        span.forward = span.forward.map(|(from, _)| (from, shared.clock.now_ns()));
    }
    trace.by_gateway = forwarded.is_err();
    let answered = (forwarded, settlement, arrived.trailers);
    super::respond::describe(routed, answered, &mut admission).await
}

/// The settles the admission left, begun (`Settlement::begin`: the answer's, and the
/// upload's).
fn begin_settling(
    (shared, snapshot): (&Arc<Shared>, &Current),
    arrived: &Arrived<'_>,
    admission: &mut Admission,
    req: &mut Request<Incoming>,
) -> (Option<Settlement>, Option<Settlement>) {
    // An upgrade has no body (`arrive` refused one with a body): its request bytes, if
    // any, are the tunnel's.
    let tunnel = arrived.upgrade.is_some();
    let settles = admission.take_settles();
    let route = (arrived.routed.index, tunnel);
    let (mut settlement, uploaded) = Settlement::begin(shared, snapshot, route, settles);
    if let Some(settlement) = &mut settlement {
        // A client that leaves before the request is sent (held by `max_delay`, waiting
        // for a connection) used nothing upstream, and is charged so.
        settlement.sent_by(super::pool::SentMark::on(req));
    }
    (settlement, uploaded)
}

/// A request that has a route: which, who sent it, and the tunnel it may open.
struct Arrived<'a> {
    routed: Routed<'a>,
    client_ip: std::net::IpAddr,
    upgrade: Option<Box<Upgrade>>,
    /// The client takes trailers (`TE: trailers`).
    trailers: bool,
    /// Its `Host` as normalised.
    host: Option<http::HeaderValue>,
}

/// Normalises the head, matches the route and tells who the client is; the answer when
/// the request goes no further (400, 404, 503 for a tunnel with no connection left).
#[inline]
fn arrive<'a>(
    shared: &Shared,
    snapshot: &'a Current,
    conn: &ConnInfo,
    req: &mut Request<Incoming>,
    trace: &mut Trace,
) -> Result<Arrived<'a>, Box<Response<Body>>> {
    let config = &snapshot.config;
    let normalized = super::head::normalize(req, (&config.server.paths, &config.key_headers))
        .map_err(|e| {
            trace.answer = Answer::BadRequest;
            Box::new(json_error(StatusCode::BAD_REQUEST, e.code(), &[]))
        })?;
    // An upgrade carries no body (a WebSocket handshake is a GET): one with a body would
    // be metered as an upload, and the tunnel opened behind it would carry the client's
    // bytes past the route's `request_bytes` tiers.
    if normalized.upgrade.is_some() && !http_body::Body::is_end_stream(req.body()) {
        trace.answer = Answer::BadRequest;
        let code = "upgrade_with_body";
        return Err(Box::new(json_error(StatusCode::BAD_REQUEST, code, &[])));
    }
    if config.server.access_log.enabled() {
        trace.normalized = Some(Box::new(req.uri().clone()));
    }
    let host = normalized.host.as_ref().and_then(|h| h.to_str().ok());
    let Some(index) = config.find_route(host, req.uri().path(), req.method()) else {
        shared.metrics.requests_unmatched.inc();
        return Err(Box::new(json_error(StatusCode::NOT_FOUND, "no_route", &[])));
    };
    trace.route = Some(index);
    let client_ip = config
        .server
        .trusted_proxies
        .client_ip(conn.peer.ip(), req.headers());
    trace.client = Some(client_ip);
    let route = &config.routes[index];
    if route.keys_by_params {
        let charset = crate::request::charset::of_request(req.headers());
        let query = req.uri().query().unwrap_or("").as_bytes();
        if let Some(named) = charset.refusal(query) {
            return Err(Box::new(unsupported_charset(named)));
        }
    }
    let upgrade = tunnel_permit(normalized.upgrade, conn, client_ip, req).map_err(|_| {
        trace.answer = Answer::TooManyConnections;
        let code = "too_many_connections";
        Box::new(json_error(StatusCode::SERVICE_UNAVAILABLE, code, &[]))
    })?;
    let routed = Routed {
        snapshot,
        index,
        route,
    };
    Ok(Arrived {
        routed,
        client_ip,
        upgrade,
        trailers: normalized.trailers,
        host: normalized.host,
    })
}

/// A tunnel counts against `max_connections`: an upgrade with no slot left is refused
/// before the limiter, so the refusal costs the client nothing.
#[inline]
fn tunnel_permit(
    protocol: Option<http::HeaderValue>,
    conn: &ConnInfo,
    client: std::net::IpAddr,
    req: &Request<Incoming>,
) -> Result<Option<Box<Upgrade>>, tokio::sync::TryAcquireError> {
    let Some(protocol) = protocol else {
        return Ok(None);
    };
    let permit = conn.permits.clone().try_acquire_owned()?;
    // Boxed: every request's future carries the option, and few requests upgrade.
    Ok(Some(Box::new(Upgrade {
        protocol,
        permit,
        client,
        request_id: req.headers().get(&super::access_log::X_REQUEST_ID).cloned(),
    })))
}

#[cfg(test)]
mod tests {
    /// The size of the future an async fn taking two arguments returns.
    fn future_size<A, B, F, G: Fn(A, B) -> F>(_: G) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request in flight — a parked one too — holds its future: a few kilobytes,
    /// not the tens a Redis path's state would add if it were not boxed (parked.rs
    /// measures what 1,000 parked requests cost).
    #[test]
    fn a_requests_future_stays_small() {
        let size = future_size(super::handle);
        assert!(size <= 12 * 1024, "the request future is {size} bytes");
    }
}
