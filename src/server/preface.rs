//! The first bytes of a connection, read under a deadline before HTTP is served: a client
//! that sends nothing, or part of the HTTP/2 preface and then waits, is cut at the header
//! timeout like a slow HTTP/1 client. The bytes read are replayed to the HTTP server.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What every HTTP/2 connection starts with (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the bytes so far either hold the whole HTTP/2 preface or can no longer be
/// its start (any HTTP/1 request line), within `deadline`. `None`: the client closed,
/// failed or stalled first.
pub async fn read_start<I>(mut io: I, deadline: Duration) -> Option<Prefixed<I>>
where
    I: AsyncRead + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    let reading = async {
        loop {
            let mut chunk = [0u8; 1024];
            let n = io.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            let common = buf.len().min(H2_PREFACE.len());
            if buf.len() >= H2_PREFACE.len() || buf[..common] != H2_PREFACE[..common] {
                return Some(());
            }
        }
    };
    tokio::time::timeout(deadline, reading).await.ok()??;
    Some(Prefixed {
        prefix: Bytes::from(buf),
        inner: io,
    })
}

/// An I/O stream whose first bytes were already read: they are served again first.
pub struct Prefixed<I> {
    prefix: Bytes,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
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
    async fn http1_is_decided_at_once_and_replayed() {
        let (mut client, server) = tokio::io::duplex(4096);
        client
            .write_all(b"POST / HTTP/1.1\r\n")
            .await
            .expect("write");
        let mut io = read_start(server, Duration::from_secs(10))
            .await
            .expect("decided");
        let mut got = [0u8; 17];
        io.read_exact(&mut got).await.expect("replayed");
        assert_eq!(&got, b"POST / HTTP/1.1\r\n");
    }

    #[tokio::test(start_paused = true)]
    async fn half_a_preface_then_silence_is_cut_at_the_deadline() {
        let (mut client, server) = tokio::io::duplex(4096);
        client.write_all(&H2_PREFACE[..10]).await.expect("write");
        assert!(read_start(server, Duration::from_secs(10)).await.is_none());
        let (_client, server) = tokio::io::duplex(4096);
        assert!(read_start(server, Duration::from_secs(10)).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_preface_in_pieces_is_kept() {
        let (mut client, server) = tokio::io::duplex(4096);
        let task = tokio::spawn(read_start(server, Duration::from_secs(10)));
        for piece in H2_PREFACE.chunks(5) {
            client.write_all(piece).await.expect("write");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut io = task.await.expect("task").expect("decided");
        let mut got = vec![0u8; H2_PREFACE.len()];
        io.read_exact(&mut got).await.expect("replayed");
        assert_eq!(got, H2_PREFACE);
    }
}
