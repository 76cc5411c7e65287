use super::*;
use proptest::prelude::*;

const SSE: Option<&[u8]> = Some(b"text/event-stream; charset=utf-8");
const JSON: Option<&[u8]> = Some(b"application/json");

fn scan(content_type: Option<&[u8]>, chunks: &[&[u8]]) -> Option<Usage> {
    let mut s = UsageScanner::new(content_type);
    for c in chunks {
        s.feed(c);
    }
    s.usage()
}

fn usage(input: u64, cached: u64, output: u64) -> Option<Usage> {
    Some(Usage {
        input,
        cached,
        output,
        ..Usage::default()
    })
}

const CHAT: &str = r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"say \"usage\":{\"prompt_tokens\":1} {}[]"},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":100}}}"#;

const CHAT_STREAM: &str = concat!(
    "data: {\"choices\":[{\"delta\":{\"content\":\"usage: {\\\"completion_tokens\\\":1}\"}}],\"usage\":null}\n\n",
    ": keep-alive\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC_STREAM: &str = concat!(
    "event: message_start\r\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\r\n\r\n",
    "event: message_delta\r\n",
    "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\n\r\n",
);

const NDJSON: Option<&[u8]> = Some(b"application/x-ndjson");

/// Ollama's `/api/chat` streamed: a JSON object a line, its counts on the last.
const OLLAMA_STREAM: &str = concat!(
    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"\\\"eval_count\\\":1,\"},\"done\":false}\n",
    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"total_duration\":4883583458,\"prompt_eval_count\":26,\"prompt_eval_duration\":342546000,\"eval_count\":282,\"eval_duration\":4535599000}\n",
);

/// llama.cpp's `/completion` streamed: its counts on the event that stops.
const LLAMA_STREAM: &str = concat!(
    "data: {\"content\":\"Hello\",\"stop\":false}\n\n",
    "data: {\"content\":\"\",\"stop\":true,\"tokens_predicted\":40,\"tokens_evaluated\":12,\"tokens_cached\":51,\"timings\":{\"prompt_n\":2,\"predicted_n\":40}}\n\n",
);

#[test]
fn a_json_answer_reports_its_usage_and_text_cannot_fake_one() {
    assert_eq!(scan(JSON, &[CHAT.as_bytes()]), usage(120, 100, 30));
    assert_eq!(scan(None, &[CHAT.as_bytes()]), usage(120, 100, 30));
}

#[test]
fn a_stream_reports_its_last_usage_event() {
    assert_eq!(scan(SSE, &[CHAT_STREAM.as_bytes()]), usage(12, 0, 7));
    // Anthropic: the cache beside the input, output counted up by message_delta.
    assert_eq!(scan(SSE, &[ANTHROPIC_STREAM.as_bytes()]), usage(30, 5, 15));
    // OpenAI's responses API: the usage of the response in response.completed.
    let responses = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"usage\":{\"input_tokens\":999}}],\"usage\":{\"input_tokens\":40,\"input_tokens_details\":{\"cached_tokens\":8},\"output_tokens\":9}}}\n\n";
    assert_eq!(scan(SSE, &[responses.as_bytes()]), usage(40, 8, 9));
}

