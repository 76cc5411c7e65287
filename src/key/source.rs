//! Key sources (`ip`, `header:NAME`, …): parsing them from the config and taking their
//! value from a request without copying where the request already holds the bytes.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use http::header::{HeaderName, AUTHORIZATION};
use http::{HeaderMap, Method, Uri};

/// Where one part of a limiter key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Ip,
    /// The client's address with an IPv6 address cut to its first `n` bits (`ip/64`): an
    /// IPv6 client usually holds a whole /64 (a /56 or /48 from some providers) and can
    /// send from any address in it.
    IpPrefix(u8),
    Header(HeaderName),
    Query(String),
    Cookie(String),
    Jwt(String),
    Route,
    Method,
    Path,
    /// A value in the request's JSON body (RFC 6901 pointer), read up to `[server]
    /// max_key_body` on routes that key or price by the body.
    Json(std::sync::Arc<crate::json::JsonPointer>),
    /// The value of a rate limit service descriptor's entry (an envoyproxy/ratelimit
    /// YAML limit's key): never written in the TOML, never found in a request.
    Descriptor(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySourceError {
    #[error("unknown key source `{0}`")]
    Unknown(String),
    #[error("`{0}:` needs a name after the colon")]
    MissingName(&'static str),
    #[error("`{0}` is not a valid HTTP header name")]
    BadHeader(String),
    #[error("`json:{0}`: {1}")]
    BadPointer(String, crate::json::PointerError),
    #[error("`ip/{0}`: the IPv6 prefix length is a whole number from 1 to 128 (a client usually holds a /64)")]
    BadPrefix(String),
}

impl KeySource {
    /// Whether a client can send any value it likes here, inventing as many keys as it
    /// wants: a header, query parameter, cookie, path, or an unverified JWT claim. (The
    /// client's address, the route and the method are not its to pick freely.)
    pub fn client_chosen(&self) -> bool {
        matches!(
            self,
            KeySource::Header(_)
                | KeySource::Query(_)
                | KeySource::Cookie(_)
                | KeySource::Jwt(_)
                | KeySource::Path
                | KeySource::Json(_)
        )
    }

    /// Whether the value is read from the request body alone (which is then buffered for
    /// every request); a `query:` key reads a body only when it is a form, multipart or
    /// JSON (`Route::body_readings`).
    pub fn reads_body(&self) -> bool {
        matches!(self, KeySource::Json(_))
    }
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
            (ip, None) if ip.starts_with("ip/") => {
                let len = &ip[3..];
                match len.parse::<u8>() {
                    // Digits only: `u8`'s parser also takes a leading `+`.
                    Ok(n @ 1..=128) if len.bytes().all(|b| b.is_ascii_digit()) => {
                        Ok(KeySource::IpPrefix(n))
                    }
                    _ => Err(KeySourceError::BadPrefix(len.to_owned())),
                }
            }
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
            ("json", Some(pointer)) => pointer
                .parse()
                .map(|p| KeySource::Json(std::sync::Arc::new(p)))
                .map_err(|e| KeySourceError::BadPointer(pointer.to_owned(), e)),
            ("json", None) => Err(KeySourceError::MissingName("json")),
            _ => Err(KeySourceError::Unknown(s.to_owned())),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Ip => f.write_str("ip"),
            KeySource::IpPrefix(len) => write!(f, "ip/{len}"),
            KeySource::Header(n) => write!(f, "header:{n}"),
            KeySource::Query(n) => write!(f, "query:{n}"),
            KeySource::Cookie(n) => write!(f, "cookie:{n}"),
            KeySource::Jwt(n) => write!(f, "jwt:{n}"),
            KeySource::Route => f.write_str("route"),
            KeySource::Method => f.write_str("method"),
            KeySource::Path => f.write_str("path"),
            KeySource::Json(p) => write!(f, "json:{p}"),
            KeySource::Descriptor(k) => write!(f, "descriptor:{k}"),
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
    /// What the JSON body told, on routes that read it.
    pub body: Option<&'a crate::json::BodyFacts<'a>>,
}

impl KeySource {
    /// `typed`, a value of this source as an operator writes it (the admin API's key
    /// paths, the config's overrides), in the one spelling requests make the key in: an
    /// address in its canonical text, under `ip/N` the network it falls in. `None` when
    /// it cannot be a value of this source (under `ip/N`: not an address, or a network
    /// wider than the key's).
    pub fn spelled<'t>(&self, typed: &'t str) -> Option<Cow<'t, str>> {
        match self {
            KeySource::Ip => Some(address::spelled_ip(typed)),
            KeySource::IpPrefix(len) => address::spelled_prefix(typed, *len).map(Cow::Owned),
            _ => Some(Cow::Borrowed(typed)),
        }
    }
}

