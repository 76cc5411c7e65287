//! The request path, top to bottom in one function: load the snapshot once → match the
//! route → take each tier's key → decide all tiers → forward, or answer 429.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_LENGTH, HOST, UPGRADE};
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::body::{HeldSlots, ResponseBody};
use super::forward::{prepare_request, strip_hop_by_hop};
use super::response::{
    concurrency_headers, concurrency_refused, json_error, rate_limit_headers, too_many_requests,
    wants_problem_json, Body, BoxError, PolicyHeaders, RouteHeaders, TierItem,
};
use super::settle::{parse_value, Measured, Metered, Settlement};
use crate::config::{Route, SettleSource};
use crate::conn::ConnInfo;
use crate::key::RequestView;
use crate::limit::{Mode, Verdict};
use crate::state::Shared;
use crate::store::{Admission, KeyRefusal, Refusal, RequestTiers, SlotOutcome};

/// What the access log line and the response counters need, filled in along the way.
struct Trace {
    route: Option<usize>,
    client: Option<std::net::IpAddr>,
    decision: &'static str,
    policy: Option<usize>,
    wait_ns: u64,
    /// The normalised target, kept only when an access log line will be written.
    normalized: Option<http::Uri>,
    /// Concurrency slots to hold until the response body is done.
    slots: HeldSlots,
}

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
    // Cheap clones (reference-counted) and a clock reading, only when a log line will be
    // written.
    let head = snapshot.config.server.access_log.then(|| {
        (
            req.method().clone(),
            req.uri().clone(),
            shared.clock.now_ns(),
        )
    });
    let mut trace = Trace {
        route: None,
        client: None,
        decision: "unmatched",
        policy: None,
        wait_ns: 0,
        normalized: None,
        slots: HeldSlots::new(),
    };
    let resp = serve(shared, &snapshot, conn, req, &mut trace).await;
    let status = resp.status().as_u16();
    if let Some(i) = trace.route {
        snapshot.route_metrics[i].responses[usize::from((status / 100).clamp(1, 5) - 1)].inc();
    }
    if let Some((method, uri, started)) = head {
        let route = trace.route.map(|i| &snapshot.config.routes[i]);
        let policy = route
            .zip(trace.policy)
            .map(|(r, p)| r.policies[p].name.as_str());
        tracing::info!(
            target: "tollgate::access",
            method = %method,
            path = %trace.normalized.as_ref().unwrap_or(&uri).path(),
            raw_path = %uri.path(),
            route = route.map_or("", |r| r.name.as_str()),
            client = %trace.client.unwrap_or(conn.peer.ip()),
            decision = trace.decision,
            policy = policy.unwrap_or(""),
            wait_ms = super::response::ceil_millis(trace.wait_ns),
            status,
            elapsed_ms = shared.clock.now_ns().saturating_sub(started) / 1_000_000,
        );
    }
    let slots = std::mem::take(&mut trace.slots);
    Ok(resp.map(|body| ResponseBody::new(body, in_flight, slots)))
}

