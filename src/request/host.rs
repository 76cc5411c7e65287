//! The one host a request is for: taken from the target (absolute-form or HTTP/2
//! `:authority`) or the single `Host` header, and reduced to the spelling routes match
//! (lower case, no port, no trailing dot). Pure: no I/O.

use std::borrow::Cow;

use http::uri::Authority;

/// Why a request's host is refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("more than one Host header")]
    Several,
    #[error("the Host header differs from the request target's authority")]
    Mismatch,
    #[error("the host is not a valid `host[:port]`")]
    Invalid,
    /// An HTTP/1.1 request names no host (RFC 9112 §3.2: answered 400). Let through,
    /// it could only match a route with no `host`, while an upstream that trusts a
    /// forwarded host would serve whichever host the client claims.
    #[error("an HTTP/1.1 request without a Host header")]
    Missing,
}

impl HostError {
    /// The `error` field of the 400 JSON body.
    pub fn code(self) -> &'static str {
        match self {
            HostError::Several => "several_hosts",
            HostError::Mismatch => "host_mismatch",
            HostError::Invalid => "bad_host",
            HostError::Missing => "missing_host",
        }
    }
}

/// A validated `host[:port]` as the client wrote it, and its routing form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHost<'a> {
    /// Lower case, without port or trailing dot: what `host = "…"` in a route matches.
    pub name: Cow<'a, str>,
    /// `name` with the port the client gave, if any: what the upstream receives as `Host`.
    pub forward: Cow<'a, str>,
}

/// Validates one `host[:port]` value: no whitespace, no user info, a non-empty host.
pub fn parse(value: &str) -> Result<RequestHost<'_>, HostError> {
    match plain(value) {
        Some(host) => Ok(host),
        None => parse_authority(value),
    }
}

/// The usual spelling, read without building an `Authority`: lower-case letters, digits,
/// `-` and `.` (not last), then nothing or `:` and 1 to 5 digits. Such a value is its own
/// routing and forwarding form. `None`: anything else, left to the full parse (which
/// agrees wherever this answers; a property test checks it).
fn plain(value: &str) -> Option<RequestHost<'_>> {
    let bytes = value.as_bytes();
    // One pass to the colon, a table look-up a byte: every request's `Host` goes through
    // here.
    let mut colon = bytes.len();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b':' {
            colon = i;
            break;
        }
        if !PLAIN_HOST_BYTE[usize::from(b)] {
            return None;
        }
    }
    let (host, port) = bytes.split_at(colon);
    if host.is_empty() || host.last() == Some(&b'.') {
        return None;
    }
    if let Some(digits) = port.strip_prefix(b":") {
        if digits.is_empty() || !is_port(digits) {
            return None;
        }
    }
    Some(RequestHost {
        name: Cow::Borrowed(&value[..colon]),
        forward: Cow::Borrowed(value),
    })
}

/// Whether `digits` are a port, 0 to 65535 (or none): `:99999` is no port any upstream
/// listens on, and forwarded as written it only confuses the upstream's own parse.
fn is_port(digits: &[u8]) -> bool {
    digits.len() <= 5
        && digits.iter().all(u8::is_ascii_digit)
        && digits
            .iter()
            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
            <= u32::from(u16::MAX)
}

/// The bytes of a plain host name: lower-case letters, digits, `-` and `.`.
static PLAIN_HOST_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.';
        b += 1;
    }
    table
};

/// The full validation, through `http`'s `Authority` parser.
fn parse_authority(value: &str) -> Result<RequestHost<'_>, HostError> {
    if value.is_empty() || value.bytes().any(|b| b.is_ascii_whitespace() || b == b'@') {
        return Err(HostError::Invalid);
    }
    let authority: Authority = value.parse().map_err(|_| HostError::Invalid)?;
    let host = authority.host();
    let trimmed = host.strip_suffix('.').unwrap_or(host);
    if trimmed.is_empty() || trimmed.ends_with('.') {
        return Err(HostError::Invalid);
    }
    // `host()` borrows from the parsed copy; find the same bytes in `value`.
    let start = value.find(host).ok_or(HostError::Invalid)?;
    let port = &value[start + host.len()..];
    let digits = port.strip_prefix(':').unwrap_or(port);
    if start != 0 || (!port.is_empty() && !port.starts_with(':')) || !is_port(digits.as_bytes()) {
        return Err(HostError::Invalid);
    }
    let name = lowercase(&value[..trimmed.len()]);
    let forward = if host.len() == trimmed.len() && matches!(name, Cow::Borrowed(_)) {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(format!("{name}{port}"))
    };
    Ok(RequestHost { name, forward })
}

