//! What an admitted request's response carries back: its settled costs (a header's value
//! settled before the head goes out; bytes and trailers metered as the body streams) and
//! the rate-limit headers of every enforcing tier.

use http::{Response, StatusCode};
use http_body_util::BodyExt;

use super::admit::{slot_headers, Routed};
use super::response::{concurrency_headers, rate_limit_headers, Answer};
use super::settle::{parse_value, CutReason, Measured, Metered, Settlement, Side};
use crate::config::SettleSource;
use crate::reply::Body;
use crate::store::Admission;

/// What forwarding gave: the upstream's answer (or on `Err` the gateway's own), what is
/// left to settle, and whether the client takes trailers.
pub type Answered = (
    Result<Response<Body>, Response<Body>>,
    Option<Settlement>,
    bool,
);

/// The response for the client: the forwarded answer, settled, with the rate-limit
/// headers.
pub async fn describe(
    routed: &Routed<'_>,
    (forwarded, settlement, trailers): Answered,
    admission: &mut Admission,
) -> Response<Body> {
    let mut resp = match settlement {
        Some(settlement) => settle_response(forwarded, settlement, admission, trailers).await,
        None => forwarded.unwrap_or_else(|resp| resp),
    };
    if routed.route.policies.is_empty() {
        return resp; // an unlimited route: no limits to describe
    }
    let mut items = super::admit::TierItems::new();
    let reported = routed.reports(admission, &mut items);
    if let Some(r) = &reported {
        rate_limit_headers(resp.headers_mut(), r, &items, Some(routed.headers()));
    }
    for (position, max, free) in admission.held_slots() {
        let policy = &routed.route.policies[position];
        let constant = &routed.answer(position).headers;
        let own = slot_headers(policy, max, constant);
        concurrency_headers(resp.headers_mut(), &policy.name, &own, free);
    }
    resp
}

/// A tunnel meters its byte tiers as its bytes pass and settles them when it ends (its
/// other tiers as a request cut short: it reports no value): handed over with the
/// response.
fn settle_tunnel(mut resp: Response<Body>, settlement: Settlement) -> Response<Body> {
    if let Some(tunnel) = resp
        .extensions_mut()
        .remove::<super::tunnel::TunnelSettle>()
    {
        tunnel.hand_over(settlement);
    }
    // Else no tunnel runs: dropped, the settlement settles as nothing moved.
    resp
}

/// Settles what the response head tells (a header's value; a failed upstream), waiting so
/// the headers sent describe the settled state, and meters the response body for what
/// its bytes or trailers tell.
async fn settle_response(
    forwarded: Result<Response<Body>, Response<Body>>,
    mut settlement: Settlement,
    admission: &mut Admission,
    takes_trailers: bool,
) -> Response<Body> {
    let by_header = settlement.split(|s| matches!(s, SettleSource::ResponseHeader(_)));
    // An upgrade's request bytes (it had no body) are the tunnel's, if one opens; else
    // none moved.
    let opened = matches!(&forwarded, Ok(r) if r.status() == StatusCode::SWITCHING_PROTOCOLS);
    if !opened {
        let unsent = settlement.split(|s| *s == SettleSource::RequestBytes);
        if !unsent.is_empty() {
            unsent.finish(|_| Measured::Bytes(0));
        }
    }
    let resp = match forwarded {
        Err(resp) => {
            settle_unanswered(&resp, [by_header, settlement]);
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
        let clock = by_header.clock();
        let (settled, now) = by_header.finish_waiting(measured).await;
        for (tier, debt) in settled {
            admission.settled(tier, debt, (now, &*clock));
        }
    }
    settle_trailers_only(&resp, &mut settlement);
    if settlement.is_empty() {
        return resp;
    }
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return settle_tunnel(resp, settlement);
    }
    metered(resp, settlement, takes_trailers)
}

