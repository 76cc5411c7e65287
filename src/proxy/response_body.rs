//! The body of every response the data plane sends, and what it holds until it is done:
//! the request's place in flight and in its worker's share, its concurrency slots, a
//! sampled request's spans.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::reply::BoxError;

/// The body of every response the data plane sends: it keeps its request counted as in
/// flight until it is done (or dropped), and tells an HTTP/2 stream's send watchdog when
/// it is waiting for the client to take more.
pub struct ResponseBody {
    inner: crate::reply::Body,
    progress: Option<std::sync::Arc<crate::conn::progress::SendProgress>>,
    _in_flight: crate::conn::InFlight,
    /// The request's place among its worker's `max_requests` share.
    _load: Option<crate::conn::load::Load>,
    /// Concurrency slots of the request: released when hyper drops the body (sent,
    /// failed or abandoned).
    _slots: HeldSlots,
    /// A sampled request's spans: ended and queued when the body is dropped.
    _spans: Option<Box<super::spans::PendingSpans>>,
}

/// The concurrency slots a request holds.
pub type HeldSlots = smallvec::SmallVec<[crate::store::Held; 2]>;

impl ResponseBody {
    pub fn new(
        inner: crate::reply::Body,
        in_flight: crate::conn::InFlight,
        load: Option<crate::conn::load::Load>,
        slots: HeldSlots,
    ) -> Self {
        Self {
            inner,
            progress: crate::conn::progress::current(),
            _in_flight: in_flight,
            _load: load,
            _slots: slots,
            _spans: None,
        }
    }

    /// The body that ends a sampled request's `spans` when it is done.
    pub fn ending_spans(mut self, spans: Option<Box<super::spans::PendingSpans>>) -> Self {
        self._spans = spans;
        self
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(p) = &self.progress {
            p.asked();
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Some(p), Poll::Ready(Some(Ok(_)))) = (&self.progress, &polled) {
            p.handed();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
