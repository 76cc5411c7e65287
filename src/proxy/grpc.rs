//! gRPC calls as the gateway sees them: a request is one when its `content-type` is
//! `application/grpc…`; its `grpc-timeout` bounds the wait for the upstream; and when the
//! gateway answers one itself — a refusal, a bad key, an upstream that failed — it answers
//! as gRPC does: HTTP 200, trailers-only (`grpc-status`, `grpc-message`), never an HTTP
//! error status, which gRPC clients map to UNAVAILABLE and many retry at once.

use std::time::Duration;

use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};

use super::response::Answer;
use super::response::CutReason;
use crate::reply::{ceil_millis, Body};

pub static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// gRPC status codes the gateway answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Unavailable = 14,
}

/// Whether the request is a gRPC call (gRPC-Web included: its clients read the same
/// trailers-only answer).
#[inline]
pub fn is_call(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16 && v[..16].eq_ignore_ascii_case(b"application/grpc")
    })
}

/// The call's `grpc-timeout` (1 to 8 digits and a unit: H, M, S, m, u, n), if valid.
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(&GRPC_TIMEOUT)?.as_bytes();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// What the gateway's own answer means to a gRPC client.
pub struct Refusal<'a> {
    /// The refusing policy, for a 429 or a 400 of a key.
    pub policy: Option<&'a str>,
    /// How long the client should wait, for a 429.
    pub wait_ns: u64,
    /// Why the gateway answered.
    pub answer: &'a Answer,
}

/// The gRPC status of a gateway-made answer: "over a budget" is RESOURCE_EXHAUSTED (a
/// refusal, a cut upload, a body over `max_body`); a request that cannot be served now
/// (overloaded, the store or the upstream unavailable) is UNAVAILABLE; time running out
/// is DEADLINE_EXCEEDED; the client's own mistake INVALID_ARGUMENT; no route, what a gRPC
/// server answers for a method it lacks: UNIMPLEMENTED.
pub fn code_of(answer: &Answer) -> Code {
    match answer {
        Answer::Denied
        | Answer::CostAboveBurst
        | Answer::BodyTooLarge
        | Answer::DecodedTooLarge => Code::ResourceExhausted,
        Answer::BodyCut { why, .. } => match why {
            CutReason::Store => Code::Unavailable,
            CutReason::Budget | CutReason::MaxCost => Code::ResourceExhausted,
        },
        Answer::MissingKey
        | Answer::TooManyKeyValues
        | Answer::UnpricedModel
        | Answer::BadRequest
        | Answer::JsonRpcBatch
        | Answer::AmbiguousContentType
        | Answer::MalformedEncoding
        | Answer::BodyBroken => Code::InvalidArgument,
        // What a gRPC server answers a compression it does not support.
        Answer::Unmatched | Answer::UnsupportedEncoding | Answer::UnsupportedCharset => {
            Code::Unimplemented
        }
        Answer::UpstreamTimeout | Answer::DeadlineExceeded | Answer::BodyStalled => {
            Code::DeadlineExceeded
        }
        Answer::TooManyConnections
        | Answer::Overloaded
        | Answer::StoreUnavailable
        | Answer::UpstreamBusy
        | Answer::UpstreamUnavailable => Code::Unavailable,
        Answer::Admitted | Answer::StoreUnavailableAllowed => Code::Unknown,
        Answer::ClientClosed => Code::Cancelled,
    }
}

/// Turns the gateway's own HTTP answer to a gRPC call into a trailers-only gRPC answer.
/// The headers it had (`retry-after`, the rate-limit headers) stay; a refusal adds
/// `grpc-retry-pushback-ms`, the exact wait, which gRPC clients' retry policies obey (`-1`,
/// do not retry, where no wait admits it).
pub fn answer(resp: Response<Body>, why: &Refusal<'_>) -> Response<Body> {
    let (mut parts, _) = resp.into_parts();
    let status = parts.status;
    let code = code_of(why.answer);
    let message = why.answer.message(why.policy, why.wait_ns);
    let headers = &mut parts.headers;
    headers.remove(CONTENT_LENGTH);
    set_status(headers, code, &message);
    if *why.answer == Answer::CostAboveBurst {
        // No wait admits it: a negative pushback asks the client not to retry (gRFC A6).
        headers.insert(GRPC_PUSHBACK.clone(), HeaderValue::from_static("-1"));
    } else if status == StatusCode::TOO_MANY_REQUESTS {
        headers.insert(
            GRPC_PUSHBACK.clone(),
            HeaderValue::from(ceil_millis(why.wait_ns)),
        );
    }
    parts.status = StatusCode::OK;
    Response::from_parts(parts, crate::reply::empty())
}