fn lowercase(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

/// The request's host from its target authority (if any) and its `Host` header lines.
/// An HTTP/1 absolute-form target wins over `Host` (RFC 9112 §3.2.2); over HTTP/2 the
/// two must agree (RFC 9113 §8.3.1); HTTP/1.1 must name one (RFC 9112 §3.2). `None`: no
/// host at all (HTTP/1.0, HTTP/2 without an authority).
pub fn of_request<'a>(
    target: Option<&'a str>,
    host_lines: &mut dyn Iterator<Item = &'a [u8]>,
    version: http::Version,
) -> Result<Option<RequestHost<'a>>, HostError> {
    let http2 = version == http::Version::HTTP_2;
    let first = host_lines.next();
    if host_lines.next().is_some() {
        return Err(HostError::Several);
    }
    let header = first
        .map(|v| std::str::from_utf8(v).map_err(|_| HostError::Invalid))
        .transpose()?;
    match (target, header) {
        (Some(t), Some(h)) if http2 && !t.eq_ignore_ascii_case(h) => Err(HostError::Mismatch),
        (Some(t), Some(h)) => {
            // HTTP/1 absolute-form: the target is routed and forwarded; a junk Host
            // header is still refused, as RFC 9112 requires of an invalid one.
            parse(h)?;
            parse(t).map(Some)
        }
        (Some(t), None) => parse(t).map(Some),
        (None, Some(h)) => parse(h).map(Some),
        (None, None) if version == http::Version::HTTP_11 => Err(HostError::Missing),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(v: &str) -> Result<String, HostError> {
        parse(v).map(|h| h.name.into_owned())
    }

    #[test]
    fn routing_form() {
        assert_eq!(name("api.example.com").as_deref(), Ok("api.example.com"));
        assert_eq!(name("API.Example.COM").as_deref(), Ok("api.example.com"));
        assert_eq!(name("api.example.com.").as_deref(), Ok("api.example.com"));
        assert_eq!(
            name("api.example.com:8443").as_deref(),
            Ok("api.example.com")
        );
        assert_eq!(
            name("Api.example.com.:80").as_deref(),
            Ok("api.example.com")
        );
        assert_eq!(name("[::1]:80").as_deref(), Ok("[::1]"));
        assert_eq!(name("127.0.0.1").as_deref(), Ok("127.0.0.1"));
    }

    #[test]
    fn forwarded_form_keeps_the_port() {
        let f = |v: &str| parse(v).map(|h| h.forward.into_owned());
        assert_eq!(f("api.example.com").as_deref(), Ok("api.example.com"));
        assert!(matches!(
            parse("a.b:81").map(|h| h.forward),
            Ok(Cow::Borrowed("a.b:81"))
        ));
        assert_eq!(
            f("API.example.com.:81").as_deref(),
            Ok("api.example.com:81")
        );
        assert_eq!(f("api.example.com.").as_deref(), Ok("api.example.com"));
    }

    #[test]
    fn refused_spellings() {
        for bad in [
            "",
            " api.example.com",
            "api.example.com ",
            "api.\texample.com",
            "user@api.example.com",
            "api.example.com/x",
            ".",
            "a..",
            "api.example.com:port",
            "api.example.com:99999",
            "api.example.com:65536",
        ] {
            assert_eq!(parse(bad), Err(HostError::Invalid), "{bad:?}");
        }
    }

    proptest::proptest! {
        /// The fast path answers exactly as the full parse wherever it answers.
        #[test]
        fn plain_spellings_parse_as_the_authority_parser_does(
            value in "[a-z0-9.:\\-]{0,12}",
        ) {
            if let Some(fast) = plain(&value) {
                proptest::prop_assert_eq!(Ok(fast), parse_authority(&value));
            }
        }
    }

    #[test]
    fn usual_spellings_take_the_fast_path() {
        for value in [
            "127.0.0.1:8080",
            "api.example.com",
            "a-b.c:1",
            "localhost:65535",
        ] {
            assert!(plain(value).is_some(), "{value}");
            assert_eq!(Ok(plain(value).expect("plain")), parse_authority(value));
        }
        for value in ["API.example", "a.", "a:", "a:123456", "[::1]:80", "a b"] {
            assert!(plain(value).is_none(), "{value}");
        }
    }

    #[test]
    fn one_host_per_request() {
        let lines = |v: &'static [&'static str]| v.iter().map(|s| s.as_bytes());
        let host = |t, v, h2: bool| {
            let version = if h2 {
                http::Version::HTTP_2
            } else {
                http::Version::HTTP_11
            };
            of_request(t, &mut lines(v), version).map(|h| h.map(|h| h.name))
        };
        assert_eq!(host(None, &["a.b"], false), Ok(Some("a.b".into())));
        assert_eq!(host(None, &["a.b", "a.b"], false), Err(HostError::Several));
        assert_eq!(host(Some("x.y"), &["a.b"], false), Ok(Some("x.y".into())));
        assert_eq!(host(Some("x.y"), &[" a.b"], false), Err(HostError::Invalid));
        assert_eq!(host(Some("x.y"), &["a.b"], true), Err(HostError::Mismatch));
        assert_eq!(host(Some("x.y"), &["X.Y"], true), Ok(Some("x.y".into())));
        assert_eq!(host(Some("x.y"), &[], true), Ok(Some("x.y".into())));
        assert_eq!(host(None, &[], false), Err(HostError::Missing));
        assert_eq!(host(None, &[], true), Ok(None));
        let http10 = of_request(None, &mut lines(&[]), http::Version::HTTP_10);
        assert_eq!(http10, Ok(None));
    }
}
