//! A connector that caps the connections one worker keeps open to one upstream: each
//! connection holds a permit until it closes; at the cap, a new connection waits for one
//! (an idle pooled connection may be reused first), and gives up as "busy" (503).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::response::BoxError;

/// Every connection to the upstream is in use and none freed up within the wait.
#[derive(Debug, thiserror::Error)]
#[error("all {cap} connections to the upstream are in use")]
pub struct UpstreamBusy {
    pub cap: usize,
}

#[derive(Clone)]
pub struct Capped<C> {
    inner: C,
    permits: Arc<Semaphore>,
    cap: usize,
    wait: Duration,
}

impl<C> Capped<C> {
    pub fn new(inner: C, cap: usize, wait: Duration) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(cap)),
            cap,
            wait,
        }
    }
}

impl<C> tower_service::Service<Uri> for Capped<C>
where
    C: tower_service::Service<Uri> + Clone + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
{
    type Response = CappedConn<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // The clone is ready too: connectors are always ready (hyper's contract).
        let mut inner = self.inner.clone();
        let (permits, cap, wait) = (self.permits.clone(), self.cap, self.wait);
        Box::pin(async move {
            let permit = match permits.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => tokio::time::timeout(wait, permits.acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .ok_or(UpstreamBusy { cap })?,
            };
            let io = inner.call(uri).await.map_err(Into::into)?;
            Ok(CappedConn {
                inner: io,
                _permit: permit,
            })
        })
    }
}

/// A connection that gives its permit back when it closes.
pub struct CappedConn<T> {
    inner: T,
    _permit: OwnedSemaphorePermit,
}

impl<T: Connection> Connection for CappedConn<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

impl<T: Read + Unpin> Read for CappedConn<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for CappedConn<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}
