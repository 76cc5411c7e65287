//! Settled costs no client can dodge (round three): each way a client could once pay less
//! than it used — leaving out `TE: trailers`, hanging up before the trailer, a body larger
//! than `max_cost`, parallel transfers past the burst, empty bodies, a refusal remembered
//! past a refund — as the attack it was, over HTTP/1.1 and HTTP/2, in memory and Redis.

use std::time::Duration;

use crate::support::*;

/// Where a test's limits live.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    Redis,
    Cluster,
}

/// A running store for `backend`, kept alive by the returned guard, and its `[store]`.
fn store(backend: Backend) -> (Box<dyn std::any::Any>, String) {
    match backend {
        Backend::Memory => (Box::new(()), "backend = \"memory\"\n".to_owned()),
        Backend::Redis => {
            let redis = RedisServer::start();
            let body = format!(
                "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                redis.url()
            );
            (Box::new(redis), body)
        }
        Backend::Cluster => {
            let cluster = RedisCluster::start();
            let body = format!(
                "backend = \"redis\"\nurl = {}\ntimeout = \"2s\"\n",
                cluster.urls_toml()
            );
            (Box::new(cluster), body)
        }
    }
}

const BACKENDS: [Backend; 3] = [Backend::Memory, Backend::Redis, Backend::Cluster];

/// How many of `n` requests by `send` a route admits: 200s, until the first refusal.
async fn admitted<F, Fut>(n: usize, mut send: F) -> usize
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let mut ok = 0;
    for i in 0..n {
        match send(i).await {
            200 => ok += 1,
            429 => {}
            other => panic!("request {i}: status {other}"),
        }
    }
    ok
}

/// 1,000 tokens an hour, all at once; 10 reserved; each answer really uses 500, told in a
/// trailer. An honest client (with `TE: trailers`) and one that leaves it out get the same
/// two requests: the gateway asks the upstream for trailers itself. (Measured before the
/// fix: 100 of 150 admitted without `TE`, 50× the limit.)
#[tokio::test]
async fn omitting_te_trailers_does_not_cut_a_trailer_settled_cost() {
    for backend in BACKENDS {
        let (_store, store_toml) = store(backend);
        let up = Upstream::start().await;
        let toml = Fixture::new()
            .store(&store_toml)
            .policy_raw(
                "tokens",
                "key = \"header:x-tenant-id\"\nlimit = 1000\nperiod = \"1h\"\nburst = 1000\nreserve = 10\nsettle = \"response_trailer:x-usage-tokens\"\n",
            )
            .route("api", "/", "api", &["tokens"])
            .build();
        let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
        gw.wait_for_store("/v1/echo", "warm-up").await;
        for (i, client) in [http1(), http2()].iter().enumerate() {
            for te in [true, false] {
                let tenant = format!("t{i}{te}");
                let mut h = vec![("x-tenant-id", tenant.as_str()), ("x-usage", "500")];
                if te {
                    h.push(("te", "trailers"));
                }
                let url = gw.url("/v1/usage-trailer");
                let admin = gw.admin_url(&format!("/admin/limits/tokens/{tenant}"));
                let ok = admitted(8, |n| {
                    let (client, url, h, admin) =
                        (client.clone(), url.clone(), h.clone(), admin.clone());
                    async move {
                        let status = send(&client, "GET", &url, &h, b"").await.status.as_u16();
                        // Each settles before the next: 1000 - 500 per admitted request.
                        let left = 1000u64.saturating_sub(500 * (n as u64 + 1));
                        if status == 200 {
                            let settled = eventually_async(Duration::from_secs(10), || async {
                                get(&admin, &[]).await.json()["remaining"].as_u64() <= Some(left)
                            });
                            assert!(settled.await, "{backend:?}: request {n} settled at 500");
                        }
                        status
                    }
                })
                .await;
                assert_eq!(ok, 2, "{backend:?}, client {i}, TE: trailers {te}");
            }
        }
    }
}

