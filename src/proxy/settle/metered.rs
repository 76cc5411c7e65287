//! A body metered as it streams: its bytes (and, for a response, its trailers) settle
//! the tiers it carries when it ends, fails or is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::measure::{parse_value, Measured};
use super::Settlement;
use crate::config::SettleSource;
use crate::reply::BoxError;

/// A body whose bytes (and, for a response, trailers) settle the tiers it carries when
/// it ends, fails or is dropped.
pub struct Metered<B> {
    inner: B,
    bytes: u64,
    /// A response with a 5xx status: a trailer it does not carry is the upstream's failure.
    server_error: bool,
    settlement: Option<Settlement>,
}

impl<B: Body> Metered<B> {
    /// Meters `inner`; `server_error` when it is a response with a 5xx status.
    pub fn new(inner: B, settlement: Settlement, server_error: bool) -> Self {
        let mut metered = Self {
            inner,
            bytes: 0,
            server_error,
            settlement: Some(settlement),
        };
        // An empty body may never be polled.
        if metered.inner.is_end_stream() {
            metered.finish(End::Complete);
        }
        metered
    }
}

impl<B> Metered<B> {
    fn finish(&mut self, end: End<'_>) {
        let Some(settlement) = self.settlement.take() else {
            return;
        };
        let (bytes, server_error) = (self.bytes, self.server_error);
        settlement.finish(|p| match (&p.settle().source, &end) {
            (SettleSource::ResponseTrailer(name), End::Trailers(t)) => match parse_value(t, name) {
                Measured::Missing if server_error => Measured::UpstreamFailed(bytes),
                measured => measured,
            },
            (SettleSource::ResponseTrailer(_), End::Complete) if server_error => {
                Measured::UpstreamFailed(bytes)
            }
            (SettleSource::ResponseTrailer(_), End::Complete) => Measured::Missing,
            (_, End::Trailers(_) | End::Complete) => Measured::Bytes(bytes),
            (_, End::Cut) => Measured::Aborted(bytes),
        });
    }
}

/// How a metered body ended.
enum End<'a> {
    Complete,
    Trailers(&'a HeaderMap),
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
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes = self.bytes.saturating_add(data.len() as u64);
                    // A body of known length may not be polled past its last bytes.
                    if self.inner.is_end_stream() {
                        self.finish(End::Complete);
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    self.finish(End::Trailers(trailers));
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(End::Cut),
            Poll::Ready(None) => self.finish(End::Complete),
            Poll::Pending => {}
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

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        self.finish(End::Cut);
    }
}
