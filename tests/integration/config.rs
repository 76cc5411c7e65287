//! Configuration: every validation error located with a hint, `tollgate check`, reloads
//! under load, state surviving reloads, SIGHUP and SIGTERM on the real binary.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;

const BASE: &str = r#"[server]
listen = "127.0.0.1:0"

[upstreams.api]
targets = ["http://127.0.0.1:3000"]

[policies.p]
key = "ip"
limit = 10
period = "1s"
burst = 5

[[routes]]
name = "r"
path = "/"
upstream = "api"
policies = ["p"]
"#;

/// Compiles `text` and returns the error text (panics if it is valid).
fn errors_of(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).expect("write");
    match tollgate::config::load(&path) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string().replace(&path.display().to_string(), "FILE"),
    }
}

#[test]
fn every_mistake_is_located_with_a_hint() {
    let cases: &[(&str, &str, &str)] = &[
        // (replace this, with this, expected "FILE:line:col: message" fragment)
        (
            "limit = 10",
            "limit = 0",
            "FILE:9:9: limit must be a whole number of at least 1, not 0",
        ),
        (
            "burst = 5",
            "burst = -2",
            "FILE:11:9: burst must be a whole number of at least 1",
        ),
        (
            "period = \"1s\"",
            "period = \"1 fortnight\"",
            "FILE:10:10: `1 fortnight` is not a duration",
        ),
        (
            "period = \"1s\"",
            "period = \"0s\"",
            "FILE:10:10: duration must be greater than zero",
        ),
        (
            "key = \"ip\"",
            "key = \"ipv6\"",
            "FILE:8:7: unknown key source `ipv6`",
        ),
        (
            "upstream = \"api\"",
            "upstream = \"apj\"",
            "did you mean `api`?",
        ),
        (
            "policies = [\"p\"]",
            "policies = [\"q\"]",
            "FILE:17:13: route `r` names unknown policy `q`",
        ),
        (
            "targets = [\"http://127.0.0.1:3000\"]",
            "targets = [\"ftp://x\"]",
            "FILE:5:12: bad upstream target `ftp://x`",
        ),
        (
            "listen = \"127.0.0.1:0\"",
            "listen = \"localhost\"",
            "FILE:2:10: `localhost` is not a socket address",
        ),
        (
            "limit = 10\n",
            "limit = 10\ncolour = \"red\"\n",
            "unknown field `colour`",
        ),
        (
            "period = \"1s\"",
            "period = \"1ns\"",
            "FILE:9:9: period / limit is below 1 ns",
        ),
        ("burst = 5", "burst = 9_000_000_000_000", "overflows"),
        (
            "name = \"r\"",
            "name = \"r\"\ncost = 6",
            "cost 6 of route `r` exceeds the burst of policy `p`",
        ),
        (
            "key = \"ip\"",
            "key = \"ip\"\nmode = \"loud\"",
            "unknown mode `loud`",
        ),
        (
            "listen = \"127.0.0.1:0\"",
            "listen = \"127.0.0.1:0\"\ntrusted_proxies = [\"10.0.0.0/33\"]",
            "`10.0.0.0/33` is not an IP address or CIDR",
        ),
        (
            "listen = \"127.0.0.1:0\"",
            "listen = \"127.0.0.1:8080\"\nadmin_listen = \"127.0.0.1:8080\"",
            "is the same address as listen",
        ),
        (
            "[[routes]]",
            "[store]\nbackend = \"etcd\"\n\n[[routes]]",
            "unknown store backend `etcd`",
        ),
        ("path = \"/\"", "path = \"v1\"", "must start with `/`"),
        (
            "name = \"r\"",
            "name = \"my route\"",
            "route name `my route` has characters",
        ),
        (
            "[upstreams.api]",
            "[upstreams.\"a\\\"pi\"]",
            "upstream name `a\"pi` has characters",
        ),
        (
            "path = \"/\"",
            "path = \"/\"\nhost = \"api.example.com:8443\"",
            "FILE:16:8: route host `api.example.com:8443` can never match",
        ),
        (
            "path = \"/\"",
            "path = \"/\"\nmethods = []",
            "has methods = [], which matches nothing",
        ),
        (
            "listen = \"127.0.0.1:0\"",
            "listen = \"0.0.0.0:8080\"\nadmin_listen = \"127.0.0.1:8080\"",
            "is the same address as listen",
        ),
        ("burst = 5", "brust = 5", "hint: did you mean `burst`?"),
        (
            "upstream = \"api\"",
            "",
            "route `r`: missing field `upstream`",
        ),
        (
            "[policies.p]",
            "[policy.p]",
            "hint: did you mean `[policies.NAME]`?",
        ),
        (
            "limit = 10",
            "limit = \"10\"",
            "hint: a number, not a string",
        ),
        (
            "period = \"1s\"",
            "period = 1",
            "hint: this field takes a string, in quotes: a duration with its unit",
        ),
        (
            // One error, at the line that made it a concurrency cap.
            "limit = 10",
            "limit = 10\nmax_in_flight = 4",
            "FILE:10:17: policy `p` sets max_in_flight and `limit`, `period`, `burst`: a policy is a concurrency cap or a rate, not both",
        ),
        (
            "policies = [\"p\"]",
            "policy = [\"p\"]",
            "hint: did you mean `policies`?",
        ),
        (
            "limit = 10\nperiod = \"1s\"",
            "rate = \"10r/s\"",
            "hint: tollgate writes a rate as `limit` requests per `period` (nginx's rate = \"10r/s\" is limit = 10, period = \"1s\")",
        ),
        (
            "key = \"ip\"",
            "key = \"ip",
            "hint: a string is not closed on its line",
        ),
        (
            "burst = 5",
            "burst = 5\nburst = 6",
            "hint: a field is set twice in this table",
        ),
        (
            "[[routes]]",
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:63790000\"\n\n[[routes]]",
            "FILE:15:7: Redis URL `redis://127.0.0.1:63790000` does not parse",
        ),
        (
            "limit = 10\nperiod = \"1s\"\nburst = 5",
            "limit = 10",
            "policy `p` has no period, burst",
        ),
        (
            "limit = 10\nperiod = \"1s\"\nburst = 5",
            "max_in_flight = 0",
            "max_in_flight must be a whole number of at least 1",
        ),
        (
            "burst = 5",
            "burst = 5\nretry_after = \"2s\"",
            "`retry_after` applies to concurrency policies only",
        ),
        (
            "limit = 10\nperiod = \"1s\"\nburst = 5",
            "max_in_flight = 2\n[policies.p.overrides.\"10.0.0.1\"]\nlimit = 3",
            "policy `p` is a concurrency cap: an override cannot set `limit`",
        ),
    ];
    for (from, to, expected) in cases {
        assert!(BASE.contains(from), "case pattern {from:?} not in BASE");
        let text = BASE.replacen(from, to, 1);
        let got = errors_of(&text);
        assert!(
            got.contains(expected),
            "for {to:?}\nexpected: {expected}\ngot:      {got}"
        );
    }
}