/// A client that takes the body and hangs up before the trailer pays `max_cost` (here
/// 500), not its reserve of 10: its hang-up cannot choose what it pays. (Before: 30 of 30
/// admitted, charged 300 for 15,000 used.)
#[tokio::test]
async fn hanging_up_before_the_trailer_pays_max_cost() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 1000\nperiod = \"1h\"\nburst = 1000\nreserve = 10\nmax_cost = 500\nsettle = \"response_trailer:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let admin = gw.admin_url("/admin/limits/tokens/acme");
    let mut admitted = 0;
    for round in 0..6 {
        let request = b"GET /v1/usage-trailer-late HTTP/1.1\r\nhost: x\r\nx-tenant-id: acme\r\nx-usage: 500\r\nte: trailers\r\nx-trailer-delay-ms: 5000\r\n\r\n";
        if round % 2 == 0 {
            // HTTP/1.1: read the head and the body's first chunk, then close.
            let mut s = tokio::net::TcpStream::connect(gw.addr)
                .await
                .expect("connect");
            s.write_all(request).await.expect("write");
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .expect("an answer")
                .expect("read");
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            if head.starts_with("HTTP/1.1 429") {
                continue;
            }
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head.contains("answer before its trailer"), "{head}");
        } else {
            // HTTP/2: the head and the first data frame, then the stream is reset.
            let tcp = tokio::net::TcpStream::connect(gw.addr)
                .await
                .expect("connect");
            let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2");
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            let req = http::Request::get("http://x/v1/usage-trailer-late")
                .header("x-tenant-id", "acme")
                .header("x-usage", "500")
                .header("te", "trailers")
                .header("x-trailer-delay-ms", "5000")
                .body(())
                .expect("request");
            let (resp, _) = client.send_request(req, true).expect("send");
            let resp = resp.await.expect("head");
            if resp.status() == 429 {
                task.abort();
                continue;
            }
            let mut body = resp.into_body();
            let first = body.data().await.expect("a frame").expect("data");
            assert!(!first.is_empty());
            drop(body);
            task.abort();
        }
        admitted += 1;
        let charged = (admitted * 500) as u64;
        let settled = eventually_async(Duration::from_secs(10), || async {
            let left = get(&admin, &[]).await.json()["remaining"].as_u64();
            left <= Some(1000u64.saturating_sub(charged))
        });
        assert!(
            settled.await,
            "round {round}: charged max_cost, not the reserve"
        );
    }
    assert_eq!(admitted, 2, "1,000 tokens at 500 a hang-up");
}

