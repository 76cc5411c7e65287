//! A sampled request's spans: what its trace recorded turned into OTLP spans — the
//! server span (the HTTP semantic conventions' attributes and tollgate's decision) and,
//! when it was forwarded, the client span of the upstream call, whose id the upstream
//! received as its parent in `traceparent`.

use http::HeaderMap;
use prometheus_client::metrics::counter::Counter;

use super::context;
use super::proto::{KeyValue, Span, SpanKind, Status, StatusCode, Value};
use super::sampler::{self, Budget, Ratio, Sampled};
use crate::clip::{clipped, MAX_PATH_BYTES};
use crate::config::telemetry::Telemetry;

/// `traceparent`, the W3C header.
pub static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

/// What a sampled request's spans are made from, filled as the request goes.
#[derive(Debug, Clone)]
pub struct SpanTrace {
    pub sampled: Sampled,
    /// The upstream call's span: the parent the upstream is told of.
    pub client_span: [u8; 8],
    /// Clock readings (the monotonic clock's ns).
    pub started_ns: u64,
    pub forward: Option<(u64, u64)>,
    /// The refusing tier's key (or, admitted, the nearest to refusing's), as a keyed hash.
    pub key_hash: Option<String>,
    /// An admitted request's policy nearest to refusing it (the one its `RateLimit`
    /// headers report): named on its span as a refusal's is.
    pub nearest: Option<String>,
    /// The caller's `tracestate` of a trace the gateway follows (the state it passes on
    /// unchanged), the spans' own; empty otherwise.
    pub trace_state: String,
}

/// `tracestate` past this many bytes is none (W3C asks at least 512 be passed on).
const MAX_TRACE_STATE: usize = 512;

/// The caller's `tracestate` lines as one list, when it is one W3C allows: at most
/// [`MAX_TRACE_STATE`] bytes and 32 members, of printable ASCII; empty otherwise.
fn trace_state(headers: &HeaderMap) -> String {
    let mut state = String::new();
    for line in headers.get_all("tracestate") {
        let Ok(text) = line.to_str() else {
            return String::new();
        };
        let text = text.trim_matches([' ', '\t']);
        if text.is_empty() {
            continue;
        }
        if !state.is_empty() {
            state.push(',');
        }
        state.push_str(text);
        if state.len() > MAX_TRACE_STATE {
            return String::new();
        }
    }
    let members = state.split(',').filter(|m| !m.trim().is_empty()).count();
    if members > 32 || !state.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return String::new();
    }
    state
}

/// The request's trace when `telemetry` samples it, given its headers (its caller's
/// `traceparent`) and while `budget` has room (a sampled request past it is counted in
/// `capped` and treated as unsampled); `None` builds nothing for it. `now_ns` reads the
/// clock, asked only for a sampled request. A caller's sampled flag may be anyone's, and
/// is followed within half the budget: a proxied request's client's, and Envoy's on the
/// rate limit or quota service too (its tracer passes on the sampled flag of the request
/// it asks about, which that request's client set).
pub fn start(
    telemetry: &Telemetry,
    budget: &Budget,
    headers: &HeaderMap,
    now_ns: impl FnOnce() -> u64,
    capped: &Counter,
) -> Option<SpanTrace> {
    // More than one `traceparent` is no parent at all (W3C): which one a later hop would
    // read is anyone's guess, and the first must not force sampling on its own.
    let mut values = headers.get_all(&TRACEPARENT).iter();
    let parent = match (values.next(), values.next()) {
        (Some(one), None) => context::parse(one.as_bytes()),
        _ => None,
    };
    let sampled = sampler::sample(parent, Ratio::new(telemetry.sample_ratio))?;
    // The clock is read only for a sampled request: an unsampled one pays nothing for it.
    let now_ns = now_ns();
    let by_client = sampled.parent_id.is_some();
    if !budget.take(telemetry.max_sampled_per_second, now_ns, by_client) {
        capped.inc();
        return None;
    }
    Some(SpanTrace {
        sampled,
        client_span: sampler::span_id(),
        started_ns: now_ns,
        forward: None,
        key_hash: None,
        nearest: None,
        trace_state: if by_client {
            trace_state(headers)
        } else {
            String::new()
        },
    })
}

