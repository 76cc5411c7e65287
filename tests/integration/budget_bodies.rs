//! A body no larger than a client's budget lets it move (round three): `max_cost` cuts an
//! upload or download near its bound and charges what moved, never a discount; at its
//! bound a body waits for the key within `max_delay`. Over HTTP/1.1 and HTTP/2.

use std::time::Duration;

use crate::support::*;

/// A mebibyte, in bytes.
const MIB: usize = 1 << 20;

/// `max_cost` cuts what one request may move, it never discounts it: on a 1 MiB budget
/// (KiB units) with `max_cost = 1024`, a declared 32 MiB upload is refused at once, a
/// streamed one is cut near 1 MiB with 413, and a 32 MiB download is cut near 1 MiB —
/// each charged what moved. (Before: each went through and was charged 1 MiB, 32×.)
#[tokio::test]
async fn max_cost_cuts_a_body_and_never_discounts_it() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&max_cost_config(), &up.url()).await;
    for (i, http2) in [false, true].into_iter().enumerate() {
        let tenant = format!("t{i}");
        let h = [("x-tenant-id", tenant.as_str())];
        // Declared: refused before a byte goes.
        let before = up.seen.body_bytes.load(std::sync::atomic::Ordering::SeqCst);
        let (status, body) = declared_upload(gw.addr, http2, &tenant, 32 * MIB).await;
        assert_eq!(status, 413, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(body["error"], "budget_exhausted");
        assert_eq!(body["policy"], "up");
        // Streamed: cut where it reaches max_cost.
        let streamed = upload(&stream_client(http2), &gw.url("/up/echo"), &h, 32 * MIB).await;
        match streamed {
            Ok(r) => assert_eq!(r.status, 413, "{}", r.text()),
            Err(e) => assert!(!e.is_empty(), "cut: {e}"),
        }
        let moved = up.seen.body_bytes.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert!(
            moved <= MIB + 64 * 1024,
            "{moved} bytes reached the upstream"
        );
        let up_left = get(&gw.admin_url(&format!("/admin/limits/up/{tenant}")), &[])
            .await
            .json();
        let charged_kib = 2048 - up_left["remaining"].as_u64().expect("remaining") as usize;
        assert!(
            charged_kib * 1024 >= moved,
            "{charged_kib} KiB charged for {moved} bytes"
        );
        download_is_cut_and_charged(&gw, http2, &tenant).await;
    }
}

/// `up` on uploads to `/up`, `down` on downloads from `/down`: each 1 MiB at once (KiB
/// units), no debt, `max_cost = 1024`.
fn max_cost_config() -> String {
    let policy = |source: &str| {
        format!("key = \"header:x-tenant-id\"\nlimit = 1024\nperiod = \"1h\"\nburst = 2048\nmax_debt = 0\nsettle = \"{source}\"\nsettle_unit = 1024\nmax_cost = 1024\n")
    };
    Fixture::new()
        .policy_raw("up", policy("request_bytes"))
        .policy_raw("down", policy("response_bytes"))
        .route("up", "/up", "api", &["up"])
        .route("down", "/down", "api", &["down"])
        .build()
}

/// A download: cut where it reaches max_cost, charged what reached the client.
async fn download_is_cut_and_charged(gw: &TestGateway, http2: bool, tenant: &str) {
    let client = if http2 {
        super::support::http2()
    } else {
        http1()
    };
    let req = http::Request::get(gw.url(&format!("/down/bytes?n={}", 32 * MIB)))
        .header("x-tenant-id", tenant)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = client.request(req).await.expect("head");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = 0usize;
    let cut = loop {
        use http_body_util::BodyExt;
        match tokio::time::timeout(Duration::from_secs(30), body.frame()).await {
            Ok(Some(Ok(frame))) => got += frame.data_ref().map_or(0, |d| d.len()),
            Ok(Some(Err(_))) | Ok(None) => break true,
            Err(_) => break false,
        }
    };
    assert!(cut, "the download ended");
    assert!(
        got <= MIB,
        "{got} bytes reached the client, max_cost is 1 MiB"
    );
    assert!(
        got >= MIB - 64 * 1024,
        "{got} bytes: cut at max_cost, not before"
    );
    let down = gw.admin_url(&format!("/admin/limits/down/{tenant}"));
    let charged = eventually_async(Duration::from_secs(10), || async {
        let left = get(&down, &[]).await.json()["remaining"]
            .as_u64()
            .unwrap_or(0) as usize;
        (2048 - left) * 1024 >= got
    });
    assert!(charged.await, "the cut download is charged what moved");
}

