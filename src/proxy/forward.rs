//! Forwarding an admitted request: its body bounded (size, silence) and metered when a
//! tier settles on its bytes, the request sent through the upstream pool, and the answer
//! (or the failure) turned into the response — an agreed upgrade becomes a tunnel.

use std::sync::Arc;

use http::header::{CONTENT_LENGTH, UPGRADE};
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::access_log::TunnelOpened;
use super::body::{AnswerBody, Answering, IdleTimeout, UntilAnswered};
use super::hop::{prepare_request, strip_hop_by_hop};
use super::key_body::{KeyBody, Prefixed};
use super::pool::UpstreamPool;
use super::request_trailers::WithoutTrailers;
use super::response::Answer;
use super::response::CutReason;
use super::response_body::HeldSlots;
use super::settle::{Metered, Settlement, Side};
use super::snapshot::Shared;
use crate::config::{Config, Route, Server};
use crate::conn::ConnInfo;
use crate::reply::{json_error, Body, BoxError};

/// Where an admitted request goes: what [`forward`] needs besides the request.
pub struct Sent<'a> {
    pub config: &'a Config,
    pub route: &'a Route,
    pub pool: &'a Arc<UpstreamPool>,
    /// How long the upstream has to answer: its `timeout`, or a gRPC call's shorter
    /// `grpc-timeout`.
    pub timeout: std::time::Duration,
    pub conn: &'a ConnInfo,
    /// The clock reading the request was admitted at.
    pub now: u64,
    /// A tier settles from a trailer: the upstream is asked for trailers (`TE:
    /// trailers`), whatever the client asked, so leaving them out cannot lower a cost.
    pub ask_trailers: bool,
    /// A tier settles on the usage the answer's body reports: the upstream is asked for
    /// an unencoded answer (`Accept-Encoding: identity`), whatever the client accepts,
    /// so a compressed body cannot hide the usage and fall back to the reserve.
    pub ask_identity: bool,
    /// What was read of the body before the decision (routes that key by it): sent
    /// first, unchanged. Boxed: every request's future carries this field, and only
    /// routes that read the body fill it.
    pub key_body: Option<Box<KeyBody>>,
    /// The request's `Host` as normalised: what `X-Forwarded-Host` says.
    pub host: Option<http::HeaderValue>,
}

/// A tunnel the client asked for: the protocol, its `max_connections` permit, and what
/// its access log line names (the request's own line is written at the 101).
pub struct Upgrade {
    pub protocol: http::HeaderValue,
    pub permit: tokio::sync::OwnedSemaphorePermit,
    pub client: std::net::IpAddr,
    /// The client's `x-request-id`.
    pub request_id: Option<http::HeaderValue>,
}

/// Sends an admitted request upstream and maps the answer or the failure to a response
/// (`Err`: the gateway answered itself). A tunnel takes the request's concurrency slots
/// from `slots` for its whole life. `uploaded`: the tiers settled on the request's body.
pub async fn forward(
    shared: &Shared,
    mut sent: Sent<'_>,
    mut req: Request<Incoming>,
    upgrade: Option<Box<Upgrade>>,
    slots: &mut HeldSlots,
    uploaded: Option<Settlement>,
) -> Result<Response<Body>, Response<Body>> {
    let key_body = sent.key_body.take();
    let host = sent.host.take();
    let Sent {
        route,
        pool,
        conn,
        now,
        ..
    } = &sent;
    // HTTP/2 has no Upgrade: to such an upstream, the request goes as a plain one.
    let upgrade = upgrade.filter(|_| !pool.upstream.protocol.multiplexed());
    let client_version = req.version();
    if let Some(refused) = declared_too_large(&req, route, uploaded.as_ref()) {
        return Err(refused);
    }
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    // Nothing of the body was read: it can be sent again.
    let replayable = req.body().is_end_stream() && key_body.as_ref().is_none_or(|b| b.is_empty());
    // The head moves once, into the outgoing request; only the body is rebuilt.
    let (parts, body) = req.into_parts();
    let (body, answering) = outgoing_body(body, &sent, key_body, uploaded, replayable);
    let mut outgoing = Request::from_parts(parts, body);
    prepare_request(&mut outgoing, (&conn.peer_text, conn.tls), host);
    if !replayable {
        // Its trailers stop here: announcing them would promise fields that never come.
        outgoing.headers_mut().remove(http::header::TRAILER);
    }
    if sent.ask_trailers {
        let te = http::HeaderValue::from_static("trailers");
        outgoing.headers_mut().insert(http::header::TE, te);
    }
    if sent.ask_identity {
        let identity = http::HeaderValue::from_static("identity");
        outgoing
            .headers_mut()
            .insert(http::header::ACCEPT_ENCODING, identity);
    }

    let sent_at = shared.clock.now_ns();
    let result = pool
        .send(outgoing, *now, replayable, &conn.upstream, sent.timeout)
        .await;
    let mut resp = match result {
        Ok(resp) => resp,
        Err(e) => return Err(failed(shared, &sent, &e)),
    };
    pool.observe(
        resp.status().as_u16(),
        shared.clock.now_ns().saturating_sub(sent_at) as f64 / 1e9,
    );
    let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        let asked = upgrade.zip(client_upgrade);
        if let Some(refused) = open_tunnel(shared, &sent, &mut resp, asked, slots) {
            return Err(refused);
        }
    }
    // An intermediary answers in its own HTTP version (RFC 9110 §6.2): an HTTP/1.0
    // upstream must not turn the client's keep-alive connection into a 1.0 one.
    *resp.version_mut() = if client_version == http::Version::HTTP_2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    strip_hop_by_hop(resp.headers_mut(), switching, &Default::default());
    Ok(resp.map(|b| AnswerBody::new(b.map_err(BoxError::from), answering).boxed_unsync()))
}

