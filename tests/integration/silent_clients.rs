//! Clients that answer nothing: an HTTP/2 connection whose client sends the preface and
//! its SETTINGS and then never acknowledges a frame (no SETTINGS ack, no PING ack) is still
//! closed on time — when idle, and when the gateway drains for shutdown. hyper's graceful
//! close sends GOAWAY and waits for a ping's answer; the gateway does not wait past a
//! second's grace. Raw sockets: a client library would answer the pings by itself.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// The client preface and an empty SETTINGS frame: all a silent client ever sends.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Reads (and discards) until the peer closes; how long that took, `None` past `limit`.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

fn idle_config(idle: &str) -> String {
    Fixture::new()
        .server(format!(
            "idle_timeout = \"{idle}\"\nheader_read_timeout = \"30s\"\n"
        ))
        .route("api", "/", "api", &[])
        .build()
}

/// An idle HTTP/2 connection whose client answers nothing is closed within
/// `idle_timeout` plus the grace. (Before: still open after 10 s, and indefinitely.)
#[tokio::test]
async fn an_idle_http2_client_that_answers_nothing_is_closed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&idle_config("2s"), &up.url()).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    s.write_all(PREFACE).await.expect("preface");
    let took = closed_within(&mut s, Duration::from_secs(20)).await;
    let took = took.expect("closed");
    assert!(took >= Duration::from_millis(1500), "closed after {took:?}");
    assert!(
        took < Duration::from_secs(8),
        "closed after {took:?}: 2 s idle + 1 s grace"
    );
    // A client that also reads nothing: closed all the same (the frames stay queued).
    let mut s = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    s.write_all(PREFACE).await.expect("preface");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let took = closed_within(&mut s, Duration::from_secs(10)).await;
    assert!(took.expect("closed") < Duration::from_secs(6));
}

/// Shutdown's drain does not wait its whole `drain_timeout` (30 s here) for a silent
/// HTTP/2 connection with nothing in flight.
#[tokio::test]
async fn the_drain_does_not_wait_for_a_silent_http2_client() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .server("drain_timeout = \"30s\"\nidle_timeout = \"60s\"\nheader_read_timeout = \"30s\"\n")
        .route("api", "/", "api", &[])
        .build();
    let mut gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    s.write_all(PREFACE).await.expect("preface");
    // The gateway has taken the connection (its SETTINGS arrive).
    let mut buf = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut buf))
        .await
        .expect("the server's SETTINGS")
        .expect("read");
    let gateway = gw.gateway.take().expect("running");
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), gateway.shutdown())
        .await
        .expect("the drain ends well before drain_timeout");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(closed_within(&mut s, Duration::from_secs(5))
        .await
        .is_some());
}
