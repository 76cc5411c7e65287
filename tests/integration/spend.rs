//! Spend: keys and costs from the JSON request body, prices per model, budgets settled on
//! the usage each answer reports (JSON or streamed), over HTTP/1.1 and HTTP/2, against a
//! real OpenAI-compatible upstream. The race replay and the `openai` client: `spend_race.rs`;
//! keys read from the body (per model, per MCP tool): `spend_keys.rs`.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use crate::support::*;

/// Prices in units per token: `mini` 1 in / 2 out, `big` 10 / 30, others 5 / 15.
pub(super) const PRICES: &str = "[prices.llm]\nmodel = \"json:/model\"\ndefault = { input = 5, output = 15 }\n\"mini\" = { input = 1, output = 2 }\n\"big\" = { input = 10, output = 30 }\n";

/// A monthly budget of `quota` units per API key, reserved and settled from `[prices.llm]`.
pub(super) fn budget(quota: u64) -> Fixture {
    budget_with(quota, "")
}

/// [`budget`] with more of the policy's fields (`extra`: TOML lines).
pub(super) fn budget_with(quota: u64, extra: &str) -> Fixture {
    Fixture::new()
        .raw(PRICES)
        .policy_raw(
            "spend",
            format!("key = \"header:x-api-key\"\nquota = {quota}\nwindow = \"month\"\nreserve = \"price:llm\"\nsettle = \"usage:llm\"\n{extra}"),
        )
        .route("llm", "/v1", "api", &["spend"])
}

/// What the price table says `body`'s answer costs (its usage as the upstream reports it).
pub(super) fn priced(body: &serde_json::Value) -> u64 {
    let (prompt, completion) = predicted_usage(body);
    let (input, output) = match body["model"].as_str() {
        Some("mini") => (1, 2),
        Some("big") => (10, 30),
        _ => (5, 15),
    };
    prompt * input + completion * output
}

/// The most `body` can cost on `model`'s row: its bytes as input, `max_tokens` out.
pub(super) fn reserve_of(body: &serde_json::Value) -> u64 {
    let len = serde_json::to_vec(body).unwrap().len() as u64;
    let (input, output) = match body["model"].as_str() {
        Some("mini") => (1, 2),
        Some("big") => (10, 30),
        _ => (5, 15),
    };
    len * input + body["max_tokens"].as_u64().expect("max_tokens") * output
}

pub(super) fn chat(model: &str, words: u64, max_tokens: u64) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": format!("{words} words please")}],
    })
}

/// POSTs `body` (JSON text as given) with an API key, and reads the whole answer.
pub(super) async fn post(client: &HttpClient, url: &str, key: &str, body: Vec<u8>) -> Got {
    let headers = [("content-type", "application/json"), ("x-api-key", key)];
    send_bytes(client, "POST", url, &headers, Bytes::from(body)).await
}

/// Units the key `key` used this month, as the admin API says.
pub(super) async fn used(gw: &TestGateway, key: &str) -> u64 {
    used_of(gw, ("spend", key)).await
}

/// Polls until `key` has used `expected` (a settle may land just after the last byte).
pub(super) async fn used_reaches(gw: &TestGateway, key: &str, expected: u64) -> u64 {
    used_reaches_of(gw, ("spend", key), expected).await
}

#[tokio::test]
async fn each_answer_is_charged_its_priced_usage_json_or_streamed_over_both_protocols() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(10_000_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("key-{i}");
        // A JSON answer: its usage, priced on its model's row.
        let body = chat("mini", 7, 50);
        let r = post(client, &url, &key, body.to_string().into_bytes()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["usage"]["completion_tokens"], 7);
        let mut expected = priced(&body);
        assert_eq!(
            used_reaches(&gw, &key, expected).await,
            expected,
            "JSON answer"
        );
        // A stream with its usage as the last event: the same, on the big row.
        let mut streamed = chat("big", 9, 50);
        streamed["stream"] = true.into();
        streamed["stream_options"] = serde_json::json!({"include_usage": true});
        let r = post(client, &url, &key, streamed.to_string().into_bytes()).await;
        assert_eq!(r.status, 200);
        assert!(r.text().contains("\"usage\":{"), "{}", r.text());
        expected += priced(&streamed);
        assert_eq!(used_reaches(&gw, &key, expected).await, expected, "stream");
        // A stream that reports no usage settles at its reserve: no choice of the client
        // lowers the charge.
        let mut silent = chat("big", 3, 40);
        silent["stream"] = true.into();
        let reserve = reserve_of(&silent);
        let r = post(client, &url, &key, silent.to_string().into_bytes()).await;
        assert_eq!(r.status, 200);
        expected += reserve;
        assert!(reserve > priced(&silent));
        assert_eq!(
            used_reaches(&gw, &key, expected).await,
            expected,
            "no usage: the reserve"
        );
    }
    // The upstream got every body byte for byte.
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics.contains("tollgate_settlements_total"),
        "settlements are counted"
    );
    assert_eq!(up.requests(), 6);
}