/// The gateway answered (502, 504, 408, 400…): no cost came back. Past the upstream
/// timeout the upstream had the request and may still run it to the end (and bill it):
/// its cost is unreported, as when the client hangs up — else a client asking for more
/// than the timeout allows paid an upstream failure.
fn settle_unanswered(resp: &Response<Body>, settlements: [Settlement; 2]) {
    let answer = resp.extensions().get::<Answer>();
    let ran = matches!(answer, Some(Answer::UpstreamTimeout));
    // The client's own upload failed (broken, stalled, or cut for a bytes tier it spent):
    // the client left, as when it hangs up — the value it kept from coming settles at
    // `max_cost`, not as the upstream's failure (which `refund_on_upstream_error` would
    // make free). A body past `max_body` is the gateway's refusal, which counts as failed
    // (docs/decisions.md).
    // A call whose own deadline passed (`grpc-timeout`) chose when to stop waiting, as
    // a hang-up does: a request header must not turn `max_cost` into the reserve.
    let client_left = matches!(
        answer,
        Some(Answer::BodyBroken | Answer::BodyStalled | Answer::DeadlineExceeded)
            | Some(Answer::BodyCut {
                why: CutReason::Budget | CutReason::MaxCost,
                ..
            })
    );
    // (No byte can move after it: a bytes source is the upstream's failure.)
    for s in settlements {
        s.finish(|p| match (client_left, ran) {
            (true, _) => Measured::Aborted(0),
            (false, true) if !p.settle().source.measures_bytes() => Measured::Unreported,
            _ => Measured::UpstreamFailed(0),
        });
    }
}

/// A gRPC answer that is trailers only (no message came: an error, or an empty stream
/// after work done): its trailers are its head, so a trailer-settled tier reads its
/// value there — else it settled as a value that never came, the reserve.
fn settle_trailers_only(resp: &Response<Body>, settlement: &mut Settlement) {
    let grpc = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
    if !grpc || !http_body::Body::is_end_stream(resp.body()) || !settlement.reads_trailers() {
        return;
    }
    let server_error = resp.status().is_server_error();
    let in_head = settlement.split(|s| matches!(s, SettleSource::ResponseTrailer(_)));
    in_head.finish(|p| match &p.settle().source {
        SettleSource::ResponseTrailer(name) => match parse_value(resp.headers(), name) {
            Measured::Missing if server_error => Measured::UpstreamFailed(0),
            measured => measured,
        },
        _ => Measured::Missing,
    });
}

/// Whether `status` is a proxy in front of the upstream giving up on an answer the
/// upstream may still be working on: `504`, Cloudflare's `524`, the `598` some proxies
/// send for a read timeout, and the `408` Envoy (Istio's sidecars) answers when its
/// `stream_idle_timeout` passes before the upstream's head — a long unstreamed generation
/// the client chose. (`522`, `599`: the connection was never made.)
fn proxy_timed_out(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 504 | 524 | 598)
}

/// Whether `status` is a 4xx the HTTP status code registry names: what a model API
/// answers before it runs a request (a bad request, a refused key, its own rate limit).
/// Another 4xx is a gateway in front of the model speaking for itself — Portkey's `446`,
/// an output guardrail's refusal of what the model generated (and billed).
fn registered_client_error(status: StatusCode) -> bool {
    matches!(status.as_u16(), 400..=418 | 421..=426 | 428 | 429 | 431 | 451)
}

/// The answer's body, metered for what its bytes, usage or trailers tell.
fn metered(resp: Response<Body>, settlement: Settlement, takes_trailers: bool) -> Response<Body> {
    let side = Side::Response {
        server_error: resp.status().is_server_error(),
        success: resp.status().is_success(),
        may_have_run: proxy_timed_out(resp.status())
            || (resp.status().is_client_error() && !registered_client_error(resp.status())),
        refused: registered_client_error(resp.status()),
        strip_trailers: !takes_trailers,
    };
    let reads_usage = settlement.reads_usage();
    let mut resp = resp;
    if !takes_trailers {
        // The trailers read for the settle are not passed on: none are announced.
        resp.headers_mut().remove(http::header::TRAILER);
    }
    // A trailer settles it: the body is read to its end, so its length is not told (an
    // HTTP/1 writer stops at a declared length, before an HTTP/2 upstream's trailers).
    let to_its_end = settlement.reads_trailers();
    if to_its_end {
        resp.headers_mut().remove(http::header::CONTENT_LENGTH);
    }
    let (parts, body) = resp.into_parts();
    let mut metered = Metered::new(body, settlement, side);
    if to_its_end {
        metered = metered.to_its_end();
    }
    if reads_usage {
        // Read from the head it came with: a JSON body or an event stream.
        let content_type = parts.headers.get(http::header::CONTENT_TYPE);
        metered = metered.scanning_usage(content_type.map(http::HeaderValue::as_bytes));
    }
    Response::from_parts(parts, metered.boxed_unsync())
}
