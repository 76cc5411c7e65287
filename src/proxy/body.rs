//! A request body that fails when the client stops sending for too long, so a slow upload
//! cannot hold a connection (and an upstream connection) indefinitely.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::reply::BoxError;

/// The client's request body failed (malformed chunked encoding, reset mid-upload).
#[derive(Debug, thiserror::Error)]
#[error("client request body: {0}")]
pub struct ClientBodyError(pub hyper::Error);

/// The client sent no body bytes for `body_read_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no request body data for {0:?}")]
pub struct BodyReadTimeout(pub Duration);

pin_project! {
    pub struct IdleTimeout<B> {
        #[pin]
        inner: B,
        #[pin]
        deadline: tokio::time::Sleep,
        idle: Duration,
        // The clock starts at the first read: before it, the request waits for an
        // upstream connection, and a client that sent `Expect: 100-continue` sends
        // nothing until asked — silence the client did not choose.
        reading: bool,
    }
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            deadline: tokio::time::sleep(idle),
            idle,
            reading: false,
        }
    }
}

impl<B> Body for IdleTimeout<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if !*this.reading {
            *this.reading = true;
            let from_now = tokio::time::Instant::now() + *this.idle;
            this.deadline.as_mut().reset(from_now);
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => {
                // Every frame restarts the clock: the limit is on silence, not on size.
                this.deadline
                    .as_mut()
                    .reset(tokio::time::Instant::now() + *this.idle);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyReadTimeout(*this.idle).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
