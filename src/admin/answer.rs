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

/// 405 for a method a path does not take: the `Allow` header names the ones it does
/// (RFC 9110), and so does the body.
pub fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let fields = [("allow", allow.into())];
    let mut resp = crate::reply::json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &fields,
    );
    resp.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

pub fn json_ok(value: serde_json::Value) -> Response<Body> {
    json_status(StatusCode::OK, value)
}

pub fn json_status(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    text(status, "application/json", value.to_string())
}

/// `{policy}/{part}[/{part}…]`: the policy's name and the key's parts, each one
/// percent-encoded path segment; or the `400` for a segment whose bytes are not UTF-8
/// text. The admin API names keys by their text: such a segment (`caf%E9`) read as text
/// (`caf\u{FFFD}`) would name another key, and a reset or an override would act on it
/// while saying it acted on the one asked for.
pub fn key_path(rest: &str) -> Result<(String, Vec<String>), Box<Response<Body>>> {
    let decode = |segment: &str| {
        percent_encoding::percent_decode_str(segment)
            .decode_utf8()
            .map(std::borrow::Cow::into_owned)
            .map_err(|_| {
                Box::new(crate::reply::json_error(
                    StatusCode::BAD_REQUEST,
                    "key_not_text",
                    &[(
                        "detail",
                        format!("`{segment}` decodes to bytes that are not UTF-8: the admin API names policies and keys by their UTF-8 text").into(),
                    )],
                ))
            })
    };
    // `+` stays a plus: this is a path, not a form.
    let mut segments = rest.split('/');
    let policy = decode(segments.next().unwrap_or(""))?;
    let parts = segments.map(decode).collect::<Result<_, _>>()?;
    Ok((policy, parts))
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