/// Declares a `length`-byte upload to `/up/echo` without sending it, and reads the
/// answer: status and body.
async fn declared_upload(
    addr: std::net::SocketAddr,
    http2: bool,
    tenant: &str,
    length: usize,
) -> (u16, String) {
    if !http2 {
        let head = format!(
            "POST /up/echo HTTP/1.1\r\nhost: x\r\nx-tenant-id: {tenant}\r\ncontent-length: {length}\r\n\r\n"
        );
        let (answer, _) = raw(addr, head.as_bytes()).await;
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        return (raw_status(&answer), body);
    }
    let (status, _, body) = h2_declared(addr, "/up/echo", &[("x-tenant-id", tenant)], length).await;
    (status, body)
}

/// At its bound a body is paused, not cut, while `max_delay` allows the wait: the key
/// refills at its rate and the upload goes on (back-pressure: the client is not read
/// meanwhile). 1 MiB at 1 MiB a minute with 256 KiB at once, `max_delay = 60s`: the upload
/// completes, after waiting for the key.
#[tokio::test]
async fn a_body_at_its_bound_waits_for_the_key_within_max_delay() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "up",
            "key = \"header:x-tenant-id\"\nlimit = 1024\nperiod = \"1m\"\nburst = 256\nmax_debt = 0\nmax_delay = \"60s\"\nsettle = \"request_bytes\"\nsettle_unit = 1024\n",
        )
        .route("up", "/", "api", &["up"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    for (round, http2) in [false, true].into_iter().enumerate() {
        let tenant = format!("t{round}");
        let started = std::time::Instant::now();
        // 320 KiB: 64 KiB past the burst, which refills in about 3.75 s.
        let r = upload(
            &stream_client(http2),
            &gw.url("/v1/echo"),
            &[("x-tenant-id", &tenant)],
            320 * 1024,
        )
        .await
        .expect("an answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("with 327680 body bytes"), "{}", r.text());
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "paused for the key: {:?}",
            started.elapsed()
        );
    }
}

/// A key whose whole bound is smaller than a frame the body arrives in (5,000 bytes here,
/// against reads of 8 KiB and more) passes the frame a piece at a time as the key
/// refills: a frame larger than the bound was held whole, could never be paid for, and
/// cut the body at its first frame. A piece is also no more than half of what refills
/// within `max_delay` (`/tight`: 20 ms, against the bound's 50 ms): after a piece of the
/// whole bound the next one waits the bound, past `max_delay`, and the body was cut at
/// its second piece.
#[tokio::test]
async fn a_frame_larger_than_the_keys_bound_passes_in_pieces() {
    let up = Upstream::start().await;
    let small = |max_delay: &str| {
        format!("key = \"header:x-tenant-id\"\nlimit = 100000\nperiod = \"1s\"\nburst = 5000\nmax_debt = 0\nsettle = \"response_bytes\"\nmax_delay = \"{max_delay}\"\n")
    };
    let toml = Fixture::new()
        .policy_raw("small", small("30s"))
        .policy_raw("tight", small("20ms"))
        .route("down", "/down", "api", &["small"])
        .route("tight", "/tight", "api", &["tight"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    for (i, http2) in [false, true].into_iter().enumerate() {
        let client = if http2 {
            super::support::http2()
        } else {
            http1()
        };
        let tenant = format!("t{i}");
        for path in ["/down/bytes?n=50000", "/tight/bytes?n=50000"] {
            let r = send(
                &client,
                "GET",
                &gw.url(path),
                &[("x-tenant-id", &tenant)],
                b"",
            )
            .await;
            let got = (r.status.as_u16(), r.body.len());
            assert_eq!(got, (200, 50_000), "{path}, http2 {http2}");
        }
    }
}
