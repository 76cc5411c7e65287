//! Who may use the admin API. With `[server] admin_token` set, every `/admin/*` request
//! presents it as a bearer token; without one, the read-only endpoints answer a request
//! that names the gateway by address (an IP literal or `localhost`: a page whose DNS name
//! was rebound to the gateway names itself), and the mutating ones answer only on a
//! loopback admin listener, where reaching the port already means being on the host.
//! Health, readiness, metrics and the status page's HTML stay open either way: probes and
//! scrapers carry no secrets.

use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};

use crate::config::Config;
use crate::reply::{json_error, Body};

/// The answer refusing this request, or `None` when it may go on.
pub fn refuse(
    config: &Config,
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
) -> Option<Response<Body>> {
    let path = uri.path();
    if !path.starts_with("/admin/") && path != "/admin" {
        return None;
    }
    match &config.server.admin_token {
        Some(token) => {
            let presented = headers
                .get(AUTHORIZATION)
                .and_then(|v| bearer(v.as_bytes()));
            if presented.is_some_and(|p| token.matches(p)) {
                return None;
            }
            let mut resp = json_error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                &[(
                    "detail",
                    "send the admin token as `Authorization: Bearer <token>`".into(),
                )],
            );
            resp.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tollgate admin\""),
            );
            Some(resp)
        }
        None if mutating(method) && !on_loopback(config) => Some(json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &[(
                "detail",
                "changes need [server] admin_token (or admin_token_file), or an admin_listen on a loopback address"
                    .into(),
            )],
        )),
        // Loopback trusts whoever is on the host, not a web page a browser there shows:
        // a cross-site form or a rebound DNS name would otherwise reach it too.
        None if mutating(method) && !from_the_host(uri, headers) => Some(json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &[(
                "detail",
                "without an admin token, changes take a loopback Host and no Origin header (a browser page cannot make them)"
                    .into(),
            )],
        )),
        // A DNS-rebinding page reaches the listener under its own name: without a token,
        // what the API reads out (tenant names, limits) goes only to a request naming the
        // gateway by address.
        None if !named_by_address(uri, headers) => Some(json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &[(
                "detail",
                "without an admin token, /admin/* answers a Host that is an IP address or localhost (a DNS name could be a rebound one): set [server] admin_token_file to use a name"
                    .into(),
            )],
        )),
        None => None,
    }
}

fn on_loopback(config: &Config) -> bool {
    config
        .server
        .admin_listen
        .is_some_and(|a| a.ip().is_loopback())
}

/// The host a request names: the target's authority (HTTP/2's `:authority`, an
/// absolute-form target) or else its `Host` header, without the port. `None` when it names
/// none (HTTP/1.0 without `Host`: no browser sends that). `Some("")` for a value that is not
/// text, or several `Host` headers (each reader would pick another), which match nothing.
fn named_host<'a>(uri: &'a http::Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    if let Some(authority) = uri.authority() {
        return Some(
            authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']'),
        );
    }
    let mut hosts = headers.get_all(http::header::HOST).iter();
    let host = hosts.next()?;
    let (Ok(host), None) = (host.to_str(), hosts.next()) else {
        return Some("");
    };
    Some(match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    })
}

