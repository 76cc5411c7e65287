//! The access log cannot flood a disk, and says who was refused: through the binary, a
//! flood of refusals over HTTP/1.1 and HTTP/2 writes at most `access_log_rate` lines a
//! second and counts every other one as dropped (lines + dropped = requests, exactly);
//! `"refused"` leaves admitted requests out; a refused line names the deciding tier's key
//! parts, escaped as sent or as keyed hashes; a client's request id and path cannot forge
//! fields or lengthen a line past a bound.

use std::time::{Duration, Instant};

use crate::support::*;

/// A gateway whose `tenant` tier admits one request an hour per `x-k`, with the access
/// log set by `logging` (lines of `[server]`).
pub(super) fn gateway(up: &Upstream, logging: &str) -> (tempfile::TempDir, Process) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = Fixture::new()
        .server(format!("workers = 1\n{logging}"))
        .policy("tenant", "header:x-k", 1, "1h", 1)
        .route("api", "/", "api", &["tenant"])
        .build_for(&up.url())
        .replace("access_log = false\n", "");
    std::fs::write(&path, text).expect("write");
    let gw = Process::run(&path);
    (dir, gw)
}

pub(super) fn access_lines(gw: &Process) -> Vec<String> {
    gw.log()
        .lines()
        .filter(|l| l.contains("tollgate::access"))
        .map(str::to_owned)
        .collect()
}

pub(super) async fn flood(gw: &Process, over_h2: bool, requests: usize) -> Duration {
    let client = if over_h2 { http2() } else { http1() };
    let url = format!("http://{}/", gw.addr);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..requests / 8 {
                send(&client, "GET", &url, &[("x-k", "flooder")], b"").await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("flood task");
    }
    started.elapsed()
}

#[tokio::test]
async fn a_flood_writes_at_most_the_rate_and_counts_the_rest() {
    for http2 in [false, true] {
        let up = Upstream::start().await;
        let (_dir, gw) = gateway(&up, "access_log_rate = 20");
        let requests = 1_600;
        let took = flood(&gw, http2, requests).await;
        // One more request after the budget refilled adds the drops to the counter.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        send(
            &http1(),
            "GET",
            &format!("http://{}/", gw.addr),
            &[("x-k", "flooder")],
            b"",
        )
        .await;
        let admin = format!("http://{}/metrics", gw.admin.expect("admin"));
        let sent = requests + 1;
        let settled = eventually_async(Duration::from_secs(20), || async {
            let dropped = metric(
                &get(&admin, &[]).await.text(),
                "tollgate_access_log_dropped_total",
            );
            access_lines(&gw).len() + dropped as usize == sent
        })
        .await;
        let lines = access_lines(&gw).len();
        assert!(
            settled,
            "http2 {http2}: {lines} lines + dropped = {sent} requests"
        );
        // A second's budget at the start, then 20 a second, and the last request's line.
        let bound = 20.0 * (took.as_secs_f64() + 1.2) + 20.0 + 1.0;
        assert!(
            lines as f64 <= bound && lines >= 20,
            "http2 {http2}: {lines} lines in {took:?} (bound {bound:.0})"
        );
    }
}

