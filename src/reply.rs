//! What the gateway's listeners answer with when they answer themselves: the body type
//! every response has, plain bodies, and JSON error answers (`{"error": kind, …}`). Both
//! the data plane and the admin listener build on it; it knows nothing of either.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The header every answer of the admin listener carries (value `1`), refusals included;
/// nothing the data plane sends carries it, an upstream's answer included (the proxy
/// strips it). `tollgate reload` and `tollgate top` see it on a token-less `GET /healthz`
/// before they send the admin token, so a command pointed at another port does not hand
/// the token to an upstream.
pub const ADMIN_IDENTITY: &str = "tollgate-admin";
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A JSON error answer: `{"error": kind, …extra}`.
pub fn json_error(
    status: StatusCode,
    kind: &str,
    extra: &[(&str, serde_json::Value)],
) -> Response<Body> {
    let mut body = serde_json::Map::with_capacity(1 + extra.len());
    body.insert("error".to_owned(), kind.into());
    for (k, v) in extra {
        body.insert((*k).to_owned(), v.clone());
    }
    let text = serde_json::Value::Object(body).to_string();
    let mut resp = Response::new(full(text));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Whole seconds, rounded up.
pub fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(crate::limit::gcra::NANOS_PER_SEC)
}

/// Whole milliseconds, rounded up.
pub fn ceil_millis(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

/// A JSON object written field by field into a byte buffer, for bodies on the hot path
/// (a 429) where building a `serde_json::Value` would cost more than the answer: every
/// string is escaped, so no text can break out of its quotes.
pub struct JsonObject {
    out: Vec<u8>,
    first: bool,
}

impl JsonObject {
    pub fn with_capacity(capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        string(&mut self.out, key);
        self.out.push(b':');
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        string(&mut self.out, value);
        self
    }

    pub fn number(&mut self, key: &str, value: u64) -> &mut Self {
        self.key(key);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self
    }

    pub fn strings<'a>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = &'a str>,
    ) -> &mut Self {
        self.key(key);
        self.out.push(b'[');
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            string(&mut self.out, v);
        }
        self.out.push(b']');
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(b'}');
        self.out
    }

    /// The object so far with `key` and its colon, the value (and the closing brace)
    /// left for the caller to write: a body whose start is made once and reused.
    pub fn open_value(mut self, key: &str) -> Vec<u8> {
        self.key(key);
        self.out
    }
}

/// `text` as a JSON string (RFC 8259 § 7): quotes, backslashes and control characters
/// escaped; everything else, UTF-8 included, as it is.
fn string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let plain = |b: &u8| *b >= 0x20 && *b != b'"' && *b != b'\\';
    if text.as_bytes().iter().all(plain) {
        out.extend_from_slice(text.as_bytes());
    } else {
        escaped(out, text);
    }
    out.push(b'"');
}

fn escaped(out: &mut Vec<u8>, text: &str) {
    for &b in text.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                let mut digits = [0; 2];
                crate::random::write_hex(&mut digits, &[b]);
                out.extend_from_slice(b"\\u00");
                out.extend_from_slice(&digits);
            }
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_up_and_exact_on_boundaries() {
        let s = crate::limit::gcra::NANOS_PER_SEC;
        assert_eq!(ceil_secs(0), 0);
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(s), 1);
        assert_eq!(ceil_secs(s + 1), 2);
        assert_eq!(ceil_millis(600_000_000), 600);
        assert_eq!(ceil_millis(600_000_001), 601);
    }

    #[test]
    fn json_objects_escape_what_would_break_them_and_parse_back() {
        let mut o = JsonObject::with_capacity(64);
        o.str("plain", "user")
            .str("hostile", "a\"b\\c\nd\u{1}é")
            .number("n", 1500)
            .strings("list", ["x", "y\"z"]);
        let bytes = o.finish();
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(parsed["plain"], "user");
        assert_eq!(parsed["hostile"], "a\"b\\c\nd\u{1}é");
        assert_eq!(parsed["n"], 1500);
        assert_eq!(parsed["list"][1], "y\"z");
        assert_eq!(
            String::from_utf8(bytes).expect("UTF-8"),
            r#"{"plain":"user","hostile":"a\"b\\c\nd\u0001é","n":1500,"list":["x","y\"z"]}"#
        );
    }
}
