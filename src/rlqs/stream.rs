//! The gRPC side of the quota service: one bidirectional stream per Envoy (per domain).
//! Each `RateLimitQuotaUsageReports` read is answered with one `RateLimitQuotaResponse`
//! holding an action per bucket it names; a nudge (another Envoy joined a key this one
//! holds) or an admin change of a held key (a reset, an override) re-sizes that key's
//! buckets between reports. The stream ends with the client's, at shutdown, or with a
//! gRPC error for a message it cannot read.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use prost::Message;
use tokio::sync::{broadcast, mpsc, watch};

use super::holders::{Holders, StreamId};
use super::proto::{BucketAction, RateLimitQuotaUsageReports};
use super::render;
use super::tracked::Stream;
use crate::grpc_frames::{frame, Frames};
use crate::proxy::grpc::{is_call, set_status, trailers_only, Code};
use crate::proxy::snapshot::{KeyChange, Shared};
use crate::reply::{Body, BoxError};

/// The quota streams one listener lets be open at once (`[rls] max_quota_streams`; an
/// Envoy holds one per domain); beyond, a new one is answered `RESOURCE_EXHAUSTED` and
/// Envoy retries at its next report.
#[derive(Clone)]
pub struct StreamBound {
    open: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl StreamBound {
    pub fn new(max: usize) -> Self {
        let max = max.min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            open: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
        }
    }

    /// A stream's place, held until the stream ends; none when none is left.
    fn enter(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.open.clone().try_acquire_owned().ok()
    }

    /// What a stream is answered when no place is left.
    fn refusal(&self) -> Response<Body> {
        let why = format!("overloaded: {} quota streams are open", self.max);
        trailers_only(Code::ResourceExhausted, &why)
    }
}

type Out = mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

/// Answers a `StreamRateLimitQuotas` call: the response's head at once, its messages as
/// the reports come.
pub fn handle(
    shared: Arc<Shared>,
    (holders, streams): (Arc<Holders>, &StreamBound),
    shutdown: watch::Receiver<bool>,
    req: Request<Incoming>,
) -> Response<Body> {
    if !is_call(req.headers()) {
        return trailers_only(
            Code::InvalidArgument,
            "content-type must be application/grpc",
        );
    }
    let Some(open) = streams.enter() else {
        return streams.refusal();
    };
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(16);
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    }));
    // The stream's own headers carry Envoy's trace, if it traces: each report's span
    // follows it.
    let headers = req.headers().clone();
    tokio::spawn(async move {
        serve(shared, holders, shutdown, (headers, req.into_body()), tx).await;
        drop(open);
    });
    let mut resp = Response::new(BodyExt::boxed_unsync(body));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

/// Why a stream ended: the client's end or shutdown (OK), or an error to tell it.
type Ended = Result<(), (Code, String)>;

async fn serve(
    shared: Arc<Shared>,
    holders: Arc<Holders>,
    mut shutdown: watch::Receiver<bool>,
    (headers, mut body): (HeaderMap, Incoming),
    out: Out,
) {
    let (nudge, mut nudged) = mpsc::channel::<String>(64);
    let mut changes = Some(shared.key_changes.subscribe());
    let id = holders.new_stream();
    let mut stream = Stream::new((&shared, &holders), id, &nudge);
    let metrics = &shared.metrics.rlqs;
    metrics.streams.inc();
    let mut frames = Frames::default();
    // A message begun and not ended holds its bytes (up to 4 MiB a stream): past the
    // server's `body_read_timeout` from its first byte, the stream ends.
    let read_timeout = shared.snapshot.load().config.server.body_read_timeout;
    let mut stall: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let idle = tokio::time::sleep(IDLE);
    tokio::pin!(idle);
    // An answer was not taken: the client is gone, or has not read for `SEND_TIMEOUT`.
    let mut untaken = false;
    let ended: Ended = loop {
        tokio::select! {
            frame = body.frame() => match frame {
                None => break Ok(()),
                Some(Err(_reset)) => break Ok(()),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    frames.push(&data);
                    let (answered, reported) = match read_messages(&mut stream, (&mut frames, &headers), &out).await {
                        Ok(Some(read)) => read,
                        Ok(None) => { untaken = true; break Ok(()) }
                        Err(e) => break Err(e),
                    };
                    // Only a report of some bucket keeps the stream's place: an empty
                    // message every 29 s would hold it for good.
                    if reported {
                        idle.as_mut().reset(tokio::time::Instant::now() + IDLE);
                    }
                    // The timer is a message's: one that ended lets the next, begun in the
                    // same frames, have its own whole `body_read_timeout`.
                    match (frames.pending(), answered) {
                        (0, _) => stall = None,
                        (_, 0) => { stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(read_timeout))); }
                        _ => stall = Some(Box::pin(tokio::time::sleep(read_timeout))),
                    }
                }
            },
            () = &mut idle => break Err((
                Code::DeadlineExceeded,
                format!("no report for {}: the stream's place is given back", humantime::format_duration(IDLE)),
            )),
            () = stalled(&mut stall) => break Err((
                Code::DeadlineExceeded,
                format!("a message begun {} ago has not ended", humantime::format_duration(read_timeout)),
            )),
            // Another Envoy joined the key: its share shrinks at Envoy's fill ratio.
            Some(key) = nudged.recv() => if !resized(&mut stream, &key, &out, false).await {
                untaken = true;
                break Ok(());
            },
            // The admin API reset the key: the new share, whole; new numbers: at the ratio.
            (key, change) = changed(&mut changes) => if !resized(&mut stream, &key, &out, change == KeyChange::Reset).await {
                untaken = true;
                break Ok(());
            },
            _ = shutdown.changed() => break Ok(()),
        }
    };
    let now = shared.clock.now_ns();
    holders.ended((id, now), stream.buckets.values().map(|t| t.key.as_str()));
    forget_told_in_fleet(&shared, &holders, id, &stream);
    metrics.streams.dec();
    send_trailers(&out, ended, untaken).await;
}

