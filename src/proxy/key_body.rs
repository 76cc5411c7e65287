//! The request body read before the decision, on routes whose policies key or price by it
//! (`json:` keys, `reserve = "price:…"`): at most `[server] max_key_body` bytes, each
//! read within `body_read_timeout`, walked once for every pointer the route reads, then
//! sent upstream unchanged ahead of the rest ([`Prefixed`]). A gzip or deflate body is
//! walked as decoded ([`super::body_coding`]); a body in another coding is refused 415.
//!
//! What such buffers hold is bounded per worker (its share of `max_key_body_memory`,
//! counted on the worker alone, like `max_requests`): a request that would pass it is
//! answered 503 `overloaded` before a byte is read, so clients parking bodies cannot make
//! the gateway hold more, nor make another request's key read as missing.

use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Request, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::body_coding::{self, Coding, Decoded};
use super::pool::ClientBodyFault;
use super::response::{jsonrpc_batch, overloaded, unsupported_coding, Answer};
use crate::config::{Route, Server};
use crate::json::{walk, BodyFacts};
use crate::reply::Body;

thread_local! {
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// Bytes of key bodies counted on this worker until dropped.
struct Held(usize);

impl Held {
    /// Counts `n` more bytes unless the worker's `share` would be passed.
    fn take(n: usize, share: usize) -> Option<Self> {
        HELD.with(|held| {
            let now = held.get();
            (now.saturating_add(n) <= share).then(|| {
                held.set(now + n);
                Held(n)
            })
        })
    }

    /// Counts `n` more bytes, whatever the share (a chunk already read).
    fn grow(&mut self, n: usize) {
        HELD.with(|held| held.set(held.get().saturating_add(n)));
        self.0 += n;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get().saturating_sub(self.0)));
    }
}

/// What was read of a request body before its decision.
pub struct KeyBody {
    /// As it came, and as it goes upstream.
    bytes: Bytes,
    /// Its `Content-Encoding`.
    coding: Coding,
    /// What is walked instead of `bytes`: an encoded body read whole, decoded whole within
    /// `max_key_body`; a body in UTF-16 or UTF-32 or behind a byte order mark, as UTF-8.
    decoded: Option<Bytes>,
    /// The whole body was read (`trailers`, when it had any).
    ended: bool,
    trailers: Option<HeaderMap>,
    /// What is walked when the body is JSON only to lenient readers, made on the first
    /// walk that needs it (counted on the worker until the decision is made).
    strict: std::sync::OnceLock<Option<(Bytes, Held)>>,
    /// The body's length when known: read whole (decoded, when it was encoded; at least
    /// `max_key_body` + 1 when it decoded past it), or declared.
    len: Option<u64>,
    held: Held,
}

impl KeyBody {
    /// Walks the bytes (decoded, when encoded) for `route`'s pointers: nothing is found
    /// in a body that was not read or decoded whole, or is not JSON even as lenient
    /// readers take it (then its strict copy is walked, `json::strict_copy`).
    pub fn facts<'a>(&'a self, route: &'a Route) -> BodyFacts<'a> {
        let mut facts = BodyFacts::unread(self.len);
        let json = self
            .decoded
            .as_ref()
            .or_else(|| (self.coding == Coding::Identity && self.ended).then_some(&self.bytes));
        if let Some(json) = json {
            let pointers: smallvec::SmallVec<[&crate::json::JsonPointer; 8]> =
                route.body_pointers.iter().map(|p| &**p).collect();
            if walk(json, &pointers, &mut facts).is_err() {
                let strict = self.strict.get_or_init(|| {
                    let copy = crate::json::strict_copy(json)?;
                    let held = Held::take(copy.len(), usize::MAX);
                    Some((Bytes::from(copy), held?))
                });
                if let Some((copy, _held)) = strict {
                    let _not_json = walk(copy, &pointers, &mut facts);
                }
            }
        }
        facts
    }

    /// Whether the request can be sent again as it is (nothing of its body was read).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.trailers.is_none()
    }
}

