//! The spend race (BerriAI/litellm#34732: concurrent calls against a budget that fits a
//! few), replayed over HTTP/1.1 and HTTP/2, in memory and on Redis shared by two gateways;
//! the official `openai` client through the gateway; and what a client can do with the
//! body before the decision (stall it, park many).

use std::time::Duration;

use crate::spend::{budget, chat, post, priced, reserve_of, used, used_reaches};
use crate::support::*;

/// Fires `calls` concurrent requests for `key` at the gateways (alternating), each with
/// reserve `reserve_of(chat(..))`; returns the priced usage of every answer admitted and
/// the number refused.
async fn race(
    gws: &[&TestGateway],
    client: &HttpClient,
    key: &str,
    calls: usize,
) -> (Vec<u64>, usize) {
    let body = chat("big", 4, 40);
    let mut tasks = Vec::new();
    for i in 0..calls {
        let url = gws[i % gws.len()].url("/v1/chat/completions");
        let (client, key, text) = (client.clone(), key.to_owned(), body.to_string());
        tasks.push(tokio::spawn(async move {
            post(&client, &url, &key, text.into_bytes()).await
        }));
    }
    let (mut spent, mut refused) = (Vec::new(), 0);
    for t in tasks {
        let r = t.await.expect("task");
        match r.status.as_u16() {
            200 => spent.push(priced(&body)),
            429 => refused += 1,
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    (spent, refused)
}

/// The published bound: what a key spends never passes its budget plus, for each request
/// in flight, what its usage exceeds its reserve by — nothing here, as a text request's
/// reserve bounds its usage. So: spent ≤ budget, and every request refused was one whose
/// reserve no longer fitted.
async fn replay(gws: &[&TestGateway]) {
    let reserve = reserve_of(&chat("big", 4, 40));
    // Room for three reserves at once, no more.
    let quota = reserve * 3 + reserve / 2;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let key = format!("racer-{i}");
        let (spent, refused) = race(gws, client, &key, 40).await;
        let total: u64 = spent.iter().sum();
        assert!(
            spent.len() >= 3,
            "the budget fits three reserves: {} admitted",
            spent.len()
        );
        assert!(total <= quota, "spent {total} of {quota}: the bound holds");
        assert_eq!(spent.len() + refused, 40);
        assert_eq!(
            used_reaches(gws[0], &key, total).await,
            total,
            "each admitted call settled on its usage"
        );
        // What is left cannot pay one more reserve only if it is below one.
        let left = quota - total;
        // A settle that gave units back clears the refusals gateways remember; on a
        // fleet that news travels through Redis, so the answer may take a moment.
        let url = gws[0].url("/v1/chat/completions");
        let one_more = || async {
            let body = chat("big", 4, 40).to_string().into_bytes();
            post(client, &url, &key, body).await.status.as_u16()
        };
        if left >= reserve {
            let admitted = eventually_async(Duration::from_secs(20), || async {
                one_more().await == 200
            })
            .await;
            assert!(admitted, "left {left} covers a reserve of {reserve}");
        } else {
            assert_eq!(one_more().await, 429, "left {left}, reserve {reserve}");
        }
    }
}

fn quota_for_race() -> u64 {
    let reserve = reserve_of(&chat("big", 4, 40));
    reserve * 3 + reserve / 2
}

#[tokio::test]
async fn the_spend_race_never_passes_the_budget_in_memory() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(quota_for_race()).build(), &up.url()).await;
    replay(&[&gw]).await;
}

#[tokio::test]
async fn the_spend_race_never_passes_the_budget_on_redis_shared_by_two_gateways() {
    let redis = RedisServer::start();
    let up = LlmUpstream::start().await;
    let toml = budget(quota_for_race())
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"500ms\"\n",
            redis.url()
        ))
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for gw in [&a, &b] {
        let ready = eventually_async(Duration::from_secs(30), || async {
            get(&gw.admin_url("/readyz"), &[]).await.status == 200
        })
        .await;
        assert!(ready, "the gateway reaches Redis");
    }
    replay(&[&a, &b]).await;
    // Both gateways read the same month of the same key.
    assert_eq!(used(&a, "racer-0").await, used(&b, "racer-0").await);
}

