//! An OpenAI-compatible upstream for the spend tests: `POST /v1/chat/completions` (and the
//! Responses API: `llm_responses.rs`), JSON or
//! streamed (`text/event-stream`, the usage as the last event when
//! `stream_options.include_usage`), with a usage the test can predict: the prompt is the
//! words of every message plus one per message; the answer is as many words as the last
//! message's first word says (5 when it is not a number), at most `max_tokens`, per choice.
//! A model named `slow-…` streams one word every 200 ms; one named `late-…` sends its
//! answer's head after 3 s; one named `refused-NNN` answers status NNN with an error
//! body and no usage (as an AI gateway's output guardrail does after the model ran). A JSON answer is gzipped when the
//! request accepts gzip, as real APIs do. It records every body it got. Under `/api/` it
//! answers as Ollama's own API does: JSON lines (`application/x-ndjson`) unless
//! `"stream": false`, the counts (`prompt_eval_count`, `eval_count`) as root members of the
//! last object, no `usage`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::net::TcpListener;

type LlmBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

#[derive(Default)]
pub struct LlmSeen {
    pub requests: AtomicUsize,
    pub bodies: Mutex<Vec<Bytes>>,
    /// The `Accept-Encoding` of every request (empty when absent).
    pub encodings: Mutex<Vec<String>>,
    /// Streams that ended before their last event (the client went away).
    pub streams_cut: AtomicUsize,
}

pub struct LlmUpstream {
    pub addr: SocketAddr,
    pub seen: Arc<LlmSeen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LlmUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The usage the upstream reports for a request body, as `(prompt, completion)`.
pub fn predicted_usage(body: &serde_json::Value) -> (u64, u64) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt: u64 = messages
        .iter()
        .map(|m| {
            1 + m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count() as u64
        })
        .sum();
    let asked = messages
        .last()
        .and_then(|m| {
            m["content"]
                .as_str()?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(5);
    let max = ["max_tokens", "max_completion_tokens"]
        .iter()
        .filter_map(|k| body[*k].as_u64())
        .min()
        .unwrap_or(u64::MAX);
    let n = body["n"].as_u64().unwrap_or(1).max(1);
    (prompt, asked.min(max) * n)
}

impl LlmUpstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind llm upstream");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(LlmSeen::default());
        let task = super::serve_all(listener, seen.clone(), answer);
        Self { addr, seen, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::SeqCst)
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.seen.bodies.lock().unwrap().clone()
    }

    pub fn encodings(&self) -> Vec<String> {
        self.seen.encodings.lock().unwrap().clone()
    }
}

/// The request's body; a gzip one read decoded, as servers that accept one do.
async fn body_of(req: Request<Incoming>) -> Result<Bytes, Response<LlmBody>> {
    let gzipped_request = req
        .headers()
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    match req.into_body().collect().await {
        Ok(b) if gzipped_request => {
            let mut decoded = Vec::new();
            let read = std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&b.to_bytes()[..]),
                &mut decoded,
            );
            match read {
                Ok(_) => Ok(Bytes::from(decoded)),
                Err(_) => Err(plain(400, "bad gzip")),
            }
        }
        Ok(b) => Ok(b.to_bytes()),
        Err(_) => Err(plain(400, "body broke")),
    }
}

async fn answer(
    seen: Arc<LlmSeen>,
    req: Request<Incoming>,
) -> Result<Response<LlmBody>, Infallible> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    let accepts = req
        .headers()
        .get(http::header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let gzip = accepts.split(',').any(|c| c.trim().starts_with("gzip"));
    seen.encodings.lock().unwrap().push(accepts);
    let body = match body_of(req).await {
        Ok(body) => body,
        Err(refused) => return Ok(refused),
    };
    seen.bodies.lock().unwrap().push(body.clone());
    if path == "/mcp" {
        let rpc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let reply = serde_json::json!({"jsonrpc": "2.0", "id": rpc["id"], "result": {"content": [{"type": "text", "text": "ok"}]}});
        return Ok(json(reply));
    }
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Ok(plain(400, "not json"));
    };
    if path.ends_with("/responses") {
        let (content_type, text) = super::llm_responses::answer(&request);
        let mut resp = Response::new(http_body_util::Full::new(text).boxed());
        resp.headers_mut()
            .insert("content-type", http::HeaderValue::from_static(content_type));
        return Ok(resp);
    }
    let model = request["model"].as_str().unwrap_or("unknown").to_owned();
    let (prompt, completion) = predicted_usage(&request);
    let usage = serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    let words = vec!["tok"; completion as usize].join(" ");
    if let Some(status) = model.strip_prefix("refused-").and_then(|s| s.parse().ok()) {
        let error = serde_json::json!({"error": {"message": "refused", "type": "guardrail"}});
        let mut resp = json(error);
        *resp.status_mut() = http::StatusCode::from_u16(status).expect("a status");
        return Ok(resp);
    }
    if model.starts_with("late-") {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    if path.starts_with("/api/") {
        return Ok(ollama(
            &model,
            prompt,
            completion,
            request["stream"] != false,
        ));
    }
    if request["stream"].as_bool() != Some(true) {
        let answer = json(serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": words}, "finish_reason": "stop"}],
            "usage": usage,
        }));
        return Ok(if gzip { gzipped(answer).await } else { answer });
    }
    let include_usage = request["stream_options"]["include_usage"].as_bool() == Some(true);
    let events = stream_events(&model, completion, include_usage.then_some(usage));
    Ok(streamed(seen, events, model.starts_with("slow-")))
}