/// Makes `headers` a trailers-only gRPC answer's: `content-type`, `grpc-status` and
/// `grpc-message` (percent-encoded). The proxy's answers and the rate limit service's
/// errors are written here.
pub fn set_status(headers: &mut HeaderMap, code: Code, message: &str) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from(code as u16));
    if let Ok(text) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE.clone(), text);
    }
}

/// A trailers-only error: status and message in the headers, no body (a gRPC service's
/// answer to a call it does not take: the rate limit and quota services').
pub fn trailers_only(code: Code, message: &str) -> Response<Body> {
    let mut resp = Response::new(crate::reply::empty());
    set_status(resp.headers_mut(), code, message);
    resp
}

/// `grpc-message`'s encoding: printable ASCII but `%` as is, every other byte `%XX`.
fn percent_encode(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                let name = HeaderName::from_bytes(k.as_bytes()).expect("name");
                (name, HeaderValue::from_str(v).expect("value"))
            })
            .collect()
    }

    #[test]
    fn a_call_is_told_by_its_content_type() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC+json",
            "application/grpc-web+proto",
        ] {
            assert!(is_call(&headers(&[("content-type", yes)])), "{yes}");
        }
        for no in ["application/json", "application/grp", "text/grpc", ""] {
            assert!(!is_call(&headers(&[("content-type", no)])), "{no}");
        }
        assert!(!is_call(&HeaderMap::new()));
    }

    #[test]
    fn grpc_timeout_units_and_bad_values() {
        let t = |v: &str| timeout(&headers(&[("grpc-timeout", v)]));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("2M"), Some(Duration::from_secs(120)));
        assert_eq!(t("3S"), Some(Duration::from_secs(3)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(t("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "100", "123456789S", "1s", "-1S", "1.5S", "1 S"] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_refusal_becomes_resource_exhausted_with_the_exact_pushback() {
        let mut resp = crate::reply::json_error(StatusCode::TOO_MANY_REQUESTS, "x", &[]);
        resp.headers_mut()
            .insert("retry-after", HeaderValue::from_static("2"));
        let why = Refusal {
            policy: Some("per_user"),
            wait_ns: 1_500_000_001,
            answer: &Answer::Denied,
        };
        let resp = answer(resp, &why);
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert_eq!(h["grpc-status"], "8");
        assert_eq!(h["grpc-retry-pushback-ms"], "1501");
        assert_eq!(h["retry-after"], "2");
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(
            h["grpc-message"],
            "rate limited by policy per_user: retry in 1501 ms"
        );
    }

    #[test]
    fn gateway_answers_map_to_grpc_codes() {
        let cut = |why| Answer::BodyCut {
            why,
            policy: "bytes".into(),
        };
        for (answer, code) in [
            (Answer::UpstreamUnavailable, Code::Unavailable),
            (Answer::Overloaded, Code::Unavailable),
            (Answer::StoreUnavailable, Code::Unavailable),
            (cut(CutReason::Store), Code::Unavailable),
            (Answer::UpstreamTimeout, Code::DeadlineExceeded),
            (Answer::DeadlineExceeded, Code::DeadlineExceeded),
            (Answer::BodyStalled, Code::DeadlineExceeded),
            (Answer::BadRequest, Code::InvalidArgument),
            (Answer::BodyTooLarge, Code::ResourceExhausted),
            (cut(CutReason::Budget), Code::ResourceExhausted),
            (Answer::Unmatched, Code::Unimplemented),
            (Answer::UnsupportedEncoding, Code::Unimplemented),
            (Answer::UnsupportedCharset, Code::Unimplemented),
        ] {
            assert_eq!(code_of(&answer), code, "{answer:?}");
        }
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("a b%c\u{e9}"), "a b%25c%C3%A9");
    }
}
