//! The request head as routing, keys and the upstream all see it: one canonical path,
//! one host (in `Host`), connection-level headers gone. Applied first, so no spelling of
//! a request can be routed or keyed one way and forwarded another.

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, TE, UPGRADE};
use http::uri::{PathAndQuery, Uri};
use http::Request;

use super::hop::{hop_by_hop_bit, strip_hop_by_hop};
use crate::key::KeyHeaders;
use crate::request::host::{self, HostError};
use crate::request::path::{self, PathError, PathRules};

static HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// Why a request head is refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Host(#[from] HostError),
    /// A gateway in front of APIs opens no tunnel to a place the client names: a
    /// `CONNECT` (authority-form, or an origin-form one no server takes) would otherwise
    /// be routed by its path and sent on, and an upstream's `2xx` to it turns the
    /// upstream connection into a tunnel nobody reads, its answer lost and its cost unsettled.
    #[error("CONNECT is not supported")]
    Connect,
    /// An absolute-form target, or HTTP/2's `:scheme`, naming a scheme other than `http`
    /// or `https` (`GET ftp://host/x`): the gateway forwards HTTP only, and such a
    /// request would otherwise be routed and sent on as an HTTP one.
    #[error("only http and https requests are forwarded")]
    Scheme,
}

impl HeadError {
    /// The `error` field of the 400 JSON body.
    pub fn code(self) -> &'static str {
        match self {
            HeadError::Path(e) => e.code(),
            HeadError::Host(e) => e.code(),
            HeadError::Connect => "connect_not_supported",
            HeadError::Scheme => "unsupported_scheme",
        }
    }
}

/// What normalising found out about the request.
#[derive(Debug, Default)]
pub struct Normalized {
    /// The protocol the client asked to switch to (`Upgrade`), when it may be tunnelled.
    pub upgrade: Option<HeaderValue>,
    /// The client takes trailers (`TE: trailers`).
    pub trailers: bool,
    /// The request's `Host` as forwarded (`None`: an HTTP/1.0 request without one): what
    /// routes it and what the upstream is told in `X-Forwarded-Host`, taken once.
    pub host: Option<HeaderValue>,
}

/// What one pass over a request's header names found: the `Host` lines (two are enough
/// to refuse), and which connection-level headers are there to deal with.
#[derive(Default)]
struct Scan<'a> {
    hosts: arrayvec::ArrayVec<&'a HeaderValue, 2>,
    found: Found,
}

/// The connection-level headers a request has.
#[derive(Default, Clone, Copy)]
struct Found {
    connection: bool,
    te: bool,
    upgrade: bool,
    http2_settings: bool,
    /// Any header `strip_hop_by_hop` would remove.
    hop_by_hop: bool,
}

impl<'a> Scan<'a> {
    fn of(headers: &'a http::HeaderMap) -> Self {
        let mut scan = Self::default();
        let found = &mut scan.found;
        for (name, value) in headers {
            if *name == HOST {
                let _ = scan.hosts.try_push(value);
            } else if hop_by_hop_bit(name) != 0 {
                found.hop_by_hop = true;
                found.connection |= *name == CONNECTION;
                found.te |= *name == TE;
                found.upgrade |= *name == UPGRADE;
            } else if *name == HTTP2_SETTINGS {
                found.http2_settings = true;
            }
        }
        scan
    }
}

/// A method with a lower-case letter (`get`: to HTTP an extension method of its own) is
/// the upper-case one to the frameworks that serve it — Django, Werkzeug, Symfony
/// upper-case it — so it is routed, keyed and forwarded upper-cased: `get` cannot slip
/// past a route limited to `GET` into another, nor key a bucket of its own. The methods
/// clients send are upper case already: a scan of a few bytes.
fn upper_case_method<B>(req: &mut Request<B>) {
    let spelled = req.method().as_str();
    if !spelled.bytes().any(|b| b.is_ascii_lowercase()) {
        return;
    }
    if let Ok(upper) = http::Method::from_bytes(spelled.to_ascii_uppercase().as_bytes()) {
        *req.method_mut() = upper;
    }
}

/// Refuses what the gateway does not forward: a `CONNECT`, a target of a scheme other
/// than HTTP's.
fn forwardable<B>(req: &Request<B>) -> Result<(), HeadError> {
    if req.method() == http::Method::CONNECT {
        return Err(HeadError::Connect);
    }
    if let Some(scheme) = req.uri().scheme() {
        // HTTP/2's `:scheme` is parsed case-sensitively (`HTTPS` is another scheme to
        // it), HTTP/1.1's absolute form not: either case is HTTP.
        let http = |name: &str| scheme.as_str().eq_ignore_ascii_case(name);
        if !http("http") && !http("https") {
            return Err(HeadError::Scheme);
        }
    }
    Ok(())
}

