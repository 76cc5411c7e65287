//! What a client can make the gateway write to its logs: a key part, a method, a call's
//! own deadline and a shadow tier's refusals cannot forge a field, lengthen a line past
//! its bound or write lines past `access_log_rate` (the access log's own bounds, and its
//! request id and path, are in `access_log.rs`).

use std::time::Duration;

use super::access_log::{access_lines, flood, gateway};
use crate::support::*;

/// A key part and a method are a client's text too: a key holding
/// ` client=9.9.9.9 decision="admitted"` is one token (spaces percent-encoded, quotes left
/// to the key's JSON text), each part cut at 256 bytes, a 4 KiB method at 32: a client
/// cannot forge a field nor write lines past the bound `access_log_rate` sets the disk,
/// over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_key_or_a_method_cannot_forge_fields_nor_lengthen_a_line() {
    let up = Upstream::start().await;
    let (_dir, gw) = gateway(&up, "access_log = \"refused\"");
    let method = "M".repeat(4096);
    for (n, client) in [http1(), http2()].into_iter().enumerate() {
        let key = format!(
            "t{n} client=9.9.9.9 decision=\"admitted\" {}",
            "k".repeat(2048)
        );
        let url = format!("http://{}/", gw.addr);
        let headers = [("x-k", key.as_str())];
        assert_eq!(
            send(&client, &method, &url, &headers, b"").await.status,
            200
        );
        assert_eq!(
            send(&client, &method, &url, &headers, b"").await.status,
            429
        );
        assert!(
            eventually(Duration::from_secs(10), || access_lines(&gw).len() == n + 1).await,
            "{}",
            gw.log()
        );
        let line = &access_lines(&gw)[n];
        let part = key[..256].replace(' ', "%20").replace('"', "\\\"");
        assert!(line.contains(&format!("key=[\"{part}…\"] ")), "{line}");
        assert!(
            line.contains(&format!("method={}… ", &method[..32])),
            "{line}"
        );
        assert!(!line.contains(" client=9.9.9.9"), "{line}");
        assert!(line.len() < 1024, "{} bytes", line.len());
    }
}

/// A gRPC call's own deadline (`grpc-timeout`, shorter than the upstream's `timeout`)
/// passing is the client's choice: answered `DEADLINE_EXCEEDED`, and warned of at most
/// once a second (a hung upstream shows this way when callers set deadlines), where each
/// call wrote an "upstream failed" warning — a line per request at the client's rate,
/// outside `access_log_rate`, naming an upstream that did nothing wrong. The upstream's
/// own `timeout` passing is still warned of each time.
#[tokio::test]
async fn a_calls_own_deadline_is_warned_of_once_a_second_at_most() {
    // An upstream that takes connections and never answers anything.
    let (addr, held) = silent_upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let text = Fixture::new()
        .upstream("api", "timeout = \"2s\"")
        .route("api", "/", "api", &[])
        .build_for(&format!("http://{addr}"));
    std::fs::write(&path, text).expect("write");
    let gw = Process::run(&path);
    let url = format!("http://{}/test.Echo/Say", gw.addr);
    let grpc = [("content-type", "application/grpc"), ("te", "trailers")];
    let started = std::time::Instant::now();
    for client in [http1(), http2()] {
        for _ in 0..20 {
            let headers = [grpc[0], grpc[1], ("grpc-timeout", "1n")];
            let r = send(&client, "POST", &url, &headers, b"").await;
            assert_eq!(r.header("grpc-status"), Some("4"), "{r:?}");
        }
    }
    let took = started.elapsed();
    let r = send(&http2(), "POST", &url, &grpc, b"").await;
    assert_eq!(r.header("grpc-status"), Some("4"), "{r:?}");
    let failed = || gw.log().matches("upstream failed").count();
    assert!(
        eventually(Duration::from_secs(10), || failed() == 1).await,
        "one warning of a failure, the upstream's own timeout: {}",
        gw.log()
    );
    let deadlines = gw
        .log()
        .matches("deadline passed before the upstream answered (one line")
        .count();
    let bound = took.as_secs() as usize + 1;
    assert!(
        (1..=bound).contains(&deadlines),
        "{deadlines} deadline warnings in {took:?}: {}",
        gw.log()
    );
    held.abort();
}

/// A shadow tier that would refuse every request of a flood: its lines share the access
/// log's budget (`access_log_rate`, here 20 a second; the access log itself off), and
/// those past it are counted as dropped, over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn a_shadow_tiers_refusals_write_at_most_the_rate() {
    for http2 in [false, true] {
        let up = Upstream::start().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        let text = Fixture::new()
            .server("workers = 1\naccess_log_rate = 20")
            .policy_raw(
                "watched",
                "key = \"header:x-k\"\nlimit = 1\nperiod = \"1h\"\nburst = 1\nmode = \"shadow\"",
            )
            .route("api", "/", "api", &["watched"])
            .build_for(&up.url());
        std::fs::write(&path, text).expect("write");
        let gw = Process::run(&path);
        let requests = 800;
        let took = flood(&gw, http2, requests).await;
        assert_eq!(up.requests(), requests, "a shadow tier refuses nothing");
        let shadow = || {
            let log = gw.log();
            log.lines()
                .filter(|l| l.contains("tollgate::shadow"))
                .count()
        };
        // A second's budget at the start, then 20 a second.
        let bound = 20.0 * (took.as_secs_f64() + 1.2) + 20.0;
        assert!(
            eventually(Duration::from_secs(10), || shadow() >= 20).await,
            "{}",
            gw.log()
        );
        let lines = shadow();
        assert!(
            (lines as f64) <= bound,
            "http2 {http2}: {lines} shadow lines in {took:?} (bound {bound:.0})"
        );
    }
}
