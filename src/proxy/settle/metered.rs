//! A body metered as it streams: its bytes are paid for by its bytes tiers before they
//! pass (`meter`), and its end — complete, trailers, failure, or the client gone —
//! settles every tier it carries. A paused body is back-pressure: the frame waiting for
//! its units is the only one held, and the inner body is not read meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::measure::{parse_value, Measured};
use super::meter::{BudgetExhausted, Call, Cover};
use super::Settlement;
use crate::config::SettleSource;
use crate::reply::BoxError;
use crate::spend::UsageScanner;

/// Which body a metered body is: it tells who failed when it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's upload: when it breaks, the client left.
    Request,
    /// The upstream's answer; `server_error` for a 5xx, whose missing trailer is the
    /// upstream's failure; `success` for a 2xx, whose missing usage may be the client's
    /// doing; `may_have_run` for a 504, a proxy in front of the model giving up while the
    /// model may still run (and bill) the request, or a 4xx no registry names, a gateway
    /// in front of the model refusing what it generated; `refused` for any other 4xx,
    /// which a model API answers without generating (nor billing) anything.
    /// `strip_trailers`: the client did not ask for trailers, so the ones read for a
    /// settle are not passed on.
    Response {
        server_error: bool,
        success: bool,
        may_have_run: bool,
        refused: bool,
        strip_trailers: bool,
    },
}

/// What a paused body waits for.
enum Waiting {
    /// The key to refill.
    Refill(Pin<Box<tokio::time::Sleep>>),
    /// A draw in Redis.
    Call(Call),
}

pub struct Metered<B> {
    inner: B,
    side: Side,
    /// Bytes passed on so far.
    bytes: u64,
    settlement: Option<Settlement>,
    /// Whether any tier is paid for as the body streams.
    metering: bool,
    /// A data frame waiting for its units.
    held: Option<Bytes>,
    /// What is left of a frame larger than a key's whole bound, held a piece at a time
    /// (a larger piece could never be paid for).
    rest: Bytes,
    /// The most bytes held at once (`Settlement::most_at_once`).
    piece: usize,
    waiting: Option<Waiting>,
    /// How long this body has waited for its key so far, in a row.
    paused: Duration,
    /// A tier settles on the usage the answer reports: it is read as the bytes pass.
    usage: Option<Box<UsageScanner>>,
    /// The length the body declared, when it did and it is the whole story: an HTTP/1
    /// writer stops polling once it has written that many bytes (an HTTP/2 upstream's
    /// stream may still be open), so a body dropped then went through whole.
    declared: Option<u64>,
    /// Its length is not told on (`to_its_end`).
    open_ended: bool,
}

impl<B: Body> Metered<B> {
    pub fn new(inner: B, settlement: Settlement, side: Side) -> Self {
        let most = settlement.most_at_once(|_| true);
        let mut metered = Self {
            inner,
            side,
            bytes: 0,
            metering: settlement.meters(),
            settlement: Some(settlement),
            held: None,
            rest: Bytes::new(),
            piece: most.map_or(usize::MAX, |m| {
                usize::try_from(m).unwrap_or(usize::MAX).max(1)
            }),
            waiting: None,
            paused: Duration::ZERO,
            usage: None,
            declared: None,
            open_ended: false,
        };
        metered.declared = metered.inner.size_hint().exact();
        // An empty body may never be polled.
        if metered.inner.is_end_stream() {
            metered.finish(End::Complete);
        }
        metered
    }

    /// Read to its very end, trailers included, whatever length it declared: the head's
    /// `Content-Length` is to be dropped with it, so an HTTP/1 writer sends it chunked
    /// and polls past its last byte (a trailer settles it).
    pub fn to_its_end(mut self) -> Self {
        self.declared = None;
        self.open_ended = true;
        self
    }

    /// Reads the usage the answer reports as it streams (an answer of `content_type`).
    pub fn scanning_usage(mut self, content_type: Option<&[u8]>) -> Self {
        if self.settlement.is_some() {
            self.usage = Some(Box::new(UsageScanner::new(content_type)));
        }
        self
    }
}