/// A request a program on the host made: it names a loopback address (as curl sends it)
/// and no browser `Origin` came with it.
fn from_the_host(uri: &http::Uri, headers: &HeaderMap) -> bool {
    if headers.contains_key(http::header::ORIGIN) {
        return false;
    }
    named_host(uri, headers).is_none_or(|name| {
        name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// A request naming the gateway by an IP address or `localhost`, never by a DNS name an
/// attacker could point at it.
fn named_by_address(uri: &http::Uri, headers: &HeaderMap) -> bool {
    named_host(uri, headers).is_none_or(|name| {
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
    })
}

fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The credentials of `Bearer <token>` (the scheme is case-insensitive, RFC 9110 §11.1).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the config warns of an admin API open beyond this host without a token.
    fn exposed_without_token(config: &Config) -> bool {
        config
            .warnings
            .iter()
            .any(|w| w.contains("no admin_token is set"))
    }

    fn config(server: &str) -> Config {
        let text = format!("[server]\nlisten = \"127.0.0.1:0\"\n{server}\n");
        crate::config::compile(std::path::Path::new("t.toml"), &text).expect("valid")
    }

    fn status(config: &Config, method: Method, path: &str, auth: Option<&str>) -> Option<u16> {
        let mut headers = HeaderMap::new();
        if let Some(a) = auth {
            headers.insert(AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        let uri: http::Uri = path.parse().unwrap();
        refuse(config, &method, &uri, &headers).map(|r| r.status().as_u16())
    }

    #[test]
    fn without_a_token_changes_need_a_loopback_listener() {
        let exposed = config("admin_listen = \"0.0.0.0:9901\"");
        assert!(exposed_without_token(&exposed), "{:?}", exposed.warnings);
        assert_eq!(
            status(&exposed, Method::POST, "/admin/reload", None),
            Some(403)
        );
        assert_eq!(
            status(&exposed, Method::PUT, "/admin/overrides/p/k", None),
            Some(403)
        );
        assert_eq!(status(&exposed, Method::GET, "/admin/config", None), None);
        let local = config("admin_listen = \"127.0.0.1:9901\"");
        assert!(!exposed_without_token(&local));
        assert_eq!(status(&local, Method::POST, "/admin/reload", None), None);
        let refused = |headers: &[(http::HeaderName, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in headers {
                h.insert(k.clone(), HeaderValue::from_static(v));
            }
            let uri = http::Uri::from_static("/admin/reload");
            refuse(&local, &Method::POST, &uri, &h).map(|r| r.status().as_u16())
        };
        use http::header::{HOST, ORIGIN};
        assert_eq!(refused(&[(HOST, "127.0.0.1:9901")]), None);
        assert_eq!(refused(&[(HOST, "localhost:9901")]), None);
        assert_eq!(refused(&[(HOST, "[::1]:9901")]), None);
        assert_eq!(
            refused(&[(HOST, "evil.example:9901")]),
            Some(403),
            "a rebound name"
        );
        assert_eq!(
            refused(&[(HOST, "127.0.0.1:9901"), (ORIGIN, "https://evil.example")]),
            Some(403),
            "a cross-site page"
        );
        let v6 = config("admin_listen = \"[::1]:9901\"");
        assert_eq!(
            status(&v6, Method::DELETE, "/admin/overrides/p/k", None),
            None
        );
    }

    #[test]
    fn without_a_token_reads_need_the_gateway_named_by_address() {
        let read = |config: &Config, target: &'static str, host: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(host) = host {
                h.insert(http::header::HOST, HeaderValue::from_static(host));
            }
            let uri = http::Uri::from_static(target);
            refuse(config, &Method::GET, &uri, &h).map(|r| r.status().as_u16())
        };
        for listen in ["127.0.0.1:9901", "0.0.0.0:9901"] {
            let c = config(&format!("admin_listen = \"{listen}\""));
            for host in ["127.0.0.1:9901", "localhost", "[::1]:9901", "10.1.2.3:9901"] {
                assert_eq!(read(&c, "/admin/overrides", Some(host)), None, "{host}");
            }
            assert_eq!(read(&c, "/admin/config", None), None, "no Host at all");
            for host in ["rebound.attacker.example", "rebound.attacker.example:9901"] {
                assert_eq!(
                    read(&c, "/admin/overrides", Some(host)),
                    Some(403),
                    "{host}"
                );
                assert_eq!(read(&c, "/admin/config", Some(host)), Some(403), "{host}");
                for open in ["/healthz", "/readyz", "/metrics", "/"] {
                    assert_eq!(read(&c, open, Some(host)), None, "{open} stays open");
                }
            }
            // HTTP/2 names its target in :authority, which wins over any Host header.
            let h2 = "http://rebound.attacker.example:9901/admin/config";
            assert_eq!(read(&c, h2, Some("127.0.0.1")), Some(403));
            assert_eq!(read(&c, "http://127.0.0.1:9901/admin/config", None), None);
        }
        let guarded = config("admin_token = \"abcdefgh12345678\"");
        assert_eq!(
            status(
                &guarded,
                Method::GET,
                "http://rebound.example/admin/config",
                Some("Bearer abcdefgh12345678")
            ),
            None,
            "a token holder may use any name"
        );
    }

    #[test]
    fn with_a_token_every_admin_path_needs_it() {
        let guarded = config("admin_listen = \"0.0.0.0:9901\"\nadmin_token = \"abcdefgh12345678\"");
        assert!(!exposed_without_token(&guarded));
        assert_eq!(
            status(&guarded, Method::GET, "/admin/config", None),
            Some(401)
        );
        assert_eq!(
            status(
                &guarded,
                Method::GET,
                "/admin/config",
                Some("Bearer abcdefgh1234567")
            ),
            Some(401)
        );
        assert_eq!(
            status(
                &guarded,
                Method::POST,
                "/admin/reload",
                Some("Bearer abcdefgh12345678")
            ),
            None
        );
        for open in ["/healthz", "/readyz", "/metrics", "/"] {
            assert_eq!(status(&guarded, Method::GET, open, None), None, "{open}");
        }
    }

    #[test]
    fn token_settings_are_checked() {
        let both =
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"a\"\nadmin_token_file = \"t\"\n";
        let e = crate::config::compile(std::path::Path::new("t.toml"), both).unwrap_err();
        assert!(e.to_string().contains("both set"), "{e}");
        let spaced = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"a b\"\n";
        let e = crate::config::compile(std::path::Path::new("t.toml"), spaced).unwrap_err();
        assert!(e.to_string().contains("printable ASCII"), "{e}");
        for (token, problem) in [("abc", "too short"), (&*"x".repeat(5000), "longer than")] {
            let text = format!("[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{token}\"\n");
            let e = crate::config::compile(std::path::Path::new("t.toml"), &text).unwrap_err();
            assert!(e.to_string().contains(problem), "{e}");
            assert!(e.to_string().contains("t.toml:3"), "located: {e}");
        }
        let missing =
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token_file = \"/nonexistent/token\"\n";
        let e = crate::config::compile(std::path::Path::new("t.toml"), missing).unwrap_err();
        assert!(
            e.to_string().contains("cannot read admin_token_file"),
            "{e}"
        );
    }

    #[test]
    fn reads_bearer_credentials() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer   abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
    }

    #[test]
    fn only_changes_are_mutating() {
        assert!(!mutating(&Method::GET));
        assert!(!mutating(&Method::HEAD));
        assert!(mutating(&Method::POST));
        assert!(mutating(&Method::PUT));
        assert!(mutating(&Method::DELETE));
    }
}
