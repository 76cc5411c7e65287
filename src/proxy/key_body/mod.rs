//! The request body read before the decision, on routes whose policies key or price by it
//! (`json:` keys, `reserve = "price:…"`; for a `query:` key, a form, multipart or JSON
//! body, whose parameters frameworks merge with the query's; a form or multipart body's
//! fields are read for `json:` keys too): at most `[server] max_key_body` bytes, each
//! read within `body_read_timeout`, walked once for every pointer the route reads, then
//! sent upstream unchanged ahead of the rest ([`Prefixed`]). It is read as its upstream
//! would read it: a gzip or deflate body decoded ([`super::body_coding`]; another coding
//! refused 415, a damaged one 400), UTF-16 and UTF-32 as UTF-8, a body only lenient
//! readers take as its strict copy; a JSON-RPC batch is refused 400 where a tier keys or
//! prices by the JSON body, `Content-Type` lines naming more readings than are read
//! are refused 400 (`ambiguous_content_type`), and a multipart text field in a charset
//! other than UTF-8 is refused 415 (`unsupported_charset`).
//!
//! What such buffers hold is bounded per worker (its share of `max_key_body_memory`,
//! counted on the worker alone, like `max_requests`; [`held`]): a request that would pass
//! it is answered 503 `overloaded` before a byte is read, and a copy that would pass it
//! (decoded, transcoded, strict) is answered the same, so clients parking bodies cannot
//! make the gateway hold more, nor make another request's key read as missing.

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{Request, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::body_coding::{self, Coding, Decoded};
use super::pool::ClientBodyFault;
use super::response::{
    ambiguous_content_type, decoded_too_large, jsonrpc_batch, malformed_coding, overloaded,
    unsupported_charset, unsupported_coding,
};
use crate::config::{Route, Server};
use crate::json::{rpc, walk, BodyFacts};
use crate::reply::Body;
use crate::request::charset::Charset;
use crate::request::form::{foreign_charset, BodyParams, ParamsBody, Readings};

use held::{Gathered, Held};
pub use prefixed::Prefixed;

mod held;
mod prefixed;

type Refused = Box<Response<Body>>;

/// What was read of a request body before its decision.
pub struct KeyBody {
    /// As it came, and as it goes upstream.
    bytes: Bytes,
    /// Its `Content-Encoding`.
    coding: Coding,
    /// An encoded body read whole, decoded whole within `max_key_body`: what a form's or
    /// a multipart body's parameters are read from instead of `bytes`.
    decoded: Option<(Bytes, Held)>,
    /// What the JSON walk reads instead: the body (decoded) in UTF-16 or UTF-32 or behind
    /// a byte order mark, as UTF-8.
    transcoded: Option<(Bytes, Held)>,
    /// The whole body was read.
    ended: bool,
    /// Declared past `max_key_body`: only its first bytes were to be read (to tell a
    /// batch), and it is not walked even when they were all of it.
    peeked: bool,
    /// What is walked when the body is JSON only to lenient readers, made by the first
    /// walk that needs it.
    strict: std::sync::OnceLock<Strict>,
    /// What the walk's copies of values (strings written with escapes) hold of the share
    /// until the body is forwarded: `None` when they would pass it.
    copies: std::sync::OnceLock<Option<Held>>,
    /// The body's length when known: read whole (decoded, when it was encoded), or
    /// declared when it is not encoded. An encoded body not decoded whole has none: its
    /// compressed length, or where decoding stopped, is no bound on what the upstream
    /// reads (a quote on it would be the client's choice).
    len: Option<u64>,
    held: Held,
    /// This worker's share of `max_key_body_memory`.
    share: usize,
    /// How frameworks read parameters from it (a form, multipart, JSON): a form's and a
    /// multipart body's are read for `query:` and `json:` keys.
    params: Readings,
}

/// A body's strict copy (`json::strict_copy`), once asked for.
enum Strict {
    /// The body is no JSON even to lenient readers.
    None,
    /// The copy, and what it holds of the share until the body is forwarded.
    Copy { text: Bytes, _held: Held },
    /// The copy would pass the worker's share: the request is answered 503.
    OverMemory,
}

impl Strict {
    fn of(text: &[u8], share: usize) -> Self {
        let Some(copy) = crate::json::strict_copy(text) else {
            return Strict::None;
        };
        match Held::take(copy.len(), share) {
            Some(held) => Strict::Copy {
                text: copy.into(),
                _held: held,
            },
            None => Strict::OverMemory,
        }
    }
}

impl KeyBody {
    /// What is walked: the decoded or transcoded copy, else the body read whole as it came
    /// (an encoded body that decoded past `max_key_body` has none).
    fn text(&self) -> Option<&Bytes> {
        match &self.transcoded {
            Some((text, _)) => Some(text),
            None => self.plain(),
        }
    }

    /// The body read whole and decoded, not transcoded: what a form's or a multipart
    /// body's parameters are read from (no reader transcodes one; a NUL in a form would
    /// make it look like UTF-16).
    fn plain(&self) -> Option<&Bytes> {
        match &self.decoded {
            Some((text, _)) => Some(text),
            None => (self.coding == Coding::Identity && self.ended && !self.peeked)
                .then_some(&self.bytes),
        }
    }

    /// Walks the text for `route`'s pointers (its strict copy when it is JSON only to
    /// lenient readers): nothing is found in a body that was not read or decoded whole, or
    /// is not JSON to any reader. A strict copy past the worker's share marks the facts
    /// (`over_memory`): the request is answered 503.
    pub fn facts<'a>(&'a self, route: &'a Route) -> BodyFacts<'a> {
        let mut facts = BodyFacts::unread(self.len);
        let Some(text) = self.text() else {
            return facts;
        };
        if let Some(plain) = self.plain() {
            let params = self.params.iter();
            facts.params = params.filter_map(|r| BodyParams::read(r, plain)).collect();
        }
        let pointers: smallvec::SmallVec<[&crate::json::JsonPointer; 8]> =
            route.body_pointers.iter().map(|p| &**p).collect();
        if walk(text, &pointers, &mut facts).is_err() {
            match self.strict.get_or_init(|| Strict::of(text, self.share)) {
                Strict::Copy { text, .. } => {
                    let _not_json = walk(text, &pointers, &mut facts);
                }
                Strict::OverMemory => facts.mark_over_memory(),
                Strict::None => {}
            }
        }
        // A value written with escapes is a copy the size of its text, held with the body
        // through the decision (a Redis round trip): one 600-byte string beside the body
        // would otherwise hold about as much again as was counted.
        let copied = facts.copied_len();
        if copied > 0
            && self
                .copies
                .get_or_init(|| Held::take(copied, self.share))
                .is_none()
        {
            facts.mark_over_memory();
        }
        facts
    }

    /// Whether the request can be sent again as it is (nothing of its body was read).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Refuses a body some upstreams read as other text than its bytes: one with a byte
    /// past ASCII under the ASCII or Latin-1 charset the request names (an other charset
    /// was refused with its head), or a multipart body with a text field in another
    /// charset (`request::form::foreign_charset`).
    fn refuse_foreign_charset(&self, charset: &Charset) -> Result<(), Refused> {
        let Some(plain) = self.plain() else {
            return Ok(());
        };
        let named = charset.refusal(plain).map(str::to_owned);
        let foreign = named.or_else(|| {
            self.params.iter().find_map(|reading| match reading {
                ParamsBody::Multipart(boundary) => foreign_charset(plain, boundary),
                _ => None,
            })
        });
        match foreign {
            Some(named) => Err(Box::new(unsupported_charset(&named))),
            None => Ok(()),
        }
    }

    /// Refuses a JSON-RPC batch: a tier counts one call a request. Read strictly, else
    /// from the strict copy (kept for the walk). A body not read whole (past
    /// `max_key_body`, or decoding past it) is refused when it begins, decoded, as an
    /// array: it cannot be told from a batch, and a thousand calls padded past 64 KiB (or
    /// gzipped into one) would otherwise be charged once.
    fn refuse_batch(&self) -> Result<(), Refused> {
        let Some(text) = self.text() else {
            let begins = body_coding::decoded_prefix(self.coding, &self.bytes, PEEK_BYTES);
            let begins = crate::json::to_utf8(&begins).unwrap_or(begins);
            return match rpc::starts_array(&begins) {
                true => Err(Box::new(jsonrpc_batch())),
                false => Ok(()),
            };
        };
        if !rpc::starts_array(text) {
            return Ok(());
        }
        let batch = match rpc::batch(text) {
            Ok(batch) => batch,
            Err(_not_json) => match self.strict.get_or_init(|| Strict::of(text, self.share)) {
                Strict::Copy { text, .. } => rpc::batch(text).unwrap_or(false),
                Strict::OverMemory => return Err(Box::new(overloaded())),
                Strict::None => false,
            },
        };
        match batch {
            true => Err(Box::new(jsonrpc_batch())),
            false => Ok(()),
        }
    }
}

/// Reads up to `max_key_body` of `req`'s body and makes it readable as its upstream reads
/// it; the answer when the client's body stalls, breaks, comes in a coding tollgate does
/// not read or that does not decode, is a JSON-RPC batch (on a route keyed or priced by
/// the JSON body), has more `Content-Type` readings than are read (`readings` is `None`:
/// [`Route::body_readings`]), or the worker holds too much.
pub async fn read(
    req: &mut Request<Incoming>,
    (server, route, readings): (&Server, &Route, Option<Readings>),
) -> Result<KeyBody, Refused> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let max = server.max_key_body;
    let share = server.max_key_body_memory.div_ceil(server.workers.max(1));
    let charset = crate::request::charset::of_request(req.headers());
    let empty = |len, coding| KeyBody {
        bytes: Bytes::new(),
        coding,
        decoded: None,
        transcoded: None,
        ended: len == Some(0),
        peeked: false,
        strict: std::sync::OnceLock::new(),
        copies: std::sync::OnceLock::new(),
        len,
        held: Held(0),
        share,
        params: Readings::new(),
    };
    if req.body().is_end_stream() {
        return Ok(empty(Some(0), Coding::Identity));
    }
    let coding = body_coding::coding_of(req.headers())
        .map_err(|named| Box::new(unsupported_coding(&named)))?;
    let params = readings.ok_or_else(|| Box::new(ambiguous_content_type()))?;
    // Too large to key by: not read; forwarded as it comes — but for its first bytes on a
    // route that keys or prices by the JSON body, which tell a batch (`refuse_batch`).
    let declared_plain = declared.filter(|_| coding == Coding::Identity);
    let too_large = declared.is_some_and(|d| d > max as u64);
    if too_large && !route.body_always {
        return Ok(empty(declared_plain, coding));
    }
    let limit = if too_large { PEEK_BYTES.min(max) } else { max };
    // Counted as it arrives (see `Gathered`).
    let mut held = Held(0);
    let (bytes, ended) = collect(req, (server, share, limit), &mut held).await?;
    let (decoded, transcoded, len) = match ended && !too_large {
        false => (None, None, declared_plain),
        true => readable(coding, &bytes, (max, route.max_body), share)?,
    };
    let body = KeyBody {
        bytes,
        coding,
        decoded,
        transcoded,
        ended,
        peeked: too_large,
        strict: std::sync::OnceLock::new(),
        copies: std::sync::OnceLock::new(),
        len,
        held,
        share,
        params,
    };
    body.refuse_foreign_charset(&charset)?;
    // A batch is refused where a tier keys or prices by the JSON body (a tier counts one
    // call a request); a route keyed by a query parameter reads a JSON body only for it.
    if route.body_always {
        body.refuse_batch()?;
    }
    Ok(body)
}

