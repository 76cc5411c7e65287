//! Per-connection bounds in time: a socket whose writes make no progress for
//! `send_timeout` fails (nginx's `send_timeout`), and a connection with no request in
//! flight for `idle_timeout` is closed, whatever pings it answers.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Requests in flight on one connection (a request counts until its response body
/// ends), and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the connection last went idle.
    idle_since_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        }
    }
}

impl Activity {
    pub fn start(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.idle_since_ms.store(ms, Ordering::Relaxed);
        }
    }

    /// When the connection may be closed for idleness, if nothing starts before then.
    pub fn idle_deadline(&self, idle_timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        Some(self.opened + since + idle_timeout)
    }
}

/// Counts a request from its start until its response (body included) is done.
pub struct InFlight(std::sync::Arc<Activity>);

impl InFlight {
    pub fn new(activity: std::sync::Arc<Activity>) -> Self {
        activity.start();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

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

    pub fn inner(&self) -> &I {
        &self.inner
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

use std::future::Future as _;

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

    #[test]
    fn idle_deadline_waits_for_requests_in_flight() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        rt.block_on(async {
            let a = std::sync::Arc::new(Activity::default());
            let limit = Duration::from_secs(60);
            assert_eq!(a.idle_deadline(limit), Some(a.opened + limit));
            let req = InFlight::new(a.clone());
            assert_eq!(a.idle_deadline(limit), None);
            tokio::time::advance(Duration::from_secs(100)).await;
            drop(req);
            let d = a.idle_deadline(limit).expect("idle");
            assert!(
                d >= a.opened + Duration::from_secs(160),
                "{:?}",
                d - a.opened
            );
        });
    }
}
