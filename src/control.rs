//! The command line's client of a running gateway's admin API: `tollgate reload --admin
//! HOST:PORT` asks `POST /admin/reload` of that one gateway (never a signal to every
//! process of a name), `tollgate top` shows its `GET /admin/top`, with the admin token
//! from a file or `TOLLGATE_ADMIN_TOKEN`.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

/// Where to ask, and with which credentials.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `HOST:PORT` as given, also sent as the `Host` header (an IP literal or
    /// `localhost`, as the admin API's guard wants for a token-less call).
    pub address: String,
    pub token: Option<String>,
    pub timeout: Duration,
}

/// Why a call got no answer to judge.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot connect to the admin API at {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("{method} http://{address}{path} failed: {source}")]
    Http {
        method: Method,
        address: String,
        path: String,
        source: hyper::Error,
    },
    #[error("{method} http://{address}{path}: no answer within {}", humantime::format_duration(*.timeout))]
    Timeout {
        method: Method,
        address: String,
        path: String,
        timeout: Duration,
    },
}

/// An answer: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Admin {
    /// The gateway at `address`, with the token of `token_file` (else
    /// `TOLLGATE_ADMIN_TOKEN`, else none): see [`token`].
    pub fn new(
        address: String,
        token_file: Option<&std::path::Path>,
        timeout: Duration,
    ) -> Result<Self, String> {
        Ok(Self {
            address,
            token: token(token_file)?,
            timeout,
        })
    }

    /// One request over a fresh HTTP/1.1 connection, bounded by the timeout.
    pub async fn call(&self, method: Method, path: &str) -> Result<Answer, CallError> {
        let call = self.call_unbounded(method.clone(), path);
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Timeout {
                    method,
                    address: self.address.clone(),
                    path: path.to_owned(),
                    timeout: self.timeout,
                })
            })
    }

    async fn call_unbounded(&self, method: Method, path: &str) -> Result<Answer, CallError> {
        let stream = tokio::net::TcpStream::connect(self.address.as_str())
            .await
            .map_err(|source| CallError::Connect {
                address: self.address.clone(),
                source,
            })?;
        let http = |source| CallError::Http {
            method: method.clone(),
            address: self.address.clone(),
            path: path.to_owned(),
            source,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, self.address.as_str())
            .header(header::USER_AGENT, "tollgate-cli")
            .header(header::CONNECTION, "close");
        if let Some(token) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|_| CallError::Connect {
                address: self.address.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the address or token cannot be sent in a request head",
                ),
            })?;
        let resp = sender.send_request(req).await.map_err(http)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.map_err(http)?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// The admin token of `--token-file` (surrounding whitespace ignored) or, without one,
/// `TOLLGATE_ADMIN_TOKEN`; none when neither is given.
pub fn token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        return Ok(Some(text.trim().to_owned()));
    }
    Ok(std::env::var("TOLLGATE_ADMIN_TOKEN")
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty()))
}

/// The lines to print for a reload's JSON answer: the report, or one line per error.
pub fn reload_lines(body: &[u8]) -> Vec<String> {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return vec![String::from_utf8_lossy(body).trim().to_owned()];
    };
    if let Some(errors) = json["errors"].as_array() {
        return errors
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect();
    }
    let report = &json["report"];
    if report.is_object() {
        let mut lines = vec![format!(
            "reloaded: {} routes, {} policies",
            report["routes"], report["policies"]
        )];
        for what in report["needs_restart"].as_array().into_iter().flatten() {
            let what = what.as_str().unwrap_or_default();
            lines.push(format!(
                "{what} changed: this takes effect only after a restart"
            ));
        }
        return lines;
    }
    vec![json.to_string()]
}

/// `GET /admin/top`'s answer as a table (plain text, one key a line); `window` is its
/// window header (seconds, or `off`).
pub fn top_table(body: &[u8], window: Option<&str>) -> String {
    use std::fmt::Write as _;
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::from_utf8_lossy(body).into_owned();
    };
    let mut out = String::new();
    if window == Some("off") {
        return "top keys are off on this gateway ([server] top_keys = false)\n".to_owned();
    }
    let _ = writeln!(
        out,
        "who is limited on this gateway, last {} s (each gateway of a fleet answers for itself)\n",
        window.unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "{:<16} {:<32} {:>9} {:>9} {:>9} {:>10}",
        "POLICY", "KEY", "REFUSED", "ADMITTED", "REMAINING", "RETRY (ms)"
    );
    for k in json.as_array().into_iter().flatten() {
        let key: Vec<String> = k["key"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.as_str().unwrap_or_default().escape_debug().to_string())
            .collect();
        let shown = |v: &serde_json::Value| {
            if v.is_null() {
                "-".to_owned()
            } else {
                v.to_string()
            }
        };
        let _ = writeln!(
            out,
            "{:<16} {:<32} {:>9} {:>9} {:>9} {:>10}",
            k["policy"].as_str().unwrap_or_default(),
            key.join(" / "),
            k["refused"],
            k["admitted"],
            shown(&k["remaining"]),
            shown(&k["next_admit_ms"]),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_answers_read_as_lines() {
        let ok = br#"{"report":{"needs_restart":["store"],"policies":4,"routes":5},"status":"ok"}"#;
        assert_eq!(
            reload_lines(ok),
            [
                "reloaded: 5 routes, 4 policies",
                "store changed: this takes effect only after a restart"
            ]
        );
        let refused = br#"{"errors":["f.toml:1:1: bad","    hint: fix"],"status":"error"}"#;
        assert_eq!(reload_lines(refused), ["f.toml:1:1: bad", "    hint: fix"]);
        assert_eq!(reload_lines(b"forbidden\n"), ["forbidden"]);
    }
}