/// The request path proper; `trace` collects what the log line reports.
async fn serve(
    shared: &Arc<Shared>,
    snapshot: &crate::state::Snapshot,
    conn: &ConnInfo,
    mut req: Request<Incoming>,
    trace: &mut Trace,
) -> Response<Body> {
    let config = &snapshot.config;
    let normalized = match super::head::normalize(&mut req, &config.server.paths) {
        Ok(n) => n,
        Err(e) => {
            trace.decision = "bad_request";
            return json_error(StatusCode::BAD_REQUEST, e.code(), &[]);
        }
    };
    if config.server.access_log {
        trace.normalized = Some(req.uri().clone());
    }
    let host = req.headers().get(HOST).and_then(|h| h.to_str().ok());
    let Some(route_index) = config.find_route(host, req.uri().path(), req.method()) else {
        shared.metrics.requests_unmatched.inc();
        return json_error(StatusCode::NOT_FOUND, "no_route", &[]);
    };
    trace.route = Some(route_index);
    let route = &config.routes[route_index];
    let route_metrics = &snapshot.route_metrics[route_index];
    let client_ip = config
        .server
        .trusted_proxies
        .client_ip(conn.peer.ip(), req.headers());
    trace.client = Some(client_ip);

    let view = RequestView {
        method: req.method(),
        uri: req.uri(),
        headers: req.headers(),
        client_ip,
        route: &route.name,
    };
    // A tunnel counts against `max_connections`: an upgrade with no slot left is refused
    // before the limiter, so the refusal costs the client nothing.
    let upgrade = match normalized.upgrade {
        Some(protocol) => match conn.permits.clone().try_acquire_owned() {
            Ok(permit) => Some((protocol, permit)),
            Err(_) => {
                trace.decision = "too_many_connections";
                return json_error(StatusCode::SERVICE_UNAVAILABLE, "too_many_connections", &[]);
            }
        },
        None => None,
    };
    let mut admission = Admission::default();
    match shared
        .limiter
        .check_request(route, &view, &*shared.clock, &mut admission)
        .await
    {
        Ok(()) => {}
        Err(Refusal::Key(refusal)) => {
            let (code, position) = match refusal {
                KeyRefusal::Missing(p) => ("missing_key", p),
                KeyRefusal::TooManyValues(p) => ("too_many_key_values", p),
            };
            trace.decision = code;
            trace.policy = Some(position);
            return json_error(
                StatusCode::BAD_REQUEST,
                code,
                &[("policy", route.policies[position].name.as_str().into())],
            );
        }
        Err(Refusal::StoreUnavailable) => {
            trace.decision = "store_unavailable";
            return json_error(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", &[]);
        }
    };
    let now = admission.now;
    let held = admission.take_slots();
    let mut settlement = (!admission.settles.is_empty())
        .then(|| Settlement::new(shared.clone(), std::mem::take(&mut admission.settles)));
    let Admission {
        tiers:
            RequestTiers {
                tiers,
                positions,
                slots,
                ..
            },
        verdict,
        slot_outcomes,
        ..
    } = &admission;
    let admitted = verdict.admitted && admission.refused_slot().is_none();
    count_decisions(verdict, tiers, positions, route_metrics);
    count_slot_decisions(slots, slot_outcomes, admitted, route_metrics);
    if let Some(k) = admission.refused_slot() {
        let position = slots[k].position;
        let policy = &route.policies[position];
        let retry_after = policy
            .concurrency()
            .map_or(Duration::from_secs(1), |c| c.retry_after);
        trace.decision = "denied";
        trace.policy = Some(position);
        trace.wait_ns = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
        let constant = &snapshot.route_headers[route_index].policies[position];
        let own = slot_headers(policy, slots[k].max, constant);
        let problem = wants_problem_json(req.headers());
        return concurrency_refused(&policy.name, retry_after, &own, problem);
    }
    for (outcome, &position) in verdict.outcomes().iter().zip(positions) {
        if outcome.mode == crate::limit::Mode::Shadow && !outcome.decision.admitted {
            tracing::info!(target: "tollgate::shadow", route = %route.name, policy = %route.policies[position].name, client = %client_ip, wait_ms = super::response::ceil_millis(outcome.decision.wait_ns), "shadow tier would deny");
        }
    }
    if !verdict.admitted {
        let (reported, items) =
            reported_tiers(&admission, route, &snapshot.route_headers[route_index]);
        let first = verdict
            .first_denier
            .map_or("", |k| route.policies[positions[k]].name.as_str());
        route_metrics
            .retry_after
            .observe(verdict.wait_ns as f64 / 1e9);
        trace.decision = "denied";
        trace.policy = verdict.first_denier.map(|k| positions[k]);
        trace.wait_ns = verdict.wait_ns;
        let violated = if wants_problem_json(req.headers()) {
            Some(violated_policies(verdict, positions, route))
        } else {
            None
        };
        return too_many_requests(
            verdict,
            first,
            reported.as_ref(),
            &items,
            &snapshot.route_headers[route_index],
            violated.as_deref(),
        );
    }
    trace.decision = "admitted";
    trace.wait_ns = verdict.delay_ns;
    if verdict.delay_ns > 0 {
        tokio::time::sleep(Duration::from_nanos(verdict.delay_ns)).await;
    }

    let pool = &snapshot.pools[route.upstream_index];
    let mut held = held;
    let sent = Sent {
        server: &config.server,
        route,
        pool,
        conn,
        now,
    };
    let uploaded = settlement
        .as_mut()
        .map(|s| s.split(|source| *source == SettleSource::RequestBytes));
    let forwarded = forward(shared, sent, req, upgrade, &mut held, uploaded).await;
    // Whatever a tunnel did not take is held until the response body is done.
    trace.slots = held;
    let mut resp = match settlement {
        Some(settlement) => settle_response(forwarded, settlement, &mut admission).await,
        None => forwarded.unwrap_or_else(|resp| resp),
    };
    let (reported, items) = reported_tiers(&admission, route, &snapshot.route_headers[route_index]);
    let Admission {
        tiers: RequestTiers { slots, .. },
        slot_outcomes,
        ..
    } = &admission;
    if let Some(r) = &reported {
        rate_limit_headers(
            resp.headers_mut(),
            r,
            &items,
            Some(&snapshot.route_headers[route_index]),
        );
    }
    for (tier, outcome) in slots.iter().zip(slot_outcomes) {
        let policy = &route.policies[tier.position];
        // Shadow tiers are counted, never shown.
        if let (SlotOutcome::Held { free }, Mode::Enforce) = (outcome, policy.mode) {
            let constant = &snapshot.route_headers[route_index].policies[tier.position];
            let own = slot_headers(policy, tier.max, constant);
            concurrency_headers(resp.headers_mut(), &policy.name, &own, *free);
        }
    }
    resp
}

/// The tier `X-RateLimit-*` report and the `RateLimit` items, as the admission left them
/// (settled costs included).
fn reported_tiers<'a>(
    admission: &Admission,
    route: &'a Route,
    headers: &'a RouteHeaders,
) -> (Option<TierItem<'a>>, smallvec::SmallVec<[TierItem<'a>; 4]>) {
    let Admission {
        tiers: RequestTiers {
            tiers, positions, ..
        },
        verdict,
        ..
    } = admission;
    let reported = verdict.reporting.map(|k| TierItem {
        policy: &route.policies[positions[k]].name,
        quota: tiers[k].quota,
        constant: constant_headers(
            &route.policies[positions[k]],
            &tiers[k].quota,
            &headers.policies[positions[k]],
        ),
        until_full_ns: verdict.outcomes()[k].decision.until_idle_ns,
        remaining: verdict.remaining,
    });
    // On a refusal, tiers are described from their TATs, relative to the verdict's own now.
    let items = tier_items(
        verdict,
        tiers,
        positions,
        route,
        &headers.policies,
        verdict.now,
    );
    (reported, items)
}

