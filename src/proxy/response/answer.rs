//! Why a request ended as it did, typed from the decision to the wire: the access log's
//! decision word, the gRPC status and message of a gateway-made answer, and the body of a
//! cut upload are all read from one [`Answer`], never worked back from a status number.

use http::header::{HeaderValue, CONNECTION};
use http::{Response, StatusCode};

use super::cut::CutReason;
use crate::reply::{json_error, Body};

/// Why the request ended as it did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Answer {
    /// No route matched (404).
    #[default]
    Unmatched,
    /// Every tier admitted it: forwarded.
    Admitted,
    /// The store could not answer and `on_error = "allow"` forwarded it unlimited.
    StoreUnavailableAllowed,
    /// A tier refused it (429).
    Denied,
    /// `missing = "reject"` and its key is absent (400).
    MissingKey,
    /// A key source came with too many distinct values (400).
    TooManyKeyValues,
    /// A priced policy has no price for the model the request names (400).
    UnpricedModel,
    /// The route's cost is above the burst a runtime override gives the key: refused
    /// whenever it comes (429 without `Retry-After`).
    CostAboveBurst,
    /// The path or host was refused before routing (400).
    BadRequest,
    /// A route that reads the body got one in a coding it does not read (415).
    UnsupportedEncoding,
    /// A route that reads the body got one whose gzip or deflate does not decode (400).
    MalformedEncoding,
    /// A route that reads the body got one that decodes past its `max_body` (413), before
    /// any decision.
    DecodedTooLarge,
    /// A route that reads the body got a JSON-RPC batch, which it cannot limit per call
    /// (400).
    JsonRpcBatch,
    /// A route that reads the body got `Content-Type` lines naming more bodies than are
    /// read for parameters (400).
    AmbiguousContentType,
    /// A route keyed by a query parameter or by the body got a `Content-Type` naming a
    /// charset other than UTF-8 or ASCII, which an upstream may read its parameters in
    /// (415).
    UnsupportedCharset,
    /// An upgrade found no connection left under `max_connections` (503).
    TooManyConnections,
    /// Past this worker's share of `max_requests` (503).
    Overloaded,
    /// The store could not decide and `on_error = "deny"` (503).
    StoreUnavailable,
    /// Admitted, then every connection to the upstream was in use (503).
    UpstreamBusy,
    /// Admitted, then the upstream did not answer in time (504).
    UpstreamTimeout,
    /// Admitted, then the call's own deadline (a gRPC client's `grpc-timeout`, shorter
    /// than the upstream's `timeout`) passed before the upstream answered (504): the
    /// client's choice, as a hang-up is.
    DeadlineExceeded,
    /// Admitted, then the upstream could not be reached or broke (502).
    UpstreamUnavailable,
    /// Admitted, then its body went past `max_body` (413).
    BodyTooLarge,
    /// Admitted, then its body stalled past `body_read_timeout` (408).
    BodyStalled,
    /// Admitted, then its body was malformed or cut off by the client (400).
    BodyBroken,
    /// Admitted, then a bytes tier (`policy`) cut its body: its budget or `max_cost` ran
    /// out (413), or the store could not meter it under `on_error = "deny"` (503).
    BodyCut { why: CutReason, policy: String },
    /// The client hung up before the limiter decided: nothing was answered (its access
    /// log line says status 499).
    ClientClosed,
}