/// Rewrites `req`'s head in place: canonical path (query untouched), the method
/// upper-cased, a single valid `Host` naming the routed host, hop-by-hop headers removed
/// (an upgrade request keeps `Upgrade`). Allocates only when something had to change; a
/// request without connection-level headers costs one pass over its header names.
pub fn normalize<B>(
    req: &mut Request<B>,
    (rules, kept): (&PathRules, &KeyHeaders),
) -> Result<Normalized, HeadError> {
    upper_case_method(req);
    forwardable(req)?;
    let (new_host, sent_host, found) = {
        let Scan { hosts, found } = Scan::of(req.headers());
        let target = req.uri().authority().map(|a| a.as_str());
        let version = req.version();
        let lines = &mut hosts.iter().map(|v| v.as_bytes());
        let sent_host = hosts.first().map(|&v| v.clone());
        let new_host = match host::of_request(target, lines, version)? {
            Some(h)
                if sent_host.as_ref().map(HeaderValue::as_bytes) != Some(h.forward.as_bytes()) =>
            {
                Some(HeaderValue::from_str(&h.forward).map_err(|_| HostError::Invalid)?)
            }
            _ => None,
        };
        (new_host, sent_host, found)
    };

    let new_path = match path::normalize(req.uri().path(), rules)? {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(p) => Some(p),
    };
    if let Some(mut p) = new_path {
        if let Some(q) = req.uri().query() {
            p.push('?');
            p.push_str(q);
        }
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query =
            Some(PathAndQuery::from_maybe_shared(p).map_err(|_| PathError::BadEscape)?);
        *req.uri_mut() = Uri::from_parts(parts).map_err(|_| PathError::BadEscape)?;
    }

    // An HTTP/1.0 request's `Upgrade` is ignored (RFC 9110 §7.8): its connection cannot
    // switch protocols.
    let upgrade = if found.connection && found.upgrade && req.version() == http::Version::HTTP_11 {
        requested_upgrade(req.headers())
    } else {
        None
    };
    let headers = req.headers_mut();
    // `Connection: host` would strip the one sent below: it is put back too.
    let put_back = new_host.is_some() || found.connection;
    let host = new_host.or(sent_host);
    // `TE: trailers` says the client takes trailers; many upstreams send them (a settled
    // cost among them) only when asked, and the gateway passes them on.
    let trailers = found.te
        && headers.get_all(TE).iter().any(|v| {
            v.as_bytes().split(|&b| b == b',').any(|t| {
                let t = t.trim_ascii();
                let name = t.split(|&b| b == b';').next().unwrap_or(t).trim_ascii();
                name.eq_ignore_ascii_case(b"trailers")
            })
        });
    if found.hop_by_hop || upgrade.is_some() {
        strip_hop_by_hop(headers, upgrade.is_some(), kept);
    }
    if trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    // Never forwarded: an h2c upgrade smuggled through us would reach the upstream
    // as HTTP/2, past every limit.
    if found.http2_settings {
        headers.remove(&HTTP2_SETTINGS);
    }
    // After stripping, so `Connection: host` cannot remove the host that was routed.
    if let Some(value) = host.as_ref().filter(|_| put_back) {
        headers.insert(HOST, value.clone());
    }
    Ok(Normalized {
        upgrade,
        trailers,
        host,
    })
}

/// The `Upgrade` protocol when `Connection` names `upgrade` and no `Upgrade` line names
/// `h2c` (every line: the upstream receives them all).
fn requested_upgrade(headers: &http::HeaderMap) -> Option<HeaderValue> {
    let asked = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let protocol = headers.get(UPGRADE)?;
    let h2c = headers.get_all(UPGRADE).iter().any(|line| {
        line.to_str().map_or(true, |p| {
            p.split(',').any(|t| t.trim().eq_ignore_ascii_case("h2c"))
        })
    });
    (asked && !h2c).then(|| protocol.clone())
}

