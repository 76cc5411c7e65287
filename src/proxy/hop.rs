//! Header hygiene at each hop: hop-by-hop headers removed both ways, X-Forwarded-* set on
//! the way upstream. Forwarding itself is in [`super::forward`]; the connections, and how
//! a failed exchange is classified and answered, in [`super::pool`].

use http::header::{Entry, HeaderName, HeaderValue, CONNECTION, TE, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, Request, Version};

use crate::key::KeyHeaders;
use crate::reply::Body;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1), and
/// `Upgrade` eighth. `Trailer` is not one of them (§6.6.2): it announces the trailer
/// fields end to end, and an HTTP/1.1 hop sends only the trailers it announces. Last, the
/// admin listener's identity (`reply::ADMIN_IDENTITY`): an upstream's answer carrying it
/// would pass a data port off as the admin listener to `tollgate reload` and `tollgate
/// top`, which would then send it the admin token.
static HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
    HeaderName::from_static("proxy-authorization"),
    TE,
    TRANSFER_ENCODING,
    UPGRADE,
    HeaderName::from_static(crate::reply::ADMIN_IDENTITY),
];
const CONNECTION_BIT: u16 = 1;
const UPGRADE_BIT: u16 = 1 << 7;

/// What a client may claim of where its request came from or went, that only the
/// gateway says: first, the X-Forwarded-* headers the gateway sets, spelled with `_` for
/// some `-`. Django under
/// ASGI and WSGI servers (gunicorn before 22) read such a name as the header and join its
/// value after the gateway's, so a client's `X_Forwarded_For: 6.6.6.6` would read as the
/// address closest to an upstream that trusts one proxy, and `X_Forwarded_Proto: https`
/// make a plain request look secure. Removed from every request (nginx drops names with
/// `_` by default); found in the same pass as the hop-by-hop names, by one bit. With them
/// go the client's `Forwarded` (RFC 7239, which Rack 3 and Spring's forwarded filter read
/// before X-Forwarded-Host: a host the gateway did not route) and `X-Original-URL` /
/// `X-Rewrite-URL` (a path older Symfony, Laminas and IIS apps serve instead of the one
/// routed): the upstream learns host, scheme and address from the X-Forwarded-* the
/// gateway writes, and serves the path it routed.
static FORWARDING_CLAIMS: [&str; 12] = [
    "forwarded",
    "x-original-url",
    "x-rewrite-url",
    "x_forwarded_for",
    "x-forwarded_for",
    "x_forwarded-for",
    "x_forwarded_proto",
    "x-forwarded_proto",
    "x_forwarded-proto",
    "x_forwarded_host",
    "x-forwarded_host",
    "x_forwarded-host",
];
const FORWARDING_CLAIM_BIT: u16 = 1 << 9;

/// `name`'s bit among [`HOP_BY_HOP`] (or the one of [`FORWARDING_CLAIMS`]), 0 for any
/// other header: one comparison of the name's text, so a message without
/// connection-level headers (most of them) costs a pass over its names, not a look-up per
/// hop-by-hop name.
pub fn hop_by_hop_bit(name: &HeaderName) -> u16 {
    match name.as_str() {
        "connection" => CONNECTION_BIT,
        "keep-alive" => 1 << 1,
        "proxy-connection" => 1 << 2,
        "proxy-authenticate" => 1 << 3,
        "proxy-authorization" => 1 << 4,
        "te" => 1 << 5,
        "transfer-encoding" => 1 << 6,
        "upgrade" => UPGRADE_BIT,
        crate::reply::ADMIN_IDENTITY => 1 << 8,
        "x_forwarded_for" | "x-forwarded_for" | "x_forwarded-for" | "x_forwarded_proto"
        | "x-forwarded_proto" | "x_forwarded-proto" | "x_forwarded_host" | "x-forwarded_host"
        | "x_forwarded-host" | "forwarded" | "x-original-url" | "x-rewrite-url" => {
            FORWARDING_CLAIM_BIT
        }
        _ => 0,
    }
}