impl<B> Metered<B> {
    fn finish(&mut self, end: End<'_>) {
        let Some(settlement) = self.settlement.take() else {
            return;
        };
        let bytes = self.bytes;
        let usage = self.usage.as_ref().and_then(|s| s.usage());
        let (server_error, success, refused, may_have_run) = match self.side {
            Side::Response {
                server_error,
                success,
                refused,
                may_have_run,
                ..
            } => (server_error, success, refused, may_have_run),
            Side::Request => (false, false, false, false),
        };
        // A usage the upstream may have run up and not told: a success that broke (after
        // bytes, or before the first: a proxy's read timeout during a long prefill), a
        // proxy's timeout in front of a model that may still run, or a gateway's refusal
        // of what the model generated (an output guardrail's). The client can bring each
        // about (a long prompt, a generation longer than a proxy waits, an output it knows
        // is refused), so it is unreported — `max_cost` for an unbounded quote — not an
        // upstream failure.
        let ran_untold = success || may_have_run;
        settlement.finish(|p| match (&p.settle().source, &end) {
            (SettleSource::Usage(prices), End::Trailers(_) | End::Complete) => {
                let row = p.row.and_then(|r| prices.rows.get(r as usize));
                match (usage, row) {
                    (Some(usage), Some(row)) => Measured::Value(row.cost(&usage)),
                    _ if may_have_run => Measured::Unreported,
                    _ if server_error => Measured::UpstreamFailed(bytes),
                    // An empty success (a 204) generated nothing to hide a usage in.
                    _ if success && bytes > 0 => Measured::Unreported,
                    // A model API's 4xx (a bad request, its own rate limit) generated
                    // nothing: no usage is none used (the settle's `min_cost`).
                    _ if refused => Measured::Value(0),
                    _ => Measured::Missing,
                }
            }
            // The gateway cut the answer for another tier: what it used is unknown.
            (SettleSource::Usage(_), End::Cut) if server_error => Measured::UpstreamFailed(bytes),
            (SettleSource::Usage(_), End::Cut) if success => Measured::Unreported,
            (SettleSource::Usage(_), End::Cut) => Measured::Missing,
            (SettleSource::ResponseTrailer(name), End::Trailers(t)) => match parse_value(t, name) {
                Measured::Missing if server_error => Measured::UpstreamFailed(bytes),
                measured => measured,
            },
            (SettleSource::ResponseTrailer(_), End::Complete) if server_error => {
                Measured::UpstreamFailed(bytes)
            }
            (SettleSource::ResponseTrailer(_), End::Complete) => Measured::Missing,
            (_, End::Trailers(_) | End::Complete) => Measured::Bytes(bytes),
            (_, End::Broke) if self.side == Side::Request => Measured::Aborted(bytes),
            (SettleSource::Usage(_), End::Broke) if ran_untold => Measured::Unreported,
            (_, End::Broke) => Measured::UpstreamFailed(bytes),
            (_, End::Gone) => Measured::Aborted(bytes),
            (_, End::Cut) => Measured::Cut(bytes),
        });
    }

