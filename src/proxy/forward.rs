//! What forwarding does to a request on its way upstream and to the answer on its way
//! back: hop-by-hop headers removed, X-Forwarded-* set. The connections, and how a failed
//! exchange is classified and answered, are in [`super::pool`].

use std::net::IpAddr;

use http::header::{HeaderName, HeaderValue, CONNECTION, HOST, UPGRADE};
use http::{HeaderMap, Request, Version};

use super::response::Body;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1). `Trailer`
/// is not one of them (§6.6.2): it announces the trailer fields end to end, and an
/// HTTP/1.1 hop sends only the trailers it announces.
static HOP_BY_HOP: [HeaderName; 7] = [
    HeaderName::from_static("connection"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("proxy-authorization"),
    HeaderName::from_static("te"),
    HeaderName::from_static("transfer-encoding"),
];

/// Removes hop-by-hop headers and any header the Connection header names. With
/// `upgrade`, keeps `Connection: upgrade` and `Upgrade` so the tunnel can be set up.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    if headers.contains_key(CONNECTION) {
        // Copied out (on the stack for any usual value), so the named headers can be
        // removed while reading it; `remove` by `&str` builds no header name.
        let mut options: smallvec::SmallVec<[u8; 128]> = smallvec::SmallVec::new();
        for value in headers.get_all(CONNECTION) {
            options.extend_from_slice(value.as_bytes());
            options.push(b',');
        }
        for option in options.split(|&b| b == b',') {
            let Ok(name) = std::str::from_utf8(option.trim_ascii()) else {
                continue;
            };
            if name.is_empty() || (upgrade && name.eq_ignore_ascii_case("upgrade")) {
                continue;
            }
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(UPGRADE);
    }
}

/// Adds what the upstream learns from the gateway: X-Forwarded-For (every line the
/// client sent, as one list, then the peer), -Proto and -Host. The head was normalised
/// before routing (`head::normalize`), so Host and hop-by-hop headers are already right.
pub fn prepare_request(req: &mut Request<Body>, peer: IpAddr, tls: bool) {
    let headers = req.headers_mut();
    let mut chain = Vec::with_capacity(64);
    for line in headers.get_all(&X_FORWARDED_FOR) {
        let line = line.as_bytes().trim_ascii();
        if !line.is_empty() {
            chain.extend_from_slice(line);
            chain.extend_from_slice(b", ");
        }
    }
    {
        use std::io::Write;
        let _ = write!(chain, "{peer}");
    }
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(chain)) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
    headers.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if tls { "https" } else { "http" }),
    );
    if let Some(host) = headers.get(HOST).cloned() {
        headers.insert(X_FORWARDED_HOST.clone(), host);
    }
    *req.version_mut() = Version::HTTP_11;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "keep-alive, X-Secret".parse().expect("v"));
        h.insert("keep-alive", "timeout=5".parse().expect("v"));
        h.insert("x-secret", "1".parse().expect("v"));
        h.insert("te", "trailers".parse().expect("v"));
        h.insert("transfer-encoding", "chunked".parse().expect("v"));
        h.insert("upgrade", "websocket".parse().expect("v"));
        h.insert("x-keep", "yes".parse().expect("v"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-keep"], "yes");
    }

    #[test]
    fn upgrade_keeps_the_upgrade_headers() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "Upgrade".parse().expect("v"));
        h.insert(UPGRADE, "websocket".parse().expect("v"));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[UPGRADE], "websocket");
        assert_eq!(h[CONNECTION], "upgrade");
    }
}
