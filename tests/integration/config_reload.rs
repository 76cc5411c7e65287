//! Reloads on the real binary and in process: limiter state kept when the numbers change,
//! nothing dropped under load, errors answered as JSON, SIGHUP and SIGTERM, what needs a
//! restart named, metric series of what was removed dropped, admin answers never cached.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;

/// Two routes: `limited` (each tenant `burst` at once, then one a minute) and `load` on
/// `path_prefix`, under a limit no test reaches.
pub(super) fn reloadable(path_prefix: &str, burst: u64) -> Fixture {
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

/// `tollgate_config_last_reload_successful` and `…_success_timestamp_seconds` of `gw`.
async fn last_reload(gw: &TestGateway) -> (i64, i64) {
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let value = |name: &str| {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{name} ")));
        let line = line.unwrap_or_else(|| panic!("no {name} in {metrics}"));
        line[name.len() + 1..]
            .trim()
            .parse::<i64>()
            .expect("a whole number")
    };
    (
        value("tollgate_config_last_reload_successful"),
        value("tollgate_config_last_reload_success_timestamp_seconds"),
    )
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
    // An alert can wait on the last reload's outcome, not only on the error counter.
    let applied = last_reload(&gw).await;
    assert_eq!(applied.0, 0, "the last reload was refused");
    assert!(
        applied.1 > 1_700_000_000,
        "applied at the start: {applied:?}"
    );
    gw.rewrite(&reloadable("/load", 4).build(), &up.url());
    let r = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");
    let again = last_reload(&gw).await;
    assert_eq!(again.0, 1, "the last reload applied its file");
    assert!(again.1 >= applied.1, "{again:?} after {applied:?}");
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

/// A hundred reloads asked at once (an admin script in a loop, a caller that asks and
/// hangs up) queue no hundred reloads: those asked while one waits to begin share its
/// outcome. Every caller is answered with the reload that read the file after it asked.
#[tokio::test]
async fn reloads_asked_at_once_share_the_one_waiting() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reloadable("/load", 3).build(), &up.url()).await;
    gw.rewrite(&reloadable("/load", 5).build(), &up.url());
    let url = gw.admin_url("/admin/reload");
    let asked: Vec<_> = (0..100)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { send(&http1(), "POST", &url, &[], b"").await })
        })
        .collect();
    for answer in asked {
        let r = answer.await.expect("answered");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["status"], "ok");
    }
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let done = metric(&metrics, "tollgate_config_reloads_total{result=\"ok\"}");
    assert!((1.0..50.0).contains(&done), "{done} reloads for 100 asked");
}