#[test]
fn what_reports_no_usage_is_none() {
    for (ct, body) in [
        (JSON, r#"{"choices":[]}"#),
        (JSON, r#"{"usage":null}"#),
        (JSON, r#"{"usage":{"total_tokens":5}}"#),
        (JSON, r#"{"usage":{"prompt_tokens":"5"}}"#),
        (JSON, r#"{"data":{"usage":{"prompt_tokens":5}}}"#),
        (JSON, "not json at all {"),
        (SSE, "data: {\"choices\":[]}\n\n"),
        (SSE, "event: x\ndata:\n\n"),
    ] {
        assert_eq!(scan(ct, &[body.as_bytes()]), None, "{body}");
    }
}

#[test]
fn an_oversized_usage_object_is_dropped() {
    let padding = "x".repeat(MAX_USAGE_BYTES);
    let body = format!(r#"{{"usage":{{"prompt_tokens":5,"note":"{padding}"}}}}"#);
    assert_eq!(scan(JSON, &[body.as_bytes()]), None);
}

#[test]
fn a_data_line_split_over_lines_is_one_event() {
    let body = "data: {\"usage\":\ndata: {\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n";
    assert_eq!(scan(SSE, &[body.as_bytes()]), usage(3, 0, 4));
}

#[test]
fn events_without_usage_are_passed_over_and_those_with_it_read() {
    // Whole text-delta events are skipped unread; a usage event, a multi-line one, one
    // after CRLF lines and one whose text says "usage" are read as before.
    let delta = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let crlf = "data: {\"choices\":[]}\r\n\r\n";
    let text_says = "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":1}\"}}]}\n\n";
    let split = "data: {\"usage\":\ndata: {\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n";
    let last = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}\n\n";
    let stream = format!(
        "{}{crlf}{text_says}{split}{}{last}data: [DONE]\n\n",
        delta.repeat(50),
        delta.repeat(50)
    );
    assert_eq!(scan(SSE, &[stream.as_bytes()]), usage(8, 0, 4));
    assert_eq!(
        scan(SSE, &[text_says.as_bytes()]),
        None,
        "text cannot fake one"
    );
    let bytes = stream.as_bytes();
    let halves = [&bytes[..bytes.len() / 2], &bytes[bytes.len() / 2..]];
    assert_eq!(scan(SSE, &halves), usage(8, 0, 4), "cut anywhere, the same");
}

proptest! {
    /// However the answer is cut into chunks, the usage found is the same.
    #[test]
    fn chunking_never_changes_the_usage(cuts in prop::collection::vec(0usize..400, 0..12), which in 0usize..5) {
        let (ct, text) = [
            (JSON, CHAT),
            (SSE, CHAT_STREAM),
            (SSE, ANTHROPIC_STREAM),
            (NDJSON, OLLAMA_STREAM),
            (SSE, LLAMA_STREAM),
        ][which];
        let bytes = text.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&bytes[at..c]);
            at = c;
        }
        chunks.push(&bytes[at..]);
        prop_assert_eq!(scan(ct, &chunks), scan(ct, &[bytes]));
    }

    /// Against serde_json on whole documents: the usage at the root, as a DOM reads it.
    #[test]
    fn a_document_reports_what_its_root_usage_says(
        prompt in 0u64..1_000_000,
        completion in 0u64..1_000_000,
        noise in "[a-z\"\\\\{}\\[\\]:, ]{0,30}",
        before in any::<bool>(),
    ) {
        let usage_member = format!(r#""usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion}}}"#);
        let text_member = format!(r#""text":{}"#, serde_json::to_string(&noise).unwrap());
        let doc = if before {
            format!("{{{usage_member},{text_member}}}")
        } else {
            format!("{{{text_member},{usage_member}}}")
        };
        let dom: serde_json::Value = serde_json::from_str(&doc).unwrap();
        prop_assert_eq!(dom["usage"]["prompt_tokens"].as_u64(), Some(prompt));
        prop_assert_eq!(scan(JSON, &[doc.as_bytes()]), usage(prompt, 0, completion));
    }
}

/// Anthropic's cache writes are kept apart from the input they are part of, the hour's
/// apart from five minutes'.
#[test]
fn anthropic_cache_writes_are_kept_by_lifetime() {
    let body = r#"{"id":"m","type":"message","usage":{"input_tokens":50,"cache_read_input_tokens":100,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200},"output_tokens":7}}"#;
    let mut s = UsageScanner::new(Some(b"application/json"));
    s.feed(body.as_bytes());
    assert_eq!(
        s.usage(),
        Some(Usage {
            input: 450,
            cached: 100,
            written: 300,
            written_1h: 200,
            output: 7,
        })
    );
}

/// Gemini's `usageMetadata`, in a JSON answer and in every event of a stream (counted up
/// as it goes): the prompt with its cached part and what tools read, the candidates and
/// the thinking as output; a `usageMetadata` inside a candidate's text is text.
#[test]
fn gemini_reports_its_usage_metadata() {
    let answer = r#"{"candidates":[{"content":{"parts":[{"text":"\"usageMetadata\":{\"promptTokenCount\":1}"}]}}],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":60,"toolUsePromptTokenCount":20,"candidatesTokenCount":30,"thoughtsTokenCount":50,"totalTokenCount":200}}"#;
    assert_eq!(scan(JSON, &[answer.as_bytes()]), usage(120, 60, 80));
    let stream = concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":1}}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]}}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":7,\"thoughtsTokenCount\":3}}\r\n\r\n",
    );
    assert_eq!(scan(SSE, &[stream.as_bytes()]), usage(9, 0, 10));
    // Without `alt=sse`, the stream is one JSON array of those responses.
    let array = r#"[{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":1}},
{"candidates":[{"content":{"parts":[{"text":"{\"usageMetadata\":{\"promptTokenCount\":1}}"}]}}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":7}}]"#;
    assert_eq!(scan(JSON, &[array.as_bytes()]), usage(9, 0, 7));
    // An object's member deeper down is no usage.
    let nested = r#"{"candidates":[{"usageMetadata":{"promptTokenCount":5}}]}"#;
    assert_eq!(scan(JSON, &[nested.as_bytes()]), None);
}

/// Model servers' own APIs: Ollama's counts as root members (a whole answer, and the last
/// line of a stream of JSON lines), llama.cpp's (its cached tokens among the prompt's),
/// SGLang's `meta_info`. Only a root member holding a plain integer counts: a count in
/// the model's text, a nested object's, a float, a string or a negative one is none.
#[test]
fn model_servers_own_apis_report_their_counts() {
    let ollama = r#"{"model":"llama3","created_at":"2026-12-06T00:00:00Z","response":"\"prompt_eval_count\": 1","done":true,"prompt_eval_count" : 26 ,"eval_count":298}"#;
    assert_eq!(scan(JSON, &[ollama.as_bytes()]), usage(26, 0, 298));
    assert_eq!(scan(NDJSON, &[OLLAMA_STREAM.as_bytes()]), usage(26, 0, 282));
    let embed = r#"{"model":"all-minilm","embeddings":[[0.01,-0.002]],"prompt_eval_count":8}"#;
    assert_eq!(scan(JSON, &[embed.as_bytes()]), usage(8, 0, 0));
    // `tokens_cached` is the slot's whole cache (here 51: prompt and output), no count of
    // prompt tokens read from it: all 12 are priced as input.
    assert_eq!(scan(SSE, &[LLAMA_STREAM.as_bytes()]), usage(12, 0, 40));
    let sglang = r#"{"text":"Paris","meta_info":{"id":"a1","finish_reason":{"type":"stop"},"prompt_tokens":10,"completion_tokens":5,"cached_tokens":4}}"#;
    assert_eq!(scan(JSON, &[sglang.as_bytes()]), usage(10, 4, 5));
    // With logprobs asked for, `meta_info` holds them: far past a kept usage's 4 KiB.
    let logprobs = vec!["[-0.5,1,null]"; 1_000].join(",");
    let with_logprobs = format!(
        r#"{{"text":"Paris","meta_info":{{"prompt_tokens":10,"output_token_logprobs":[{logprobs}],"completion_tokens":5,"cached_tokens":4}}}}"#
    );
    assert_eq!(scan(JSON, &[with_logprobs.as_bytes()]), usage(10, 4, 5));
    let nested = r#"{"meta_info":{"x":{"prompt_tokens":10}},"y":{"completion_tokens":3}}"#;
    assert_eq!(
        scan(JSON, &[nested.as_bytes()]),
        None,
        "only meta_info's own members"
    );
    let sglang_stream = "data: {\"text\":\"Par\",\"meta_info\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\ndata: {\"text\":\"Paris\",\"meta_info\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
    assert_eq!(scan(SSE, &[sglang_stream.as_bytes()]), usage(10, 0, 2));
    for body in [
        r#"{"response":"{\"eval_count\":5}","done":true}"#,
        r#"{"options":{"eval_count":5}}"#,
        r#"{"eval_count":5.5}"#,
        r#"{"eval_count":"5"}"#,
        r#"{"eval_count":-5}"#,
        r#"{"eval_count":5 6}"#,
        r#"{"eval_count":null}"#,
        r#"{"eval_count":5"#,
    ] {
        assert_eq!(scan(JSON, &[body.as_bytes()]), None, "{body}");
    }
}

/// A stream of several sequences (SGLang's `/generate` with a list of prompts, llama.cpp's
/// `/completion` with one): each event counts its own sequence so far, named by `index`
/// (before or after its counts). Each sequence's largest, summed: the largest of all
/// would charge the batch for one prompt. Past 128 sequences the sum is unknown.
#[test]
fn a_stream_of_several_sequences_is_charged_for_each() {
    let event = |index: u64, prompt: u64, done: u64, first: bool| {
        match first {
        true => format!("data: {{\"index\":{index},\"text\":\"t\",\"meta_info\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{done}}}}}\n\n"),
        false => format!("data: {{\"text\":\"t\",\"meta_info\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{done}}},\"index\":{index}}}\n\n"),
    }
    };
    let stream = [
        event(0, 5, 1, true),
        event(1, 7, 1, false),
        event(0, 5, 9, false),
        event(1, 7, 4, true),
    ]
    .concat();
    assert_eq!(scan(SSE, &[stream.as_bytes()]), usage(12, 0, 13));
    let llama = "data: {\"index\":0,\"stop\":true,\"tokens_evaluated\":3,\"tokens_predicted\":8}\n\ndata: {\"index\":1,\"stop\":true,\"tokens_evaluated\":4,\"tokens_predicted\":6}\n\n";
    assert_eq!(scan(SSE, &[llama.as_bytes()]), usage(7, 0, 14));
    let many: String = (0..129).map(|i| event(i, 1, 1, true)).collect();
    assert_eq!(
        scan(SSE, &[many.as_bytes()]),
        None,
        "past what is counted apart"
    );
    let kept: String = (0..128).map(|i| event(i, 1, 2, true)).collect();
    assert_eq!(scan(SSE, &[kept.as_bytes()]), usage(128, 0, 256));
}
