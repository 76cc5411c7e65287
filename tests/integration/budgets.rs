//! Settled costs no client can dodge (round three): each way a client could once pay less
//! than it used — leaving out `TE: trailers`, hanging up before the trailer, parallel
//! transfers past the burst, empty bodies — as the attack it was, over HTTP/1.1 and
//! HTTP/2, in memory and Redis. Bodies past `max_cost` are in `budget_bodies`, a fleet's
//! refunds and calls per chunk in `budget_fleet`.

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