/// Settles what the response head tells (a header's value; a failed upstream), waiting so
/// the headers sent describe the settled state, and meters the response body for what
/// its bytes or trailers tell.
async fn settle_response(
    forwarded: Result<Response<Body>, Response<Body>>,
    mut settlement: Settlement,
    admission: &mut Admission,
) -> Response<Body> {
    let by_header = settlement.split(|s| matches!(s, SettleSource::ResponseHeader(_)));
    let resp = match forwarded {
        Err(resp) => {
            // The gateway answered (502, 504, 413…): no cost came back.
            for s in [by_header, settlement] {
                s.finish(|_| Measured::UpstreamFailed(0));
            }
            return resp;
        }
        Ok(resp) => resp,
    };
    let server_error = resp.status().is_server_error();
    if !by_header.is_empty() {
        let measured = by_header.measure(|p| match &p.settle().source {
            SettleSource::ResponseHeader(name) => match parse_value(resp.headers(), name) {
                Measured::Missing if server_error => Measured::UpstreamFailed(0),
                measured => measured,
            },
            _ => Measured::Missing,
        });
        let settled = by_header.finish_waiting(measured).await;
        for (tier, debt) in settled {
            let quota = admission.tiers.tiers[tier].quota;
            admission.verdict.settled(tier, debt, &quota);
        }
    }
    if settlement.is_empty() {
        return resp;
    }
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        // A tunnel's bytes are not the response's: it settles at its reserve.
        settlement.finish(|_| Measured::Aborted(0));
        return resp;
    }
    resp.map(|body| Metered::new(body, settlement, server_error).boxed_unsync())
}