    /// Ready once every bytes tier has paid for the held frame; pending while paused.
    fn release(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BudgetExhausted>> {
        loop {
            if let Some(waiting) = &mut self.waiting {
                match waiting {
                    Waiting::Refill(sleep) => {
                        std::task::ready!(sleep.as_mut().poll(cx));
                        self.waiting = None;
                    }
                    Waiting::Call(call) => {
                        let (i, answer) = std::task::ready!(call.as_mut().poll(cx));
                        self.waiting = None;
                        let next = self.settlement.as_mut().and_then(|s| s.drew(i, answer));
                        if let Some(cover) = next {
                            self.wait_for(cover)?;
                        }
                        continue;
                    }
                }
            }
            let Some(held) = &self.held else {
                return Poll::Ready(Ok(()));
            };
            let total = self.bytes.saturating_add(held.len() as u64);
            let Some(settlement) = self.settlement.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match settlement.cover(total) {
                Cover::Paid => {
                    self.paused = Duration::ZERO;
                    return Poll::Ready(Ok(()));
                }
                cover => self.wait_for(cover)?,
            }
        }
    }

    /// Starts waiting as `cover` asks, or cuts the body where the wait would pass the
    /// tier's `max_delay`.
    fn wait_for(&mut self, cover: Cover) -> Result<(), BudgetExhausted> {
        match cover {
            Cover::Paid => Ok(()),
            Cover::Cut(cut) => Err(cut),
            Cover::Call(call) => {
                self.waiting = Some(Waiting::Call(call));
                Ok(())
            }
            Cover::Pause {
                wait_ns,
                max_delay_ns,
                policy,
            } => {
                let wait = super::pause_for(&mut self.paused, (wait_ns, max_delay_ns, policy))?;
                let sleep = Box::pin(tokio::time::sleep(wait));
                self.waiting = Some(Waiting::Refill(sleep));
                Ok(())
            }
        }
    }
}

/// How a metered body ended.
enum End<'a> {
    Complete,
    Trailers(&'a HeaderMap),
    /// The inner body failed (the client's upload, or the upstream's answer).
    Broke,
    /// Dropped before its end: the client (or the exchange) went away.
    Gone,
    /// Cut by the gateway: a budget ran out.
    Cut,
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.held.is_none() && !this.rest.is_empty() {
            this.held = Some(this.next_piece());
        }
        if this.held.is_some() {
            match std::task::ready!(this.release(cx)) {
                Ok(()) => return Poll::Ready(this.pass_held().map(Ok)),
                Err(cut) => return Poll::Ready(Some(Err(this.cut(cut)))),
            }
        }
        let polled = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let frame = match polled {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                this.finish(End::Broke);
                return Poll::Ready(Some(Err(e)));
            }
            None => {
                this.finish(End::Complete);
                return Poll::Ready(None);
            }
        };
        let frame = match frame.into_data() {
            Ok(data) if this.metering && this.settlement.is_some() => {
                this.rest = data;
                this.held = Some(this.next_piece());
                return match std::task::ready!(this.release(cx)) {
                    Ok(()) => Poll::Ready(this.pass_held().map(Ok)),
                    Err(cut) => Poll::Ready(Some(Err(this.cut(cut)))),
                };
            }
            Ok(data) => {
                if let Some(scanner) = &mut this.usage {
                    scanner.feed(&data);
                }
                this.bytes = this.bytes.saturating_add(data.len() as u64);
                this.finish_if_done();
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            Err(frame) => frame,
        };
        if let Some(trailers) = frame.trailers_ref() {
            this.finish(End::Trailers(trailers));
            let strip = matches!(
                this.side,
                Side::Response {
                    strip_trailers: true,
                    ..
                }
            );
            if strip {
                return Poll::Ready(None);
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // What is held of a frame read from the inner body is still to come.
        let kept = (self.held.as_ref().map_or(0, Bytes::len) + self.rest.len()) as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(kept));
        // No exact length when open-ended: the writer reads it to its end (`to_its_end`).
        if let Some(upper) = inner.upper().filter(|_| !self.open_ended) {
            hint.set_upper(upper.saturating_add(kept));
        }
        hint
    }
}

impl<B: Body> Metered<B> {
    /// The next piece of `rest` to hold.
    fn next_piece(&mut self) -> Bytes {
        self.rest.split_to(self.piece.min(self.rest.len()))
    }

    /// The held frame, paid for: passed on, and the body settled when it was the last.
    fn pass_held(&mut self) -> Option<Frame<Bytes>> {
        let data = self.held.take()?;
        if let Some(scanner) = &mut self.usage {
            scanner.feed(&data);
        }
        self.bytes = self.bytes.saturating_add(data.len() as u64);
        self.finish_if_done();
        Some(Frame::data(data))
    }

    /// A body of known length may not be polled past its last bytes: settled now.
    fn finish_if_done(&mut self) {
        if self.rest.is_empty() && self.inner.is_end_stream() {
            self.finish(End::Complete);
        }
    }

    /// Cuts the body: settled at what moved, and the error the exchange ends with.
    fn cut(&mut self, cut: BudgetExhausted) -> BoxError {
        self.held = None;
        self.rest = Bytes::new();
        self.waiting = None;
        self.finish(End::Cut);
        Box::new(cut)
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        // Every declared byte passed on: the writer had what it needed and stopped.
        let whole = self.declared.is_some_and(|n| n == self.bytes)
            && self.held.is_none()
            && self.rest.is_empty();
        self.finish(if whole { End::Complete } else { End::Gone });
    }
}
