//! The body of a 429: the contract's JSON (its start made once per config, so a refusal
//! writes only its wait) or, for a client that asks for it, RFC 9457 problem details.

use http::header::HeaderValue;

use crate::json::rpc::RequestId;
use crate::reply::JsonObject;

/// The JSON-RPC error code of a refusal: in the range JSON-RPC 2.0 leaves to servers
/// (-32000 to -32099), 429 in its last digits.
pub const JSON_RPC_RATE_LIMITED: i64 = -32029;

/// The problem type of the IETF httpapi RateLimit draft (-11) for a refused quota
/// (RFC 9457 problem details), with its title.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";
pub const QUOTA_EXCEEDED_TITLE: &str =
    "Request cannot be satisfied as assigned quota has been exceeded";

/// What a 429's body says, in either of its forms.
pub struct Refused<'a> {
    pub policy: &'a str,
    /// The plain body up to the wait, made once per config ([`body_start`]).
    pub start: &'a [u8],
    /// `"concurrency"` for a concurrency cap's refusal, `"quota"` for a calendar quota's.
    pub limit: Option<&'static str>,
    pub retry_after_ms: u64,
    /// `Some`: RFC 9457 problem details naming these policies as `violated-policies`.
    pub problem: Option<&'a [&'a str]>,
    /// `Some`: the request was JSON-RPC 2.0 with this id; the body is its error response,
    /// the plain body as the error's `data` (ahead of `problem`).
    pub rpc: Option<&'a RequestId>,
}

impl Refused<'_> {
    /// The body and its content type.
    pub fn body(&self) -> (Vec<u8>, HeaderValue) {
        if let Some(id) = self.rpc {
            return (
                self.json_rpc_error(id),
                HeaderValue::from_static("application/json"),
            );
        }
        let Some(violated) = self.problem else {
            return (self.plain(), HeaderValue::from_static("application/json"));
        };
        let mut body = JsonObject::with_capacity(280 + self.policy.len() + 24 * violated.len());
        body.str("type", QUOTA_EXCEEDED_TYPE)
            .str("title", QUOTA_EXCEEDED_TITLE)
            .number("status", 429)
            .strings("violated-policies", violated.iter().copied());
        body.str("error", "rate_limited").str("policy", self.policy);
        if let Some(limit) = self.limit {
            body.str("limit", limit);
        }
        body.number("retry_after_ms", self.retry_after_ms);
        let content_type = HeaderValue::from_static("application/problem+json");
        (body.finish(), content_type)
    }
}

impl Refused<'_> {
    /// The contract's body.
    fn plain(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.start.len() + 21);
        body.extend_from_slice(self.start);
        body.extend_from_slice(itoa::Buffer::new().format(self.retry_after_ms).as_bytes());
        body.push(b'}');
        body
    }

    /// A JSON-RPC 2.0 error response to the request `id`:
    /// `{"jsonrpc":"2.0","id":ID,"error":{"code":-32029,"message":"rate limited by
    /// POLICY","data":PLAIN}}`, `PLAIN` the contract's body.
    fn json_rpc_error(&self, id: &RequestId) -> Vec<u8> {
        let data: serde_json::Value =
            serde_json::from_slice(&self.plain()).unwrap_or(serde_json::Value::Null);
        let error = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id.value(),
            "error": {
                "code": JSON_RPC_RATE_LIMITED,
                "message": format!("rate limited by {}", self.policy),
                "data": data,
            },
        });
        serde_json::to_vec(&error).unwrap_or_default()
    }
}

/// The contract's 429 body for a refusal by `policy`, up to its wait:
/// `{"error":"rate_limited","policy":"<policy>",["limit":"concurrency"|"quota",]"retry_after_ms":`.
/// Made once per config load, so a refusal only writes its number.
pub fn body_start(policy: &str, limit: Option<&str>) -> Box<[u8]> {
    let mut body = JsonObject::with_capacity(80 + policy.len());
    body.str("error", "rate_limited").str("policy", policy);
    if let Some(limit) = limit {
        body.str("limit", limit);
    }
    body.open_value("retry_after_ms").into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_bodies_carry_the_same_fields() {
        let start = body_start("user", Some("concurrency"));
        let refused = |problem| Refused {
            policy: "user",
            start: &start,
            limit: Some("concurrency"),
            retry_after_ms: 1500,
            problem,
            rpc: None,
        };
        let (plain, content_type) = refused(None).body();
        let plain = String::from_utf8(plain).expect("UTF-8");
        assert_eq!(content_type, "application/json");
        assert_eq!(
            plain,
            r#"{"error":"rate_limited","policy":"user","limit":"concurrency","retry_after_ms":1500}"#
        );
        let violated = ["user", "tenant"];
        let (problem, content_type) = refused(Some(&violated)).body();
        let problem = String::from_utf8(problem).expect("UTF-8");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(
            problem,
            format!(
                r#"{{"type":"{QUOTA_EXCEEDED_TYPE}","title":"{QUOTA_EXCEEDED_TITLE}","status":429,"violated-policies":["user","tenant"],"error":"rate_limited","policy":"user","limit":"concurrency","retry_after_ms":1500}}"#
            )
        );
        let parsed: serde_json::Value = serde_json::from_str(&problem).expect("JSON");
        assert_eq!(parsed["violated-policies"][1], "tenant");
    }

    #[test]
    fn a_json_rpc_request_is_answered_with_an_error_to_its_id() {
        let start = body_start("per_tool", None);
        let call = br#"{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{}}"#;
        let id = crate::json::rpc::request_id(call).expect("JSON-RPC");
        let violated = ["per_tool"];
        let refused = Refused {
            policy: "per_tool",
            start: &start,
            limit: None,
            retry_after_ms: 2500,
            // JSON-RPC wins over an Accept that asks for problem details.
            problem: Some(&violated),
            rpc: Some(&id),
        };
        let (body, content_type) = refused.body();
        assert_eq!(content_type, "application/json");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": "call-7",
                "error": {
                    "code": -32029,
                    "message": "rate limited by per_tool",
                    "data": {"error": "rate_limited", "policy": "per_tool", "retry_after_ms": 2500},
                },
            })
        );
    }
}
