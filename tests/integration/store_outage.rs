//! A store that is down is shown down, from the first failed call and whatever the
//! traffic: at start while the fleet's key secret is awaited, and when Redis dies mid-run
//! (`/readyz` 503 within about a second, one line when it goes, one when it comes back),
//! a Cluster as soon as one master is silent, and a reachable Sentinel or Cluster store
//! never at start, a Redis that answers but takes no writes as one that does not answer,
//! one that hangs soon after two of its call timeouts;
//! requests `on_error = "allow"` lets through are counted and logged as such.

use std::time::{Duration, Instant};

use crate::support::*;

fn config(store: &str, up: &Upstream, access_log: &str) -> String {
    Fixture::new()
        .store(store)
        .policy("tenant", "header:x-k", 10, "1s", 10)
        .route("api", "/", "api", &["tenant"])
        .build_for(&up.url())
        .replace("access_log = false", &format!("access_log = {access_log}"))
}

fn stats_store(body: &serde_json::Value) -> serde_json::Value {
    body["store"].clone()
}

/// The binary on a Redis store (`store`: its `[store]` lines) in front of `up`, its
/// config in `dir`; and where its `/readyz` answers.
fn gateway_on(store: &str, up: &Upstream, dir: &std::path::Path) -> (Process, String) {
    let path = dir.join("tollgate.toml");
    let store = format!("backend = \"redis\"\n{store}\ntimeout = \"100ms\"\n");
    std::fs::write(&path, config(&store, up, "false")).expect("write");
    let gw = Process::run(&path);
    let ready_url = format!("http://{}/readyz", gw.admin.expect("admin"));
    (gw, ready_url)
}

/// Whether `/readyz` at `url` answers `status` within `secs` seconds.
async fn readyz_becomes(url: &str, status: u16, secs: u64) -> bool {
    eventually_async(Duration::from_secs(secs), || async {
        get(url, &[]).await.status == status
    })
    .await
}

/// How many lines of `log` say `what`.
fn lines_saying(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

#[tokio::test]
async fn redis_down_from_the_start_shows_open_with_its_cause_before_any_request() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // No key_secret: the fleet's secret is awaited from Redis, which never answers.
    let port = free_port();
    let url = format!("url = \"redis://127.0.0.1:{port}\"");
    let (gw, _) = gateway_on(&url, &up, dir.path());
    let admin = gw.admin.expect("admin");
    let stats_url = format!("http://{admin}/admin/stats");
    // Not one request is sent: the background probe alone must tell.
    let shown = eventually_async(Duration::from_secs(10), || async {
        stats_store(&get(&stats_url, &[]).await.json())["breaker"] == "open"
    })
    .await;
    let store = stats_store(&get(&stats_url, &[]).await.json());
    assert!(shown, "{store}");
    assert_eq!(
        store["last_error"]["cause"], "connection_refused",
        "{store}"
    );
    assert!(store["failed_calls"].as_u64().unwrap_or(0) >= 2, "{store}");
    assert_eq!(store["reachable"], false, "{store}");
    let ready = get(&format!("http://{admin}/readyz"), &[]).await;
    assert_eq!(ready.status, 503);
    assert!(
        ready.text().contains("connection_refused"),
        "{}",
        ready.text()
    );
    let page = get(&format!("http://{admin}/admin/stats"), &[])
        .await
        .text();
    assert!(!page.contains("\"breaker\":\"closed\""), "{page}");
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn redis_dying_mid_run_is_not_ready_within_a_second_and_said_once_each_way() {
    let up = Upstream::start().await;
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, ready_url) = gateway_on(&format!("url = \"{}\"", redis.url()), &up, dir.path());
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());

    redis.kill();
    let killed = Instant::now();
    assert!(readyz_becomes(&ready_url, 503, 10).await, "{}", gw.log());
    // About a second: two probes half a second apart, with a margin for a busy machine.
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
    let gone = eventually(Duration::from_secs(5), || {
        gw.log().contains("store unreachable")
    })
    .await;
    assert!(gone, "{}", gw.log());

    redis.restart();
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());
    let said = eventually(Duration::from_secs(5), || {
        gw.log().contains("store reachable again")
    })
    .await;
    assert!(said, "{}", gw.log());
    let log = gw.log();
    assert_eq!(lines_saying(&log, "store unreachable"), 1, "{log}");
    assert_eq!(lines_saying(&log, "store reachable again"), 1, "{log}");
}

/// A single Redis that hangs (frozen, not refusing), with no traffic: the liveness
/// probe runs on a timer of its own (a turn's INFO and other calls each wait their whole
/// timeout on a hung store), the second probe is asked 250 ms after the first misses, and
/// the first miss's cause is looked for meanwhile. With the default 50 ms call timeout:
/// about 0.6 s (1.1 s before); with 500 ms: 1.75 s at most (2.8 s before, measured). The
/// bounds leave a margin for a busy machine; the second one is below the old figure.
#[tokio::test]
async fn a_redis_that_hangs_is_not_ready_soon_after_two_call_timeouts() {
    let up = Upstream::start().await;
    for (timeout, bound) in [("", 1_500), ("timeout = \"500ms\"\n", 2_400)] {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        let store = format!("backend = \"redis\"\nurl = \"{}\"\n{timeout}", redis.url());
        std::fs::write(&path, config(&store, &up, "false")).expect("write");
        let gw = Process::run(&path);
        let ready_url = format!("http://{}/readyz", gw.admin.expect("admin"));
        assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());

        redis.pause();
        let frozen = Instant::now();
        let unready = readyz_becomes(&ready_url, 503, 15).await;
        let elapsed = frozen.elapsed();
        redis.resume();
        assert!(unready, "{}", gw.log());
        assert!(
            elapsed < Duration::from_millis(bound),
            "{timeout}: {elapsed:?}"
        );
        assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());
    }
}

