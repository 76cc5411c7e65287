//! A priced route in front of a model server's own API (Ollama's `/api/chat`): its answer
//! writes no `usage` but root members `prompt_eval_count` and `eval_count` (on the last
//! line of a stream of JSON lines, or in the one object). Each call is charged those
//! counts priced, not `max_cost` as an answer that reported nothing, over HTTP/1.1 and
//! HTTP/2.

use crate::spend::{budget_with, post, priced, used_reaches};
use crate::support::*;

#[tokio::test]
async fn an_ollama_answer_is_charged_its_own_counts_streamed_or_not() {
    let up = LlmUpstream::start().await;
    // Ollama's API reads no `max_tokens`: the quote is unbounded and reserves `max_cost`.
    let toml = budget_with(10_000_000, "max_cost = 100000\n")
        .route("ollama", "/api", "api", &["spend"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/api/chat");
    let mut expected = 0;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = &format!("ollama-{i}");
        // Streamed (Ollama's default), then one object.
        for stream in [None, Some(false)] {
            let mut body = serde_json::json!({
                "model": "mini",
                "messages": [{"role": "user", "content": "9 words please"}],
            });
            if let Some(stream) = stream {
                body["stream"] = stream.into();
            }
            let r = post(client, &url, key, body.to_string().into_bytes()).await;
            let text = r.text();
            assert_eq!(r.status, 200, "{stream:?} over client {i}: {text}");
            let lines = text.lines().count();
            assert_eq!(lines, if stream.is_none() { 10 } else { 1 }, "{text}");
            expected += priced(&body);
            assert_eq!(
                used_reaches(&gw, key, expected).await,
                expected,
                "{stream:?} over client {i}: the counts priced, not max_cost"
            );
        }
        expected = 0;
    }
}