#[tokio::test]
#[ignore = "needs Python's openai package: scripts/test installs it"]
async fn the_openai_client_is_charged_what_each_answer_reports() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(20_000).build(), &up.url()).await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spend/openai_client.py");
    let base = gw.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .args([&base, "openai-user"])
            .output()
            .expect("python3 runs (scripts/test installs openai)")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the openai client failed:\n{stderr}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json out");
    let price = |u: &serde_json::Value, input: u64, output: u64| {
        u["prompt_tokens"].as_u64().unwrap() * input
            + u["completion_tokens"].as_u64().unwrap() * output
    };
    assert_eq!(got["json"]["completion_tokens"], 7);
    assert_eq!(
        got["stream"]["completion_tokens"], 9,
        "the stream's last event, read by the client"
    );
    assert_eq!(
        (
            got["responses_json"]["completion_tokens"].as_u64(),
            got["responses_stream"]["completion_tokens"].as_u64()
        ),
        (Some(6), Some(8)),
        "the Responses API's usage, JSON and streamed, read by the client: {got}"
    );
    let expected = price(&got["json"], 1, 2)
        + price(&got["stream"], 10, 30)
        + price(&got["responses_json"], 1, 2)
        + price(&got["responses_stream"], 10, 30);
    assert_eq!(used_reaches(&gw, "openai-user", expected).await, expected);
    let refused = &got["refused"];
    assert_eq!(refused["status"], 429, "{got}");
    assert!(
        refused["retry_after"]
            .as_str()
            .is_some_and(|s| s.parse::<u64>().is_ok()),
        "{refused}"
    );
    assert_eq!(refused["error"], "rate_limited");
    assert_eq!(
        up.requests(),
        4,
        "the refused call never reached the upstream"
    );
}

