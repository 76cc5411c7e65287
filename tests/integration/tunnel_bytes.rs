//! A WebSocket on a route whose tiers are charged by bytes: what the tunnel moves each
//! way settles those tiers when it ends, not the reserve of the request that opened it (a
//! tunnel would otherwise move any number of bytes for the price of one request); and an
//! upgrade request with a body is refused. Over HTTP/1.1: an HTTP/2 request does not
//! upgrade.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_tunnels_bytes_settle_its_byte_tiers_when_it_ends() {
    let (ws_addr, _task) = websocket_echo().await;
    let bytes = |settle: &str| {
        format!("key = \"ip\"\nlimit = 10000\nperiod = \"1h\"\nburst = 10000\nreserve = 1\nsettle = \"{settle}\"\nsettle_unit = 1024\n")
    };
    let toml = Fixture::new()
        .upstream("ws", "")
        .policy_raw("up", bytes("request_bytes"))
        .policy_raw("down", bytes("response_bytes"))
        .route("ws", "/ws", "ws", &["up", "down"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{ws_addr}")).await;
    let (mut ws, resp) = websocket_through(gw.addr, "/ws").await;
    assert_eq!(resp.status(), 101);
    // 100 frames of 10 KiB each way: about 1,000 KiB up and 1,000 KiB down.
    let frame = vec![7u8; 10 * 1024];
    for _ in 0..100 {
        let message = tokio_tungstenite::tungstenite::Message::binary(frame.clone());
        assert_eq!(
            echoed(&mut ws, message).await.into_data().len(),
            frame.len()
        );
    }
    ws.close(None).await.expect("close");
    drop(ws);
    for policy in ["up", "down"] {
        let admin = gw.admin_url(&format!("/admin/limits/{policy}/127.0.0.1"));
        let settled = eventually_async(Duration::from_secs(30), || async {
            let left = get(&admin, &[]).await.json()["remaining"].as_u64();
            left.is_some_and(|l| l <= 10_000 - 1_000)
        })
        .await;
        assert!(
            settled,
            "{policy}: the tunnel's bytes charged, not the reserve alone: {}",
            get(&admin, &[]).await.text()
        );
    }
}

/// An upgrade request with a body (chunked, or a declared length) is refused before it is
/// limited or forwarded: metered as an upload, the tunnel opened behind it would carry
/// the client's bytes past the `request_bytes` tier. A raw client: no library would send
/// it.
#[tokio::test]
async fn an_upgrade_request_with_a_body_is_refused() {
    let (ws_addr, _task) = websocket_echo().await;
    let toml = Fixture::new()
        .upstream("ws", "")
        .policy_raw(
            "up",
            "key = \"ip\"\nlimit = 10000\nperiod = \"1h\"\nburst = 10000\nreserve = 1\nsettle = \"request_bytes\"\n",
        )
        .route("ws", "/ws", "ws", &["up"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{ws_addr}")).await;
    let handshake = "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    for body in [
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Content-Length: 1\r\n\r\nx",
    ] {
        let (answer, _) = raw(gw.addr, format!("{handshake}{body}").as_bytes()).await;
        assert_eq!(raw_status(&answer), 400, "{answer}");
        assert!(answer.contains("upgrade_with_body"), "{answer}");
    }
    let state = get(&gw.admin_url("/admin/limits/up/127.0.0.1"), &[]).await;
    assert_eq!(state.json()["remaining"], 10_000, "nothing charged");
    // The handshake without a body still opens its tunnel.
    let (_ws, resp) = websocket_through(gw.addr, "/ws").await;
    assert_eq!(resp.status(), 101);
}
