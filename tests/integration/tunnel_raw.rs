//! Tunnels driven from raw sockets on both sides: an upstream that answers any head with a
//! WebSocket `101` and then floods, sinks or sends a set number of bytes, and a client that
//! opens a tunnel and answers nothing on its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// What the raw upstream does once it has answered `101`.
#[derive(Clone, Copy)]
pub(super) enum After {
    /// Writes bytes until the connection fails.
    Flood,
    /// Reads and counts every byte.
    Sink,
    /// Writes this many bytes, then keeps the tunnel open (reading what comes).
    Send(usize),
}

/// What a sink read: bytes so far, and whether its connection has ended.
#[derive(Clone, Default)]
pub(super) struct Sunk {
    pub(super) bytes: Arc<AtomicU64>,
    pub(super) ended: Arc<std::sync::atomic::AtomicBool>,
}

/// An upstream that answers any request head with a WebSocket `101`, then floods or
/// sinks.
pub(super) async fn tunnel_upstream(after: After) -> (SocketAddr, Sunk) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let received = Sunk::default();
    let count = received.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                if read_head(&mut s).await.is_none() {
                    return;
                }
                let answer = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let mut buf = vec![7u8; 16 * 1024];
                match after {
                    After::Flood => while s.write_all(&buf).await.is_ok() {},
                    After::Send(n) => {
                        let _ = s.write_all(&vec![7u8; n]).await;
                        while let Ok(1..) = s.read(&mut buf).await {}
                    }
                    After::Sink => {
                        while let Ok(n @ 1..) = s.read(&mut buf).await {
                            count.bytes.fetch_add(n as u64, Ordering::SeqCst);
                        }
                        count.ended.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    (addr, received)
}

/// Reads an HTTP/1 head; `None` when the peer closed first. What follows it is kept
/// out of it: the caller counts it.
async fn read_head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        read.extend_from_slice(&chunk[..n]);
        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = read.split_off(end + 4);
            return Some((String::from_utf8_lossy(&read).into_owned(), rest));
        }
    }
}

/// Opens a tunnel through the gateway at `addr`; returns the socket and the bytes that
/// came after the `101`.
pub(super) async fn open(addr: SocketAddr) -> (TcpStream, u64) {
    open_with(addr, "").await
}

/// [`open`], the handshake carrying the header lines `extra` (each ending in CRLF).
pub(super) async fn open_with(addr: SocketAddr, extra: &str) -> (TcpStream, u64) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let handshake = format!("GET /t HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n");
    s.write_all(handshake.as_bytes()).await.expect("handshake");
    let (head, rest) = tokio::time::timeout(Duration::from_secs(30), read_head(&mut s))
        .await
        .expect("an answer in time")
        .expect("an answer");
    assert_eq!(raw_status(&head), 101, "{head}");
    (s, rest.len() as u64)
}
