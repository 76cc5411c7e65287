//! When bytes last moved through a tunnel, either way: the idle timer's clock, and the
//! wrapper that keeps it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When bytes last moved through a tunnel, in milliseconds after it opened.
pub(super) struct LastActivity {
    opened: Instant,
    ms: AtomicU64,
}

impl LastActivity {
    pub(super) fn new() -> Self {
        Self {
            opened: Instant::now(),
            ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.ms.store(ms, Ordering::Relaxed);
    }

    fn at(&self) -> Instant {
        self.opened + Duration::from_millis(self.ms.load(Ordering::Relaxed))
    }
}

/// Returns once `limit` has passed since bytes last moved.
pub(super) async fn idle(last: &LastActivity, limit: Duration) {
    loop {
        let deadline = last.at() + limit;
        if deadline <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// An I/O stream that records when bytes last moved either way, and how many it read.
pub(super) struct Touching<I> {
    inner: I,
    last: Arc<LastActivity>,
    read: u64,
}

impl<I> Touching<I> {
    pub(super) fn new(inner: I, last: Arc<LastActivity>) -> Self {
        Self {
            inner,
            last,
            read: 0,
        }
    }

    /// Bytes read from this side so far (what it sent into the tunnel).
    pub(super) fn read(&self) -> u64 {
        self.read
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Touching<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len().saturating_sub(before);
        if got > 0 {
            self.read = self.read.saturating_add(got as u64);
            self.last.touch();
        }
        poll
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Touching<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.last.touch();
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
