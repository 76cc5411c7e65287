//! What a request leaves behind — its access log line, its response count, its spans —
//! written once it is answered, or, when its client hangs up before any answer, with
//! status 499 (nginx's "client closed request") as the request's future is dropped: a
//! client that gives up on a slow upstream is still in the log, decision and all.

use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;

use super::access_log::{self, Head, Trace};
use super::response::Answer;
use super::snapshot::{Current, Shared};
use super::spans::PendingSpans;
use crate::conn::ConnInfo;

/// The status a request's line and spans carry when its client left before any answer.
pub const CLIENT_CLOSED: u16 = 499;

/// A request's trace and what its record needs, from arrival until it is closed.
pub struct Record<'a> {
    shared: &'a Arc<Shared>,
    snapshot: &'a Current,
    conn: &'a ConnInfo,
    /// The request's head as the access log writes it (`None` without an access log).
    /// Boxed, like `asked`: what a request without a log line or a span carries stays
    /// small, and its record is moved into the request's future on every request.
    head: Option<Box<Head>>,
    pub trace: Trace,
    /// What a sampled request's span names (taken only for one).
    asked: Option<Box<(http::Method, String)>>,
    closed: bool,
}

impl<'a> Record<'a> {
    /// The record of `req`, its span started when `[telemetry]` samples it. Inlined: the
    /// trace is then built where the request's future keeps it, not copied there.
    #[inline]
    pub fn open(
        shared: &'a Arc<Shared>,
        snapshot: &'a Current,
        conn: &'a ConnInfo,
        req: &Request<Incoming>,
    ) -> Self {
        let head = snapshot.config.server.access_log.enabled().then(|| {
            Box::new(Head {
                method: req.method().clone(),
                uri: req.uri().clone(),
                started: shared.clock.now_ns(),
                request_id: req.headers().get(&access_log::X_REQUEST_ID).cloned(),
            })
        });
        let mut trace = Trace::new();
        if let Some(telemetry) = &snapshot.config.telemetry {
            let now = || shared.clock.now_ns();
            trace.span = shared
                .start_span(telemetry, req.headers(), now)
                .map(Box::new);
        }
        let asked = trace
            .span
            .is_some()
            .then(|| Box::new((req.method().clone(), req.uri().path().to_owned())));
        Self {
            shared,
            snapshot,
            conn,
            head,
            trace,
            asked,
            closed: false,
        }
    }

    /// Names the access line `id` when the client named the request nothing a line can
    /// show.
    pub fn name_if_unnamed(&mut self, id: &http::HeaderValue) {
        if let Some(head) = &mut self.head {
            let shown = head
                .request_id
                .as_ref()
                .and_then(super::access_log::shown_id);
            if shown.is_none() {
                head.request_id = Some(id.clone());
            }
        }
    }

    /// The request was answered `status`: its line written and its response counted; its
    /// spans returned, to end with the response body.
    #[inline]
    pub fn close(&mut self, status: u16) -> Option<Box<PendingSpans>> {
        self.write(status, true)
    }

    /// Writes the record once; `answered`: a response was sent (and is counted). An
    /// upstream's own 499 is an answer like any other.
    #[inline]
    fn write(&mut self, status: u16, answered: bool) -> Option<Box<PendingSpans>> {
        self.closed = true;
        if let (Some(i), true) = (self.trace.route, answered) {
            let class = usize::from((status / 100).clamp(1, 5) - 1);
            self.snapshot.routes[i].metrics.responses[class].inc();
        }
        let (shared, snapshot) = (self.shared, self.snapshot);
        if let Some(head) = self.head.as_deref() {
            let now = shared.clock.now_ns();
            let line = (head, &self.trace);
            let (config, metrics) = (&snapshot.config, &shared.metrics);
            access_log::write(line, config, metrics, self.conn, status, now);
        }
        // Only a sampled request has spans to hand on.
        self.trace.span.as_ref()?;
        self.end_spans(status)
    }

    /// A sampled request's spans, handed on to end with its response body: out of line,
    /// so what every unsampled request runs stays small.
    #[cold]
    #[inline(never)]
    fn end_spans(&mut self, status: u16) -> Option<Box<PendingSpans>> {
        let (shared, snapshot) = (self.shared, self.snapshot);
        let span = self.trace.span.take();
        let asked = self.asked.take();
        let trace = &self.trace;
        span.zip(asked)
            .map(|(span, asked)| PendingSpans::new(shared, snapshot, (trace, span), *asked, status))
    }

    /// The client hung up before any answer: out of line, as it is rare.
    #[cold]
    #[inline(never)]
    fn hung_up(&mut self) {
        if self.trace.answer == Answer::Unmatched && self.trace.route.is_some() {
            // Routed, then gone before the limiter decided.
            self.trace.answer = Answer::ClientClosed;
        }
        drop(self.write(CLIENT_CLOSED, false));
    }
}

impl Drop for Record<'_> {
    /// The client hung up before any answer: what was decided so far is written, with
    /// status 499, and the spans end now.
    #[inline]
    fn drop(&mut self) {
        if !self.closed {
            self.hung_up();
        }
    }
}
