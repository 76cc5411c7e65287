//! The data-plane listener: accepts connections (TLS when configured), bounds them with a
//! semaphore, serves HTTP/1.1 and HTTP/2 on each under per-connection deadlines, and
//! drains them on shutdown.

pub mod deadline;
pub mod preface;
pub mod stream_watch;

use std::future::Future as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use atomic_waker::AtomicWaker;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;

use crate::config::Server;
use crate::conn::{Activity, ConnContext, ConnInfo};
use crate::proxy::service::{handle, Downstream};
use crate::proxy::snapshot::Shared;
use stream_watch::StreamExecutor;

/// Once a connection is being closed (idle, or the shutdown's drain), how long it may take
/// to finish while nothing is in flight: an HTTP/2 client answering the GOAWAY's ping.
/// A client that answers nothing is then closed, answered or not.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// A TLS client that has not finished its handshake by then is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Client-reset HTTP/2 streams tolerated before the connection is closed (rapid reset).
pub const H2_MAX_PENDING_RESETS: usize = 64;
/// HTTP/2 keep-alive pings: every 30 s, and a peer that does not answer within 10 s is dropped.
pub const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);
/// Response bytes buffered per HTTP/2 stream waiting for the client's window (h2's
/// default is 400 KiB): a connection buffers at most `max_streams` × this.
pub const H2_SEND_BUFFER: usize = 64 * 1024;
/// Request bytes an HTTP/2 client may send ahead per stream, and per connection (all
/// streams share it), before the gateway has passed them upstream.
pub const H2_STREAM_WINDOW: u32 = 256 * 1024;
pub const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;

fn builder(server: &Server) -> auto::Builder<StreamExecutor> {
    let mut b = auto::Builder::new(StreamExecutor {
        send_timeout: server.send_timeout,
    });
    b.http1()
        // Replaced per connection (see `serve`) by a timer it keeps between requests.
        .timer(TokioTimer::new())
        .header_read_timeout(server.header_read_timeout)
        // Bounds both the head being read and the response bytes queued for writing.
        .max_buf_size(server.max_header_bytes)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(server.max_streams)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_header_list_size(u32::try_from(server.max_header_bytes).unwrap_or(u32::MAX))
        .max_send_buf_size(H2_SEND_BUFFER)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        // Pings find dead HTTP/2 peers, whose connections would otherwise hold a slot.
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    b
}

/// Accepts until `shutdown` flips, then waits up to `drain` for open connections.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let server = shared.config().server.clone();
    let builder = builder(&server);
    // Every connection task (and tunnel) holds a clone of `open`; the drain is over when
    // the last one is dropped.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    loop {
        let Some((permit, stream, peer)) =
            accept_bounded(&listener, &permits, &mut shutdown, "accept failed").await
        else {
            break;
        };
        let _ = stream.set_nodelay(true);
        // The certificates of the config in effect now (a reload swaps them).
        let tls = shared
            .snapshot
            .load()
            .config
            .server
            .tls
            .as_ref()
            .map(|t| t.config.clone());
        let ctx = Arc::new(ConnContext {
            peer,
            peer_text: crate::conn::ip_text(peer.ip()),
            tls: tls.is_some(),
            activity: Arc::new(Activity::default()),
            permits: permits.clone(),
            open: open.clone(),
            upstream: Default::default(),
        });
        let accepted = Accepted {
            stream,
            tls,
            permit,
            ctx,
            shared: shared.clone(),
            builder: builder.clone(),
            shutdown: shutdown.clone(),
            limits: Limits::of(&server),
        };
        shared.metrics.open_connections.inc();
        tokio::spawn(accepted.serve());
    }
    drop(listener);
    drop(open);
    let drain = server.drain_timeout;
    tracing::info!(
        open = permits_in_use(&permits, &server),
        ?drain,
        "draining connections"
    );
    if tokio::time::timeout(drain, all_closed.recv())
        .await
        .is_err()
    {
        tracing::warn!("drain deadline passed; closing remaining connections");
    }
}

/// One accepted connection and what serving it needs.
struct Accepted {
    stream: TcpStream,
    /// The TLS config to handshake with, when the listener serves TLS.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Its slot among `max_connections`, held until it closes.
    permit: tokio::sync::OwnedSemaphorePermit,
    ctx: Arc<ConnContext>,
    shared: Arc<Shared>,
    builder: auto::Builder<StreamExecutor>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
}

impl Accepted {
    /// Serves the connection to its end: TLS first when configured, then whatever the
    /// client speaks.
    async fn serve(self) {
        let Accepted {
            stream,
            tls,
            permit,
            ctx,
            shared,
            mut builder,
            shutdown,
            limits,
        } = self;
        // The header-read timeout on a timer the connection keeps between its requests.
        builder.http1().timer(crate::conn::HeaderTimer::default());
        let gauge = shared.metrics.open_connections.clone();
        // A client has `header_read_timeout` to show what it speaks: silent connections
        // and stalled HTTP/2 prefaces are cut like slow HTTP/1 headers.
        let deadline = limits.header_read;
        match tls {
            None => {
                if let Some(io) = preface::read_start(stream, deadline).await {
                    serve_io(io, ctx, shared, &builder, shutdown, limits).await;
                }
            }
            Some(cfg) => {
                if let Some(tls_stream) = handshake(stream, cfg).await {
                    if let Some(io) = preface::read_start(tls_stream, deadline).await {
                        serve_io(io, ctx, shared, &builder, shutdown, limits).await;
                    }
                }
            }
        }
        gauge.dec();
        drop(permit);
    }
}