#[tokio::test]
async fn a_reserve_that_no_longer_fits_is_refused_before_the_upstream_sees_it() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(5_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    let first = chat("big", 2, 100);
    let reserve = reserve_of(&first);
    assert!(reserve < 5_000 && reserve + reserve > 5_000, "{reserve}");
    let r = post(&http1(), &url, "acme", first.to_string().into_bytes()).await;
    assert_eq!(r.status, 200);
    let spent = priced(&first);
    assert_eq!(
        used_reaches(&gw, "acme", spent).await,
        spent,
        "settled down to its usage"
    );
    // Now a request whose reserve would pass the budget: refused, never sent.
    let seen = up.requests();
    let dear = chat("big", 2, (5_000 - spent) / 30 + 10);
    assert!(reserve_of(&dear) > 5_000 - spent);
    let r = post(&http2(), &url, "acme", dear.to_string().into_bytes()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert_eq!(up.requests(), seen, "the upstream never saw it");
    assert_eq!(used(&gw, "acme").await, spent, "a refusal costs nothing");
    // More choices multiply the output bound: `n` cannot hide a reserve.
    let mut many = chat("mini", 2, 500);
    many["n"] = 128.into();
    let r = post(&http1(), &url, "acme", many.to_string().into_bytes()).await;
    assert_eq!(r.status, 429, "128 × 500 × 2 units does not fit");
    assert_eq!(up.requests(), seen);
}

/// A body in UTF-16 (which Python's servers read as JSON) is quoted at its text's UTF-8
/// length: a character above U+07FF is two bytes of UTF-16 and three of UTF-8, each a
/// token at worst, so the wire's length is no bound on its input. Over HTTP/1.1 and
/// HTTP/2; the upstream fails (a 500 without a usage), which settles at the reserve: the
/// quote.
#[tokio::test]
async fn a_utf16_body_is_quoted_at_its_utf8_length() {
    const FAILED: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
    let up = RawUpstream::start(FAILED, false).await;
    let mut body = chat("mini", 2, 1);
    body["messages"][1]["content"] = "\u{E000}".repeat(4_000).into();
    let utf8 = body.to_string();
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(utf8.encode_utf16().flat_map(u16::to_le_bytes));
    // mini: 1 a byte in, 2 a token out, max_tokens 1.
    let (by_wire, by_text) = (utf16.len() as u64 + 2, utf8.len() as u64 + 2);
    assert!(by_text > by_wire, "{by_text} {by_wire}");
    let gw = TestGateway::start(&budget(4 * by_text).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("utf16-{i}");
        let r = post(client, &url, &key, utf16.clone()).await;
        assert_eq!(r.status, 500, "{}", r.text());
        let charged = used_reaches(&gw, &key, by_text).await;
        assert_eq!(charged, by_text, "quoted {by_text}, not {by_wire}");
    }
    assert_eq!(up.heads().len(), 2);
}

#[tokio::test]
async fn a_model_named_twice_is_priced_on_the_dearest_and_an_unpriced_one_is_refused() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(10_000_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    // Parsers upstream disagree on which `model` wins: the reserve takes the dearer row.
    let twice = r#"{"model":"mini","max_tokens":10,"messages":[{"role":"user","content":"1"}],"model":"big"}"#;
    let r = post(&http1(), &url, "dup", twice.as_bytes().to_vec()).await;
    assert_eq!(r.status, 200);
    // The upstream (serde_json: the last) answered as `big`; settled on big's row: 2 × 10 + 1 × 30.
    assert_eq!(used_reaches(&gw, "dup", 50).await, 50);

    // Without a `default`, a model the table does not price is refused.
    let strict = Fixture::new()
        .raw("[prices.llm]\nmodel = \"json:/model\"\n\"mini\" = { input = 1, output = 2 }\n")
        .policy_raw("spend", "key = \"header:x-api-key\"\nquota = 1000000\nwindow = \"month\"\nsettle = \"usage:llm\"\n")
        .route("llm", "/v1", "api", &["spend"])
        .build();
    let gw = TestGateway::start(&strict, &up.url()).await;
    let seen = up.requests();
    for client in [http1(), http2()] {
        let r = post(
            &client,
            &gw.url("/v1/chat/completions"),
            "k",
            chat("gpt-9", 1, 10).to_string().into_bytes(),
        )
        .await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["error"], "unpriced_model");
        assert_eq!(r.json()["policy"], "spend");
        let r = post(
            &client,
            &gw.url("/v1/chat/completions"),
            "k",
            b"not json".to_vec(),
        )
        .await;
        assert_eq!(r.status, 400, "no model at all is not priced either");
    }
    assert_eq!(up.requests(), seen);
    let ok = post(
        &http1(),
        &gw.url("/v1/chat/completions"),
        "k",
        chat("mini", 1, 10).to_string().into_bytes(),
    )
    .await;
    assert_eq!(ok.status, 200);
}