/// Removes hop-by-hop headers and any header the Connection header names but those in
/// `kept` (what policies key by). With `upgrade`, keeps `Connection: upgrade` and
/// `Upgrade` so the tunnel can be set up.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool, kept: &KeyHeaders) {
    let found = headers
        .keys()
        .fold(0, |bits, name| bits | hop_by_hop_bit(name));
    if found != 0 {
        remove_hop_by_hop(headers, (upgrade, kept), found);
    }
    if upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// The removals of [`strip_hop_by_hop`]: the headers `Connection` names, and those of
/// [`HOP_BY_HOP`] whose bits are in `found`.
fn remove_hop_by_hop(headers: &mut HeaderMap, (upgrade, kept): (bool, &KeyHeaders), found: u16) {
    if found & CONNECTION_BIT != 0 && !names_no_other_header(headers) {
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
            // Hop-by-hop names go below, by their bits (`keep-alive` is the usual option).
            let listed = HOP_BY_HOP
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h.as_str()));
            // The client's address as a trusted proxy wrote it (what keying by `ip`
            // reads): a client's `Connection: x-forwarded-for` passed on by a front proxy
            // that does not act on it would otherwise erase it, and the client would be
            // keyed as that proxy (nginx ignores every option).
            // The same for any header a policy keys by (`KeyHeaders`).
            let address = name.eq_ignore_ascii_case(X_FORWARDED_FOR.as_str());
            if name.is_empty() || listed || address || kept.holds(name) {
                continue;
            }
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        let bit = 1 << i;
        if found & bit != 0 && !(upgrade && bit == UPGRADE_BIT) {
            headers.remove(name);
        }
    }
    if found & FORWARDING_CLAIM_BIT != 0 {
        for name in FORWARDING_CLAIMS.iter().filter(|n| !kept.holds(n)) {
            headers.remove(*name);
        }
    }
}

/// Whether `Connection` is the one `keep-alive` (what nearly every HTTP/1.1 upstream sends
/// with each response), which names only a hop-by-hop header: then there is no option to
/// parse, and the `Keep-Alive` header, if any, goes by its bit.
fn names_no_other_header(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(CONNECTION).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.as_bytes().eq_ignore_ascii_case(b"keep-alive"),
        _ => false,
    }
}

/// Adds what the upstream learns from the gateway: X-Forwarded-For (every line the
/// client sent, as one list, then the peer: `peer_text`), -Proto and -Host (`host`: the
/// `Host` the head was normalised to before routing, `head::normalize`, which also made
/// the hop-by-hop headers right).
pub fn prepare_request(
    req: &mut Request<Body>,
    (peer_text, tls): (&HeaderValue, bool),
    host: Option<HeaderValue>,
) {
    let headers = req.headers_mut();
    // One look-up of the name whether or not the client sent it (a custom name is hashed
    // byte by byte on every look-up).
    match headers.entry(&X_FORWARDED_FOR) {
        Entry::Occupied(mut lines) => {
            let mut chain = Vec::with_capacity(64);
            for line in lines.iter() {
                let line = line.as_bytes().trim_ascii();
                if !line.is_empty() {
                    chain.extend_from_slice(line);
                    chain.extend_from_slice(b", ");
                }
            }
            chain.extend_from_slice(peer_text.as_bytes());
            if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(chain)) {
                lines.insert(v);
            }
        }
        // The usual request, from a client no proxy stands before: the connection's own.
        Entry::Vacant(slot) => {
            slot.insert(peer_text.clone());
        }
    }
    headers.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if tls { "https" } else { "http" }),
    );
    // The routed host, never the client's word: a request without one (HTTP/1.0, or
    // HTTP/2 without an authority) matched only routes that name no host, and its own
    // X-Forwarded-Host would have the upstream serve whichever host it claims.
    match host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST.clone(), host);
        }
        None => {
            headers.remove(&X_FORWARDED_HOST);
        }
    }
    if req.version() == Version::HTTP_2 {
        join_cookie_crumbs(req.headers_mut());
    }
    *req.version_mut() = Version::HTTP_11;
}

