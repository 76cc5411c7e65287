//! How an exchange with an upstream fails, classified once by its cause, and the answer
//! the client gets for each.

use std::time::Duration;

use http::header::{HeaderValue, CONNECTION};
use http::{Response, StatusCode};

use super::connect::ConnectError;
use crate::config::Target;
use crate::proxy::body::{BodyReadTimeout, ClientBodyError};
use crate::proxy::response::{body_cut, Answer};
use crate::proxy::response::{BudgetExhausted, CutReason};
use crate::reply::{json_error, Body};

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        #[source]
        source: ConnectError,
    },
    #[error("all {cap} connections to {target}'s upstream are in use")]
    Busy { target: String, cap: usize },
    #[error("no response from {target} within {timeout:?}")]
    Timeout { target: String, timeout: Duration },
    /// A bytes tier cut the client's upload: its key's budget (or `max_cost`) ran out
    /// before the upstream answered.
    #[error("the client's request body was cut: {source}")]
    OverBudget {
        policy: String,
        why: CutReason,
        #[source]
        source: hyper::Error,
    },
    /// The client's own request body failed on the way: its fault, not the upstream's.
    #[error("the client's request body {fault}: {source}")]
    ClientBody {
        fault: ClientBodyFault,
        #[source]
        source: hyper::Error,
    },
    #[error("upstream {target} failed: {source}")]
    Broken {
        target: String,
        #[source]
        source: hyper::Error,
    },
}

/// How a client's request body failed while it was being forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClientBodyFault {
    #[error("exceeded max_body")]
    TooLarge,
    #[error("stalled past body_read_timeout")]
    Stalled,
    #[error("was malformed or cut off")]
    Broken,
}

impl ForwardError {
    /// Classifies a failed exchange once, by what caused it.
    pub(super) fn classify(target: &Target, source: hyper::Error) -> Self {
        let fault = std::error::Error::source(&source).and_then(BodyFault::of);
        Self::with_fault(target, source, fault)
    }

    /// A failed exchange whose request body's fate is known apart from the error
    /// (an HTTP/2 stream reports a body's failure only as a reset).
    pub(super) fn with_fault(
        target: &Target,
        source: hyper::Error,
        fault: Option<BodyFault>,
    ) -> Self {
        match fault {
            Some(BodyFault::OverBudget(policy, why)) => ForwardError::OverBudget {
                policy,
                why,
                source,
            },
            Some(BodyFault::Client(fault)) => ForwardError::ClientBody { fault, source },
            None => ForwardError::Broken {
                target: target.to_string(),
                source,
            },
        }
    }

    /// Whether the client brought the failure on itself: its body failed or went over a
    /// budget.
    pub fn clients_fault(&self) -> bool {
        matches!(
            self,
            ForwardError::ClientBody { .. } | ForwardError::OverBudget { .. }
        )
    }

    /// Whether the upstream did not answer in the time it had.
    pub fn timed_out(&self) -> bool {
        matches!(self, ForwardError::Timeout { .. })
    }

    /// The answer the client gets: 4xx for its own faults, 502/503/504 for the upstream's,
    /// carrying its typed [`Answer`]. `deadline`: the wait was the client's own deadline,
    /// shorter than the upstream's `timeout` (a timeout is then the client's choice).
    pub fn response(&self, upstream: &str, deadline: bool) -> Response<Body> {
        let named = [("upstream", upstream.into())];
        let (answer, resp) = match self {
            ForwardError::Busy { .. } => (
                Answer::UpstreamBusy,
                json_error(StatusCode::SERVICE_UNAVAILABLE, "upstream_busy", &named),
            ),
            ForwardError::Timeout { .. } if deadline => (
                Answer::DeadlineExceeded,
                json_error(StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded", &named),
            ),
            ForwardError::Timeout { .. } => (
                Answer::UpstreamTimeout,
                json_error(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", &named),
            ),
            ForwardError::ClientBody { fault, .. } => return fault.response(),
            // Built with its answer on it.
            ForwardError::OverBudget { policy, why, .. } => return body_cut(*why, policy),
            ForwardError::Connect { .. } | ForwardError::Broken { .. } => (
                Answer::UpstreamUnavailable,
                json_error(StatusCode::BAD_GATEWAY, "upstream_unavailable", &named),
            ),
        };
        answer.on(resp)
    }
}

impl ClientBodyFault {
    /// The answer to a client whose body failed: 413, or 408 / 400 with the connection
    /// closed (the rest of the body cannot be trusted to be read).
    pub fn response(self) -> Response<Body> {
        let closing = |status, code| {
            let mut resp = json_error(status, code, &[]);
            resp.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            resp
        };
        let (answer, resp) = match self {
            ClientBodyFault::TooLarge => (
                Answer::BodyTooLarge,
                json_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", &[]),
            ),
            ClientBodyFault::Stalled => (
                Answer::BodyStalled,
                closing(StatusCode::REQUEST_TIMEOUT, "request_body_timeout"),
            ),
            ClientBodyFault::Broken => (
                Answer::BodyBroken,
                closing(StatusCode::BAD_REQUEST, "bad_request_body"),
            ),
        };
        answer.on(resp)
    }
}

/// Why a request body failed on its way upstream, when it was not the upstream's doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFault {
    /// A bytes tier (this policy) cut it, for this reason.
    OverBudget(String, CutReason),
    Client(ClientBodyFault),
}

impl BodyFault {
    /// The body's fault in `e` or its sources, if it is one.
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Option<Self> {
        if let Some(cut) = find::<BudgetExhausted>(e) {
            return Some(BodyFault::OverBudget(cut.policy.name.clone(), cut.why));
        }
        let fault = if find::<http_body_util::LengthLimitError>(e).is_some() {
            ClientBodyFault::TooLarge
        } else if find::<BodyReadTimeout>(e).is_some() {
            ClientBodyFault::Stalled
        } else if find::<ClientBodyError>(e).is_some() {
            ClientBodyFault::Broken
        } else {
            return None;
        };
        Some(BodyFault::Client(fault))
    }
}

/// The first `E` among `e` and its sources.
fn find<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(found) = s.downcast_ref::<E>() {
            return Some(found);
        }
        source = s.source();
    }
    None
}