/// What is read of a body too large to read whole, to tell whether it is an array.
const PEEK_BYTES: usize = 1024;

/// Reads frames until the body ends or passes `max` (`max_key_body`), within `body_read_timeout`
/// in all, counting what it holds in `held` within the worker's `share`: the body, and
/// whether it ended (its trailers, which stop at the gateway (`request_trailers`), left
/// behind). Past the share: 503 `overloaded`.
async fn collect(
    req: &mut Request<Incoming>,
    (server, share, max): (&Server, usize, usize),
    held: &mut Held,
) -> Result<(Bytes, bool), Refused> {
    let mut gathered = Gathered::default();
    let body = req.body_mut();
    // The whole read before the decision, not only each silence in it: a body dripped a
    // byte at a time would otherwise hold its share of `max_key_body_memory` for as long
    // as its client likes, and a few hundred of them every body-reading route's.
    let deadline = tokio::time::Instant::now() + server.body_read_timeout;
    let ended = loop {
        if gathered.total > max {
            break false;
        }
        let frame = tokio::time::timeout_at(deadline, body.frame()).await;
        match frame {
            Err(_elapsed) => return Err(Box::new(ClientBodyFault::Stalled.response())),
            Ok(Some(Err(_))) => return Err(Box::new(ClientBodyFault::Broken.response())),
            Ok(None) => break true,
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    if !gathered.push(data, held, (max, share)) {
                        return Err(Box::new(overloaded()));
                    }
                }
                // Trailers: the body's end.
                Err(_) => break true,
            },
        }
        if body.is_end_stream() {
            break true;
        }
    };
    Ok((gathered.into_bytes(), ended))
}