/// On Redis, forgets the tokens the ended stream was told for each key it held, as
/// `Holders::ended` does here, in a task of its own (the stream's end waits for none).
fn forget_told_in_fleet(
    shared: &Arc<Shared>,
    holders: &Holders,
    id: StreamId,
    stream: &Stream<'_>,
) {
    if shared.limiter.remote().is_none() || stream.buckets.is_empty() {
        return;
    }
    let mut keys: Vec<String> = stream.buckets.values().map(|t| t.key.clone()).collect();
    keys.sort_unstable();
    keys.dedup();
    let (shared, field) = (shared.clone(), holders.field(id));
    tokio::spawn(async move {
        let Some(remote) = shared.limiter.remote() else {
            return;
        };
        for key in keys {
            // A failure leaves them until the stream's record expires.
            let _kept = super::fleet::forget_told(remote, &key, &field).await;
        }
    });
}

/// Ends the stream with the trailers `ended` makes. A client gone, or not taking its
/// answers (`untaken`), would not take them either: waiting for room would hold the
/// stream's place for good.
async fn send_trailers(out: &Out, ended: Ended, untaken: bool) {
    let last = Ok(Frame::trailers(trailers(ended)));
    if untaken {
        let _ = out.try_send(last);
    } else {
        let _ = tokio::time::timeout(SEND_TIMEOUT, out.send(last)).await;
    }
}

/// The stream's buckets of `key` re-sized and sent (started `full` or not); `false` once
/// the client is gone.
async fn resized(stream: &mut Stream<'_>, key: &str, out: &Out, full: bool) -> bool {
    let snapshot = stream.shared.snapshot.load_full();
    let actions = stream.resize(&snapshot, key).await;
    send(out, actions, full).await
}

/// The trailers a stream ends with: OK, or the error that ended it.
fn trailers(ended: Ended) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    match ended {
        Ok(()) => {
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
        }
        Err((code, why)) => {
            tracing::warn!(target: "tollgate::rlqs", code = ?code, "quota stream ended: {why}");
            set_status(&mut trailers, code, &why);
            trailers.remove(CONTENT_TYPE);
        }
    }
    trailers
}

