//! An output limit the upstream does not read bounds nothing it generates: Ollama's
//! OpenAI endpoint ignores `max_completion_tokens`, so a stream asked with
//! `"max_completion_tokens": 1` and no usage generated as much as it liked and settled at
//! a one-token quote. `upstream_reads = ["max_tokens"]` tells the price table what the
//! upstream reads: such a request's output is then unknown, and the stream that reports
//! nothing pays `max_cost` — over HTTP/1.1 and HTTP/2.

use crate::spend::{chat, used_reaches, PRICES};
use crate::support::*;

const MAX_COST: u64 = 6_000;

/// A stream without a usage, as Ollama's OpenAI endpoint sends one not asked for it.
const NO_USAGE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 73\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"a long answer\"}}]}\n\ndata: [DONE]\n\n";

fn gateway_toml(prices: &str) -> String {
    Fixture::new()
        .raw(prices)
        .policy_raw(
            "spend",
            format!("key = \"header:x-api-key\"\nquota = 1000000\nwindow = \"month\"\nreserve = \"price:llm\"\nsettle = \"usage:llm\"\nmax_cost = {MAX_COST}\n"),
        )
        .route("llm", "/v1", "api", &["spend"])
        .build()
}

#[tokio::test]
async fn a_limit_the_upstream_ignores_leaves_a_stream_without_usage_at_max_cost() {
    let up = RawUpstream::start(NO_USAGE, true).await;
    let mut body = chat("mini", 6, 0);
    let fields = body.as_object_mut().expect("object");
    fields.remove("max_tokens");
    fields.insert("max_completion_tokens".into(), 1.into());
    fields.insert("stream".into(), true.into());
    let input = serde_json::to_vec(&body).expect("json").len() as u64;
    let reads_only_max_tokens = PRICES.replace(
        "[prices.llm]\n",
        "[prices.llm]\nupstream_reads = [\"max_tokens\"]\n",
    );
    // mini: 1 unit an input byte, 2 an output token.
    for (prices, charged) in [
        (PRICES.to_owned(), input + 2),
        (reads_only_max_tokens, MAX_COST),
    ] {
        let gw = TestGateway::start(&gateway_toml(&prices), &up.url()).await;
        for (i, client) in [http1(), http2()].iter().enumerate() {
            let key = format!("k{i}-{charged}");
            let headers = [
                ("content-type", "application/json"),
                ("x-api-key", key.as_str()),
            ];
            let url = gw.url("/v1/chat/completions");
            let sent = bytes::Bytes::from(body.to_string());
            let r = send_bytes(client, "POST", &url, &headers, sent).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(used_reaches(&gw, &key, charged).await, charged, "{prices}");
        }
    }
}

/// A quote above the key's whole burst could never be reserved: the request was refused
/// whenever it came, told to retry in 584 years (`u64::MAX` ns), while the same body
/// without `max_tokens` (quoted without a bound) went through. It reserves the burst now,
/// passes on a full key, and pays its usage — over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_quote_above_the_burst_reserves_the_burst_and_pays_its_usage() {
    use crate::spend::{budget_with, post, priced, reserve_of};
    let up = LlmUpstream::start().await;
    let body = chat("big", 6, 600);
    let quota = 10_000;
    assert!(reserve_of(&body) > quota && priced(&body) < quota, "{body}");
    let toml = budget_with(quota, &format!("max_cost = {}\n", 4 * quota)).build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("wide-{i}");
        let r = post(client, &url, &key, body.to_string().into_bytes()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let charged = priced(&body);
        assert_eq!(used_reaches(&gw, &key, charged).await, charged);
    }
}

/// A reserve cut to the burst bounds nothing: a stream whose usage never comes pays
/// `max_cost`, not the burst it reserved (a review: a quote of 2,100 reserved as a burst
/// of 100 paid 100 where the same answer with its usage paid 1,150).
#[tokio::test]
async fn a_quote_cut_to_the_burst_pays_max_cost_when_no_usage_comes() {
    let up = RawUpstream::start(NO_USAGE, true).await;
    let mut body = chat("big", 6, 600);
    body["stream"] = true.into();
    let quota = 10_000;
    let toml = crate::spend::budget_with(quota, &format!("max_cost = {MAX_COST}0\n")).build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("cut-{i}");
        let headers = [("content-type", "application/json"), ("x-api-key", &key)];
        let url = gw.url("/v1/chat/completions");
        let sent = bytes::Bytes::from(body.to_string());
        let r = send_bytes(client, "POST", &url, &headers, sent).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let charged = used_reaches(&gw, &key, MAX_COST * 10).await;
        assert_eq!(
            charged,
            MAX_COST * 10,
            "max_cost, not the burst it reserved"
        );
    }
}

/// `min_cost` raises a reserve, but not past the key's burst: a key whose override made
/// its burst smaller than `min_cost` was refused for good, told `Retry-After:
/// 18446744074`.
#[tokio::test]
async fn a_burst_below_min_cost_still_admits_on_a_whole_key() {
    let up = LlmUpstream::start().await;
    let extra = format!("max_cost = {MAX_COST}\nmin_cost = 50\n");
    let toml = crate::spend::budget_with(1000, &extra).build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    let body = chat("mini", 2, 1).to_string().into_bytes();
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("small-{i}");
        let path = format!("/admin/overrides/spend/{key}");
        let put = crate::admin::put_ok(&gw.admin_url(&path), br#"{"quota": 10}"#).await;
        assert_eq!(put.status, 200, "{}", put.text());
        let r = crate::spend::post(client, &url, &key, body.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
}