/// A body read whole as its upstream reads it: decoded (gzip, deflate), then as UTF-8
/// (UTF-16, UTF-32, a byte order mark) for the JSON walk, each copy counted within
/// `share`; and its length. The route's `max_body` bounds the body decoded as well as
/// sent: one at or below `max_key_body` refuses (413) a body that decodes past it, as it
/// refuses a plain one.
#[allow(clippy::type_complexity)]
fn readable(
    coding: Coding,
    bytes: &[u8],
    (max, max_body): (usize, Option<u64>),
    share: usize,
) -> Result<(Option<(Bytes, Held)>, Option<(Bytes, Held)>, Option<u64>), Refused> {
    let kept = |copy: Vec<u8>| match Held::take(copy.len(), share) {
        Some(held) => Ok((Bytes::from(copy), held)),
        None => Err(Box::new(overloaded())),
    };
    let plain = match coding {
        Coding::Identity => {
            let text = crate::json::to_utf8(bytes).map(kept).transpose()?;
            let len = utf8_len(bytes.len(), text.as_ref());
            return Ok((None, text, Some(len)));
        }
        Coding::Gzip | Coding::Deflate => match body_coding::decode(coding, bytes, max) {
            Decoded::Whole(plain) => plain,
            Decoded::TooLarge => match max_body.filter(|&m| m <= max as u64) {
                Some(max_body) => return Err(Box::new(decoded_too_large(max_body))),
                None => return Ok((None, None, None)),
            },
            Decoded::Corrupt => return Err(Box::new(malformed_coding(coding.name()))),
        },
    };
    let text = crate::json::to_utf8(&plain).map(kept).transpose()?;
    let len = Some(utf8_len(plain.len(), text.as_ref()));
    Ok((Some(kept(plain)?), text, len))
}

/// A body's length as its input is quoted: its UTF-8 text's when it came in another
/// encoding and that is longer (a character above U+07FF is two bytes of UTF-16 and
/// three of UTF-8, each byte a token at worst), else its bytes'.
fn utf8_len(bytes: usize, text: Option<&(Bytes, Held)>) -> u64 {
    bytes.max(text.map_or(0, |(utf8, _)| utf8.len())) as u64
}