/// The `traceparent` the upstream gets: this request's trace, the client span as parent.
pub fn upstream_traceparent(trace: &SpanTrace) -> http::HeaderValue {
    context::format(&trace.sampled.trace_id, &trace.client_span, true)
}

/// What the HTTP conventions call a method they do not know.
const OTHER_METHOD: &str = "_OTHER";

/// `method` if the HTTP conventions know it, `_OTHER` otherwise: a client's invented
/// method (any token, any length) is not copied into a span.
fn known_method(method: &str) -> &str {
    const KNOWN: [&str; 10] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY",
    ];
    KNOWN
        .iter()
        .find(|k| **k == method)
        .copied()
        .unwrap_or(OTHER_METHOD)
}

/// The method as a span's name spells it (the conventions' `{method} {route}`): `HTTP`
/// standing for a method they do not know (a client's invented one is no name).
fn span_method(method: &str) -> &str {
    match known_method(method) {
        OTHER_METHOD => "HTTP",
        known => known,
    }
}

/// How a request ended, for its spans.
pub struct Ended<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The route's name and path prefix.
    pub route: Option<(&'a str, &'a str)>,
    pub status: u16,
    pub decision: &'a str,
    pub policy: Option<&'a str>,
    pub retry_after_ms: Option<u64>,
    pub upstream: Option<&'a str>,
    /// The clock reading it ended at.
    pub ended_ns: u64,
}

/// The server span and, when the request was forwarded, the client span; `unix` turns a
/// clock reading into Unix ns.
pub fn spans(trace: &SpanTrace, ended: &Ended<'_>, unix: impl Fn(u64) -> u64) -> Vec<Span> {
    let named = span_method(ended.method);
    let name = match ended.route {
        Some((_, path)) => format!("{named} {path}"),
        None => named.to_owned(),
    };
    let mut server = server_span(
        trace,
        name,
        (unix(trace.started_ns), unix(ended.ended_ns)),
        server_attributes(trace, ended),
    );
    if ended.status >= 500 {
        server.status = Some(Status {
            message: String::new(),
            code: StatusCode::Error as i32,
        });
    }
    let mut out = vec![server];
    if let Some((from, to)) = trace.forward {
        out.push(client_span(trace, ended, (unix(from), unix(to))));
    }
    out
}

/// A sampled request's or call's own span, from `start` to `end` (Unix ns), its caller's
/// span (if any) its parent.
fn server_span(
    trace: &SpanTrace,
    name: String,
    (start, end): (u64, u64),
    attributes: Vec<KeyValue>,
) -> Span {
    let s = &trace.sampled;
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        parent_span_id: s.parent_id.map(|p| p.to_vec()).unwrap_or_default(),
        name,
        kind: SpanKind::Server as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        status: None,
        // W3C flags (sampled), then "is_remote is known" and whether the parent is remote.
        flags: 0x01 | 0x100 | u32::from(s.parent_id.is_some()) << 9,
        trace_state: trace.trace_state.clone(),
    }
}

/// The server span's attributes: the HTTP conventions' and the decision's.
fn server_attributes(trace: &SpanTrace, ended: &Ended<'_>) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new(
            "http.request.method",
            Value::String(known_method(ended.method).to_owned()),
        ),
        KeyValue::new(
            "url.path",
            Value::String(clipped(ended.path, MAX_PATH_BYTES).to_owned()),
        ),
        KeyValue::new(
            "http.response.status_code",
            Value::Int(i64::from(ended.status)),
        ),
        KeyValue::new(
            "tollgate.decision",
            Value::String(ended.decision.to_owned()),
        ),
    ];
    if let Some((name, path)) = ended.route {
        attributes.push(KeyValue::new("http.route", Value::String(path.to_owned())));
        attributes.push(KeyValue::new(
            "tollgate.route",
            Value::String(name.to_owned()),
        ));
    }
    let policy = ended.policy.or(trace.nearest.as_deref());
    // An admitted request named by its nearest policy waited for nothing.
    let retry_after_ms = ended.retry_after_ms.or(trace.nearest.as_ref().map(|_| 0));
    refusal_attributes(&mut attributes, trace, (policy, retry_after_ms));
    attributes
}

