//! The data-plane listener: accepts connections (TLS when configured), bounds them with a
//! semaphore, serves HTTP/1.1 and HTTP/2 on each, and drains them on shutdown.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

pub mod preface;

use crate::app::Shared;
use crate::config::Server;
use crate::proxy::service::{handle, ConnInfo};

/// A TLS client that has not finished its handshake by then is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent HTTP/2 streams per connection.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 256;
/// Client-reset HTTP/2 streams tolerated before the connection is closed (rapid reset).
pub const H2_MAX_PENDING_RESETS: usize = 64;
/// HTTP/2 keep-alive pings: every 30 s, and a peer that does not answer within 10 s is dropped.
pub const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The live TLS server config; swapped on reload, read by each new connection.
pub type TlsSlot = Arc<ArcSwapOption<rustls::ServerConfig>>;

fn builder(server: &Server) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(server.header_read_timeout)
        .max_buf_size(server.max_header_bytes)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_header_list_size(u32::try_from(server.max_header_bytes).unwrap_or(u32::MAX))
        // Pings find dead HTTP/2 peers, whose connections would otherwise hold a slot.
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    b
}

/// Accepts until `shutdown` flips, then waits up to `drain` for open connections.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: TlsSlot,
    permits: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let server = shared.config().server.clone();
    let builder = builder(&server);
    let graceful = GracefulShutdown::new();
    loop {
        // Back-pressure: at the connection limit we stop accepting; the kernel queues.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.load_full();
        shared.metrics.open_connections.inc();
        tokio::spawn(async move {
            let conn = ConnInfo {
                peer,
                tls: tls.is_some(),
            };
            let gauge = shared.metrics.open_connections.clone();
            // A client has `header_read_timeout` to show what it speaks: silent
            // connections and stalled HTTP/2 prefaces are cut like slow HTTP/1 headers.
            let deadline = server.header_read_timeout;
            match tls {
                None => {
                    if let Some(io) = preface::read_start(stream, deadline).await {
                        serve_io(TokioIo::new(io), conn, shared, &builder, watcher).await;
                    }
                }
                Some(cfg) => {
                    if let Some(tls_stream) = handshake(stream, cfg).await {
                        if let Some(io) = preface::read_start(tls_stream, deadline).await {
                            serve_io(TokioIo::new(io), conn, shared, &builder, watcher).await;
                        }
                    }
                }
            }
            gauge.dec();
            drop(permit);
        });
    }
    drop(listener);
    let drain = server.drain_timeout;
    tracing::info!(open = graceful.count(), ?drain, "draining connections");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain deadline passed; closing remaining connections");
    }
}

async fn handshake(
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

async fn serve_io<I>(
    io: TokioIo<I>,
    conn: ConnInfo,
    shared: Arc<Shared>,
    builder: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| handle(shared.clone(), conn, req));
    let connection = builder.serve_connection_with_upgrades(io, svc);
    if let Err(e) = watcher.watch(connection).await {
        tracing::debug!(error = %e, peer = %conn.peer, "connection ended with an error");
    }
}
