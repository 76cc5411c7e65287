//! What every admin answer shares: plain and JSON bodies that are never cached, and the
//! key named in a path the way `/admin/limits` and `/admin/overrides` take it.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};

use crate::reply::{full, Body};

pub fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

pub fn json_ok(value: serde_json::Value) -> Response<Body> {
    json_status(StatusCode::OK, value)
}

pub fn json_status(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    text(status, "application/json", value.to_string())
}

/// `{policy}/{part}[/{part}…]`: the policy's name and the key's parts, each one
/// percent-encoded path segment.
pub fn key_path(rest: &str) -> (String, Vec<String>) {
    let mut segments = rest.split('/');
    let policy = percent_decode(segments.next().unwrap_or(""));
    (policy, segments.map(percent_decode).collect())
}

/// One path segment, percent-decoded (`+` stays a plus: this is a path, not a form).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Tells the quota streams (RLQS) that `policy`'s key `parts` changed (a reset, an
/// override set or removed): an Envoy holding a share of it is sent its new share now, not
/// at its next report. Another gateway's streams learn it at their Envoys' next report.
pub fn tell_quota_streams(
    shared: &crate::proxy::snapshot::Shared,
    (policy, parts): (&str, &[String]),
    change: crate::proxy::snapshot::KeyChange,
) {
    // No receiver (no stream open) is no one to tell.
    let _ = shared
        .key_changes
        .send((crate::rlqs::keys::holder_key(policy, parts).into(), change));
}
