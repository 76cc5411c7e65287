//! What reading a request body costs a decision, and what a usage settle costs an answer:
//! a `json:/model` key on 1 KiB and 64 KiB bodies beside a `header:` key, a `query:` key
//! found in a 1 KiB form and multipart body, a quote's walk and media scan, and the usage scanner over a JSON answer
//! and a streamed one. Nanoseconds per operation, median of
//! seven runs (`cargo bench --bench spend`); figures in docs/benchmarks.md §11.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::hint::black_box;
use std::time::Instant;

use http::{HeaderMap, HeaderValue, Method, Uri};
use tollgate::json::{walk, BodyFacts, JsonPointer};
use tollgate::key::{KeySource, KeyValues, RequestView};
use tollgate::spend::UsageScanner;

fn median_ns(iters: u32, mut op: impl FnMut()) -> f64 {
    // `cargo test --benches` runs benches without --bench: a smoke run, kept quick.
    let iters = if std::env::args().any(|a| a == "--bench") {
        iters
    } else {
        (iters / 10_000).max(1)
    };
    let mut runs: Vec<f64> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                op();
            }
            start.elapsed().as_nanos() as f64 / f64::from(iters)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[3]
}

fn view<'a>(
    (method, uri, headers): (&'a Method, &'a Uri, &'a HeaderMap),
    body: Option<&'a BodyFacts<'a>>,
) -> RequestView<'a> {
    RequestView {
        method,
        uri,
        headers,
        client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
        route: "chat",
        body,
    }
}

/// A chat request of about `size` bytes: the model first, then messages.
fn chat_body(size: usize) -> Vec<u8> {
    let filler = "lorem ipsum dolor sit amet ".repeat(size / 27 + 1);
    let text = &filler[..size.saturating_sub(120)];
    format!("{{\"model\":\"gpt-4o-mini\",\"max_tokens\":256,\"messages\":[{{\"role\":\"user\",\"content\":\"{text}\"}}]}}").into_bytes()
}

fn main() {
    let mut headers = HeaderMap::new();
    headers.insert("x-model", HeaderValue::from_static("gpt-4o-mini"));
    let (method, uri) = (Method::POST, Uri::from_static("/v1/chat/completions"));
    let header_key: KeySource = "header:x-model".parse().unwrap();
    let json_key: KeySource = "json:/model".parse().unwrap();
    let pointer: JsonPointer = "/model".parse().unwrap();
    let quote_pointers: Vec<JsonPointer> = [
        "/model",
        "/max_tokens",
        "/max_completion_tokens",
        "/max_output_tokens",
        "/n",
    ]
    .iter()
    .map(|p| p.parse().unwrap())
    .collect();
    let parts = (&method, &uri, &headers);
    let mut values = KeyValues::new();
    let header_ns = median_ns(2_000_000, || {
        header_key
            .extract_into(&view(parts, None), &mut values)
            .unwrap();
        black_box(values.len());
    });
    println!("header:x-model key                      {header_ns:>9.1} ns");
    for size in [1024, 64 * 1024] {
        let body = chat_body(size);
        let iters = if size > 4096 { 20_000 } else { 500_000 };
        let ns = median_ns(iters, || {
            let mut facts = BodyFacts::unread(Some(body.len() as u64));
            walk(black_box(&body), &[&pointer], &mut facts).unwrap();
            let mut values = KeyValues::new();
            json_key
                .extract_into(&view(parts, Some(&facts)), &mut values)
                .unwrap();
            black_box(values.len());
        });
        let refs: Vec<&JsonPointer> = quote_pointers.iter().collect();
        let quote_ns = median_ns(iters, || {
            let mut facts = BodyFacts::unread(Some(body.len() as u64));
            walk(black_box(&body), &refs, &mut facts).unwrap();
            black_box(facts.values(&quote_pointers[1]).count());
        });
        println!(
            "json:/model key, {:>2} KiB body            {ns:>9.1} ns",
            size / 1024
        );
        println!(
            "json walk for a quote (5 pointers), {:>2} KiB {quote_ns:>9.1} ns",
            size / 1024
        );
        // What a quote adds to it: the body's shape read (images, audio and files; what
        // the upstream keeps; the API its limits belong to).
        let media_ns = median_ns(iters, || {
            assert!(!tollgate::spend::body_shape(black_box(&body)).beyond);
        });
        println!(
            "body shape scan for a quote, {:>2} KiB      {media_ns:>9.1} ns",
            size / 1024
        );
    }
    body_params(parts);
    usage_scans();
}

/// A `query:username` key read from a 1 KiB login form and a 1 KiB multipart body (the
/// name last, after filler fields), the multipart body's fields parsed each time as a
/// request's are; and the charset check a multipart body read for keys gets once.
fn body_params(parts: (&Method, &Uri, &HeaderMap)) {
    use tollgate::request::form::{BodyParams, ParamsBody};
    let key: KeySource = "query:username".parse().unwrap();
    let filler = "x".repeat(900);
    let form = format!("password=secret&remember=1&note={filler}&username=alice");
    let mut multipart = String::new();
    for (name, value) in [
        ("password", "secret"),
        ("note", filler.as_str()),
        ("username", "alice"),
    ] {
        multipart.push_str(&format!(
            "--b0undary\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    multipart.push_str("--b0undary--\r\n");
    let kinds = [
        ("form", ParamsBody::Form, form.as_bytes()),
        (
            "multipart",
            ParamsBody::Multipart("b0undary".into()),
            multipart.as_bytes(),
        ),
    ];
    for (what, kind, text) in kinds {
        let ns = median_ns(500_000, || {
            let mut facts = BodyFacts::unread(Some(text.len() as u64));
            facts
                .params
                .extend(BodyParams::read(&kind, black_box(text)));
            let mut values = KeyValues::new();
            key.extract_into(&view(parts, Some(&facts)), &mut values)
                .unwrap();
            assert_eq!(values.len(), 1);
            black_box(values.len());
        });
        println!("query:username key, 1 KiB {what:<9}     {ns:>9.1} ns");
    }
    // What the body read adds for a multipart body before that: its text fields' charsets
    // checked (`request::form::foreign_charset`), once a request.
    let ns = median_ns(500_000, || {
        let foreign =
            tollgate::request::form::foreign_charset(black_box(multipart.as_bytes()), "b0undary");
        assert!(foreign.is_none());
    });
    println!("multipart charset check, 1 KiB        {ns:>9.1} ns");
}

/// The usage settle's scan of a JSON answer and of an event stream.
fn usage_scans() {
    let json_answer = format!(
        "{{\"id\":\"c\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{}\"}}}}],\"usage\":{{\"prompt_tokens\":812,\"completion_tokens\":256}}}}",
        "token ".repeat(256)
    );
    let mut stream = String::new();
    for _ in 0..256 {
        stream.push_str("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token \"}}]}\n\n");
    }
    stream.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":256}}\n\ndata: [DONE]\n\n");
    for (what, ct, text) in [
        (
            "JSON answer",
            &b"application/json"[..],
            json_answer.as_bytes(),
        ),
        (
            "event stream, 256 events",
            &b"text/event-stream"[..],
            stream.as_bytes(),
        ),
    ] {
        let ns = median_ns(20_000, || {
            let mut scanner = UsageScanner::new(Some(ct));
            for chunk in text.chunks(1024) {
                scanner.feed(black_box(chunk));
            }
            black_box(scanner.usage());
        });
        println!(
            "usage of a {what} ({} B)  {ns:>9.1} ns ({:.2} ns/byte)",
            text.len(),
            ns / text.len() as f64
        );
    }
}
