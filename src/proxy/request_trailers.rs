//! A client's request trailers on their way upstream. A trailer arrives after the decision
//! and is never read by it, yet an upstream may read it as a header: tonic merges a
//! request's trailers into the call's metadata, replacing the header of the same name, so
//! `x-tenant-id: r1234` in the head and `x-tenant-id: acme` in the trailers would be
//! charged to a fresh key and served as `acme`. So a gRPC call's trailers never pass (the
//! protocol has none from a client), and another request's pass without any field that
//! must come before the content (RFC 9110 §6.5.1: framing, routing, authentication,
//! content format), any the gateway sets (`X-Forwarded-*`, `Forwarded`), any hop-by-hop
//! one (an HTTP/2 upstream refuses the whole trailer block for one, and the stream would
//! hang until the upstream's timeout) and any header a policy keys by.

use bytes::Bytes;
use http::{HeaderMap, HeaderName};
use http_body::Frame;
use http_body_util::BodyExt;

use super::hop::hop_by_hop_bit;
use crate::key::KeyHeaders;

/// Fields a trailer may not carry: read before the content by any recipient, or written
/// by the gateway. Hop-by-hop names and the headers policies key by come besides.
static BEFORE_CONTENT: [&str; 15] = [
    "authorization",
    "cache-control",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "cookie",
    "expect",
    "forwarded",
    "host",
    "max-forwards",
    "trailer",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// Which of a request's trailers go upstream.
#[derive(Clone)]
pub enum RequestTrailers {
    /// A gRPC call's: none.
    None,
    /// Another request's: those no recipient reads before the content, none the gateway
    /// sets, none of these key headers.
    Without(KeyHeaders),
}

impl RequestTrailers {
    pub fn new(grpc: bool, keys: &KeyHeaders) -> Self {
        if grpc {
            Self::None
        } else {
            Self::Without(keys.clone())
        }
    }

    /// `body` with its trailers (if it has any) filtered.
    pub fn apply<B>(self, body: B) -> impl http_body::Body<Data = Bytes, Error = B::Error>
    where
        B: http_body::Body<Data = Bytes>,
    {
        body.map_frame(move |frame| match frame.into_trailers() {
            Ok(trailers) => Frame::trailers(self.filter(trailers)),
            Err(frame) => frame,
        })
    }

    fn filter(&self, trailers: HeaderMap) -> HeaderMap {
        let keys = match self {
            Self::None => return HeaderMap::new(),
            Self::Without(keys) => keys,
        };
        let passes = |name: &HeaderName| {
            hop_by_hop_bit(name) == 0
                && !BEFORE_CONTENT.contains(&name.as_str())
                && !keys.holds(name.as_str())
        };
        if trailers.keys().all(passes) {
            return trailers;
        }
        let mut kept = HeaderMap::new();
        let mut name = None;
        for (named, value) in trailers {
            name = named.or(name);
            if let Some(name) = name.as_ref().filter(|n| passes(n)) {
                kept.append(name.clone(), value);
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trailers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("v"),
            );
        }
        map
    }

    #[test]
    fn only_fields_read_after_the_content_pass() {
        let keys = KeyHeaders::of(&["header:x-tenant-id".parse().expect("source")]);
        let sent = trailers(&[
            ("x-checksum", "abc"),
            ("x-tenant-id", "acme"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x_forwarded_for", "6.6.6.6"),
            ("authorization", "Bearer x"),
            ("connection", "close"),
            ("te", "gzip"),
            ("content-length", "0"),
            ("x-checksum", "def"),
        ]);
        let kept = RequestTrailers::new(false, &keys).filter(sent);
        let names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-checksum"]);
        let values: Vec<_> = kept.get_all("x-checksum").iter().collect();
        assert_eq!(values, ["abc", "def"], "every value of a name that passes");
        let plain = trailers(&[("x-checksum", "abc")]);
        assert_eq!(
            RequestTrailers::new(false, &keys).filter(plain.clone()),
            plain
        );
        assert!(
            RequestTrailers::new(true, &keys).filter(plain).is_empty(),
            "gRPC: none"
        );
    }
}