/// `events` as a `text/event-stream` answer, sent one at a time (`slow`: 200 ms apart); a
/// client gone mid-stream is counted in `streams_cut`.
fn streamed(seen: Arc<LlmSeen>, events: Vec<Bytes>, slow: bool) -> Response<LlmBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        for event in events {
            if slow {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if tx.send(Ok(Frame::data(event))).await.is_err() {
                seen.streams_cut.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    });
    let stream = tokio_stream_from(rx);
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// A streamed chat completion's events: the role, a `tok ` chunk per completion token,
/// the stop, the usage chunk when asked for, and `[DONE]`.
fn stream_events(model: &str, completion: u64, usage: Option<serde_json::Value>) -> Vec<Bytes> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let event = serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Bytes::from(format!("data: {event}\n\n"))
    };
    let mut events = vec![chunk(
        serde_json::json!({"role": "assistant", "content": ""}),
        serde_json::Value::Null,
    )];
    for _ in 0..completion {
        events.push(chunk(
            serde_json::json!({"content": "tok "}),
            serde_json::Value::Null,
        ));
    }
    events.push(chunk(serde_json::json!({}), "stop".into()));
    if let Some(usage) = usage {
        let last = serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [], "usage": usage});
        events.push(Bytes::from(format!("data: {last}\n\n")));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// Ollama's `/api/chat` answer: a line per token and the last with the counts, or (not
/// streamed) one object with the whole message and the counts.
fn ollama(model: &str, prompt: u64, completion: u64, stream: bool) -> Response<LlmBody> {
    let line = |content: &str, done: bool| {
        let mut object = serde_json::json!({"model": model, "created_at": "2026-12-06T00:00:00Z",
            "message": {"role": "assistant", "content": content}, "done": done});
        if done {
            object["done_reason"] = "stop".into();
            object["prompt_eval_count"] = prompt.into();
            object["eval_count"] = completion.into();
        }
        object
    };
    let (text, content_type) = if stream {
        let mut lines: Vec<String> = (0..completion)
            .map(|_| line("tok ", false).to_string())
            .collect();
        lines.push(line("", true).to_string());
        (lines.join("\n") + "\n", "application/x-ndjson")
    } else {
        let words = vec!["tok"; completion as usize].join(" ");
        (line(&words, true).to_string(), "application/json")
    };
    let mut resp = Response::new(http_body_util::Full::new(Bytes::from(text)).boxed());
    resp.headers_mut()
        .insert("content-type", http::HeaderValue::from_static(content_type));
    resp
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn json(value: serde_json::Value) -> Response<LlmBody> {
    let mut resp = Response::new(http_body_util::Full::new(Bytes::from(value.to_string())).boxed());
    resp.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// `resp` with its body gzipped and said so.
async fn gzipped(resp: Response<LlmBody>) -> Response<LlmBody> {
    use std::io::Write;
    let (mut parts, body) = resp.into_parts();
    let plain = body.collect().await.expect("a full body").to_bytes();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&plain).expect("gzip");
    let packed = encoder.finish().expect("gzip");
    parts.headers.insert(
        http::header::CONTENT_ENCODING,
        http::HeaderValue::from_static("gzip"),
    );
    Response::from_parts(
        parts,
        http_body_util::Full::new(Bytes::from(packed)).boxed(),
    )
}

fn plain(status: u16, text: &'static str) -> Response<LlmBody> {
    let mut resp =
        Response::new(http_body_util::Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *resp.status_mut() = http::StatusCode::from_u16(status).expect("status");
    resp
}
