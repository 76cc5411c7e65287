//! Key sources (`ip`, `header:NAME`, …): parsing them from the config and taking their
//! value from a request without copying where the request already holds the bytes.

use std::borrow::Cow;
use std::fmt;
use std::hash::Hasher;
use std::net::IpAddr;
use std::str::FromStr;

use base64::Engine;
use http::header::{HeaderName, AUTHORIZATION, COOKIE};
use http::{HeaderMap, Method, Uri};

/// Where one part of a limiter key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Ip,
    Header(HeaderName),
    Query(String),
    Cookie(String),
    Jwt(String),
    Route,
    Method,
    Path,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySourceError {
    #[error("unknown key source `{0}`")]
    Unknown(String),
    #[error("`{0}:` needs a name after the colon")]
    MissingName(&'static str),
    #[error("`{0}` is not a valid HTTP header name")]
    BadHeader(String),
}

impl FromStr for KeySource {
    type Err = KeySourceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, name) = match s.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (s, None),
        };
        let named = |label: &'static str| match name {
            Some(n) if !n.is_empty() => Ok(n.to_owned()),
            _ => Err(KeySourceError::MissingName(label)),
        };
        match (kind, name) {
            ("ip", None) => Ok(KeySource::Ip),
            ("route", None) => Ok(KeySource::Route),
            ("method", None) => Ok(KeySource::Method),
            ("path", None) => Ok(KeySource::Path),
            ("header", _) => {
                let n = named("header")?;
                HeaderName::from_bytes(n.as_bytes())
                    .map(KeySource::Header)
                    .map_err(|_| KeySourceError::BadHeader(n))
            }
            ("query", _) => Ok(KeySource::Query(named("query")?)),
            ("cookie", _) => Ok(KeySource::Cookie(named("cookie")?)),
            ("jwt", _) => Ok(KeySource::Jwt(named("jwt")?)),
            _ => Err(KeySourceError::Unknown(s.to_owned())),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Ip => f.write_str("ip"),
            KeySource::Header(n) => write!(f, "header:{n}"),
            KeySource::Query(n) => write!(f, "query:{n}"),
            KeySource::Cookie(n) => write!(f, "cookie:{n}"),
            KeySource::Jwt(n) => write!(f, "jwt:{n}"),
            KeySource::Route => f.write_str("route"),
            KeySource::Method => f.write_str("method"),
            KeySource::Path => f.write_str("path"),
        }
    }
}

/// What a key source can see of a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub client_ip: IpAddr,
    pub route: &'a str,
}

/// One part of a key, borrowed from the request where possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart<'a> {
    Bytes(Cow<'a, [u8]>),
    Ip(IpAddr),
}

impl KeyPart<'_> {
    /// Feeds the part to a hasher, length-prefixed so `("ab","c")` ≠ `("a","bc")`.
    pub fn hash_into<H: Hasher>(&self, hasher: &mut H) {
        match self {
            KeyPart::Bytes(b) => {
                hasher.write_usize(b.len());
                hasher.write(b);
            }
            KeyPart::Ip(ip) => {
                // Same bytes as the textual form an operator would type in the admin API.
                let mut buf = [0u8; 48];
                let len = {
                    use std::io::Write;
                    let mut cursor = std::io::Cursor::new(&mut buf[..]);
                    let _ = write!(cursor, "{ip}");
                    cursor.position() as usize
                };
                hasher.write_usize(len);
                hasher.write(&buf[..len]);
            }
        }
    }

    /// The part as text, for Redis keys, logs and override look-ups.
    pub fn as_text(&self) -> Cow<'_, str> {
        match self {
            KeyPart::Bytes(b) => String::from_utf8_lossy(b),
            KeyPart::Ip(ip) => Cow::Owned(ip.to_string()),
        }
    }
}

impl KeySource {
    /// The source's value in `req`, or `None` when the request does not carry it.
    pub fn extract<'a>(&self, req: &RequestView<'a>) -> Option<KeyPart<'a>> {
        let borrowed = |b: &'a [u8]| Some(KeyPart::Bytes(Cow::Borrowed(b)));
        match self {
            KeySource::Ip => Some(KeyPart::Ip(req.client_ip)),
            KeySource::Route => borrowed(req.route.as_bytes()),
            KeySource::Method => borrowed(req.method.as_str().as_bytes()),
            KeySource::Path => borrowed(req.uri.path().as_bytes()),
            KeySource::Header(name) => req
                .headers
                .get(name)
                .map(|v| v.as_bytes())
                .filter(|v| !v.is_empty())
                .and_then(borrowed),
            KeySource::Query(name) => query_value(req.uri.query()?, name),
            KeySource::Cookie(name) => cookie_value(req.headers, name),
            KeySource::Jwt(claim) => jwt_claim(req.headers, claim),
        }
    }
}