#[tokio::test]
async fn refused_mode_logs_only_refusals_naming_their_key() {
    let up = Upstream::start().await;
    let (_dir, gw) = gateway(&up, "access_log = \"refused\"");
    let url = format!("http://{}/", gw.addr);
    assert_eq!(get(&url, &[("x-k", "acme \"corp\"")]).await.status, 200);
    assert_eq!(get(&url, &[("x-k", "acme \"corp\"")]).await.status, 429);
    assert!(
        eventually(Duration::from_secs(10), || access_lines(&gw).len() == 1).await,
        "{}",
        gw.log()
    );
    let line = &access_lines(&gw)[0];
    assert!(line.contains("decision=\"denied\""), "{line}");
    assert!(line.contains("policy=\"tenant\""), "{line}");
    // Escaped as JSON text, the space percent-encoded: a key cannot end the field or
    // forge another.
    assert!(line.contains(r#"key=["acme%20\"corp\""]"#), "{line}");
}

#[tokio::test]
async fn hashed_keys_match_each_other_and_hide_the_value() {
    let up = Upstream::start().await;
    let (_dir, gw) = gateway(&up, "log_keys = \"hash\"");
    let url = format!("http://{}/", gw.addr);
    for _ in 0..3 {
        get(&url, &[("x-k", "tenant-secret-42")]).await;
    }
    assert!(
        eventually(Duration::from_secs(10), || access_lines(&gw).len() == 3).await,
        "{}",
        gw.log()
    );
    let lines = access_lines(&gw);
    assert!(!gw.log().contains("tenant-secret-42"), "{}", gw.log());
    let key_of = |line: &str| {
        line.split("key=[\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(str::to_owned)
    };
    assert_eq!(
        key_of(&lines[0]),
        None,
        "the admitted line names no key: {}",
        lines[0]
    );
    let (a, b) = (
        key_of(&lines[1]).expect("a key"),
        key_of(&lines[2]).expect("a key"),
    );
    assert_eq!(a, b, "the same key, the same hash");
    assert_eq!(a.len(), 32, "128 bits as hex: {a}");
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
}

#[tokio::test]
async fn the_json_log_writes_the_key_as_a_list_and_names_each_request() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = Fixture::new()
        .server("workers = 1")
        .policy("tenant", "header:x-k", 1, "1h", 1)
        .route("api", "/", "api", &["tenant"])
        .build_for(&up.url())
        .replace("access_log = false\n", "");
    std::fs::write(&path, text).expect("write");
    let gw = Process::start(&path, &["--log-format", "json"]).expect("starts");
    let url = format!("http://{}/", gw.addr);
    let named = [("x-k", "acme \"corp\""), ("x-request-id", "req-7")];
    assert_eq!(send(&http1(), "GET", &url, &named, b"").await.status, 200);
    let refused = send(&http2(), "GET", &url, &[("x-k", "acme \"corp\"")], b"").await;
    assert_eq!(refused.status, 429);
    assert!(
        eventually(Duration::from_secs(10), || access_lines(&gw).len() == 2).await,
        "{}",
        gw.log()
    );
    let lines: Vec<serde_json::Value> = access_lines(&gw)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines[0]["fields"]["request_id"], "req-7", "the client's id");
    assert_eq!(lines[0]["fields"]["key"], serde_json::json!([]));
    assert_eq!(
        lines[1]["fields"]["key"],
        serde_json::json!(["acme%20\"corp\""])
    );
    let made = lines[1]["fields"]["request_id"].as_str().expect("an id");
    assert!(made.len() > 8 && made != "req-7", "one is made: {made}");
}

/// A client that hangs up while its admitted request waits for a slow upstream (`/slow`
/// answers after 30 s): raw over HTTP/1.1 (the socket closed), over HTTP/2 (the stream
/// reset). Each still gets its line — `status=499`, decided `admitted` — at once.
#[tokio::test]
async fn a_client_that_hangs_up_before_any_answer_is_logged_with_499() {
    let up = Upstream::start().await;
    let (_dir, gw) = gateway(&up, "");
    let hung_up = |n: usize| {
        let lines = access_lines(&gw);
        lines.iter().filter(|l| l.contains("status=499")).count() == n
    };
    let mut socket = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let head = b"GET /v1/slow HTTP/1.1\r\nhost: gw\r\nx-k: raw-h1\r\n\r\n";
    tokio::io::AsyncWriteExt::write_all(&mut socket, head)
        .await
        .expect("write");
    let forwarded = eventually(Duration::from_secs(20), || up.requests() == 1).await;
    assert!(forwarded, "the request reaches the upstream");
    drop(socket);
    let logged = eventually(Duration::from_secs(20), || hung_up(1)).await;
    assert!(logged, "HTTP/1.1: a 499 line\n{}", gw.log());
    let url = format!("http://{}/v1/slow", gw.addr);
    let waiting = tokio::spawn(async move {
        send(&http2(), "GET", &url, &[("x-k", "h2")], b"").await;
    });
    let forwarded = eventually(Duration::from_secs(20), || up.requests() == 2).await;
    assert!(forwarded, "the HTTP/2 request reaches the upstream");
    waiting.abort();
    let logged = eventually(Duration::from_secs(20), || hung_up(2)).await;
    assert!(logged, "HTTP/2: a 499 line\n{}", gw.log());
    for line in access_lines(&gw) {
        assert!(line.contains("decision=\"admitted\""), "{line}");
        assert!(line.contains("path=/v1/slow"), "{line}");
        assert!(line.contains("status=499"), "{line}");
    }
    let admin = format!("http://{}/metrics", gw.admin.expect("admin"));
    let responses = "tollgate_responses_total{route=\"api\",status=\"4xx\"}";
    let counted = || async { metric(&get(&admin, &[]).await.text(), responses) };
    assert_eq!(counted().await, 0.0, "no response was sent to either");
    // An upstream's own 499 is an answer like any other: sent, logged and counted.
    let url = format!("http://{}/v1/usage", gw.addr);
    let sent = get(&url, &[("x-k", "upstream-499"), ("x-status", "499")]).await;
    assert_eq!(sent.status, 499);
    assert_eq!(counted().await, 1.0, "the upstream's 499 is counted");
}

/// What a client writes into its line cannot forge fields nor make the line long: an
/// `x-request-id` holding `decision="admitted"` is written as one token (spaces and
/// quotes percent-encoded), cut at 128 bytes; a 16 KiB path at 1 KiB (the upstream gets
/// all of it), over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_request_id_cannot_forge_fields_and_long_paths_are_cut() {
    let up = Upstream::start().await;
    let (_dir, gw) = gateway(&up, "access_log = \"refused\"");
    let forged = format!("x decision=\"admitted\" status=200 {}", "a".repeat(300));
    let long = format!("/{}", "p".repeat(16 * 1024));
    for (n, client) in [http1(), http2()].into_iter().enumerate() {
        let url = format!("http://{}{long}", gw.addr);
        let tenant = format!("t{n}");
        let headers = [("x-k", tenant.as_str()), ("x-request-id", forged.as_str())];
        assert_eq!(send(&client, "GET", &url, &headers, b"").await.status, 200);
        assert_eq!(send(&client, "GET", &url, &headers, b"").await.status, 429);
        assert!(
            eventually(Duration::from_secs(10), || access_lines(&gw).len() == n + 1).await,
            "{}",
            gw.log()
        );
        let line = &access_lines(&gw)[n];
        // One token: spaces and quotes percent-encoded, the same text in the JSON log.
        let id = forged[..128].replace(' ', "%20").replace('"', "%22");
        assert!(line.contains(&format!("request_id={id}… ")), "{line}");
        assert!(line.contains("decision=\"denied\""), "{line}");
        assert!(!line.contains("decision=\"admitted\" "), "{line}");
        assert!(
            line.contains(&format!("path=/{}… ", "p".repeat(1023))),
            "{line}"
        );
        assert!(line.len() < 4096, "{} bytes", line.len());
    }
    assert!(up.requests() >= 2);
}
