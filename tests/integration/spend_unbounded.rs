//! Requests whose cost their body does not bound (no `max_tokens`, no row `max_output`;
//! or a streamed body too large to read, whose length is unknown): each reserves its
//! input's price (or `max_cost`, when written) so calls go on while the budget lasts, and
//! one whose usage never comes — a stream without `include_usage` — pays `max_cost`, not
//! that reserve, over HTTP/1.1 and HTTP/2.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use crate::spend::{budget, budget_with, chat, post, priced, used_reaches};
use crate::support::*;

/// `n` words picked pseudo-randomly: prose that gzip does not shrink to nothing.
fn words(n: usize) -> String {
    let words = [
        "alpha", "quill", "mesa", "orbit", "tundra", "vex", "lumen", "cask",
    ];
    let mut x: u64 = 0x9e37_79b9;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            words[(x >> 61) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn gzip(plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(plain).expect("gzip");
    e.finish().expect("gzip")
}

fn unbounded(model: &str) -> serde_json::Value {
    let mut body = chat(model, 6, 0);
    body.as_object_mut().expect("object").remove("max_tokens");
    body
}

#[tokio::test]
async fn a_request_without_max_tokens_reserves_its_input_or_max_cost_when_written() {
    let up = LlmUpstream::start().await;
    let url = |gw: &TestGateway| gw.url("/v1/chat/completions");
    // No max_cost: each call reserves its input's price and pays its usage, so calls go
    // on while the budget lasts (not one call, then a month of 429s).
    let body = unbounded("mini");
    // Its input reserve is its length at mini's 1 unit a byte: three calls fit, a fourth
    // finds less than that left.
    let input = serde_json::to_vec(&body).unwrap().len() as u64;
    let quota = input + priced(&body) * 5 / 2;
    let gw = TestGateway::start(&budget(quota).build(), &up.url()).await;
    for (i, client) in [http1(), http2(), http1()].iter().enumerate() {
        let r = post(client, &url(&gw), "open", body.to_string().into_bytes()).await;
        assert_eq!(r.status, 200, "call {i}");
        let expected = priced(&body) * (i as u64 + 1);
        assert_eq!(used_reaches(&gw, "open", expected).await, expected);
    }
    let r = post(&http2(), &url(&gw), "open", body.to_string().into_bytes()).await;
    assert_eq!(r.status, 429, "the budget is spent");
    // With max_cost written, that is what an unbounded call reserves: a 10,000 budget
    // holds one 6,000 reserve at a time.
    let toml = budget_with(10_000, "max_cost = 6000\n").build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut slow = unbounded("slow-model");
    slow["stream"] = true.into();
    slow["stream_options"] = serde_json::json!({"include_usage": true});
    for (i, client) in [http1(), http2()].into_iter().enumerate() {
        let key = &format!("held-{i}");
        let req = Request::post(url(&gw))
            .header("x-api-key", key)
            .body(Full::new(Bytes::from(slow.to_string())))
            .unwrap();
        let resp = client.request(req).await.expect("head");
        assert_eq!(resp.status(), 200);
        let second = post(
            &client,
            &url(&gw),
            key,
            unbounded("mini").to_string().into_bytes(),
        )
        .await;
        assert_eq!(second.status, 429, "6,000 of 10,000 are held");
        resp.into_body().collect().await.expect("the stream ends");
        let expected = priced(&slow);
        assert_eq!(used_reaches(&gw, key, expected).await, expected);
        let third = post(
            &client,
            &url(&gw),
            key,
            unbounded("mini").to_string().into_bytes(),
        )
        .await;
        assert_eq!(third.status, 200, "settled: the reserve is back");
    }
}

#[tokio::test]
async fn an_unbounded_request_whose_usage_never_comes_pays_max_cost() {
    let up = LlmUpstream::start().await;
    let max_cost = 50_000;
    let toml = budget_with(10_000_000, &format!("max_cost = {max_cost}\n"))
        .server("max_key_body = 1024\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        // No max_tokens, a stream that reports no usage: its reserve bounds nothing.
        let mut silent = unbounded("mini");
        silent["stream"] = true.into();
        let key = format!("silent-{i}");
        let r = post(client, &url, &key, silent.to_string().into_bytes()).await;
        assert_eq!(r.status, 200);
        assert_eq!(used_reaches(&gw, &key, max_cost).await, max_cost);
        // A body streamed without a length, too large to read: its input is unknown too.
        let mut long = chat("mini", 3, 10);
        long["messages"][0]["content"] = "word ".repeat(600).into();
        long["stream"] = true.into();
        let key = format!("chunked-{i}");
        let text = Bytes::from(long.to_string());
        let chunks: Vec<Result<_, std::io::Error>> = (0..text.len())
            .step_by(700)
            .map(|at| {
                Ok(hyper::body::Frame::data(
                    text.slice(at..(at + 700).min(text.len())),
                ))
            })
            .collect();
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let req = Request::post(&url)
            .header("content-type", "application/json")
            .header("x-api-key", &key)
            .body(BodyExt::boxed(body))
            .unwrap();
        let resp = stream_client(i == 1).request(req).await.expect("answered");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("the stream ends");
        assert_eq!(used_reaches(&gw, &key, max_cost).await, max_cost);
        // The same with its usage asked for: charged what it used.
        let mut told = unbounded("mini");
        told["stream"] = true.into();
        told["stream_options"] = serde_json::json!({"include_usage": true});
        let key = format!("told-{i}");
        let r = post(client, &url, &key, told.to_string().into_bytes()).await;
        assert_eq!(r.status, 200);
        assert_eq!(used_reaches(&gw, &key, priced(&told)).await, priced(&told));
    }
}

/// A gzipped body's length is no bound on its input when it decoded past `max_key_body`
/// or declared a compressed length past it: its input is unknown, so a stream whose usage
/// never comes pays `max_cost` — not a reserve worked out from the bytes read, which a
/// client could shrink at will. Every row has a `max_output`, so only the input is open.
#[tokio::test]
async fn a_gzipped_body_read_in_part_is_quoted_as_unknown_input() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&bounded_rows(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    let mut packed = chat("mini", 3, 10);
    packed["stream"] = true.into();
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (text, case) in [
            ("word ".repeat(2_000), "decodes past"),
            (words(5_000), "declares past"),
        ] {
            packed["messages"][0]["content"] = text.into();
            let body = gzip(packed.to_string().as_bytes());
            // Read as bytes, the quote would be 10 a byte and 30 × 100 out: far below.
            assert!(
                (body.len() > 1024) == (case == "declares past") && body.len() < 4_000,
                "{case}: {} bytes",
                body.len()
            );
            let key = format!("gzip-{i}-{}", case.len());
            let req = Request::post(&url)
                .header("content-type", "application/json")
                .header("content-encoding", "gzip")
                .header("x-api-key", &key)
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let resp = client.request(req).await.expect("answered");
            assert_eq!(resp.status(), 200, "{case}");
            resp.into_body().collect().await.expect("the stream ends");
            assert_eq!(used_reaches(&gw, &key, MAX_COST).await, MAX_COST, "{case}");
        }
    }
    assert!(
        up.bodies().iter().any(|b| b.len() > 20_000),
        "the upstream read the prompts decoded"
    );
}

const MAX_COST: u64 = 50_000;

/// A budget whose every row has a `max_output` (so only the input and the choices can be
/// open), `max_cost` 50,000 and `max_key_body` 1 KiB.
fn bounded_rows() -> String {
    budget_with(10_000_000, &format!("max_cost = {MAX_COST}\n"))
        .server("max_key_body = 1024\n")
        .build()
        .replace("output = 15 }", "output = 15, max_output = 100 }")
        .replace("output = 2 }", "output = 2, max_output = 100 }")
        .replace("output = 30 }", "output = 30, max_output = 100 }")
}

/// `n` in spellings pydantic's lax mode reads as 128 and the gateway cannot count: the
/// choices are unknown, so a stream whose usage never comes pays `max_cost`, not one
/// choice's reserve; a plain `n` keeps its bound (and pays its reserve).
#[tokio::test]
async fn choices_in_a_spelling_the_gateway_cannot_count_pay_max_cost_unreported() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&bounded_rows(), &up.url()).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let cases = [("\"1_28\"", MAX_COST), ("\" 128\"", MAX_COST), ("2", 0)];
        for (j, (n, charged)) in cases.into_iter().enumerate() {
            let text = silent_stream_with(&format!(r#""max_tokens":10,"n":{n}"#));
            let charged = match charged {
                0 => text.len() as u64 + 2 * 10 * 2,
                c => c,
            };
            pays(&gw, client, &format!("n-{i}-{j}"), text, charged).await;
        }
    }
}

