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

/// Whether `body` is a JSON-RPC batch: an array holding a JSON-RPC 2.0 call. Looked at
/// only past its first byte for a body that starts as an array.
pub fn is_batch(body: &[u8]) -> bool {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'[') {
        return false;
    }
    let Ok(elements) = serde_json::from_slice::<Vec<Value>>(body) else {
        return false;
    };
    elements.iter().any(|e| e.get("jsonrpc").is_some())
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
    fn a_batch_is_an_array_holding_a_call() {
        let batch =
            r#" [{"jsonrpc":"2.0","id":1,"method":"tools/call"},{"jsonrpc":"2.0","method":"x"}]"#;
        assert!(is_batch(batch.as_bytes()));
        for body in [
            r#"{"jsonrpc":"2.0","method":"x"}"#,
            "[1,2]",
            "[]",
            r#"[{"model":"m"}]"#,
            "[{",
        ] {
            assert!(!is_batch(body.as_bytes()), "{body}");
        }
    }
}