/// The first `name=value` pair, percent-decoded so `a%20b` and `a+b` are one key.
fn query_value<'a>(query: &'a str, name: &str) -> Option<KeyPart<'a>> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .filter(|(_, v)| !v.is_empty())
        .map(|(_, v)| match v {
            Cow::Borrowed(s) => KeyPart::Bytes(Cow::Borrowed(s.as_bytes())),
            Cow::Owned(s) => KeyPart::Bytes(Cow::Owned(s.into_bytes())),
        })
}

/// The first cookie called `name` across all Cookie headers.
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<KeyPart<'a>> {
    headers
        .get_all(COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            let (k, v) = (&pair[..eq], &pair[eq + 1..]);
            let v = v
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(v);
            (k.trim_ascii() == name.as_bytes() && !v.is_empty())
                .then(|| KeyPart::Bytes(Cow::Borrowed(v.trim_ascii())))
        })
}

/// Longest bearer token whose payload we are willing to decode.
const MAX_JWT_LEN: usize = 8192;

/// A claim from the payload of `Authorization: Bearer <jwt>`. The signature is NOT
/// verified: the gateway only reads the claim to pick a bucket (see docs/configuration.md).
fn jwt_claim<'a>(headers: &HeaderMap, claim: &str) -> Option<KeyPart<'a>> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.len() > MAX_JWT_LEN {
        return None;
    }
    let mut segments = token.trim().split('.');
    let (_header, payload, _sig) = (segments.next()?, segments.next()?, segments.next()?);
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let text = match json.get(claim)? {
        serde_json::Value::String(s) if !s.is_empty() => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    Some(KeyPart::Bytes(Cow::Owned(text.into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> RequestView<'a> {
        RequestView {
            method: &Method::GET,
            uri,
            headers,
            client_ip: "192.0.2.1".parse().expect("ip"),
            route: "search",
        }
    }

    fn text(part: Option<KeyPart<'_>>) -> Option<String> {
        part.map(|p| p.as_text().into_owned())
    }

    #[test]
    fn parses_every_source_and_rejects_nonsense() {
        for s in [
            "ip",
            "route",
            "method",
            "path",
            "header:x-tenant-id",
            "query:u",
            "cookie:sid",
            "jwt:sub",
        ] {
            let src: KeySource = s.parse().expect(s);
            assert_eq!(src.to_string(), s);
        }
        assert_eq!(
            "ipv4".parse::<KeySource>(),
            Err(KeySourceError::Unknown("ipv4".into()))
        );
        assert_eq!(
            "header:".parse::<KeySource>(),
            Err(KeySourceError::MissingName("header"))
        );
        assert!(matches!(
            "header:bad name".parse::<KeySource>(),
            Err(KeySourceError::BadHeader(_))
        ));
    }

    #[test]
    fn extracts_query_cookie_header_jwt() {
        let uri: Uri = "/v1/search?q=x&user=a%20b&user=second"
            .parse()
            .expect("uri");
        let mut headers = HeaderMap::new();
        headers.insert("x-tenant-id", "acme".parse().expect("value"));
        headers.append(COOKIE, "theme=dark; sid=\"s-123\"".parse().expect("value"));
        // {"sub":"alice","org":42}
        let payload =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"alice","org":42}"#);
        headers.insert(
            AUTHORIZATION,
            format!("Bearer h.{payload}.sig").parse().expect("value"),
        );
        let req = view(&uri, &headers);
        let get = |s: &str| text(s.parse::<KeySource>().expect("source").extract(&req));
        assert_eq!(get("query:user").as_deref(), Some("a b"));
        assert_eq!(get("query:absent"), None);
        assert_eq!(get("cookie:sid").as_deref(), Some("s-123"));
        assert_eq!(get("cookie:the"), None);
        assert_eq!(get("header:x-tenant-id").as_deref(), Some("acme"));
        assert_eq!(get("jwt:sub").as_deref(), Some("alice"));
        assert_eq!(get("jwt:org").as_deref(), Some("42"));
        assert_eq!(get("jwt:missing"), None);
        assert_eq!(get("path").as_deref(), Some("/v1/search"));
        assert_eq!(get("route").as_deref(), Some("search"));
        assert_eq!(get("ip").as_deref(), Some("192.0.2.1"));
    }

    #[test]
    fn malformed_jwt_is_missing_not_an_error() {
        let uri: Uri = "/".parse().expect("uri");
        for bad in [
            "Bearer",
            "Bearer a.b",
            "Bearer a.!!!.c",
            "Basic abc",
            "Bearer a.e30.c",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, bad.parse().expect("value"));
            let req = view(&uri, &headers);
            assert_eq!(KeySource::Jwt("sub".into()).extract(&req), None, "{bad}");
        }
    }
}
