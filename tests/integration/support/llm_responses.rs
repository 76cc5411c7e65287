//! OpenAI's Responses API (`POST /v1/responses`) on the spend tests' upstream: the same
//! predictable usage as its chat completions (`input` read as the messages, a string as
//! one), reported as `input_tokens` / `output_tokens`, as JSON or (with `stream`) as the
//! typed events the `openai` client reads, the usage in `response.completed`.

use bytes::Bytes;

/// The chat body a Responses request stands for: its `input` as messages and its
/// `max_output_tokens` as `max_tokens`, so [`super::predicted_usage`] reads it.
fn as_chat(request: &serde_json::Value) -> serde_json::Value {
    let messages = match &request["input"] {
        serde_json::Value::String(text) => serde_json::json!([{"role": "user", "content": text}]),
        other => other.clone(),
    };
    let mut chat = serde_json::json!({"model": request["model"], "messages": messages});
    if let Some(max) = request["max_output_tokens"].as_u64() {
        chat["max_tokens"] = max.into();
    }
    chat
}

/// The usage the upstream reports for a Responses request, as `(input, output)`.
fn predicted_response_usage(request: &serde_json::Value) -> (u64, u64) {
    super::predicted_usage(&as_chat(request))
}

/// The whole response object, `status` and its `usage`.
fn response(model: &str, words: &str, (input, output): (u64, u64)) -> serde_json::Value {
    serde_json::json!({
        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": model,
        "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": words, "annotations": []}]}],
        "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    })
}

/// The answer to a Responses request: JSON, or the stream's events in one body.
pub fn answer(request: &serde_json::Value) -> (&'static str, Bytes) {
    let model = request["model"].as_str().unwrap_or("unknown");
    let usage = predicted_response_usage(request);
    let words = vec!["tok"; usage.1 as usize].join(" ");
    let done = response(model, &words, usage);
    if request["stream"].as_bool() != Some(true) {
        return ("application/json", Bytes::from(done.to_string()));
    }
    let mut started = done.clone();
    started["status"] = "in_progress".into();
    started["output"] = serde_json::json!([]);
    started["usage"] = serde_json::Value::Null;
    let mut events = vec![serde_json::json!({"type": "response.created", "response": started})];
    for _ in 0..usage.1 {
        events.push(
            serde_json::json!({"type": "response.output_text.delta", "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "delta": "tok ", "logprobs": []}),
        );
    }
    events.push(serde_json::json!({"type": "response.completed", "response": done}));
    let text: String = (events.iter().enumerate())
        .map(|(n, e)| {
            let mut e = e.clone();
            e["sequence_number"] = n.into();
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""))
        })
        .collect();
    ("text/event-stream", Bytes::from(text))
}
