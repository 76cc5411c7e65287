//! One call to a gateway's admin API, over one connection: first a token-less
//! `GET /healthz` whose answer must carry the admin listener's header
//! ([`crate::reply::ADMIN_IDENTITY`]), then the call itself with the token. Each answer is
//! read up to [`ANSWER_LIMIT`] and refused past it, never buffered whole.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Body as _;
use hyper_util::rt::TokioIo;

use crate::reply::ADMIN_IDENTITY;

/// The most an answer may hold: the admin API's answers are far smaller (a reload report,
/// a thousand top keys).
pub const ANSWER_LIMIT: usize = 1024 * 1024;

/// What is asked first, without the token: open on every admin listener.
const PROBE: &str = "/healthz";

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
    #[error("{method} http://{address}{path} answered more than {} KiB: refused unread (the admin API's answers are far smaller)", ANSWER_LIMIT / 1024)]
    TooLarge {
        method: Method,
        address: String,
        path: String,
    },
    #[error("{address} does not look like tollgate's admin listener: {what}, without the `{ADMIN_IDENTITY}` header every admin answer carries (the data-plane port? --admin takes the address of [server] admin_listen){}", if *.token_withheld { "; the admin token was not sent" } else { "" })]
    NotAdmin {
        address: String,
        what: String,
        token_withheld: bool,
    },
}

impl CallError {
    /// 2 for an address that is not an admin listener (a usage error), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CallError::NotAdmin { .. } => 2,
            _ => 1,
        }
    }
}

/// An answer: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

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

    /// The admin listener's identity checked, then one request, all bounded by the timeout.
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
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(self.http(&method, path))?;
        tokio::spawn(conn);
        // The same connection carries both: the token goes to the peer that answered.
        let probe = self.send(&mut sender, Method::GET, PROBE, false).await?;
        if !from_admin(&probe.headers) {
            return Err(CallError::NotAdmin {
                address: self.address.clone(),
                what: format!("GET {PROBE} answered {}", probe.status),
                token_withheld: self.token.is_some(),
            });
        }
        let answer = self.send(&mut sender, method.clone(), path, true).await?;
        if !from_admin(&answer.headers) {
            return Err(CallError::NotAdmin {
                address: self.address.clone(),
                what: format!("{method} {path} answered {}", answer.status),
                token_withheld: false,
            });
        }
        Ok(answer)
    }

    /// One request on `sender`'s connection, the token only when `last` (which also
    /// closes the connection after it); its answer read up to [`ANSWER_LIMIT`].
    async fn send(
        &self,
        sender: &mut Sender,
        method: Method,
        path: &str,
        last: bool,
    ) -> Result<Answer, CallError> {
        let http = self.http(&method, path);
        sender.ready().await.map_err(&http)?;
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, self.address.as_str())
            .header(header::USER_AGENT, "tollgate-cli");
        if last {
            req = req.header(header::CONNECTION, "close");
            if let Some(token) = &self.token {
                req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
            }
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
        let resp = sender.send_request(req).await.map_err(&http)?;
        let (parts, body) = resp.into_parts();
        let body = read_bounded(body).await.map_err(&http)?;
        let body = body.ok_or_else(|| CallError::TooLarge {
            method: method.clone(),
            address: self.address.clone(),
            path: path.to_owned(),
        })?;
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    fn http<'a>(
        &'a self,
        method: &'a Method,
        path: &'a str,
    ) -> impl Fn(hyper::Error) -> CallError + 'a {
        move |source| CallError::Http {
            method: method.clone(),
            address: self.address.clone(),
            path: path.to_owned(),
            source,
        }
    }
}

/// Whether an answer carries the admin listener's header.
fn from_admin(headers: &HeaderMap) -> bool {
    headers
        .get(ADMIN_IDENTITY)
        .is_some_and(|v| v.as_bytes() == b"1")
}

/// The body, or `None` once it holds more than [`ANSWER_LIMIT`] bytes (or says it will):
/// at most the limit and one chunk are ever held.
async fn read_bounded(mut body: hyper::body::Incoming) -> Result<Option<Bytes>, hyper::Error> {
    if body.size_hint().lower() > ANSWER_LIMIT as u64 {
        return Ok(None);
    }
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if out.len() + data.len() > ANSWER_LIMIT {
                return Ok(None);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Some(out.freeze()))
}

/// The admin token of `--token-file` (surrounding whitespace ignored) or, without one,
/// `TOLLGATE_ADMIN_TOKEN`; none when neither is given.
pub fn token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    if let Some(path) = file {
        let text = crate::read_file::read_text_bounded(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        return Ok(Some(text.trim().to_owned()));
    }
    Ok(std::env::var("TOLLGATE_ADMIN_TOKEN")
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty()))
}