/// Ends when a message begun has stalled past its time; pending while none is.
async fn stalled(stall: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match stall {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

/// The next key the admin API changed. Changes missed while the stream was behind (64
/// queued) are answered at Envoy's next report of their buckets, as without this. Pending
/// for ever once the sender is gone.
async fn changed(
    changes: &mut Option<broadcast::Receiver<(Arc<str>, KeyChange)>>,
) -> (Arc<str>, KeyChange) {
    loop {
        let Some(rx) = changes else {
            return std::future::pending().await;
        };
        match rx.recv().await {
            Ok(key) => return key,
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => *changes = None,
        }
    }
}

/// Answers every whole message read: how many, and whether any reported a bucket, or
/// `None` once the client is gone.
async fn read_messages(
    stream: &mut Stream<'_>,
    (frames, headers): (&mut Frames, &HeaderMap),
    out: &Out,
) -> Result<Option<(usize, bool)>, (Code, String)> {
    let (mut answered, mut reported) = (0, false);
    loop {
        let message = match frames.next_message() {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(Some((answered, reported))),
            Err(e) => return Err((Code::ResourceExhausted, e.to_string())),
        };
        answered += 1;
        super::wire_bounds::within_bounds(&message).map_err(|e| (Code::InvalidArgument, e))?;
        let reports = RateLimitQuotaUsageReports::decode(message).map_err(|e| {
            (
                Code::InvalidArgument,
                format!("not a RateLimitQuotaUsageReports: {e}"),
            )
        })?;
        // The domain is the stream's: rlqs.proto asks for it in the first report only
        // (Envoy sends it in each), so a report without one keeps the last one given.
        let mut domain = std::mem::take(&mut stream.domain);
        if !reports.domain.is_empty() && reports.domain != domain {
            domain.clone_from(&reports.domain);
        }
        let snapshot = stream.shared.snapshot.load_full();
        let started = stream.shared.clock.now_ns();
        let span = snapshot
            .config
            .telemetry
            .as_ref()
            .and_then(|t| stream.shared.start_span(t, headers, || started));
        reported |= !reports.bucket_quota_usages.is_empty();
        let mut actions = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in &reports.bucket_quota_usages {
            actions.extend(stream.usage(&snapshot, &domain, usage).await);
        }
        stream.resplit(&snapshot, &domain, &mut actions).await;
        actions.extend(stream.take_abandoned());
        stream.domain = domain;
        if let Some(span) = span {
            export_span(stream.shared, &span, reports.bucket_quota_usages.len());
        }
        // The report's usage is charged: its shares are net of it, whole.
        if !send(out, actions, true).await {
            return Ok(None);
        }
    }
}

/// A sampled report's span: the buckets it named, answered.
fn export_span(shared: &Shared, span: &crate::telemetry::span::SpanTrace, buckets: usize) {
    let clock = &*shared.clock;
    let unix = |ns| clock.unix_ns_at(ns);
    let method = super::proto::STREAM_RATE_LIMIT_QUOTAS.trim_start_matches('/');
    let mut exported = crate::telemetry::span::rpc_span(
        span,
        method,
        ("reported", None, None),
        (clock.now_ns(), &unix),
    );
    let buckets = i64::try_from(buckets).unwrap_or(i64::MAX);
    exported
        .attributes
        .push(crate::telemetry::proto::KeyValue::new(
            "tollgate.buckets",
            crate::telemetry::proto::Value::Int(buckets),
        ));
    shared.spans.push(exported, &shared.metrics.telemetry);
}

/// How long a stream may go without a whole report before it ends. Envoy reports every
/// 5 s, buckets or none; a stream that sends nothing would hold one of the listener's
/// places (`max_quota_streams`) for good, and an Envoy refused a place loses the report
/// it opened the stream with (its counters are cleared as the report is built).
const IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The most one response message holds, well below the 4 MiB a gRPC client takes by
/// default: a report of thousands of buckets is answered in several.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Sends `actions` (none: nothing is sent), each token bucket started full when `full`
/// ([`render::encode_action`]), in responses of at most [`MAX_RESPONSE_BYTES`] (a
/// bucket's two actions always in one); `false` once the client is gone. The response
/// is `repeated BucketAction bucket_action = 1`: its actions written one after another.
async fn send(out: &Out, actions: Vec<BucketAction>, full: bool) -> bool {
    let mut buf = Vec::new();
    for action in &actions {
        let before = buf.len();
        render::encode_action(action, full, &mut buf);
        if buf.len() > MAX_RESPONSE_BYTES && before > 0 {
            let rest = buf.split_off(before);
            if !send_encoded(out, &buf).await {
                return false;
            }
            buf = rest;
        }
    }
    buf.is_empty() || send_encoded(out, &buf).await
}

/// Sends one encoded response; `false` once the client is gone, or has not taken an
/// answer for [`SEND_TIMEOUT`] (a client that sends reports and never reads the answers
/// would otherwise hold the stream, its timers unpolled, for good).
async fn send_encoded(out: &Out, response: &[u8]) -> bool {
    let sent = tokio::time::timeout(SEND_TIMEOUT, out.send(Ok(Frame::data(frame(response)))));
    matches!(sent.await, Ok(Ok(())))
}

/// How long an answer may wait for the client to take it.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