/// Whether a `101` response's `Upgrade` names the protocol the client asked for.
pub fn upgrade_matches(asked: &HeaderValue, answered: Option<&HeaderValue>) -> bool {
    let first = |v: &HeaderValue| {
        v.to_str()
            .ok()
            .and_then(|s| s.split(',').next())
            .map(|s| s.trim().to_ascii_lowercase())
    };
    match (first(asked), answered.and_then(first)) {
        (Some(a), Some(b)) => !a.is_empty() && a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Version;

    fn head(uri: &str, version: Version, headers: &[(&str, &str)]) -> Request<()> {
        let mut req = Request::builder().uri(uri).version(version);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).expect("request")
    }

    #[test]
    fn absolute_form_target_is_routed_and_forwarded() {
        let mut req = head(
            "http://Other.Example.:8080/a//b?x=1",
            Version::HTTP_11,
            &[("host", "api.example.com")],
        );
        normalize(&mut req, (&PathRules::default(), &KeyHeaders::default())).expect("valid");
        assert_eq!(req.headers()[HOST], "other.example:8080");
        assert_eq!(
            req.uri().path_and_query().map(|p| p.as_str()),
            Some("/a/b?x=1")
        );
    }

    #[test]
    fn schemes_other_than_http_are_refused() {
        let normalized = |uri: &str| {
            let mut req = head(uri, Version::HTTP_11, &[("host", "api.example.com")]);
            normalize(&mut req, (&PathRules::default(), &KeyHeaders::default())).map(|_| ())
        };
        for scheme in ["ftp", "wss", "ws", "file", "httpx"] {
            assert_eq!(
                normalized(&format!("{scheme}://h/x")),
                Err(HeadError::Scheme)
            );
        }
        for scheme in ["http", "https", "HTTPS", "Http"] {
            assert_eq!(normalized(&format!("{scheme}://h/x")), Ok(()), "{scheme}");
        }
        // HTTP/2's `:scheme` keeps its case: `HTTPS` is a scheme of its own to `http`.
        let mut h2 = head("/x", Version::HTTP_2, &[]);
        let scheme = http::uri::Scheme::try_from("HTTPS").expect("a scheme");
        assert_ne!(scheme, http::uri::Scheme::HTTPS);
        let mut parts = h2.uri().clone().into_parts();
        (parts.scheme, parts.authority) = (Some(scheme), Some("h".parse().expect("authority")));
        *h2.uri_mut() = Uri::from_parts(parts).expect("uri");
        let kept = (&PathRules::default(), &KeyHeaders::default());
        assert_eq!(normalize(&mut h2, kept).map(|_| ()), Ok(()));
    }

    #[test]
    fn connection_cannot_strip_host_and_h2c_is_never_an_upgrade() {
        let mut req = head(
            "/x",
            Version::HTTP_11,
            &[
                ("host", "api.example.com"),
                ("connection", "host, upgrade, http2-settings"),
                ("upgrade", "h2c"),
                ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA"),
            ],
        );
        let n =
            normalize(&mut req, (&PathRules::default(), &KeyHeaders::default())).expect("valid");
        assert!(n.upgrade.is_none());
        assert_eq!(req.headers()[HOST], "api.example.com");
        assert!(!req.headers().contains_key(UPGRADE));
        assert!(!req.headers().contains_key("http2-settings"));

        let mut ws = head(
            "/x",
            Version::HTTP_11,
            &[
                ("host", "a"),
                ("connection", "Upgrade"),
                ("upgrade", "websocket"),
            ],
        );
        let n = normalize(&mut ws, (&PathRules::default(), &KeyHeaders::default())).expect("valid");
        assert_eq!(
            n.upgrade.as_ref().map(|v| v.as_bytes()),
            Some(&b"websocket"[..])
        );
        assert!(upgrade_matches(
            &n.upgrade.clone().expect("asked"),
            Some(&HeaderValue::from_static("WebSocket"))
        ));
        assert!(!upgrade_matches(
            &n.upgrade.expect("asked"),
            Some(&HeaderValue::from_static("h2c"))
        ));
    }

    #[test]
    fn http2_host_must_match_authority() {
        let mut req = head(
            "http://a.example/x",
            Version::HTTP_2,
            &[("host", "b.example")],
        );
        assert_eq!(
            normalize(&mut req, (&PathRules::default(), &KeyHeaders::default())).map(|_| ()),
            Err(HeadError::Host(HostError::Mismatch))
        );
        let mut req = head("http://a.example/x", Version::HTTP_2, &[]);
        normalize(&mut req, (&PathRules::default(), &KeyHeaders::default())).expect("valid");
        assert_eq!(req.headers()[HOST], "a.example");
    }
}