/// The deciding policy, its wait and its hashed key.
fn refusal_attributes(
    attributes: &mut Vec<KeyValue>,
    trace: &SpanTrace,
    (policy, retry_after_ms): (Option<&str>, Option<u64>),
) {
    if let Some(policy) = policy {
        attributes.push(KeyValue::new(
            "tollgate.policy",
            Value::String(policy.to_owned()),
        ));
    }
    if let Some(ms) = retry_after_ms {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        attributes.push(KeyValue::new("tollgate.retry_after_ms", Value::Int(ms)));
    }
    if let Some(hash) = &trace.key_hash {
        attributes.push(KeyValue::new(
            "tollgate.key_hash",
            Value::String(hash.clone()),
        ));
    }
}

/// The upstream call's span, from `from` to `to` (Unix ns), the server span its parent.
fn client_span(trace: &SpanTrace, ended: &Ended<'_>, (from, to): (u64, u64)) -> Span {
    let s = &trace.sampled;
    let method = known_method(ended.method);
    let mut attributes = vec![
        KeyValue::new("http.request.method", Value::String(method.to_owned())),
        KeyValue::new(
            "http.response.status_code",
            Value::Int(i64::from(ended.status)),
        ),
    ];
    if let Some(upstream) = ended.upstream {
        attributes.push(KeyValue::new(
            "tollgate.upstream",
            Value::String(upstream.to_owned()),
        ));
    }
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: trace.client_span.to_vec(),
        parent_span_id: s.span_id.to_vec(),
        name: span_method(ended.method).to_owned(),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: from,
        end_time_unix_nano: to,
        attributes,
        status: None,
        flags: 0x01 | 0x100,
        trace_state: trace.trace_state.clone(),
    }
}

/// A gRPC call's server span (the rate limit service's): `method` as
/// `package.Service/Method`, the decision and, for a refusal, the policy and its wait.
pub fn rpc_span(
    trace: &SpanTrace,
    method: &str,
    (decision, policy, retry_after_ms): (&str, Option<&str>, Option<u64>),
    (ended_ns, unix): (u64, &dyn Fn(u64) -> u64),
) -> Span {
    let (service, name) = method.split_once('/').unwrap_or((method, ""));
    let mut attributes = vec![
        KeyValue::new("rpc.system", Value::String("grpc".to_owned())),
        KeyValue::new("rpc.service", Value::String(service.to_owned())),
        KeyValue::new("rpc.method", Value::String(name.to_owned())),
        KeyValue::new("tollgate.decision", Value::String(decision.to_owned())),
    ];
    refusal_attributes(&mut attributes, trace, (policy, retry_after_ms));
    let span = (unix(trace.started_ns), unix(ended_ns));
    server_span(trace, method.to_owned(), span, attributes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_clipped_at_a_character() {
        let path = format!("/{}é/rest", "a".repeat(1022));
        // 'é' takes bytes 1023 and 1024: cut before it, not through it.
        assert_eq!(clipped(&path, MAX_PATH_BYTES).len(), 1023);
        assert_eq!(clipped("/short", MAX_PATH_BYTES), "/short");
    }

    #[test]
    fn only_the_conventions_methods_are_named() {
        assert_eq!(known_method("PATCH"), "PATCH");
        assert_eq!(
            known_method("get"),
            OTHER_METHOD,
            "methods are case-sensitive"
        );
        assert_eq!(known_method(&"X".repeat(10_000)), OTHER_METHOD);
    }
}

#[cfg(test)]
mod trace_state_tests {
    use super::*;

    fn of(lines: &[&str]) -> String {
        let mut headers = HeaderMap::new();
        for line in lines {
            let value = http::HeaderValue::from_bytes(line.as_bytes()).expect("a value");
            headers.append("tracestate", value);
        }
        trace_state(&headers)
    }

    #[test]
    fn a_tracestate_is_its_lines_as_one_list_within_w3c_bounds() {
        assert_eq!(of(&["a=1", " b=2 "]), "a=1,b=2");
        assert_eq!(of(&[]), "");
        let long = format!("a={}", "x".repeat(MAX_TRACE_STATE));
        assert_eq!(of(&[&long]), "", "past 512 bytes: none");
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(of(&[&many.join(",")]), "", "33 members: none");
        assert_eq!(of(&["a=\u{e9}"]), "", "not ASCII: none");
    }
}