#[test]
fn a_period_in_months_is_a_warning_check_prints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("months.toml");
    std::fs::write(&path, BASE.replace("period = \"1s\"", "period = \"1M\"")).expect("write");
    let config = tollgate::config::load(&path).expect("valid, with a warning");
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    // 10 a month: a minute (`m`) was surely meant.
    assert!(
        config.warnings[0].ends_with(
            "months.toml:10:10: warning: policy `p`: period `1M` is 1M month(s) (`M`), not minutes (`m`): 10 requests a month is fewer than one every ten minutes\n    hint: for a minute write period = \"1m\"; for a monthly allowance use a calendar quota (quota = …, window = \"month\")"
        ),
        "{}",
        config.warnings[0]
    );
    // A million a month is a rate meant in months, said as one.
    let million = BASE
        .replace("period = \"1s\"", "period = \"1M\"")
        .replace("limit = 10", "limit = 1_000_000");
    std::fs::write(&path, million).expect("write");
    let config = tollgate::config::load(&path).expect("valid, with a warning");
    assert!(
        config.warnings[0].ends_with(
            "warning: policy `p`: period `1M` counts a month as a fixed length (30.44 days a month, 365.25 days a year) and refills continuously; it is not a calendar window\n    hint: write the period in days (\"30d\") to say so; limit = 1000000, period = \"30d\" is a continuous rate, not a monthly allowance"
        ),
        "{}",
        config.warnings[0]
    );
    std::fs::write(&path, BASE.replace("period = \"1s\"", "period = \"1M\"")).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning: policy `p`: period `1M`"));
    let days = BASE.replace("period = \"1s\"", "period = \"30d\"");
    std::fs::write(&path, days).expect("write");
    assert!(tollgate::config::load(&path)
        .expect("valid")
        .warnings
        .is_empty());
}