/// One `RateLimit-Policy` / `RateLimit` item per enforcing rate tier, in route order. A
/// policy whose key came with several values speaks through the key with the fewest
/// remaining. On a denial every tier is described as the request left it: rolled back.
fn tier_items<'a>(
    verdict: &Verdict,
    tiers: &[crate::limit::Tier],
    positions: &[usize],
    route: &'a Route,
    headers: &'a [PolicyHeaders],
    now: u64,
) -> smallvec::SmallVec<[TierItem<'a>; 4]> {
    let outcomes = verdict.outcomes();
    let mut items = smallvec::SmallVec::new();
    let mut i = 0;
    while i < outcomes.len() {
        let position = positions[i];
        let end = positions[i..outcomes.len()]
            .iter()
            .position(|&p| p != position)
            .map_or(outcomes.len(), |n| i + n);
        if outcomes[i].mode == Mode::Enforce {
            let state = (i..end).map(|k| {
                let (o, quota) = (&outcomes[k], tiers[k].quota);
                let d = &o.decision;
                if verdict.admitted {
                    (k, d.remaining, d.until_idle_ns)
                } else if d.admitted {
                    let left = quota.remaining(o.prior_tat, now);
                    (k, left, o.prior_tat.saturating_sub(now))
                } else {
                    (k, quota.remaining(o.prior_tat, now), d.until_idle_ns)
                }
            });
            if let Some((k, remaining, until_full_ns)) = state.min_by_key(|s| s.1) {
                let policy = &route.policies[position];
                items.push(TierItem {
                    policy: &policy.name,
                    quota: tiers[k].quota,
                    constant: constant_headers(policy, &tiers[k].quota, &headers[position]),
                    remaining,
                    until_full_ns,
                });
            }
        }
        i = end;
    }
    items
}

/// The names of the enforcing tiers that refused the request, in route order, each once
/// (a policy whose key came with several values refuses once): the problem details'
/// `violated-policies`.
fn violated_policies<'a>(
    verdict: &Verdict,
    positions: &[usize],
    route: &'a Route,
) -> smallvec::SmallVec<[&'a str; 4]> {
    let mut names = smallvec::SmallVec::new();
    let mut last = None;
    for (outcome, &position) in verdict.outcomes().iter().zip(positions) {
        if outcome.mode == Mode::Enforce && !outcome.decision.admitted && last != Some(position) {
            names.push(route.policies[position].name.as_str());
            last = Some(position);
        }
    }
    names
}

/// A rate tier's header values built at config load, when the key decided on the
/// policy's own quota (not an override's).
fn constant_headers<'a>(
    policy: &crate::config::Policy,
    quota: &crate::limit::Quota,
    constant: &'a PolicyHeaders,
) -> Option<&'a PolicyHeaders> {
    (Some(quota) == policy.rate().map(|r| &r.quota)).then_some(constant)
}

/// A concurrency tier's header values: the policy's constant ones, or, for a key with an
/// override, ones naming its own cap.
fn slot_headers<'a>(
    policy: &crate::config::Policy,
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

/// Counts one decision per concurrency tier.
fn count_slot_decisions(
    slots: &[crate::store::SlotTier],
    outcomes: &[SlotOutcome],
    admitted: bool,
    metrics: &crate::metrics::RouteMetrics,
) {
    for (tier, outcome) in slots.iter().zip(outcomes) {
        let counters = &metrics.tiers[tier.position];
        match outcome {
            SlotOutcome::Refused => counters.denied.inc(),
            SlotOutcome::ShadowFull => counters.shadow_denied.inc(),
            SlotOutcome::Held { .. } | SlotOutcome::Unchecked if admitted => {
                counters.admitted.inc()
            }
            SlotOutcome::Held { .. } | SlotOutcome::Unchecked | SlotOutcome::Skipped => {}
        }
    }
}

/// Where an admitted request goes: what `forward` needs besides the request.
struct Sent<'a> {
    server: &'a crate::config::Server,
    route: &'a Route,
    pool: &'a Arc<super::pool::UpstreamPool>,
    conn: &'a ConnInfo,
    now: u64,
}

/// Counts one decision per policy: a policy whose key came with several values counts
/// as denied when any of its keys denied.
fn count_decisions(
    verdict: &Verdict,
    tiers: &[crate::limit::Tier],
    positions: &[usize],
    metrics: &crate::metrics::RouteMetrics,
) {
    let outcomes = verdict.outcomes();
    let mut i = 0;
    while i < outcomes.len() {
        let position = positions[i];
        let end = positions[i..]
            .iter()
            .position(|&p| p != position)
            .map_or(outcomes.len(), |n| i + n);
        let counters = &metrics.tiers[position];
        if outcomes[i..end]
            .iter()
            .zip(&tiers[i..end])
            .any(|(o, t)| o.key != t.key)
        {
            counters.overflow.inc();
        }
        match outcomes[i..end].iter().find(|o| !o.decision.admitted) {
            Some(o) if o.mode == crate::limit::Mode::Enforce => {
                counters.denied.inc();
            }
            Some(_) => {
                counters.shadow_denied.inc();
            }
            None if verdict.admitted => {
                counters.admitted.inc();
            }
            None => {}
        }
        i = end;
    }
}