impl KeySource {
    /// Every distinct, non-empty value of the source in `req`; empty when the request does
    /// not carry it. A source given several times (header lines, query parameters,
    /// cookies of one name, Authorization lines) yields each value, since upstreams
    /// disagree on whether the first or the last one counts.
    pub fn extract<'a>(&self, req: &RequestView<'a>) -> Result<KeyValues<'a>, TooManyValues> {
        let mut values = KeyValues::new();
        self.extract_into(req, &mut values)?;
        Ok(values)
    }

    /// [`extract`](Self::extract) into `values`, replacing what it held: the request path
    /// reuses one buffer rather than moving a fresh one out of every call.
    pub fn extract_into<'a>(
        &self,
        req: &RequestView<'a>,
        values: &mut KeyValues<'a>,
    ) -> Result<(), TooManyValues> {
        values.clear();
        let borrowed = |b: &'a [u8]| KeyPart::Bytes(Cow::Borrowed(b));
        match self {
            KeySource::Ip => values.push(KeyPart::Ip(req.client_ip)),
            KeySource::IpPrefix(len) => values.push(address::prefix_part(req.client_ip, *len)),
            KeySource::Route => values.push(borrowed(req.route.as_bytes())),
            KeySource::Method => values.push(borrowed(req.method.as_str().as_bytes())),
            KeySource::Path => values.push(borrowed(req.uri.path().as_bytes())),
            // Only a rate limit service call has descriptors; it keys them itself.
            KeySource::Descriptor(_) => {}
            KeySource::Header(name) => {
                for value in req.headers.get_all(name) {
                    header_value(value, values)?;
                }
                if values.is_empty() {
                    underscore_values(req.headers, name, values)?;
                }
            }
            KeySource::Query(name) => {
                if let Some(query) = req.uri.query() {
                    query_values(query.as_bytes(), name, values)?;
                }
                if let Some(body) = req.body {
                    body_param_values(body, name, values)?;
                }
            }
            KeySource::Cookie(name) => cookie_values(req.headers, name, values)?,
            KeySource::Json(pointer) => {
                let Some(body) = req.body else {
                    return Ok(());
                };
                // Values the walk could not keep would be uncharged: too many.
                if body.overflowed() {
                    return Err(TooManyValues);
                }
                for value in body.values(pointer) {
                    if !value.is_empty() {
                        push_distinct(values, borrowed(value))?;
                    }
                }
                body_field_values(body, pointer, values)?;
            }
            KeySource::Jwt(claim) => {
                for value in req.headers.get_all(AUTHORIZATION) {
                    jwt_claims(value.as_bytes(), claim, values)?;
                }
                // A spelling of `access_token` holds its letters, or a `%` that encodes them.
                let named = |q: &&str| q.contains("ccess") || q.contains('%');
                if let Some(query) = req.uri.query().filter(named) {
                    query_token_claims(query, claim, values)?;
                }
            }
        }
        Ok(())
    }
}

mod address;
mod body;
mod cookie;
mod part;
mod parts;
use body::{body_field_values, body_param_values};
use cookie::cookie_values;
use part::push_distinct;
pub use part::{KeyPart, KeyValues, TooManyValues, MAX_KEY_VALUES};
pub(crate) use parts::trim_ows_text;
use parts::{header_value, jwt_claims, query_token_claims, query_values, underscore_values};

#[cfg(test)]
mod tests;