/// A Cluster is told unready within about a second of one master going silent (with the
/// default full coverage the Cluster then takes no writes), whatever the traffic, and
/// ready again once it answers.
#[tokio::test]
async fn a_cluster_with_a_silent_master_is_not_ready_within_a_second() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, ready_url) = gateway_on(&format!("url = {}", cluster.urls_toml()), &up, dir.path());
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());

    // Frozen, not killed: it comes back as it was, and its peers do not fail it over
    // within the few seconds it is silent.
    cluster.nodes[1].pause();
    let silent = Instant::now();
    let unready = readyz_becomes(&ready_url, 503, 10).await;
    let elapsed = silent.elapsed();
    let answer = get(&ready_url, &[]).await.text();
    cluster.nodes[1].resume();
    assert!(unready, "{}", gw.log());
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(answer.contains("a node does not answer"), "{answer}");
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());
    let log = gw.log();
    assert_eq!(lines_saying(&log, "store unreachable"), 1, "{log}");
    assert_eq!(lines_saying(&log, "store reachable again"), 1, "{log}");
}

/// A Sentinel or Cluster store is found before the start's PING: reachable, it is never
/// reported unreachable at start, and the gateway is ready from the first probe.
#[tokio::test]
async fn a_reachable_sentinel_or_cluster_store_is_not_reported_down_at_start() {
    let set = SentinelSet::start();
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    for url in [
        format!("sentinels = {}\nmaster = \"{MASTER}\"", set.urls_toml()),
        format!("url = {}", cluster.urls_toml()),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (gw, ready_url) = gateway_on(&url, &up, dir.path());
        let ready = readyz_becomes(&ready_url, 200, 30).await;
        let log = gw.log();
        assert!(ready, "{log}");
        assert!(!log.contains("cannot be reached at start"), "{url}:\n{log}");
        assert!(!log.contains("store reachable again"), "{url}:\n{log}");
    }
}

/// A Redis that answers but takes no writes (here: too few replicas) fails every
/// decision: it is told unready within about a second, with its cause and whatever the
/// traffic, and ready again once it takes writes.
#[tokio::test]
async fn a_redis_that_refuses_writes_is_not_ready_within_a_second() {
    let redis = RedisServer::start();
    refusing_writes_is_unready(&format!("url = \"{}\"", redis.url()), &redis).await;
}

/// The same for one master of a Cluster: it answers PING, and its slots' decisions all
/// fail.
#[tokio::test]
async fn a_cluster_with_a_master_that_refuses_writes_is_not_ready_within_a_second() {
    let cluster = RedisCluster::start();
    let url = format!("url = {}", cluster.urls_toml());
    refusing_writes_is_unready(&url, &cluster.nodes[1]).await;
}

/// A gateway on `store` is told unready soon after `node` stops taking writes, and ready
/// again once it takes them.
async fn refusing_writes_is_unready(store: &str, node: &RedisServer) {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, ready_url) = gateway_on(store, &up, dir.path());
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());

    node.cli(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    let refusing = Instant::now();
    let unready = readyz_becomes(&ready_url, 503, 10).await;
    let elapsed = refusing.elapsed();
    let answer = get(&ready_url, &[]).await.text();
    node.cli(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    assert!(unready, "{}", gw.log());
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(answer.contains("noreplicas"), "{answer}");
    assert!(readyz_becomes(&ready_url, 200, 30).await, "{}", gw.log());
}

#[tokio::test]
async fn requests_let_through_by_on_error_allow_are_counted_and_logged_as_such() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let port = free_port();
    let store = format!(
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\ntimeout = \"100ms\"\non_error = \"allow\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n"
    );
    std::fs::write(&path, config(&store, &up, "\"refused\"")).expect("write");
    let gw = Process::run(&path);
    let url = format!("http://{}/", gw.addr);
    for client in [http1(), http2(), http1()] {
        let r = send(&client, "GET", &url, &[("x-k", "a")], b"").await;
        assert_eq!(r.status, 200, "let through unlimited");
    }
    let admin = gw.admin.expect("admin");
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await.text();
    let series = |outcome: &str| {
        metric(
            &metrics,
            &format!(
                "tollgate_decisions_total{{route=\"api\",policy=\"tenant\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(series("store_unavailable_allowed"), 3.0, "{metrics}");
    assert_eq!(series("admitted"), 0.0);
    let logged = eventually(Duration::from_secs(5), || {
        gw.log()
            .lines()
            .filter(|l| l.contains("decision=\"store_unavailable_allowed\""))
            .count()
            == 3
    })
    .await;
    assert!(logged, "{}", gw.log());
}
