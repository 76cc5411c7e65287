//! A tunnel's line in the access log: the request that opened it has its line at the
//! `101`, before a byte went through, so a second line (`front="tunnel"`) says, when it
//! closes, why (the result `tollgate_tunnels_closed_total` counts), the tier that closed
//! it and the bytes each side sent — under the same `access_log` mode and budget as any
//! line. Raw sockets on both sides. HTTP/1.1 only: an HTTP/2 request does not upgrade.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tunnel_metered::{download, tunnel_route};
use super::tunnel_raw::{open_with, tunnel_upstream, After};
use crate::support::*;

/// A gateway with a `/t` route whose tunnels are paid by `response_bytes` (`burst` KiB,
/// none refilled within the test), a `/once` route that admits one request an hour, and
/// the access log set by `access_log` (a line of `[server]`).
fn gateway(up: SocketAddr, burst: u64, access_log: &str) -> (tempfile::TempDir, Process) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = tunnel_route("response_bytes", (burst, "1h", burst), "")
        .server(format!("workers = 1\n{access_log}"))
        .policy("once", "ip", 1, "1h", 1)
        .route("once", "/once", "ws", &["once"])
        .build_for(&format!("http://{up}"))
        .replace("access_log = false\n", "");
    std::fs::write(&path, text).expect("write");
    let gw = Process::run(&path);
    (dir, gw)
}

/// Opens a tunnel named `request_id`; the socket and the bytes that came after the 101.
async fn open_named(addr: SocketAddr, request_id: &str) -> (TcpStream, u64) {
    open_with(addr, &format!("x-request-id: {request_id}\r\n")).await
}

/// The tunnels' lines so far.
fn tunnel_lines(gw: &Process) -> Vec<String> {
    let log = gw.log();
    let lines = log.lines().filter(|l| l.contains("tollgate::access"));
    lines
        .filter(|l| l.contains("front=\"tunnel\""))
        .map(str::to_owned)
        .collect()
}

/// Waits (30 s at most) for the first tunnel line.
async fn first_tunnel_line(gw: &Process) -> String {
    let written = eventually(Duration::from_secs(30), || !tunnel_lines(gw).is_empty()).await;
    assert!(written, "a tunnel line: {}", gw.log());
    tunnel_lines(gw).remove(0)
}

/// A field's number in a text line.
fn number(line: &str, field: &str) -> u64 {
    let start = line.find(&format!(" {field}=")).expect(field) + field.len() + 2;
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect(field)
}

#[tokio::test]
async fn a_tunnel_its_tier_closes_is_logged_with_the_tier_and_the_bytes() {
    let (up, _) = tunnel_upstream(After::Flood).await;
    let (_dir, gw) = gateway(up, 100, "");
    let (mut s, after_head) = open_named(gw.addr, "ws-7").await;
    let (got, closed) = download(&mut s, after_head).await;
    assert!(closed, "the tier closed the flood: {got} bytes came");
    let line = first_tunnel_line(&gw).await;
    for field in [
        " request_id=ws-7 ",
        " route=\"ws\" ",
        " client=127.0.0.1 ",
        " result=\"budget\" ",
        " policy=\"bytes\" ",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert_eq!(number(&line, "bytes_from_client"), 0, "{line}");
    // What the upstream sent into the tunnel: at least what reached the client, and no
    // more than the burst and the one read refused at the bound.
    let from_upstream = number(&line, "bytes_from_upstream");
    assert!(
        (got..=116 * 1024).contains(&from_upstream),
        "{from_upstream} against {got} delivered: {line}"
    );
}

#[tokio::test]
async fn a_tunnel_that_ends_is_logged_with_what_each_side_sent() {
    let (up, _) = tunnel_upstream(After::Send(5000)).await;
    let (_dir, gw) = gateway(up, 1000, "");
    let (mut s, mut got) = open_named(gw.addr, "ws-8").await;
    s.write_all(&[1u8; 300]).await.expect("write");
    let mut buf = vec![0u8; 8192];
    while got < 5000 {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("bytes in time")
            .expect("read");
        assert!(n > 0, "the tunnel closed after {got} bytes");
        got += n as u64;
    }
    drop(s);
    let line = first_tunnel_line(&gw).await;
    for field in [" request_id=ws-8 ", " result=\"ended\" ", " policy=\"\" "] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert_eq!(number(&line, "bytes_from_client"), 300, "{line}");
    assert_eq!(number(&line, "bytes_from_upstream"), 5000, "{line}");
}

#[tokio::test]
async fn with_refused_only_a_tunnel_its_tier_closes_is_logged() {
    let (up, _) = tunnel_upstream(After::Send(5000)).await;
    let (_dir, gw) = gateway(up, 1000, "access_log = \"refused\"");
    let (mut s, mut got) = open_named(gw.addr, "ws-9").await;
    let mut buf = vec![0u8; 8192];
    while got < 5000 {
        match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
            Ok(Ok(n @ 1..)) => got += n as u64,
            other => panic!("the tunnel stopped after {got} bytes: {other:?}"),
        }
    }
    drop(s);
    // Wait for the tunnel's end (its count), then a refusal's line: written after it,
    // it shows the log has caught up with the tunnel.
    let metrics = format!("http://{}/metrics", gw.admin.expect("an admin listener"));
    let counted = "tollgate_tunnels_closed_total{result=\"ended\"} 1";
    let ended = eventually_async(Duration::from_secs(30), || async {
        get(&metrics, &[]).await.text().contains(counted)
    })
    .await;
    assert!(ended, "the tunnel's end was counted");
    let url = format!("http://{}/once", gw.addr);
    // Admitted (the tunnel upstream's 101 to a plain request is a 502), then refused.
    assert_ne!(get(&url, &[]).await.status, 429);
    assert_eq!(get(&url, &[]).await.status, 429);
    let refused = eventually(Duration::from_secs(30), || {
        gw.log().contains("decision=\"denied\"")
    })
    .await;
    assert!(refused, "the refusal's line: {}", gw.log());
    assert_eq!(tunnel_lines(&gw), Vec::<String>::new(), "{}", gw.log());
}

/// A field's text in a text line (up to the next space).
fn text<'a>(line: &'a str, field: &str) -> &'a str {
    let start = line.find(&format!(" {field}=")).expect(field) + field.len() + 2;
    line[start..].split(' ').next().unwrap_or_default()
}

/// A tunnel whose request named no id (or one a line cannot show: not text) gets one
/// made by the gateway, and its `101`'s line and its closing line share it (each made its
/// own: the two could not be joined).
#[tokio::test]
async fn an_unnamed_tunnels_two_lines_share_the_id_the_gateway_made() {
    for extra in ["", "x-request-id: caf\u{e9}\r\n"] {
        let (up, _) = tunnel_upstream(After::Send(100)).await;
        let (_dir, gw) = gateway(up, 1000, "");
        let (mut s, mut got) = open_with(gw.addr, extra).await;
        let mut buf = vec![0u8; 1024];
        while got < 100 {
            match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
                Ok(Ok(n @ 1..)) => got += n as u64,
                other => panic!("the tunnel stopped after {got} bytes: {other:?}"),
            }
        }
        drop(s);
        let closing = first_tunnel_line(&gw).await;
        let log = gw.log();
        let opening = log
            .lines()
            .find(|l| l.contains("tollgate::access") && l.contains(" status=101 "))
            .expect("the 101's line");
        let id = text(&closing, "request_id");
        assert!(
            !id.is_empty() && !id.contains("caf"),
            "{extra:?}: {closing}"
        );
        assert_eq!(text(opening, "request_id"), id, "{opening}\n{closing}");
    }
}
