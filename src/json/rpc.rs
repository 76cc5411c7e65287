//! Whether a request body is a JSON-RPC 2.0 request (MCP's tool calls are), and its id:
//! a refusal of such a request is answered as a JSON-RPC error the caller can match to
//! its call. Read only when a request is refused, from the body the route already read.
//! A batch (several calls in one body) is told apart, to be refused before its decision.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

/// A JSON-RPC request's id, as the caller wrote it: a string, a number, or null (a
/// notification, or an id that was null).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestId(Value);

impl RequestId {
    /// The id as the caller wrote it.
    pub fn value(&self) -> &Value {
        &self.0
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(default)]
    id: Option<Value>,
}

/// The id of `body` when it is one JSON-RPC 2.0 request or notification (`"jsonrpc":
/// "2.0"` and a `method`); `None` for anything else, a batch included.
pub fn request_id(body: &[u8]) -> Option<RequestId> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    if envelope.jsonrpc != "2.0" || envelope.method.is_empty() {
        return None;
    }
    match envelope.id {
        None => Some(RequestId(Value::Null)),
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(RequestId(id)),
        // An object or array id is not JSON-RPC: answered as any other request.
        Some(_) => None,
    }
}

/// Whether `body` starts as an array (after whitespace): only such a body can be a batch.
pub fn starts_array(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// Whether `body`, an array, holds a JSON-RPC call: an object with a member named
/// `jsonrpc` or `method` in any case (Go's readers fold names, as the walk does). Elements are
/// skipped unbuilt, so any depth and size costs one pass and no tree. What trails the
/// array is not read: Go's `json.Decoder` and Jackson serve `[{call},{call}] {}` as the
/// batch (see `walk`).
pub fn batch(body: &[u8]) -> Result<bool, super::NotJson> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde::Deserializer::deserialize_seq(&mut de, Elements).map_err(|_| super::NotJson)
}

struct Elements;

impl<'de> serde::de::Visitor<'de> for Elements {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut any = false;
        while let Some(Call(call)) = seq.next_element::<Call>()? {
            any |= call;
        }
        Ok(any)
    }
}

/// One element: whether it is an object naming `jsonrpc`.
struct Call(bool);

impl<'de> Deserialize<'de> for Call {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CallVisitor)
    }
}

struct CallVisitor;

impl<'de> serde::de::Visitor<'de> for CallVisitor {
    type Value = Call;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Call, A::Error> {
        let mut call = false;
        while let Some(super::names::Key(name)) = map.next_key()? {
            // A lenient server takes a call without `jsonrpc`: a `method` is one too.
            call |= super::names::names("jsonrpc", &name) || super::names::names("method", &name);
            map.next_value::<serde::de::IgnoredAny>()?;
        }
        Ok(Call(call))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Call, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Call(false))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Call, E> {
        Ok(Call(false))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Call, E> {
        Ok(Call(false))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Call, E> {
        Ok(Call(false))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Call, E> {
        Ok(Call(false))
    }

    fn visit_str<E>(self, _: &str) -> Result<Call, E> {
        Ok(Call(false))
    }

    fn visit_unit<E>(self) -> Result<Call, E> {
        Ok(Call(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(body: &str) -> Option<String> {
        request_id(body.as_bytes()).map(|id| id.value().to_string())
    }

    #[test]
    fn a_call_keeps_its_id_as_written() {
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(id(call).as_deref(), Some("7"));
        let named = r#"{"method":"tools/call","id":"a\"b","jsonrpc":"2.0"}"#;
        assert_eq!(id(named).as_deref(), Some(r#""a\"b""#));
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(id(notification).as_deref(), Some("null"));
    }

    #[test]
    fn anything_else_is_not_json_rpc() {
        for body in [
            r#"{"model":"gpt-4o","messages":[]}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","jsonrpc":"2.0"}"#,
            "not json",
        ] {
            assert_eq!(id(body), None, "{body}");
        }
    }

    #[test]
    fn a_batch_is_an_array_holding_a_call_named_in_any_case() {
        let batch = |body: &str| super::batch(body.as_bytes());
        let calls = r#" [1,{"jsonrpc":"2.0","id":1,"method":"tools/call"},{"x":[[{}]]}]"#;
        assert!(starts_array(calls.as_bytes()));
        assert_eq!(batch(calls), Ok(true));
        assert_eq!(batch(r#"[{"JSONRPC":"2.0","method":"x"}]"#), Ok(true));
        // What trails the array is not read, as Go's decoder and Jackson do not read it.
        assert_eq!(batch(r#"[{"jsonrpc":"2.0","method":"x"}] {}"#), Ok(true));
        assert_eq!(batch(r#"[{"jsonrpc":"2.0","method":"x"}]x"#), Ok(true));
        for body in [
            "[1,2]",
            "[]",
            r#"[{"model":"m"}]"#,
            r#"[[{"jsonrpc":"2.0"}]]"#,
        ] {
            assert_eq!(batch(body), Ok(false), "{body}");
        }
        assert!(!starts_array(br#"{"jsonrpc":"2.0","method":"x"}"#));
        assert!(batch("[{").is_err());
        assert!(
            batch(r#"[{"jsonrpc":"2.0","x":NaN}]"#).is_err(),
            "a strict copy decides it"
        );
        // Deeper than serde_json builds: skipped, not refused.
        let deep = format!(
            r#"[{}{},{{"jsonrpc":"2.0"}}]"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(batch(&deep), Ok(true));
    }
}