fn permits_in_use(permits: &Semaphore, server: &Server) -> usize {
    server
        .max_connections
        .saturating_sub(permits.available_permits())
}

/// The next connection, once a permit is free (back-pressure: at the limit we stop
/// accepting and the kernel queues). Accept errors (EMFILE and friends) pause instead of
/// spinning. `None` once `shutdown` flips.
pub async fn accept_bounded(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    shutdown: &mut watch::Receiver<bool>,
    failure: &'static str,
) -> Option<(
    tokio::sync::OwnedSemaphorePermit,
    TcpStream,
    std::net::SocketAddr,
)> {
    let permit = tokio::select! {
        p = permits.clone().acquire_owned() => p.ok()?,
        _ = shutdown.changed() => return None,
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => return Some((permit, stream, peer)),
                Err(e) => {
                    tracing::warn!(error = %e, "{failure}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => return None,
        }
    }
}

/// The per-connection deadlines, copied out of the config a worker started with.
#[derive(Clone, Copy)]
struct Limits {
    header_read: Duration,
    send: Duration,
    idle: Duration,
}

impl Limits {
    fn of(server: &Server) -> Self {
        Self {
            header_read: server.header_read_timeout,
            send: server.send_timeout,
            idle: server.idle_timeout,
        }
    }
}

/// The TLS handshake of an accepted connection, bounded by `TLS_HANDSHAKE_TIMEOUT`.
pub async fn handshake(
    stream: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// Serves one connection until it ends; closes it gracefully on shutdown, or once it has
/// had no request in flight for `idle_timeout` (HTTP/2 pings do not count as requests).
async fn serve_io<I>(
    io: I,
    ctx: ConnInfo,
    shared: Arc<Shared>,
    builder: &auto::Builder<StreamExecutor>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(deadline::SendDeadline::new(io, limits.send));
    let downstream = Arc::new(Downstream {
        shared,
        conn: ctx.clone(),
    });
    let svc = service_fn(move |req| handle(downstream.clone(), req));
    let connection = builder.serve_connection_with_upgrades(io, svc);
    tokio::pin!(connection);
    let idle = tokio::time::sleep(limits.idle);
    tokio::pin!(idle);
    let mut closing = *shutdown.borrow();
    if closing {
        connection.as_mut().graceful_shutdown();
    }
    let changed = shutdown.changed();
    tokio::pin!(changed);
    // The idle timer and the shutdown signal wake the task through `watchers`, so a wake-up
    // for the connection's own I/O (several a request) does not poll them too.
    let watchers = Arc::new(Watchers::default());
    let watchers_waker = Waker::from(watchers.clone());
    // Started with the graceful close: it does not wait on the client's cooperation.
    let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let result = std::future::poll_fn(|cx| {
        watchers.task.register(cx.waker());
        if !closing && watchers.woken.swap(false, Ordering::AcqRel) {
            let mut wcx = Context::from_waker(&watchers_waker);
            if changed.as_mut().poll(&mut wcx).is_ready() {
                closing = true;
            }
            while !closing && idle.as_mut().poll(&mut wcx).is_ready() {
                match ctx.activity.idle_deadline(limits.idle) {
                    Some(at) if at <= Instant::now() => closing = true,
                    Some(at) => idle.as_mut().reset(at),
                    None => idle.as_mut().reset(Instant::now() + limits.idle),
                }
            }
            if closing {
                connection.as_mut().graceful_shutdown();
            }
        }
        if closing {
            let grace = grace.get_or_insert_with(|| Box::pin(tokio::time::sleep(CLOSE_GRACE)));
            while grace.as_mut().poll(cx).is_ready() {
                if ctx.activity.in_flight() == 0 {
                    tracing::debug!(peer = %ctx.peer, "closed: nothing in flight, the close not answered");
                    return std::task::Poll::Ready(Ok(()));
                }
                grace.as_mut().reset(Instant::now() + CLOSE_GRACE);
            }
        }
        connection.as_mut().poll(cx)
    })
    .await;
    if let Err(e) = result {
        tracing::debug!(error = %e, peer = %ctx.peer, "connection ended with an error");
    }
}

/// What a connection's watchers (idle timer, shutdown signal) wake it through: notes that
/// they need polling, then wakes the connection's task.
struct Watchers {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Default for Watchers {
    fn default() -> Self {
        Self {
            // Polled once at the start, which registers them.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Wake for Watchers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}
