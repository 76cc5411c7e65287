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

/// The answer to the request is over (sent, failed or abandoned) while its body was still
/// being sent upstream.
#[derive(Debug, thiserror::Error)]
#[error("the answer ended before the request body")]
pub struct Answered;

pin_project! {
    /// A request body that ends, failed, once its answer is over: an upstream that answered
    /// early (a 401, a 200 before reading everything) and keeps reading would otherwise
    /// hold its connection for a body trickled a frame per `body_read_timeout`, after the
    /// request's concurrency slot, `max_requests` place and in-flight count were given
    /// back with the answer. Cut, the upstream's HTTP/1.1 connection is closed and an
    /// HTTP/2 stream reset. A body already ended (most GETs) is passed as it is.
    pub struct UntilAnswered<B> {
        #[pin]
        inner: B,
        watch: Watch,
    }
}

/// What an [`UntilAnswered`] body watches.
enum Watch {
    /// Nothing: the body had ended when the request was sent.
    Off,
    /// The answer's [`Answering`], which resolves this when it is dropped.
    Answer(tokio::sync::oneshot::Receiver<()>),
    /// The answer is over: the body is cut.
    Answered,
}

/// Held by the answer's body ([`AnswerBody`]): dropped with it, it cuts the request's upload.
pub struct Answering {
    _sender: tokio::sync::oneshot::Sender<()>,
}

impl<B: Body> UntilAnswered<B> {
    /// `inner`, and what its answer's body holds to cut it: `None` (no channel made) for
    /// a body already ended.
    pub fn new(inner: B) -> (Self, Option<Answering>) {
        if inner.is_end_stream() {
            return (
                Self {
                    inner,
                    watch: Watch::Off,
                },
                None,
            );
        }
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let body = Self {
            inner,
            watch: Watch::Answer(receiver),
        };
        (body, Some(Answering { _sender: sender }))
    }
}

impl<B> Body for UntilAnswered<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let answer = match this.watch {
            Watch::Off => return this.inner.poll_frame(cx),
            Watch::Answered => return Poll::Ready(Some(Err(Answered.into()))),
            Watch::Answer(answer) => answer,
        };
        match this.inner.poll_frame(cx) {
            Poll::Pending => match Pin::new(answer).poll(cx) {
                Poll::Ready(_) => {
                    *this.watch = Watch::Answered;
                    Poll::Ready(Some(Err(Answered.into())))
                }
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project! {
    /// An upstream's answer body that cuts its request's upload ([`UntilAnswered`]) when
    /// it is dropped.
    pub struct AnswerBody<B> {
        #[pin]
        inner: B,
        _answering: Option<Answering>,
    }
}

impl<B> AnswerBody<B> {
    pub fn new(inner: B, answering: Option<Answering>) -> Self {
        Self {
            inner,
            _answering: answering,
        }
    }
}

impl<B: Body> Body for AnswerBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
