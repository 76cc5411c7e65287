//! `tollgate health`: one `GET` against the admin API, for a container's HEALTHCHECK (the
//! slim image has no curl). Healthy means a `200` answer within the timeout; anything else
//! (refused, silent, another status) is unhealthy, with a one-line reason.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

/// Where `tollgate health` asks when no `--url` is given: the admin listener of the
/// container's default configuration.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9901/healthz";

/// A plain `http://` URL to probe: what to connect to and what to ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// As given, for messages.
    pub url: String,
    /// The host to connect to (an IPv6 literal without its brackets).
    pub host: String,
    pub port: u16,
    /// The `Host` header: the URL's authority.
    pub authority: String,
    /// The request target: path and query.
    pub path: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PATH]`; `https://` and relative URLs are refused (the
    /// admin API serves plain HTTP).
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("not a URL: {url:?} ({e})"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "only http:// URLs can be checked (the admin API serves plain HTTP), not {other}://"
                ))
            }
            None => return Err(format!("not an absolute http:// URL: {url:?}")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("no host in {url:?}"))?;
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        Ok(Self {
            url: url.to_owned(),
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_owned(),
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
        })
    }
}

/// Why a probe found no healthy answer.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    #[error("GET {url} answered {status}, not 200 OK")]
    Status { url: String, status: StatusCode },
    #[error("cannot connect to {host}:{port} for {url}: {source}")]
    Connect {
        url: String,
        host: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("GET {url} failed: {source}")]
    Http { url: String, source: hyper::Error },
    #[error("GET {url}: no answer within {}", humantime::format_duration(*.timeout))]
    Timeout { url: String, timeout: Duration },
}

/// Asks `GET target` once, over a fresh HTTP/1.1 connection, and waits at most `timeout`
/// for the connection and the answer's head. `Ok` only for `200`.
pub async fn check(target: &Target, timeout: Duration) -> Result<(), Unhealthy> {
    match tokio::time::timeout(timeout, status(target)).await {
        Err(_) => Err(Unhealthy::Timeout {
            url: target.url.clone(),
            timeout,
        }),
        Ok(Err(e)) => Err(e),
        Ok(Ok(StatusCode::OK)) => Ok(()),
        Ok(Ok(status)) => Err(Unhealthy::Status {
            url: target.url.clone(),
            status,
        }),
    }
}

async fn status(target: &Target) -> Result<StatusCode, Unhealthy> {
    let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|source| Unhealthy::Connect {
            url: target.url.clone(),
            host: target.host.clone(),
            port: target.port,
            source,
        })?;
    let http = |source| Unhealthy::Http {
        url: target.url.clone(),
        source,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    // The connection is driven beside the request and dropped with this call's runtime.
    tokio::spawn(conn);
    let req = Request::get(target.path.as_str())
        .header(header::HOST, target.authority.as_str())
        .header(header::USER_AGENT, "tollgate-health")
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .expect("a path and query from a parsed URI make a valid request");
    let resp = sender.send_request(req).await.map_err(http)?;
    Ok(resp.status())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_http_urls() {
        let t = Target::parse(DEFAULT_URL).expect("default");
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.authority.as_str(),
                t.path.as_str()
            ),
            ("127.0.0.1", 9901, "127.0.0.1:9901", "/healthz")
        );
        let t = Target::parse("http://localhost").expect("no port, no path");
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 80, "/")
        );
        let t = Target::parse("http://[::1]:9901/readyz?x=1").expect("IPv6");
        assert_eq!(
            (t.host.as_str(), t.authority.as_str(), t.path.as_str()),
            ("::1", "[::1]:9901", "/readyz?x=1")
        );
    }

    #[test]
    fn refuses_what_it_cannot_ask() {
        for (url, says) in [
            ("https://127.0.0.1:9901/healthz", "only http://"),
            ("/healthz", "not an absolute"),
            ("127.0.0.1:9901", "not an absolute"),
            ("http://", "not a URL"),
            ("http://exa mple", "not a URL"),
        ] {
            let err = Target::parse(url).expect_err(url);
            assert!(err.contains(says), "{url}: {err}");
        }
    }
}
