//! Opening one connection to a target: TCP (no Nagle), TLS for `https://` targets with the
//! upstream's trust roots and server name, within `connect_timeout`. The connection holds
//! its worker's place under the upstream's `max_connections` until it closes, tunnels
//! included, because the place travels inside the I/O object.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::config::Target;

/// Why a connection to a target could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Tcp(io::Error),
    #[error("no connection within {0:?}")]
    Timeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("`{0}` is not a valid TLS server name")]
    ServerName(String),
    #[error("the target's TLS does not offer HTTP/2 by ALPN (protocol = \"h2\")")]
    NoHttp2,
    #[error("HTTP handshake failed: {0}")]
    Handshake(hyper::Error),
    /// The connection this request waited for (HTTP/2: one opening for all) failed.
    #[error("{0}")]
    Shared(std::sync::Arc<str>),
}

/// One worker's places under an upstream's `max_connections`.
pub struct Slots {
    open: AtomicUsize,
    cap: usize,
    /// Woken when a place frees up or a connection comes back idle.
    freed: Notify,
    /// Requests waiting on `freed`: a connection checked in wakes them only when there
    /// are any (waking none still takes the notifier's lock, on every request).
    waiting: AtomicUsize,
    /// The upstream's open connections, every worker's (moved per connection, not per
    /// request).
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Slots {
    pub fn new(cap: usize, gauge: prometheus_client::metrics::gauge::Gauge) -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            cap: cap.max(1),
            freed: Notify::new(),
            waiting: AtomicUsize::new(0),
            gauge,
        })
    }

    /// Waits until a place frees up or a connection comes back idle; `false` when
    /// `give_up` came first.
    pub async fn wait_freed(&self, give_up: tokio::time::Instant) -> bool {
        /// Counts the wait until it ends, however it ends (the request may be dropped).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        // Created after the count: a check-in from now on sees a waiter and wakes it
        // (`notify_waiters` reaches a `Notified` made before it, polled or not).
        let freed = self.freed.notified();
        tokio::time::timeout_at(give_up, freed).await.is_ok()
    }

    /// Wakes every request waiting for a place or an idle connection, if any waits.
    pub fn wake_waiters(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.freed.notify_waiters();
        }
    }

    /// Takes a place if one is free.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        // Only the owning worker takes places, so a load-then-add cannot overshoot.
        if self.open.load(Ordering::Relaxed) >= self.cap {
            return None;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        self.gauge.inc();
        Some(Slot(self.clone()))
    }
}

/// A place under the cap, given back when the connection that holds it closes.
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.gauge.dec();
        self.0.freed.notify_one();
    }
}

/// How to reach the targets of one upstream.
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
    /// `sni` from the config: replaces every target's host as the TLS server name.
    sni: Option<ServerName<'static>>,
    timeout: Duration,
    /// HTTP/2 over TLS: the target must agree to `h2` by ALPN.
    http2: bool,
}

impl Connector {
    pub fn new(upstream: &crate::config::Upstream) -> Self {
        let mut tls = (*upstream.tls).clone();
        let http2 = upstream.protocol == crate::config::Protocol::H2;
        let alpn: &[u8] = if http2 { b"h2" } else { b"http/1.1" };
        tls.alpn_protocols = vec![alpn.to_vec()];
        Self {
            tls: TlsConnector::from(Arc::new(tls)),
            // Validated as a server name when the config was compiled.
            sni: upstream
                .sni
                .as_deref()
                .and_then(|name| ServerName::try_from(name.to_owned()).ok()),
            timeout: upstream.connect_timeout,
            http2,
        }
    }

    /// Opens a connection to `target`, holding `slot` for as long as it stays open.
    pub async fn connect(&self, target: &Target, slot: Slot) -> Result<UpstreamIo, ConnectError> {
        tokio::time::timeout(self.timeout, self.open(target, slot))
            .await
            .unwrap_or(Err(ConnectError::Timeout(self.timeout)))
    }

    async fn open(&self, target: &Target, slot: Slot) -> Result<UpstreamIo, ConnectError> {
        let https = target.scheme == http::uri::Scheme::HTTPS;
        let host = target.authority.host();
        let port = target
            .authority
            .port_u16()
            .unwrap_or(if https { 443 } else { 80 });
        // An IPv6 literal comes bracketed in the authority.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let tcp = TcpStream::connect((bare, port))
            .await
            .map_err(ConnectError::Tcp)?;
        // Requests are written whole; waiting to coalesce them only adds latency.
        tcp.set_nodelay(true).map_err(ConnectError::Tcp)?;
        let stream = if https {
            let name = match &self.sni {
                Some(name) => name.clone(),
                None => ServerName::try_from(bare.to_owned())
                    .map_err(|_| ConnectError::ServerName(bare.to_owned()))?,
            };
            let tls = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(ConnectError::Tls)?;
            if self.http2 && tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(ConnectError::NoHttp2);
            }
            Stream::Tls(Box::new(tls))
        } else {
            Stream::Plain(tcp)
        };
        Ok(UpstreamIo {
            stream,
            _slot: slot,
        })
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connection to a target, plain or TLS, with its place under the cap.
pub struct UpstreamIo {
    stream: Stream,
    _slot: Slot,
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