/// Reads up to `max_key_body` of `req`'s body (and decodes it, gzip or deflate); the
/// answer when the client's body stalls, breaks, comes in a coding tollgate does not read,
/// or the worker holds too many such bodies already.
pub async fn read(
    req: &mut Request<Incoming>,
    server: &Server,
) -> Result<KeyBody, Box<Response<Body>>> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let max = server.max_key_body;
    let empty = |len, held, coding| KeyBody {
        bytes: Bytes::new(),
        coding,
        decoded: None,
        strict: std::sync::OnceLock::new(),
        ended: len == Some(0),
        trailers: None,
        len,
        held,
    };
    if req.body().is_end_stream() {
        return Ok(empty(Some(0), Held(0), Coding::Identity));
    }
    let coding = body_coding::coding_of(req.headers())
        .map_err(|named| Box::new(unsupported_coding(&named)))?;
    // Too large to key by: not read; forwarded as it comes.
    if declared.is_some_and(|d| d > max as u64) {
        return Ok(empty(declared, Held(0), coding));
    }
    let share = server.max_key_body_memory.div_ceil(server.workers.max(1));
    // An encoded body is held twice: as it came, and decoded (at most `max`).
    let decoding = if coding == Coding::Identity { 0 } else { max };
    let wanted = declared.map_or(max, |d| d as usize) + decoding;
    let Some(mut held) = Held::take(wanted, share) else {
        return Err(Box::new(Answer::Overloaded.on(overloaded())));
    };
    let mut chunks: smallvec::SmallVec<[Bytes; 4]> = smallvec::SmallVec::new();
    let mut total = 0usize;
    let mut trailers = None;
    let body = req.body_mut();
    // The whole read before the decision, not only each silence in it: a body dripped a
    // byte at a time would otherwise hold its share of `max_key_body_memory` for as long
    // as its client likes, and a few hundred of them every body-reading route's.
    let deadline = tokio::time::Instant::now() + server.body_read_timeout;
    let ended = loop {
        if total > max {
            break false;
        }
        let frame = tokio::time::timeout_at(deadline, body.frame()).await;
        match frame {
            Err(_elapsed) => return Err(Box::new(ClientBodyFault::Stalled.response())),
            Ok(Some(Err(_))) => return Err(Box::new(ClientBodyFault::Broken.response())),
            Ok(None) => break true,
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    total += data.len();
                    if total > held.0 {
                        held.grow(total - held.0);
                    }
                    chunks.push(data);
                }
                Err(frame) => {
                    trailers = frame.into_trailers().ok();
                    break true;
                }
            },
        }
        if body.is_end_stream() {
            break true;
        }
    };
    let bytes = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut joined = BytesMut::with_capacity(total);
            chunks.iter().for_each(|c| joined.extend_from_slice(c));
            joined.freeze()
        }
    };
    // Text in another encoding than UTF-8 is walked as UTF-8, as its readers detect it.
    let as_utf8 = |text: &[u8]| crate::json::to_utf8(text).map(Bytes::from);
    let (decoded, len) = match coding {
        _ if !ended => (None, declared),
        Coding::Identity => (as_utf8(&bytes), Some(total as u64)),
        Coding::Gzip | Coding::Deflate => match body_coding::decode(coding, &bytes, max) {
            Decoded::Whole(plain) => {
                let len = plain.len() as u64;
                (Some(as_utf8(&plain).unwrap_or(plain)), Some(len))
            }
            Decoded::TooLarge => (None, Some(max as u64 + 1)),
            Decoded::Corrupt => (None, Some(total as u64)),
        },
    };
    // Several calls in one body are refused before their decision: a tier counts one.
    let text = decoded
        .as_deref()
        .or((coding == Coding::Identity && ended).then_some(&bytes[..]));
    if text.is_some_and(crate::json::is_rpc_batch) {
        return Err(Box::new(jsonrpc_batch()));
    }
    let need = total + decoded.as_ref().map_or(0, Bytes::len);
    if need > held.0 {
        held.grow(need - held.0);
    }
    Ok(KeyBody {
        bytes,
        coding,
        decoded,
        strict: std::sync::OnceLock::new(),
        ended,
        trailers,
        len,
        held,
    })
}

pin_project_lite::pin_project! {
    /// The body upstream: what was read before the decision, then the rest as it comes.
    pub struct Prefixed<B> {
        prefix: Option<Bytes>,
        trailers: Option<HeaderMap>,
        #[pin]
        rest: Option<B>,
        held: Option<Held>,
    }
}

impl<B> Prefixed<B> {
    pub fn new(read: KeyBody, rest: B) -> Self {
        Self {
            prefix: Some(read.bytes).filter(|b| !b.is_empty()),
            trailers: read.trailers,
            rest: (!read.ended).then_some(rest),
            held: Some(read.held),
        }
    }
}

impl<B> http_body::Body for Prefixed<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        // The buffer is on its way: no longer held here.
        this.held.take();
        if let Some(trailers) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        match this.rest.as_pin_mut() {
            Some(rest) => rest.poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |r| r.size_hint());
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}