#[test]
fn all_errors_are_reported_at_once() {
    let text = BASE
        .replace("limit = 10", "limit = 0")
        .replace("upstream = \"api\"", "upstream = \"nope\"")
        .replace("key = \"ip\"", "key = \"cookie:\"");
    let got = errors_of(&text);
    assert_eq!(got.matches("FILE:").count(), 3, "{got}");
    let routes = text.clone()
        + r#"
[[routes]]
name = "r"
path = "/x"
upstream = "api"
"#;
    assert!(errors_of(&routes).contains("duplicate route name `r`"));
}

#[test]
fn check_command_summarises_or_lists_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, BASE).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&good)
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(0));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("T=100ms τ=500ms"), "{summary}");
    assert!(summary.contains("tiers=[p]"), "{summary}");
    assert!(!summary.contains("warning"), "{summary}");

    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "[server]\nlisten = \"127.0.0.1:0\"\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&empty)
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(0), "valid, but…");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("warning: every request will be answered 404"),
        "a config without routes is warned about:\n{summary}"
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        BASE.replace("limit = 10", "limit = 0")
            .replace("burst = 5", "burst = 0"),
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(errors.contains("bad.toml:9:9: limit must be"), "{errors}");
    assert!(errors.contains("bad.toml:11:9: burst must be"), "{errors}");

    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config", "/nonexistent/tollgate.toml"])
        .output()
        .expect("run check");
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/tollgate.toml")
    );
}

#[test]
fn every_shipped_config_is_valid() {
    let mut checked = 0;
    for dir in ["config", "examples", "examples/compose", "docker"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml") {
                if let Err(e) = tollgate::config::load(&path) {
                    panic!("{} does not load:\n{e}", path.display());
                }
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 7,
        "config/, examples/ (compose/ too) and docker/ configs: {checked}"
    );
}

/// Two routes: `limited` (each tenant `burst` at once, then one a minute) and `load` on
/// `path_prefix`, under a limit no test reaches.
fn reloadable(path_prefix: &str, burst: u64) -> Fixture {
    Fixture::new()
        .policy("tenant", "header:x-tenant-id", 1, "1m", burst)
        .policy("open", "ip", 1_000_000, "1s", 1_000_000)
        .route("limited", "/limited", "api", &["tenant"])
        .route("load", path_prefix, "api", &["open"])
}

#[tokio::test]
async fn limiter_state_survives_a_reload_that_changes_the_numbers() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reloadable("/load", 3).build(), &up.url()).await;
    let h = [("x-tenant-id", "acme")];
    assert_eq!(
        get(&gw.url("/limited"), &h)
            .await
            .num("x-ratelimit-remaining"),
        2
    );
    assert_eq!(
        get(&gw.url("/limited"), &h)
            .await
            .num("x-ratelimit-remaining"),
        1
    );
    gw.rewrite(&reloadable("/load", 5).build(), &up.url());
    let report = gw.gw().reload().await.expect("reload");
    assert_eq!(report.routes, 2);
    let after = get(&gw.url("/limited"), &h).await;
    assert!(
        report.needs_restart.is_empty(),
        "{:?}",
        report.needs_restart
    );
    assert_eq!(after.num("x-ratelimit-limit"), 5, "new numbers apply");
    assert_eq!(
        after.num("x-ratelimit-remaining"),
        2,
        "the two earlier requests are still charged"
    );
}