#[tokio::test]
async fn a_body_that_stalls_before_the_decision_is_answered_408_and_charges_nothing() {
    let up = LlmUpstream::start().await;
    let toml = budget(1_000_000)
        .server("body_read_timeout = \"1s\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // A raw client: declares 100 bytes, sends 12, then nothing.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-api-key: staller\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":\"b";
    let (answer, closed) = raw(gw.addr, head.as_bytes()).await;
    assert_eq!(raw_status(&answer), 408, "{answer}");
    assert!(
        closed,
        "the connection closes: the rest of the body cannot be trusted"
    );
    assert_eq!(up.requests(), 0);
    assert_eq!(used(&gw, "staller").await, 0);
}

#[tokio::test]
async fn a_body_dripped_before_the_decision_has_body_read_timeout_in_all() {
    let up = LlmUpstream::start().await;
    let toml = budget(1_000_000)
        .server("body_read_timeout = \"1s\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for http2 in [false, true] {
        // A byte every 300 ms: no silence reaches the timeout, the whole read does.
        let started = std::time::Instant::now();
        let drip = futures_util::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let byte = if n == 0 { &b"{"[..] } else { &b" "[..] };
            (n < 40).then(|| {
                (
                    Ok::<_, std::io::Error>(hyper::body::Frame::data(bytes::Bytes::from_static(
                        byte,
                    ))),
                    n + 1,
                )
            })
        });
        let req = http::Request::post(gw.url("/v1/chat/completions"))
            .header("x-api-key", "dripper")
            .body(http_body_util::BodyExt::boxed(
                http_body_util::StreamBody::new(drip),
            ))
            .expect("request");
        let answered = stream_client(http2).request(req).await;
        let status = answered.map(|r| r.status().as_u16()).unwrap_or(0);
        assert_eq!(status, 408, "http2 {http2}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(up.requests(), 0);
    assert_eq!(used(&gw, "dripper").await, 0);
}

/// A raw HTTP/1.1 request, `head` (its lines, without the blank one) with `expect:
/// 100-continue`, and `body` sent in one write once the gateway says `100 Continue`
/// (its body is being read); the connection, kept open.
async fn sent_after_continue(
    addr: std::net::SocketAddr,
    head: &str,
    body: &[u8],
) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("{head}expect: 100-continue\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut told = [0u8; 25];
    s.read_exact(&mut told).await.unwrap();
    assert_eq!(
        &told,
        b"HTTP/1.1 100 Continue\r\n\r\n",
        "{}",
        String::from_utf8_lossy(&told)
    );
    s.write_all(body).await.unwrap();
    s
}

#[tokio::test]
async fn parked_bodies_cannot_hold_more_than_max_key_body_memory() {
    let up = LlmUpstream::start().await;
    let toml = budget(1_000_000)
        .server("workers = 1\nmax_key_body = 1024\nmax_key_body_memory = 2048\nbody_read_timeout = \"30s\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // Two clients park 1 KiB bodies each (sent but for their last byte): the worker's
    // whole share, as a body is counted by what it sent. Each body goes once the
    // gateway asks for it (`100 Continue`), in one write: read as one frame, before the
    // requests that follow.
    let mut parked = Vec::new();
    for _ in 0..2 {
        let head = "POST /v1/x HTTP/1.1\r\nhost: x\r\nx-api-key: p\r\ncontent-length: 1020\r\n";
        let body = format!("{{{}", "x".repeat(1018));
        parked.push(sent_after_continue(gw.addr, head, body.as_bytes()).await);
    }
    let busy = eventually_async(Duration::from_secs(20), || async {
        let r = post(
            &http1(),
            &gw.url("/v1/chat/completions"),
            "other",
            chat("mini", 1, 5).to_string().into_bytes(),
        )
        .await;
        r.status == 503 && r.json()["error"] == "overloaded" && r.header("retry-after") == Some("1")
    })
    .await;
    assert!(busy, "a third body is refused, not buffered");
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metric(&metrics, "tollgate_requests_overloaded_total") >= 1.0,
        "counted as overloaded: {metrics}"
    );
    drop(parked);
    let back = eventually_async(Duration::from_secs(20), || async {
        post(
            &http2(),
            &gw.url("/v1/chat/completions"),
            "other",
            chat("mini", 1, 5).to_string().into_bytes(),
        )
        .await
        .status
            == 200
    })
    .await;
    assert!(back, "the budget comes back when the parked bodies go");
}

/// Streams that declare a body and send none of it hold none of `max_key_body_memory`:
/// parking them (HTTP/2 streams of one connection, HTTP/1.1 connections, each reopened
/// as `body_read_timeout` ends it) costs the client the bytes it parks, so headers alone
/// no longer make every body-reading route answer 503. (Before, each reserved its
/// declared length: the third of these took a 503 in place of its `100 Continue`.)
#[tokio::test]
async fn bodies_declared_but_not_sent_hold_no_memory() {
    let up = LlmUpstream::start().await;
    let toml = budget(1_000_000)
        .server("workers = 1\nmax_key_body = 1024\nmax_key_body_memory = 2048\nbody_read_timeout = \"30s\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.expect("ready");
    let mut streams = Vec::new();
    for _ in 0..8 {
        let req = http::Request::post("http://x/v1/chat/completions")
            .header("x-api-key", "p")
            .header("content-type", "application/json")
            .header("content-length", "1000")
            .body(())
            .expect("request");
        let (resp, mut body) = client.send_request(req, false).expect("send");
        body.send_data(bytes::Bytes::from_static(b"{"), false)
            .expect("data");
        streams.push((resp, body));
        client = client.ready().await.expect("ready");
    }
    // Each HTTP/1.1 one is told to go on (`100 Continue`: its body is being read) before
    // the next is sent.
    let mut sockets = Vec::new();
    for _ in 0..8 {
        let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-api-key: p\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n";
        sockets.push(sent_after_continue(gw.addr, head, b"{").await);
    }
    for client in [http1(), http2()] {
        let r = post(
            &client,
            &gw.url("/v1/chat/completions"),
            "other",
            chat("mini", 1, 5).to_string().into_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(up.requests(), 2, "the parked requests went nowhere");
    drop((sockets, streams));
}
