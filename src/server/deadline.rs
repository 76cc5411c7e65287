//! A socket whose writes make no progress for `send_timeout` fails (nginx's
//! `send_timeout`): the connection is then closed, and so is everything it held.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// An I/O stream whose writes fail with `TimedOut` once one has waited `limit` without
/// the peer taking a byte: the connection is then closed, and so is everything it held.
pub struct SendDeadline<I> {
    inner: I,
    limit: Duration,
    /// Armed while a write is pending.
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<I> SendDeadline<I> {
    pub fn new(inner: I, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// Maps a write's readiness: progress disarms the timer, waiting arms it once.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => {
                if !self.armed {
                    self.armed = true;
                    let deadline = Instant::now() + self.limit;
                    self.timer.as_mut().reset(deadline);
                }
                match self.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading (send_timeout)",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => {
                self.armed = false;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for SendDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for SendDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_fails_the_write_at_the_deadline() {
        let (_reader, writer) = tokio::io::duplex(1024);
        let mut io = SendDeadline::new(writer, Duration::from_secs(60));
        let started = Instant::now();
        let big = vec![0u8; 64 * 1024];
        let err = io.write_all(&big).await.expect_err("times out");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_steady_reader_is_never_cut() {
        use tokio::io::AsyncReadExt;
        let (mut reader, writer) = tokio::io::duplex(1024);
        let drain = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let mut total = 0;
            while let Ok(n) = reader.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                total += n;
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            total
        });
        let mut io = SendDeadline::new(writer, Duration::from_secs(60));
        io.write_all(&[1u8; 8 * 1024])
            .await
            .expect("each write progresses in time");
        drop(io);
        assert_eq!(drain.await.expect("reader"), 8 * 1024);
    }
}
