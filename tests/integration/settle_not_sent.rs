//! A settled request whose client leaves before the request is sent upstream — held by
//! `max_delay`, here — used nothing there: it settles at `min_cost`, counted as
//! `not_sent`, not at the reserve it was admitted with (nor at `max_cost`, as a hang-up
//! while the upstream works). Over a raw HTTP/1.1 socket that closes without a word, and
//! an HTTP/2 stream reset on a connection kept open.

use std::time::Duration;

use super::settle::{tokens, used};
use crate::support::*;

/// How far ahead of now the tenant's TAT is, in ms.
async fn tat_ms(gw: &TestGateway) -> f64 {
    let limits = get(&gw.admin_url("/admin/limits/tokens/acme"), &[])
        .await
        .json();
    limits["tat_ms"].as_f64().expect("tat_ms")
}

/// How a client leaves while its request is held.
enum Leave {
    /// A raw HTTP/1.1 socket, closed without a word.
    Closes,
    /// An HTTP/2 stream reset (`RST_STREAM`), its connection kept open.
    ResetsItsStream,
}

#[tokio::test]
async fn a_client_gone_before_its_request_was_sent_pays_min_cost() {
    for leave in [Leave::Closes, Leave::ResetsItsStream] {
        leaves_while_held(leave).await;
    }
}

async fn leaves_while_held(leave: Leave) {
    let up = Upstream::start().await;
    let extra = "max_delay = \"30s\"\nmax_cost = 100\nmin_cost = 1\n";
    let toml = tokens("response_header:x-usage-tokens", extra).build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // The whole burst used: the next request (10 reserved) waits 10 s for its units.
    assert_eq!(used(&gw, "100").await.status, 200);
    let before = tat_ms(&gw).await;
    // Held by max_delay; admitted, reserved: 10 s more.
    let held = || async {
        let held = eventually_async(Duration::from_secs(10), || async {
            tat_ms(&gw).await >= before + 10_000.0
        })
        .await;
        assert!(
            held,
            "admitted and held: {before} then {}",
            tat_ms(&gw).await
        );
    };
    // Kept open past the hang-up: only the stream goes.
    let client = http2();
    match leave {
        Leave::Closes => {
            use tokio::io::AsyncWriteExt;
            let head = format!(
                "GET /v1/usage HTTP/1.1\r\nHost: {}\r\nx-tenant-id: acme\r\nx-usage: 5\r\n\r\n",
                gw.addr
            );
            let mut s = tokio::net::TcpStream::connect(gw.addr)
                .await
                .expect("connect");
            s.write_all(head.as_bytes()).await.expect("write");
            held().await;
        }
        Leave::ResetsItsStream => {
            let req = http::Request::get(gw.url("/v1/usage"))
                .header("x-tenant-id", "acme")
                .header("x-usage", "5")
                .body(Default::default())
                .expect("request");
            let asking = client.clone();
            let pending = tokio::spawn(async move { asking.request(req).await });
            held().await;
            pending.abort();
        }
    }
    // Gone before it was sent: 1 unit (1 s) charged of the 10 reserved.
    let settled = eventually_async(Duration::from_secs(10), || async {
        (tat_ms(&gw).await - (before + 1_000.0)).abs() < 1.0
    })
    .await;
    assert!(settled, "{} then {}", before, tat_ms(&gw).await);
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_settle_fallbacks_total")
                && l.contains("result=\"not_sent\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
    assert_eq!(
        up.requests(),
        1,
        "the held request never reached the upstream"
    );
    drop(client);
}