/// A mini chat streamed without its usage, `members` written first in its body as given
/// (spellings serde_json would not write), and no `max_tokens` but theirs.
fn silent_stream_with(members: &str) -> String {
    let mut body = chat("mini", 3, 10);
    body.as_object_mut().expect("object").remove("max_tokens");
    body["stream"] = true.into();
    body.to_string().replacen('{', &format!("{{{members},"), 1)
}

/// POSTs `text` as `key` through `client`: answered, and charged `charged`.
async fn pays(gw: &TestGateway, client: &HttpClient, key: &str, text: String, charged: u64) {
    let url = gw.url("/v1/chat/completions");
    let r = post(client, &url, key, text.clone().into_bytes()).await;
    assert_eq!(r.status, 200, "{text}");
    assert_eq!(used_reaches(gw, key, charged).await, charged, "{text}");
}

/// An image, an audio clip or a file is far more input tokens than its bytes in the body:
/// a request carrying one is quoted as input of unknown length, so a stream whose usage
/// never comes pays `max_cost`; the same request in text pays its reserve.
#[tokio::test]
async fn media_in_the_prompt_is_input_the_quote_cannot_bound() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&bounded_rows(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    let parts = [
        serde_json::json!([{"type": "image_url", "image_url": {"url": "https://x/big.png", "detail": "high"}}]),
        serde_json::json!([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]),
        serde_json::json!([{"type": "file", "file": {"file_id": "file-1"}}]),
        // vLLM's and SGLang's video and audio by URL.
        serde_json::json!([{"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}]),
        serde_json::json!([{"type": "audio_url", "audio_url": {"url": "https://x/a.wav"}}]),
        serde_json::json!("a plain question"),
    ];
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (j, content) in parts.iter().enumerate() {
            let mut body = chat("mini", 3, 10);
            body["stream"] = true.into();
            body["messages"][0]["content"] = content.clone();
            let text = body.to_string();
            let charged = match content.is_string() {
                true => text.len() as u64 + 10 * 2,
                false => MAX_COST,
            };
            let key = format!("media-{i}-{j}");
            let r = post(client, &url, &key, text.into_bytes()).await;
            assert_eq!(r.status, 200, "{content}");
            assert_eq!(used_reaches(&gw, &key, charged).await, charged, "{content}");
        }
    }
}

/// Output limits and choices bound a quote only as the upstream reads them, and a chain
/// kept upstream is input beyond the body: a stream whose usage never comes pays the
/// row's `max_output` for a limit of another API (`max_output_tokens` beside `messages`,
/// which vLLM's Chat Completions ignore), and `max_cost` for a limit in another case
/// (`MAX_TOKENS`: Python's readers ignore it, Go's read it) or given twice, beside another
/// upstream's own limit (`n_predict`, `options`, `max_new_tokens`), more than 128
/// choices, a `previous_response_id`, several prompts, a server-side tool, or a cache or a
/// limit inside `extra_body`.
#[tokio::test]
async fn limits_the_upstream_may_not_read_and_chains_it_keeps_bound_nothing() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&bounded_rows(), &up.url()).await;
    // mini: 1 a byte in, 2 a token out, max_output 100.
    let cases: [(&str, Option<u64>); 13] = [
        (r#""max_tokens":10"#, Some(10)),
        // llama.cpp's own limit wins over `max_tokens`; Ollama's and Hugging Face's.
        (r#""max_tokens":1,"n_predict":-1"#, None),
        (r#""max_tokens":1,"options":{"num_predict":-1}"#, None),
        (r#""max_tokens":1,"max_new_tokens":4096"#, None),
        (r#""max_output_tokens":1"#, Some(100)),
        (r#""MAX_TOKENS":1"#, None),
        (r#""max_tokens":10,"max_tokens":null"#, None),
        (r#""max_tokens":10,"n":200"#, None),
        (r#""max_tokens":10,"previous_response_id":"resp_1""#, None),
        (r#""max_tokens":10,"prompt":["one","two"]"#, None),
        (
            r#""max_tokens":10,"tools":[{"type":"web_search_preview"}]"#,
            None,
        ),
        // Gemini's OpenAI-compatible API reads its cache from a literal `extra_body`;
        // a proxy merging `extra_body` reads a second limit there.
        (
            r#""max_tokens":10,"extra_body":{"google":{"cached_content":"cachedContents/c"}}"#,
            None,
        ),
        (r#""max_tokens":10,"extra_body":{"max_tokens":4096}"#, None),
    ];
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (j, (members, output)) in cases.into_iter().enumerate() {
            let text = silent_stream_with(members);
            let charged = output.map_or(MAX_COST, |out| text.len() as u64 + 2 * out);
            pays(&gw, client, &format!("limit-{i}-{j}"), text, charged).await;
        }
    }
}

/// A request the upstream had not answered by the upstream `timeout` (504) may still run
/// there to the end: its cost is unreported, as when the client hangs up — its reserve
/// when its quote is a bound, `max_cost` when not — even with `refund_on_upstream_error`,
/// which had let a client asking for more than the timeout allows pay `min_cost`.
#[tokio::test]
async fn a_request_past_the_upstream_timeout_pays_as_unreported() {
    let up = LlmUpstream::start().await;
    let toml = bounded_rows()
        .replace(
            "max_cost = 50000\n",
            "max_cost = 50000\nrefund_on_upstream_error = true\n",
        )
        .replace("[upstreams.api]\n", "[upstreams.api]\ntimeout = \"1s\"\n");
    assert!(toml.contains("refund_on_upstream_error") && toml.contains("timeout = \"1s\""));
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (j, media) in [false, true].into_iter().enumerate() {
            let mut body = chat("late-model", 3, 10);
            if media {
                body["messages"][1]["content"] = serde_json::json!([{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]);
            }
            let text = body.to_string();
            // The default row: 5 a byte in, 15 a token out.
            let charged = match media {
                false => text.len() as u64 * 5 + 10 * 15,
                true => MAX_COST,
            };
            let key = format!("late-{i}-{j}");
            let r = post(client, &url, &key, text.into_bytes()).await;
            assert_eq!(r.status, 504, "{}", r.text());
            assert_eq!(
                used_reaches(&gw, &key, charged).await,
                charged,
                "media: {media}"
            );
        }
    }
}