impl Answer {
    /// The access log's `decision`: what the limiter decided. An admitted request whose
    /// forwarding failed stays `admitted` (its status says what came of it).
    pub fn decision(&self) -> &'static str {
        match self {
            Answer::Unmatched => "unmatched",
            Answer::StoreUnavailableAllowed => "store_unavailable_allowed",
            Answer::Denied => "denied",
            Answer::MissingKey => "missing_key",
            Answer::TooManyKeyValues => "too_many_key_values",
            Answer::UnpricedModel => "unpriced_model",
            Answer::CostAboveBurst => "cost_above_burst",
            Answer::BadRequest => "bad_request",
            Answer::UnsupportedEncoding => "unsupported_content_encoding",
            Answer::JsonRpcBatch => "jsonrpc_batch",
            Answer::AmbiguousContentType => "ambiguous_content_type",
            Answer::UnsupportedCharset => "unsupported_charset",
            Answer::MalformedEncoding => "malformed_content_encoding",
            Answer::DecodedTooLarge => "decoded_too_large",
            Answer::TooManyConnections => "too_many_connections",
            Answer::Overloaded => "overloaded",
            Answer::StoreUnavailable => "store_unavailable",
            Answer::ClientClosed => "client_closed",
            Answer::Admitted
            | Answer::UpstreamBusy
            | Answer::UpstreamTimeout
            | Answer::DeadlineExceeded
            | Answer::UpstreamUnavailable
            | Answer::BodyTooLarge
            | Answer::BodyStalled
            | Answer::BodyBroken
            | Answer::BodyCut { .. } => "admitted",
        }
    }

    /// Whether the limiter admitted the request (what `access_log = "refused"` leaves
    /// out): forwarded, whatever came of the forwarding.
    pub fn admitted(&self) -> bool {
        self.decision() == "admitted"
    }

    /// What a person reads of it: the gRPC message of a gateway-made answer (`policy`
    /// and `wait_ns` name a refusal's tier and wait).
    pub fn message(&self, policy: Option<&str>, wait_ns: u64) -> String {
        let policy = policy.unwrap_or("?");
        let text = match self {
            Answer::Denied => {
                let ms = crate::reply::ceil_millis(wait_ns);
                return format!("rate limited by policy {policy}: retry in {ms} ms");
            }
            Answer::BodyCut { why, policy } => {
                return match why {
                    CutReason::Budget => format!("tollgate: request body cut: policy {policy}'s budget ran out"),
                    CutReason::MaxCost => format!("tollgate: request body cut: policy {policy}'s max_cost reached"),
                    CutReason::Store => format!("tollgate: the rate-limit store could not meter the request body (policy {policy})"),
                }
            }
            Answer::MissingKey => return format!("tollgate: the key of policy {policy} is missing"),
            Answer::TooManyKeyValues => {
                return format!("tollgate: the key of policy {policy} has too many values")
            }
            Answer::UnpricedModel => {
                return format!("tollgate: policy {policy} has no price for the model asked for")
            }
            Answer::CostAboveBurst => {
                return format!("tollgate: this call costs more than policy {policy} lets its key hold: refused whenever it comes")
            }
            Answer::Unmatched => "no route for this call",
            Answer::Admitted | Answer::StoreUnavailableAllowed => "forwarded",
            Answer::BadRequest => "the path or host was refused",
            Answer::UnsupportedEncoding => {
                "the request body's content-encoding cannot be read (gzip and deflate can)"
            }
            Answer::JsonRpcBatch => "a JSON-RPC batch is not accepted: send one call a request",
            Answer::AmbiguousContentType => "the request's content-type lines name too many bodies",
            Answer::UnsupportedCharset => {
                "the request's content-type names a charset other than utf-8, which keys are not read in"
            }
            Answer::MalformedEncoding => "the request body does not decode as its content-encoding says",
            Answer::DecodedTooLarge => "request body decodes past max_body",
            Answer::TooManyConnections => "too many connections",
            Answer::Overloaded => "overloaded: retry in 1 s",
            Answer::StoreUnavailable => "the rate-limit store is unavailable",
            Answer::UpstreamBusy => "every connection to the upstream is in use",
            Answer::UpstreamTimeout => "the upstream did not answer in time",
            Answer::DeadlineExceeded => "the call's deadline passed before the upstream answered",
            Answer::UpstreamUnavailable => "the upstream is unavailable",
            Answer::BodyTooLarge => "request body over max_body",
            Answer::BodyStalled => "request body stalled past body_read_timeout",
            Answer::BodyBroken => "request body malformed or cut off",
            Answer::ClientClosed => "the client closed the request",
        };
        format!("tollgate: {text}")
    }

    /// A gateway-made response carrying this answer, for whoever renders it later (the
    /// gRPC re-encoding reads it back).
    pub fn on(self, mut resp: Response<Body>) -> Response<Body> {
        resp.extensions_mut().insert(self);
        resp
    }
}

