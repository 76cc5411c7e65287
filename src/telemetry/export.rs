//! The exporter: spans queued by the request path (never waiting: a full queue drops the
//! span and counts it), sent in batches on a task of their own to the collector the
//! configuration in effect names — OTLP/gRPC or OTLP/HTTP with protobuf — so a reload
//! moves the endpoint, and a slow or dead collector costs requests nothing.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::proto::{
    ExportTraceServiceRequest, InstrumentationScope, KeyValue, Resource, ResourceSpans, ScopeSpans,
    Span, Value, EXPORT, HTTP_PATH,
};
use crate::config::telemetry::{OtlpProtocol, Telemetry};
use crate::metrics::telemetry::TelemetryFamilies;

/// Spans waiting for the exporter at most; beyond, new ones are dropped.
pub const QUEUE: usize = 8_192;
/// Spans one export sends at most.
const BATCH: usize = 512;
/// How long a span waits for its batch to fill.
const LINGER: Duration = Duration::from_secs(1);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The request path's end of the queue, and the gateway's way to flush it.
#[derive(Clone)]
pub struct Spans {
    tx: mpsc::Sender<Span>,
    flush: mpsc::Sender<oneshot::Sender<()>>,
}

/// The exporter's end: the spans, and flush requests (each answered once every span
/// queued before it was exported or dropped).
pub struct Queued {
    spans: mpsc::Receiver<Span>,
    flushes: mpsc::Receiver<oneshot::Sender<()>>,
}

impl Spans {
    /// The queue and its receiving end, for [`run`].
    pub fn new() -> (Self, Queued) {
        let (tx, spans) = mpsc::channel(QUEUE);
        let (flush, flushes) = mpsc::channel(1);
        (Self { tx, flush }, Queued { spans, flushes })
    }

    /// Queues `span`, or drops and counts it when the queue is full.
    pub fn push(&self, span: Span, metrics: &TelemetryFamilies) {
        if self.tx.try_send(span).is_err() {
            metrics.queue_full.inc();
        }
    }

    /// Exports what is queued now, without waiting for batches to fill: the gateway's
    /// last requests' spans at shutdown. Returns once they went (or failed).
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.flush.send(done).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

/// Sends batches until the queue's senders are gone; `current` is the `[telemetry]` in
/// effect at each export (none: the batch is dropped).
pub async fn run(
    mut queued: Queued,
    current: impl Fn() -> Option<Telemetry>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let mut exporter = Exporter {
        current,
        metrics,
        warned: false,
    };
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let flushed = tokio::select! {
            span = queued.spans.recv() => match span {
                Some(first) => {
                    batch.push(first);
                    fill(&mut queued, &mut batch).await
                }
                None => break,
            },
            Some(done) = queued.flushes.recv() => Some(done),
        };
        if let Some(done) = flushed {
            // Everything queued goes now, in whole batches.
            while let Ok(span) = queued.spans.try_recv() {
                batch.push(span);
                if batch.len() == BATCH {
                    exporter.export(&mut batch).await;
                }
            }
            exporter.export(&mut batch).await;
            let _ = done.send(());
        } else {
            exporter.export(&mut batch).await;
        }
    }
}

/// Fills `batch` until it is full, its first span has waited [`LINGER`], or a flush is
/// asked (returned: the batch and the rest go at once).
async fn fill(queued: &mut Queued, batch: &mut Vec<Span>) -> Option<oneshot::Sender<()>> {
    let linger = tokio::time::sleep(LINGER);
    tokio::pin!(linger);
    while batch.len() < BATCH {
        tokio::select! {
            span = queued.spans.recv() => match span {
                Some(s) => batch.push(s),
                None => break,
            },
            Some(done) = queued.flushes.recv() => return Some(done),
            () = &mut linger => break,
        }
    }
    None
}

/// Sends batches to the collector the configuration in effect names, counting them.
struct Exporter<F> {
    current: F,
    metrics: Arc<crate::metrics::Metrics>,
    /// A failure was logged and nothing succeeded since.
    warned: bool,
}

impl<F: Fn() -> Option<Telemetry>> Exporter<F> {
    /// Sends `batch` (emptied), or counts it dropped.
    async fn export(&mut self, batch: &mut Vec<Span>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let family = &self.metrics.telemetry;
        let Some(config) = (self.current)() else {
            family.export_failed.inc_by(n);
            batch.clear();
            return;
        };
        let body = encode(&config, std::mem::take(batch));
        match tokio::time::timeout(EXPORT_TIMEOUT, send(&config, body)).await {
            Ok(Ok(())) => {
                family.exported.inc_by(n);
                self.warned = false;
            }
            failed => {
                family.export_failed.inc_by(n);
                if !self.warned {
                    let why = match failed {
                        Ok(Err(e)) => e,
                        _ => format!("no answer within {}s", EXPORT_TIMEOUT.as_secs()),
                    };
                    // Once until an export succeeds again: a dead collector does not flood the log.
                    tracing::warn!(target: "tollgate::telemetry", endpoint = %config.endpoint(), "span export failed, spans dropped until it recovers: {why}");
                    self.warned = true;
                }
            }
        }
    }
}

/// The batch as one OTLP request, under the configured resource.
fn encode(config: &Telemetry, spans: Vec<Span>) -> Vec<u8> {
    let mut attributes = vec![KeyValue::new(
        "service.name",
        Value::String(config.service_name.clone()),
    )];
    attributes.extend(
        config
            .resource
            .iter()
            .map(|(k, v)| KeyValue::new(k, Value::String(v.clone()))),
    );
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource { attributes }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "tollgate".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                spans,
            }],
        }],
    }
    .encode_to_vec()
}

async fn send(config: &Telemetry, body: Vec<u8>) -> Result<(), String> {
    let stream = TcpStream::connect((config.host.as_str(), config.port))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let _ = stream.set_nodelay(true);
    // An IPv6 address is written in brackets, or its colons would run into the port's.
    let authority = if config.host.contains(':') {
        format!("[{}]:{}", config.host, config.port)
    } else {
        format!("{}:{}", config.host, config.port)
    };
    match config.protocol {
        OtlpProtocol::HttpProtobuf => {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(bounded(conn));
            let req = Request::post(format!("{}{HTTP_PATH}", config.base_path))
                .header(HOST, authority)
                .header(CONTENT_TYPE, "application/x-protobuf")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let _ = resp.into_body().collect().await;
            ok_status(status)
        }
        OtlpProtocol::Grpc => {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(bounded(conn));
            let req = Request::post(format!("http://{authority}{EXPORT}"))
                .header(CONTENT_TYPE, "application/grpc")
                .header("te", "trailers")
                .body(Full::new(crate::grpc_frames::frame(&body)))
                .map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            ok_status(resp.status())?;
            let head_status = resp.headers().get("grpc-status").cloned();
            let collected = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            let status = collected
                .trailers()
                .and_then(|t| t.get("grpc-status").cloned())
                .or(head_status);
            match status.as_ref().map(|v| v.as_bytes()) {
                Some(b"0") => Ok(()),
                Some(code) => Err(format!("grpc-status {}", String::from_utf8_lossy(code))),
                None => Err("no grpc-status".to_owned()),
            }
        }
    }
}

/// A connection's task, ended with its export's deadline: an export given up (timed out)
/// drops only its request, and a collector that accepted but stopped reading would
/// otherwise hold the task and its socket forever, one more every export.
async fn bounded<F: std::future::Future>(conn: F) {
    let _ = tokio::time::timeout(EXPORT_TIMEOUT, conn).await;
}

fn ok_status(status: StatusCode) -> Result<(), String> {
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {status}"))
    }
}