#[tokio::test]
async fn reloads_under_load_drop_nothing() {
    // Each generation routes `/v{n}`, and every one routes `/steady`, where the clients
    // send their requests: each must be answered 200, whichever generation it meets.
    let generation_toml = |n: u64| {
        reloadable(&format!("/v{n}"), 3)
            .route("steady", "/steady", "api", &["open"])
            .build()
    };
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&generation_toml(0), &up.url()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (stop, answered, addr) = (stop.clone(), answered.clone(), gw.addr);
        clients.push(tokio::spawn(async move {
            let client = http1();
            let url = format!("http://{addr}/steady/{c}");
            let mut failures = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = send(&client, "GET", &url, &[], b"").await;
                if r.status != 200 {
                    failures.push((r.status, r.text()));
                }
                answered.fetch_add(1, Ordering::SeqCst);
            }
            failures
        }));
    }
    for generation in 1..=12u64 {
        if generation % 3 == 0 {
            std::fs::write(gw.config_path(), "[server]\nlisten = 3\n").expect("write broken");
            let err = gw.gw().reload().await.expect_err("broken config refused");
            assert!(err.to_string().contains("invalid type"), "{err}");
            assert_eq!(
                get(&gw.url(&format!("/v{}", generation - 1)), &[])
                    .await
                    .status,
                200,
                "old config still serving"
            );
        } else {
            gw.rewrite(&generation_toml(generation), &up.url());
            gw.gw().reload().await.expect("good reload");
            assert_eq!(
                get(&gw.url(&format!("/v{generation}")), &[]).await.status,
                200,
                "generation {generation} visible at once"
            );
        }
        // Let the clients send a few requests under this generation before the next.
        let seen = answered.load(Ordering::SeqCst);
        let progress = || answered.load(Ordering::SeqCst) >= seen + 8;
        assert!(
            eventually(Duration::from_secs(20), progress).await,
            "the clients made progress under generation {generation}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        let failures = c.await.expect("client");
        assert!(
            failures.is_empty(),
            "requests failed during reloads: {failures:?}"
        );
    }
    assert!(
        answered.load(Ordering::SeqCst) > 50,
        "the clients really ran"
    );
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"ok\"} 8"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"error\"} 4"),
        "{metrics}"
    );
}

#[tokio::test]
async fn admin_reload_reports_errors_as_json() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reloadable("/load", 3).build(), &up.url()).await;
    gw.rewrite(&reloadable("/load", 0).build(), &up.url());
    let r = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(r.status, 422);
    let body = r.json();
    assert_eq!(body["status"], "error");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap_or("")
            .contains("burst must be a whole number"),
        "{body}"
    );
    gw.rewrite(&reloadable("/load", 4).build(), &up.url());
    let r = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");
    assert_eq!(
        get(&gw.url("/limited"), &[("x-tenant-id", "t")])
            .await
            .num("x-ratelimit-limit"),
        4
    );
    // The data plane never serves the admin API.
    assert_eq!(
        send(&http1(), "POST", &gw.url("/admin/reload"), &[], b"")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn the_binary_reloads_on_sighup_and_drains_on_sigterm() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, reloadable("/before", 3).build_for(&up.url())).expect("write");
    let mut gw = Process::run(&path);
    let base = format!("http://{}", gw.addr);
    assert_eq!(get(&format!("{base}/before"), &[]).await.status, 200);

    std::fs::write(&path, reloadable("/after", 3).build_for(&up.url())).expect("write");
    gw.signal("HUP");
    let after = format!("{base}/after");
    let seen = eventually_async(Duration::from_secs(20), || async {
        get(&after, &[]).await.status == 200
    })
    .await;
    assert!(seen, "SIGHUP applied the new route; log:\n{}", gw.log());

    // Ten requests in flight on a 1 s upstream, then SIGTERM: every one completes.
    let before = up.requests();
    let mut inflight = Vec::new();
    for _ in 0..10 {
        let url = format!("{base}/after/delay");
        inflight.push(tokio::spawn(async move {
            send(&http1(), "GET", &url, &[], b"").await.status
        }));
    }
    assert!(
        eventually(Duration::from_secs(20), || up.requests() == before + 10).await,
        "all ten reached the upstream: {} of 10",
        up.requests() - before
    );
    gw.signal("TERM");
    for r in inflight {
        assert_eq!(
            r.await.expect("request task"),
            200,
            "an accepted request was cut off"
        );
    }
    let code = tokio::task::spawn_blocking(move || {
        let code = gw.wait_exit(Duration::from_secs(20));
        (code, gw.log())
    })
    .await
    .expect("join");
    assert_eq!(code.0, Some(0), "exit 0 after draining; log:\n{}", code.1);
}