/// 503 for a request past what the gateway holds at once (`max_requests`, or the memory
/// of bodies read before their decision): try again in a second. It carries its
/// `Answer`, so every caller renders the same one.
pub fn overloaded() -> Response<Body> {
    let mut resp = json_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded", &[]);
    let retry = HeaderValue::from_static("1");
    resp.headers_mut().insert(http::header::RETRY_AFTER, retry);
    Answer::Overloaded.on(resp)
}

/// 415 for a body in a coding tollgate does not read, on a route that keys or prices by
/// the body: `named` is the request's `Content-Encoding`; `Accept-Encoding` lists what is
/// read (RFC 9110, 15.5.16).
pub fn unsupported_coding(named: &str) -> Response<Body> {
    let read = crate::proxy::body_coding::READ;
    let mut resp = json_error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_content_encoding",
        &[
            ("content_encoding", named.into()),
            ("supported", read.into()),
        ],
    );
    resp.headers_mut().insert(
        http::header::ACCEPT_ENCODING,
        HeaderValue::from_static(read),
    );
    Answer::UnsupportedEncoding.on(resp)
}

/// 400 for a body, on a route that reads the body, that does not decode as its
/// `Content-Encoding` says (a cut or damaged gzip): some readers would still take what
/// came before the damage, so it is not read as missing keys.
pub fn malformed_coding(named: &str) -> Response<Body> {
    let resp = json_error(
        StatusCode::BAD_REQUEST,
        "malformed_content_encoding",
        &[("content_encoding", named.into())],
    );
    Answer::MalformedEncoding.on(resp)
}

/// 413 for a body that decodes past the route's `max_body` (one at or below
/// `max_key_body`), on a route that reads the body: the bound holds for what the upstream
/// reads, not only for what was sent.
pub fn decoded_too_large(max_body: u64) -> Response<Body> {
    Answer::DecodedTooLarge.on(json_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        &[("max_body", max_body.into()), ("decoded", true.into())],
    ))
}

/// 400 for a body, on a route that reads it, whose `Content-Type` lines name more ways to
/// read it for parameters than are read (`request::form::MAX_READINGS`): any reading left
/// out would be a way around a key.
pub fn ambiguous_content_type() -> Response<Body> {
    let max = crate::request::form::MAX_READINGS;
    Answer::AmbiguousContentType.on(json_error(
        StatusCode::BAD_REQUEST,
        "ambiguous_content_type",
        &[("max_readings", max.into())],
    ))
}

/// 415 for a request naming a charset other than UTF-8 or ASCII (`named`, as written) on
/// a route keyed by a query parameter or by the body (`request::charset`): its
/// parameters may be read in that charset upstream, as other bytes than tollgate keys by.
pub fn unsupported_charset(named: &str) -> Response<Body> {
    Answer::UnsupportedCharset.on(json_error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_charset",
        &[("charset", named.into()), ("supported", "utf-8".into())],
    ))
}

/// 400 for a JSON-RPC batch on a route that reads the body: its tiers key and count one
/// call a request, so a batch would pass many calls for one (MCP dropped batches in its
/// 2025-06-18 revision). The body is JSON-RPC's own `Invalid Request` error, id null.
pub fn jsonrpc_batch() -> Response<Body> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32600,
            "message": "Invalid Request: a batch is not accepted here; send one call a request",
            "data": {"error": "jsonrpc_batch"},
        },
    });
    let mut resp = Response::new(crate::reply::full(body.to_string()));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Answer::JsonRpcBatch.on(resp)
}

/// The answer to an upload a bytes tier (`policy`) cut: 413 `budget_exhausted` when its
/// budget or `max_cost` ran out — the client's doing — and 503 `store_unavailable` when
/// the store could not meter it under `on_error = "deny"`, as at admission. The rest of
/// the upload is not read, so the connection cannot carry another request.
pub fn body_cut(why: CutReason, policy: &str) -> Response<Body> {
    let mut resp = match why {
        CutReason::Store => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &[("policy", policy.into())],
        ),
        CutReason::Budget | CutReason::MaxCost => json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "budget_exhausted",
            &[("policy", policy.into())],
        ),
    };
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    Answer::BodyCut {
        why,
        policy: policy.to_owned(),
    }
    .on(resp)
}