/// A budget of ten million units with a `max_cost` far above any reserve here, in front
/// of the LLM upstream, and that `max_cost`: what a client that leaves pays.
async fn leavers_gateway() -> (LlmUpstream, TestGateway, u64) {
    let up = LlmUpstream::start().await;
    let max_cost = 200_000;
    let toml = budget_with(10_000_000, &format!("max_cost = {max_cost}\n")).build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    (up, gw, max_cost)
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_stream_pays_max_cost() {
    let (_up, gw, max_cost) = leavers_gateway().await;
    for (i, http2_) in [false, true].into_iter().enumerate() {
        let key = format!("leaver-{i}");
        let mut body = chat("slow-model", 20, 30);
        body["stream"] = true.into();
        body["stream_options"] = serde_json::json!({"include_usage": true});
        assert!(
            reserve_of(&body) < max_cost,
            "the reserve is below max_cost"
        );
        let client = if http2_ { http2() } else { http1() };
        let req = Request::post(gw.url("/v1/chat/completions"))
            .header("x-api-key", &key)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = client.request(req).await.expect("head");
        assert_eq!(resp.status(), 200);
        let mut stream = resp.into_body();
        let first = stream.frame().await.expect("a first event").expect("data");
        assert!(first.data_ref().is_some());
        drop(stream); // gone before the usage event
        drop(client);
        assert_eq!(
            used_reaches(&gw, &key, max_cost).await,
            max_cost,
            "a usage that never arrives because the client left: max_cost"
        );
    }
}

#[tokio::test]
async fn a_client_that_hangs_up_before_the_answers_head_pays_max_cost() {
    let (_up, gw, max_cost) = leavers_gateway().await;
    for (i, client) in [http1(), http2()].into_iter().enumerate() {
        let key = format!("early-leaver-{i}");
        // `late-…`: the upstream's head comes after 3 s; the client waits half a second.
        let req = Request::post(gw.url("/v1/chat/completions"))
            .header("x-api-key", &key)
            .body(Full::new(Bytes::from(
                chat("late-model", 20, 30).to_string(),
            )))
            .unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(500), client.request(req)).await;
        assert!(waited.is_err(), "no head yet");
        drop(client);
        assert_eq!(
            used_reaches(&gw, &key, max_cost).await,
            max_cost,
            "a usage that never arrives because the client left: max_cost"
        );
    }
}

#[tokio::test]
async fn a_body_too_large_to_read_is_priced_at_the_dearest_row_so_padding_saves_nothing() {
    let up = LlmUpstream::start().await;
    let toml = budget(10_000_000).server("max_key_body = 1024\n").build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    // 4 KiB of prompt for the cheap model: the model is not read, so no row can be
    // trusted; the dearest of each price (big's 10 / 30) prices it, not the default's
    // 5 / 15 — padding a request for a dear model cannot make it cheap.
    let long = "word ".repeat(800);
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("big-body-{i}");
        let body = serde_json::json!({"model": "mini", "max_tokens": 5, "messages": [{"role": "user", "content": format!("1 {long}")}]});
        let r = post(client, &url, &key, body.to_string().into_bytes()).await;
        assert_eq!(r.status, 200);
        let expected = {
            let (p, c) = predicted_usage(&body);
            p * 10 + c * 30
        };
        assert_eq!(used_reaches(&gw, &key, expected).await, expected);
        assert!(
            up.bodies()
                .iter()
                .any(|b| *b == body.to_string().as_bytes()),
            "sent whole"
        );
    }
}

#[tokio::test]
async fn a_client_that_accepts_gzip_is_charged_its_usage_not_the_reserve() {
    // The upstream gzips a JSON answer when asked, as real APIs do: a compressed body
    // would hide its usage and settle at the reserve. The gateway asks for it plain.
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(10_000_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("gzip-{i}");
        let body = chat("big", 4, 900);
        let headers = [
            ("content-type", "application/json"),
            ("x-api-key", key.as_str()),
            ("accept-encoding", "gzip, deflate, br"),
        ];
        let r = send_bytes(client, "POST", &url, &headers, body.to_string().into()).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers.get("content-encoding"), None, "answered plain");
        assert_eq!(r.json()["usage"]["completion_tokens"], 4);
        let expected = priced(&body);
        assert!(expected < reserve_of(&body));
        assert_eq!(used_reaches(&gw, &key, expected).await, expected);
    }
    assert_eq!(up.encodings(), ["identity", "identity"]);
}

/// A model API's 4xx generated nothing: an answer refused upstream (here a body that is
/// not JSON, quoted on the dearest row) settles at `min_cost`, not at its reserve.
#[tokio::test]
async fn an_answer_the_upstream_refused_costs_min_cost() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(10_000_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("refused-{i}");
        let r = post(
            client,
            &url,
            &key,
            br#"{"model":"mini","messages":"#.to_vec(),
        )
        .await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(used_reaches(&gw, &key, 1).await, 1, "min_cost");
        assert_eq!(used(&gw, &key).await, 1, "not the reserve");
    }
}