#[tokio::test]
async fn a_reload_names_what_needs_a_restart_and_applies_the_rest() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reloadable("/load", 3).build(), &up.url()).await;
    let moved = reloadable("/moved", 3)
        .listen("127.0.0.1:1")
        .store("max_keys = 5000");
    gw.rewrite(&moved.build(), &up.url());
    let report = gw.gw().reload().await.expect("reload");
    assert!(
        report.needs_restart.contains(&"server.listen".to_owned()),
        "{:?}",
        report.needs_restart
    );
    assert!(
        report.needs_restart.contains(&"store".to_owned()),
        "{:?}",
        report.needs_restart
    );
    // Listeners are never rebound; the new route applies at once on the old address.
    assert_eq!(get(&gw.url("/moved"), &[]).await.status, 200);
    // What is in effect is reported, and compared with on the next reload.
    let config = get(&gw.admin_url("/admin/config"), &[]).await.json();
    assert_eq!(
        config["server"]["listen"],
        gw.gw().shared().config().server.listen.to_string()
    );
    assert_ne!(config["server"]["listen"], "127.0.0.1:1");
    assert_eq!(config["store"]["max_keys"], 10_000_000, "{config}");
    let again = gw.gw().reload().await.expect("reload");
    assert!(
        again.needs_restart.contains(&"server.listen".to_owned()),
        "still not in effect: {:?}",
        again.needs_restart
    );
}

#[tokio::test]
async fn a_reload_drops_the_metric_series_of_what_it_removed() {
    let up = Upstream::start().await;
    let before = Fixture::new()
        .policy("p", "ip", 100, "1s", 100)
        .policy("q", "ip", 100, "1s", 100)
        .route("a", "/a", "api", &["p", "q"])
        .route("b", "/b", "api", &["p"])
        .build();
    let gw = TestGateway::start(&before, &up.url()).await;
    assert_eq!(get(&gw.url("/a"), &[]).await.status, 200);
    assert_eq!(get(&gw.url("/b"), &[]).await.status, 200);
    let series = |text: &str, name: &str| metric(text, name);
    let text = get(&gw.admin_url("/metrics"), &[]).await.text();
    let a_q = "tollgate_decisions_total{route=\"a\",policy=\"q\",outcome=\"admitted\"}";
    let a_p = "tollgate_decisions_total{route=\"a\",policy=\"p\",outcome=\"admitted\"}";
    let b_2xx = "tollgate_responses_total{route=\"b\",status=\"2xx\"}";
    assert_eq!(series(&text, a_q), 1.0);
    assert_eq!(series(&text, b_2xx), 1.0);

    let after = Fixture::new()
        .policy("p", "ip", 100, "1s", 100)
        .route("a", "/a", "api", &["p"])
        .build();
    gw.rewrite(&after, &up.url());
    gw.gw().reload().await.expect("reload");
    let text = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        series(&text, a_q).is_nan(),
        "the tier removed from route a is gone"
    );
    assert!(series(&text, b_2xx).is_nan(), "route b is gone");
    assert!(
        !text.contains("route=\"b\""),
        "no series of route b left:\n{text}"
    );
    assert_eq!(
        series(&text, a_p),
        1.0,
        "what stays keeps counting where it was"
    );
    assert_eq!(get(&gw.url("/a"), &[]).await.status, 200);
    let text = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert_eq!(series(&text, a_p), 2.0);
}

#[tokio::test]
async fn admin_answers_errors_included_are_never_cached() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&Fixture::new().build(), &up.url()).await;
    for path in [
        "/admin/config",
        "/admin/limits/nope/x",
        "/nowhere",
        "/metrics",
    ] {
        let r = get(&gw.admin_url(path), &[]).await;
        assert_eq!(
            r.header("cache-control"),
            Some("no-store"),
            "{path}: {}",
            r.status
        );
    }
}

#[test]
fn a_header_key_without_missing_and_mistyped_values_get_hints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("first-day.toml");
    let header = BASE.replace("key = \"ip\"", "key = \"header:x-tenant-id\"");
    std::fs::write(&path, &header).expect("write");
    let config = tollgate::config::load(&path).expect("valid, with a warning");
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0]
            .contains("every request without its key (header:x-tenant-id) shares one bucket")
            && config.warnings[0].contains("missing = \"skip\""),
        "{}",
        config.warnings[0]
    );
    let meant = header.replace("burst = 5", "burst = 5\nmissing = \"shared\"");
    std::fs::write(&path, meant).expect("write");
    let said = tollgate::config::load(&path).expect("valid");
    assert!(said.warnings.is_empty(), "{:?}", said.warnings);

    let cases = [
        (
            "targets = [\"http://127.0.0.1:3000\"]",
            "targets = \"http://127.0.0.1:3000\"",
            "put the value in brackets",
        ),
        ("limit = 10", "limit = 10.5", "a whole number"),
    ];
    for (from, to, hint) in cases {
        let got = errors_of(&BASE.replacen(from, to, 1));
        assert!(got.contains(hint), "for {to:?}: {got}");
    }
}