/// The answer to an exchange with the upstream that failed, and its log line: none worth
/// a warning for the client's own body; for a call's own deadline (its `grpc-timeout`,
/// the client's choice, yet how a hung upstream shows when its callers set deadlines)
/// one a second at most for each upstream; a warning for anything else.
fn failed(shared: &Shared, sent: &Sent<'_>, e: &super::pool::ForwardError) -> Response<Body> {
    let (route, pool) = (sent.route, sent.pool);
    let upstream = &pool.upstream.name;
    let deadline = sent.timeout < pool.upstream.timeout;
    if e.clients_fault() {
        tracing::debug!(route = %route.name, error = %e, "client request body failed");
    } else if deadline && e.timed_out() {
        match pool.warn_of_deadline(shared.clock.now_ns()) {
            Some(unwarned) => {
                tracing::warn!(route = %route.name, upstream = %upstream, error = %e, unwarned, "a call's deadline passed before the upstream answered (one line a second at most for each upstream; `unwarned`: those since the last)")
            }
            None => {
                tracing::debug!(route = %route.name, upstream = %upstream, error = %e, "a call's deadline passed before the upstream answered")
            }
        }
    } else {
        tracing::warn!(route = %route.name, upstream = %upstream, error = %e, "upstream failed");
    }
    e.response(upstream, deadline)
}

/// The body as it goes upstream: behind what was read of it before the decision, bounded
/// and metered (see [`upstream_body`]); one still to come is cut when its answer is over
/// (held by the answer's body: the [`Answering`]).
#[inline(always)]
fn outgoing_body(
    body: Incoming,
    sent: &Sent<'_>,
    key_body: Option<Box<KeyBody>>,
    uploaded: Option<Settlement>,
    replayable: bool,
) -> (Body, Option<Answering>) {
    let (server, route) = (&sent.config.server, sent.route);
    if replayable {
        // No byte and no frame to come (so no trailer to stop, nothing to cut): sent as
        // an empty body, which hyper sees as it sees the ended one (no frame, an exact
        // size of 0) and which boxes without allocating (it has no size).
        drop((body, key_body));
        let empty = http_body_util::Empty::new().map_err(|never| match never {});
        return (upstream_body(empty, server, route, true, uploaded), None);
    }
    let body = body.map_err(|e| BoxError::from(super::body::ClientBodyError(e)));
    let (body, answering) = UntilAnswered::new(body);
    let body = match key_body {
        Some(read) => upstream_body(
            WithoutTrailers::new(Prefixed::new(*read, body)),
            server,
            route,
            false,
            uploaded,
        ),
        None => upstream_body(WithoutTrailers::new(body), server, route, false, uploaded),
    };
    (body, answering)
}