/// `max_cost` cuts what one request may move, it never discounts it: on a 1 MiB budget
/// (KiB units) with `max_cost = 1024`, a declared 32 MiB upload is refused at once, a
/// streamed one is cut near 1 MiB with 413, and a 32 MiB download is cut near 1 MiB —
/// each charged what moved. (Before: each went through and was charged 1 MiB, 32×.)
#[tokio::test]
async fn max_cost_cuts_a_body_and_never_discounts_it() {
    const MIB: usize = 1 << 20;
    let up = Upstream::start().await;
    let policy = |source: &str| {
        format!("key = \"header:x-tenant-id\"\nlimit = 1024\nperiod = \"1h\"\nburst = 2048\nmax_debt = 0\nsettle = \"{source}\"\nsettle_unit = 1024\nmax_cost = 1024\n")
    };
    let toml = Fixture::new()
        .policy_raw("up", policy("request_bytes"))
        .policy_raw("down", policy("response_bytes"))
        .route("up", "/up", "api", &["up"])
        .route("down", "/down", "api", &["down"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
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
        // A download: cut where it reaches max_cost, charged what reached the client.
        let client = if http2 {
            super::support::http2()
        } else {
            http1()
        };
        let req = http::Request::get(gw.url(&format!("/down/bytes?n={}", 32 * MIB)))
            .header("x-tenant-id", &tenant)
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
}

/// 16 parallel 4 MiB uploads on one key with a 1 MiB burst and `max_debt = 0`: together
/// they move about the burst, then each is cut with 413 (`max_delay = 0`). (Before: 64
/// MiB in 0.4 s, then 64 h of debt.)
#[tokio::test]
async fn parallel_uploads_of_one_key_share_its_burst() {
    const MIB: usize = 1 << 20;
    for backend in BACKENDS {
        let (_store, store_toml) = store(backend);
        let up = Upstream::start().await;
        let toml = Fixture::new()
            .store(&store_toml)
            .policy_raw(
                "up",
                "key = \"header:x-tenant-id\"\nlimit = 1024\nperiod = \"1h\"\nburst = 1024\nmax_debt = 0\nsettle = \"request_bytes\"\nsettle_unit = 1024\n",
            )
            .route("up", "/", "api", &["up"])
            .build();
        let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
        gw.wait_for_store("/v1/echo", "warm-up").await;
        for (round, http2) in [false, true].into_iter().enumerate() {
            let tenant = format!("t{round}");
            let before = up.seen.body_bytes.load(std::sync::atomic::Ordering::SeqCst);
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let (url, tenant) = (gw.url("/v1/echo"), tenant.clone());
                tasks.push(tokio::spawn(async move {
                    let client = stream_client(http2);
                    upload(&client, &url, &[("x-tenant-id", &tenant)], 4 * MIB).await
                }));
            }
            let mut cut = 0;
            for t in tasks {
                match t.await.expect("task") {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        // Cut mid-body (413), or refused at the door once the key owes.
                        assert!([413, 429].contains(&r.status.as_u16()), "{}", r.text());
                        cut += 1;
                    }
                    Err(_) => cut += 1,
                }
            }
            let moved = up.seen.body_bytes.load(std::sync::atomic::Ordering::SeqCst) - before;
            // The burst, give or take a chunk per upload.
            assert!(
                moved <= MIB + 16 * 64 * 1024,
                "{backend:?}: {moved} bytes of 64 MiB reached the upstream"
            );
            assert!(cut >= 15, "{backend:?}: {cut} of 16 cut");
        }
    }
}

/// A bytes tier bounds the request rate too: every request pays at least `min_cost`, so
/// body-less GETs and HEADs of a large resource run out like any other. (Before: 2,000 of
/// 2,000 admitted on a 1,024-unit burst.)
#[tokio::test]
async fn empty_bodies_and_heads_pay_min_cost() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "up",
            "key = \"header:x-tenant-id\"\nlimit = 64\nperiod = \"1h\"\nburst = 64\nsettle = \"request_bytes\"\n",
        )
        .policy_raw(
            "down",
            "key = \"header:x-tenant-id\"\nlimit = 64\nperiod = \"1h\"\nburst = 64\nsettle = \"response_bytes\"\nsettle_unit = 1048576\n",
        )
        .route("up", "/up", "api", &["up"])
        .route("down", "/down", "api", &["down"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for (i, client) in [http1(), super::support::http2()].iter().enumerate() {
        let tenant = format!("t{i}");
        let h = [("x-tenant-id", tenant.as_str())];
        let gets = admitted(100, |_| {
            let (client, url) = (client.clone(), gw.url("/up/echo"));
            async move { send(&client, "GET", &url, &h, b"").await.status.as_u16() }
        })
        .await;
        assert!(
            (64..=65).contains(&gets),
            "{gets} body-less GETs on a burst of 64"
        );
        let heads = admitted(100, |_| {
            let (client, url) = (client.clone(), gw.url("/down/bytes?n=33554432"));
            async move { send(&client, "HEAD", &url, &h, b"").await.status.as_u16() }
        })
        .await;
        assert!((64..=65).contains(&heads), "{heads} HEADs on a burst of 64");
    }
}

/// With Redis, a settle that refunds a key clears the refusal the settling gateway
/// remembered at once, and another gateway asks Redis again within a second. (Before:
/// refused for 2.5 s — up to τ — with the key idle in Redis.)
#[tokio::test]
async fn a_refund_clears_remembered_refusals_across_the_fleet() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    // 10 at once, T = 6 min: nothing refills during the test.
    let toml = Fixture::new()
        .store(format!("backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n", redis.url()))
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 10\nperiod = \"1h\"\nburst = 10\nreserve = 10\nmin_cost = 0\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for (i, gw) in [&a, &b].into_iter().enumerate() {
        gw.wait_for_store("/v1/echo", &format!("warm-up-{i}")).await;
    }
    // The whole burst reserved by a request whose answer takes 2.5 s.
    let h = [
        ("x-tenant-id", "acme"),
        ("x-usage", "0"),
        ("x-delay-ms", "2500"),
    ];
    let url = a.url("/v1/usage");
    let seen = up.requests();
    let slow = tokio::spawn(async move { get(&url, &h).await });
    assert!(eventually(Duration::from_secs(10), || up.requests() > seen).await);
    let h = [("x-tenant-id", "acme"), ("x-usage", "0")];
    // Both gateways keep refusing (and remembering) until the answer comes.
    while !slow.is_finished() {
        assert_eq!(get(&a.url("/v1/usage"), &h).await.status, 429);
        assert_eq!(get(&b.url("/v1/usage"), &h).await.status, 429);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered = slow.await.expect("task");
    assert_eq!(answered.status, 200);
    // Used 0: all 10 refunded. The settling gateway admits at once.
    let refunded = eventually_async(Duration::from_secs(5), || async {
        get(&a.admin_url("/admin/limits/tokens/acme"), &[])
            .await
            .json()["remaining"]
            == 10
    });
    assert!(refunded.await, "the refund reached Redis");
    let refunded_at = std::time::Instant::now();
    assert_eq!(get(&a.url("/v1/usage"), &h).await.status, 200);
    // The other gateway within a second of its last refusal.
    let admitted_b = eventually_async(Duration::from_secs(5), || async {
        get(&b.url("/v1/usage"), &h).await.status == 200
    });
    assert!(admitted_b.await);
    assert!(
        refunded_at.elapsed() < Duration::from_millis(1500),
        "remembered for {:?} after the refund",
        refunded_at.elapsed()
    );
}