/// An HTTP/2 client may split its cookies into one `cookie` field each (RFC 9113
/// §8.2.3, for better header compression); an HTTP/1.1 request carries one `Cookie`
/// line (RFC 6265 §5.4), so the crumbs are joined with `"; "` before the request goes on.
fn join_cookie_crumbs(headers: &mut HeaderMap) {
    let Entry::Occupied(mut crumbs) = headers.entry(http::header::COOKIE) else {
        return;
    };
    if crumbs.iter().nth(1).is_none() {
        return;
    }
    let mut joined = Vec::with_capacity(128);
    for crumb in crumbs.iter() {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(crumb.as_bytes());
    }
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(joined)) {
        crumbs.insert(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http2_cookie_crumbs_go_on_as_one_line() {
        let mut headers = HeaderMap::new();
        for crumb in ["a=1", "b=2", "c=3"] {
            headers.append(http::header::COOKIE, HeaderValue::from_static(crumb));
        }
        join_cookie_crumbs(&mut headers);
        let all: Vec<_> = headers.get_all(http::header::COOKIE).iter().collect();
        assert_eq!(all, ["a=1; b=2; c=3"]);
        let mut one = HeaderMap::new();
        one.insert(http::header::COOKIE, HeaderValue::from_static("x=1"));
        join_cookie_crumbs(&mut one);
        assert_eq!(one[http::header::COOKIE], "x=1");
    }

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
        strip_hop_by_hop(&mut h, false, &KeyHeaders::default());
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-keep"], "yes");
    }

    #[test]
    fn every_hop_by_hop_name_has_its_own_bit() {
        let bits: Vec<u16> = HOP_BY_HOP.iter().map(hop_by_hop_bit).collect();
        for (i, bit) in bits.iter().enumerate() {
            assert_eq!(*bit, 1 << i, "{}", HOP_BY_HOP[i]);
        }
        assert_eq!(hop_by_hop_bit(&http::header::HOST), 0);
        assert_eq!(hop_by_hop_bit(&HeaderName::from_static("x-connection")), 0);
        // The spellings the `match` names are the list that is removed, and no other.
        for name in FORWARDING_CLAIMS {
            let bit = hop_by_hop_bit(&HeaderName::from_static(name));
            assert_eq!(bit, FORWARDING_CLAIM_BIT, "{name}");
        }
        assert_eq!(hop_by_hop_bit(&X_FORWARDED_FOR), 0);
    }

    #[test]
    fn connection_options_naming_hop_by_hop_headers_remove_only_what_is_there() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "Keep-Alive, TE, x-a".parse().expect("v"));
        h.insert("keep-alive", "timeout=5".parse().expect("v"));
        h.insert("x-a", "1".parse().expect("v"));
        h.insert("x-b", "2".parse().expect("v"));
        strip_hop_by_hop(&mut h, false, &KeyHeaders::default());
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-b"], "2");
    }

    #[test]
    fn the_usual_keep_alive_is_removed_with_its_header_and_nothing_else() {
        for value in ["keep-alive", "Keep-Alive"] {
            let mut h = HeaderMap::new();
            h.insert(CONNECTION, value.parse().expect("v"));
            h.insert("keep-alive", "timeout=5".parse().expect("v"));
            h.insert("x-b", "2".parse().expect("v"));
            strip_hop_by_hop(&mut h, false, &KeyHeaders::default());
            assert_eq!(h.len(), 1, "{h:?}");
            assert_eq!(h["x-b"], "2");
        }
        // Two lines, or another option beside it: parsed as ever.
        let mut h = HeaderMap::new();
        h.append(CONNECTION, "keep-alive".parse().expect("v"));
        h.append(CONNECTION, "x-a".parse().expect("v"));
        h.insert("x-a", "1".parse().expect("v"));
        h.insert("x-b", "2".parse().expect("v"));
        strip_hop_by_hop(&mut h, false, &KeyHeaders::default());
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-b"], "2");
    }

    #[test]
    fn upgrade_keeps_the_upgrade_headers() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, "Upgrade".parse().expect("v"));
        h.insert(UPGRADE, "websocket".parse().expect("v"));
        strip_hop_by_hop(&mut h, true, &KeyHeaders::default());
        assert_eq!(h[UPGRADE], "websocket");
        assert_eq!(h[CONNECTION], "upgrade");
    }
}