/// Turns an upstream's 101 into a tunnel: only for the upgrade the client asked for, and
/// only when the 101 names it (otherwise the "tunnel" could carry any number of
/// unlimited requests): the 502 when it does not. The tunnel takes the request's
/// concurrency slots.
fn open_tunnel(
    shared: &Shared,
    sent: &Sent<'_>,
    resp: &mut Response<super::pool::PooledBody>,
    asked: Option<(Box<Upgrade>, hyper::upgrade::OnUpgrade)>,
    slots: &mut HeldSlots,
) -> Option<Response<Body>> {
    let upstream = &sent.pool.upstream.name;
    let answered = resp.headers().get(UPGRADE);
    let agreed = asked.filter(|(up, _)| super::head::upgrade_matches(&up.protocol, answered));
    let Some((upgrade, client)) = agreed else {
        tracing::warn!(route = %sent.route.name, upstream = %upstream, "upstream answered 101 to a request that did not ask for that upgrade");
        return Some(json_error(
            StatusCode::BAD_GATEWAY,
            "upstream_bad_upgrade",
            &[("upstream", upstream.as_str().into())],
        ));
    };
    let (settle, handle) = super::tunnel::TunnelSettle::new();
    resp.extensions_mut().insert(handle);
    // One id names the 101's line and the tunnel's: made here when the client sent none
    // that a line can show (the 101's line, written later, reads it from the response).
    let shown = |v: &http::HeaderValue| super::access_log::shown_id(v).is_some();
    let mut request_id = upgrade.request_id.clone().filter(shown);
    if request_id.is_none() && sent.config.server.access_log.enabled() {
        let made = super::access_log::MadeRequestId::make();
        request_id = Some(made.0.clone());
        resp.extensions_mut().insert(made);
    }
    let tunnel = super::tunnel::Tunnel {
        client,
        upstream: hyper::upgrade::on(resp),
        permit: upgrade.permit,
        conn: sent.conn.clone(),
        idle_timeout: sent.config.server.tunnel_idle_timeout,
        gauge: shared.metrics.open_connections.clone(),
        closed: shared.metrics.tunnels_closed.clone(),
        slots: std::mem::take(slots),
        settle,
        opened: TunnelOpened {
            mode: sent.config.server.access_log,
            lines_per_second: super::access_log::per_worker(sent.config),
            metrics: shared.metrics.clone(),
            clock: shared.clock.clone(),
            route: sent.route.name.as_str().into(),
            client: upgrade.client,
            request_id,
            at_ns: shared.clock.now_ns(),
        },
    };
    tunnel.spawn();
    None
}

/// 413 for a body whose declared length is above the route's `max_body`, or above what a
/// `request_bytes` tier lets one request move (`max_cost`): refused before a byte goes.
#[inline]
fn declared_too_large(
    req: &Request<Incoming>,
    route: &Route,
    uploaded: Option<&Settlement>,
) -> Option<Response<Body>> {
    if route.max_body.is_none() && uploaded.is_none() {
        return None;
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())?;
    if let Some(max) = route.max_body.filter(|&max| declared > max) {
        return Some(Answer::BodyTooLarge.on(json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            &[("max_body", max.into())],
        )));
    }
    let over = uploaded.and_then(|s| s.over_max_cost(declared))?;
    Some(super::response::body_cut(CutReason::MaxCost, &over.name))
}

/// The client's body as the upstream gets it. A failure of the client's body is tagged,
/// so it is answered as the client's fault; a client that goes silent mid-body is cut
/// after `body_read_timeout`; a request known to have no body (most GETs) skips the
/// timer. `request_bytes` tiers settle on what it carried to the upstream.
#[inline]
fn upstream_body<B>(
    body: B,
    server: &Server,
    route: &Route,
    empty: bool,
    uploaded: Option<Settlement>,
) -> Body
where
    B: http_body::Body<Data = bytes::Bytes, Error = BoxError> + Send + 'static,
{
    let body: Body = match (route.max_body, empty) {
        (_, true) => body.boxed_unsync(),
        (None, false) => IdleTimeout::new(body, server.body_read_timeout).boxed_unsync(),
        (Some(max), false) => Limited::new(
            IdleTimeout::new(body, server.body_read_timeout),
            usize::try_from(max).unwrap_or(usize::MAX),
        )
        .boxed_unsync(),
    };
    match uploaded.filter(|s| !s.is_empty()) {
        Some(settlement) => Metered::new(body, settlement, Side::Request).boxed_unsync(),
        None => body,
    }
}