/// Sends an admitted request upstream and maps the answer or the failure to a response.
/// A tunnel takes the request's concurrency slots from `slots` for its whole life.
async fn forward(
    shared: &Shared,
    sent: Sent<'_>,
    mut req: Request<Incoming>,
    upgrade: Option<(http::HeaderValue, tokio::sync::OwnedSemaphorePermit)>,
    slots: &mut HeldSlots,
    uploaded: Option<Settlement>,
) -> Result<Response<Body>, Response<Body>> {
    let Sent {
        server,
        route,
        pool,
        conn,
        now,
    } = sent;
    let (upgrade, tunnel_permit) = upgrade.unzip();
    let client_version = req.version();
    let (body_read_timeout, tunnel_idle_timeout) =
        (server.body_read_timeout, server.tunnel_idle_timeout);
    if let Some(max) = route.max_body {
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > max) {
            return Err(json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                &[("max_body", max.into())],
            ));
        }
    }
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let replayable = req.body().is_end_stream();
    let (parts, body) = req.into_parts();
    // A failure of the client's body is tagged, so it is answered as the client's fault;
    // a client that goes silent mid-body is cut after `body_read_timeout`. A request known
    // to have no body (most GETs) skips the timer.
    let body = body.map_err(|e| BoxError::from(super::body::ClientBodyError(e)));
    let body: Body = match (route.max_body, replayable) {
        (_, true) => body.boxed_unsync(),
        (None, false) => super::body::IdleTimeout::new(body, body_read_timeout).boxed_unsync(),
        (Some(max), false) => Limited::new(
            super::body::IdleTimeout::new(body, body_read_timeout),
            usize::try_from(max).unwrap_or(usize::MAX),
        )
        .boxed_unsync(),
    };
    // `request_bytes` tiers settle on what the client's body carried to the upstream.
    let body = match uploaded.filter(|s| !s.is_empty()) {
        Some(settlement) => Metered::new(body, settlement, false).boxed_unsync(),
        None => body,
    };
    let mut outgoing = Request::from_parts(parts, body);
    prepare_request(&mut outgoing, &conn.peer_text, conn.tls);

    let sent = shared.clock.now_ns();
    let result = pool.send(outgoing, now, replayable, &conn.upstream).await;
    let upstream = &pool.upstream.name;
    let mut resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            // The client's own body failing is the client's fault: not worth a warning.
            if e.clients_fault() {
                tracing::debug!(route = %route.name, error = %e, "client request body failed");
            } else {
                tracing::warn!(route = %route.name, upstream = %upstream, error = %e, "upstream failed");
            }
            return Err(e.response(upstream));
        }
    };
    pool.observe(
        resp.status().as_u16(),
        shared.clock.now_ns().saturating_sub(sent) as f64 / 1e9,
    );

    let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        // Tunnel only the upgrade the client asked for, and only when the 101 names it:
        // otherwise the "tunnel" could carry any number of unlimited requests.
        let agreed = upgrade
            .as_ref()
            .is_some_and(|asked| super::head::upgrade_matches(asked, resp.headers().get(UPGRADE)));
        let Some(client_upgrade) = client_upgrade.filter(|_| agreed) else {
            tracing::warn!(route = %route.name, upstream = %upstream, "upstream answered 101 to a request that did not ask for that upgrade");
            return Err(json_error(
                StatusCode::BAD_GATEWAY,
                "upstream_bad_upgrade",
                &[("upstream", upstream.as_str().into())],
            ));
        };
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        if let Some(permit) = tunnel_permit {
            super::tunnel::spawn(
                client_upgrade,
                upstream_upgrade,
                permit,
                conn.clone(),
                tunnel_idle_timeout,
                shared.metrics.open_connections.clone(),
                std::mem::take(slots),
            );
        }
    }
    // An intermediary answers in its own HTTP version (RFC 9110 §6.2): an HTTP/1.0
    // upstream must not turn the client's keep-alive connection into a 1.0 one.
    *resp.version_mut() = if client_version == http::Version::HTTP_2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    strip_hop_by_hop(resp.headers_mut(), switching);
    Ok(resp.map(|b| b.map_err(BoxError::from).boxed_unsync()))
}