/// With Redis, a stream's bytes cost a bounded number of calls: one draw per chunk
/// (64 KiB, or an eighth of the burst when larger).
#[tokio::test]
async fn a_metered_download_costs_a_call_per_chunk() {
    const MIB: usize = 1 << 20;
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!("backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n", redis.url()))
        .policy_raw(
            "down",
            "key = \"header:x-tenant-id\"\nlimit = 1000000000\nperiod = \"1h\"\nburst = 100000000\nsettle = \"response_bytes\"\n",
        )
        .route("api", "/", "api", &["down"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/v1/echo", "warm-up").await;
    // A first download loads the draw and settle scripts (a first call of a script costs
    // two: EVALSHA, then EVAL), so what follows counts calls alone.
    let warm = get(&gw.url("/v1/bytes?n=300000"), &[("x-tenant-id", "warm-up")]).await;
    assert_eq!(warm.body.len(), 300_000);
    assert!(eventually(Duration::from_secs(10), || redis.script_calls() > 0).await);
    let calls = redis.script_calls();
    let r = get(
        &gw.url(&format!("/v1/bytes?n={}", 16 * MIB)),
        &[("x-tenant-id", "acme")],
    )
    .await;
    assert_eq!(r.body.len(), 16 * MIB);
    let spent = eventually_async(Duration::from_secs(10), || async {
        redis.script_calls() >= calls + 2
    });
    assert!(spent.await);
    // burst / 8 = 12.5 MB: 16 MiB in two draws, plus admission and the final settle.
    let made = redis.script_calls() - calls;
    assert!(made <= 4, "{made} calls for 16 MiB");
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
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::post("http://x/up/echo")
        .header("x-tenant-id", tenant)
        .header("content-length", length.to_string())
        .body(())
        .expect("request");
    let (resp, _stream) = client.send_request(req, false).expect("send");
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("in time")
        .expect("an answer");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        text.extend_from_slice(&chunk);
    }
    task.abort();
    (status, String::from_utf8_lossy(&text).into_owned())
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
