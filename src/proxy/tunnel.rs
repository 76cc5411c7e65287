//! Upgraded connections (WebSocket and the like): bytes copied both ways until either
//! side closes or neither sends for `tunnel_idle_timeout`. A tunnel holds one of the
//! listener's connection permits and keeps the drain waiting, like any connection. What
//! it moved each way is told when it ends ([`TunnelEnd`]): a route's byte tiers settle
//! at it, not at their reserve (a WebSocket would otherwise move any number of bytes for
//! the price of the request that opened it).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::conn::ConnInfo;

/// A tunnel about to run: both upgraded connections, and what it holds for its life.
pub struct Tunnel {
    pub client: OnUpgrade,
    pub upstream: OnUpgrade,
    /// Its connection slot (`max_connections`).
    pub permit: OwnedSemaphorePermit,
    /// The client connection's facts (and the drain's count of it).
    pub conn: ConnInfo,
    pub idle_timeout: Duration,
    pub gauge: prometheus_client::metrics::gauge::Gauge,
    /// The request's concurrency slots.
    pub slots: super::response_body::HeldSlots,
    /// Told what moved each way when the tunnel ends.
    pub ended: tokio::sync::oneshot::Sender<Moved>,
}

/// What a tunnel moved: bytes read from the client (sent upstream) and from the upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub from_client: u64,
    pub from_upstream: u64,
}

/// Where the response that opened a tunnel learns what it moved (in its extensions, for
/// the settle): `None` once taken.
#[derive(Clone, Default)]
pub struct TunnelEnd(Arc<parking_lot::Mutex<Option<tokio::sync::oneshot::Receiver<Moved>>>>);

impl TunnelEnd {
    /// A tunnel's end: the sender for the tunnel, this for the response.
    pub fn new() -> (tokio::sync::oneshot::Sender<Moved>, Self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (tx, Self(Arc::new(parking_lot::Mutex::new(Some(rx)))))
    }

    /// What the tunnel moved, once it ends; `None` when it never ran (an upgrade that
    /// failed, a gateway shutting down).
    pub async fn moved(&self) -> Option<Moved> {
        let rx = self.0.lock().take()?;
        rx.await.ok()
    }
}

impl Tunnel {
    /// Runs the tunnel between the client's and the upstream's upgraded connections.
    pub fn spawn(self) {
        let Tunnel {
            client,
            upstream,
            permit,
            conn,
            idle_timeout,
            gauge,
            slots,
            ended,
        } = self;
        gauge.inc();
        tokio::spawn(run(
            (client, upstream),
            idle_timeout,
            ended,
            (permit, conn, OpenGauge(gauge), slots),
        ));
    }
}

/// Copies both ways until either side closes or goes idle, then tells `ended` what moved;
/// `_held` lives as long.
async fn run<H>(
    (client, upstream): (OnUpgrade, OnUpgrade),
    idle_timeout: Duration,
    ended: tokio::sync::oneshot::Sender<Moved>,
    _held: H,
) {
    let (Ok(client), Ok(server)) = (client.await, upstream.await) else {
        return;
    };
    let last = Arc::new(LastActivity::new());
    let mut client = Touching::new(TokioIo::new(client), last.clone());
    let mut server = Touching::new(TokioIo::new(server), last.clone());
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        () = idle(&last, idle_timeout) => {
            tracing::debug!(?idle_timeout, "tunnel closed: no bytes either way");
        }
    }
    let _ = ended.send(Moved {
        from_client: client.read,
        from_upstream: server.read,
    });
}

/// Counts the tunnel in `tollgate_open_connections` until it ends.
struct OpenGauge(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// When bytes last moved through a tunnel, in milliseconds after it opened.
struct LastActivity {
    opened: Instant,
    ms: AtomicU64,
}

impl LastActivity {
    fn new() -> Self {
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

async fn idle(last: &LastActivity, limit: Duration) {
    loop {
        let deadline = last.at() + limit;
        if deadline <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// An I/O stream that records when bytes last moved either way.
struct Touching<I> {
    inner: I,
    last: Arc<LastActivity>,
    /// Bytes read from this side.
    read: u64,
}

impl<I> Touching<I> {
    fn new(inner: I, last: Arc<LastActivity>) -> Self {
        Self {
            inner,
            last,
            read: 0,
        }
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
        if buf.filled().len() > before {
            self.last.touch();
            self.read += (buf.filled().len() - before) as u64;
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
