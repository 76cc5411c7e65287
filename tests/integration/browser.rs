//! The admin status page in real headless Chromium (tests/browser/status_page.py): the page
//! loads, its chart and totals move with real traffic, and the playground denies after the
//! burst. Needs chromium, chromium-driver and Python's selenium: `scripts/test` installs
//! them and runs this test (a plain `cargo test` ignores it and says so); run by hand
//! without them, it fails saying what to install.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn browser_available() -> bool {
    Path::new("/usr/bin/chromium").exists()
        && Path::new("/usr/bin/chromedriver").exists()
        && std::process::Command::new("python3")
            .args(["-c", "import selenium"])
            .output()
            .is_ok_and(|o| o.status.success())
}

#[tokio::test]
#[ignore = "needs chromium, chromium-driver and selenium: scripts/test installs them and runs it (--include-ignored)"]
async fn status_page_in_headless_chromium() {
    assert!(
        browser_available(),
        "install chromium, chromium-driver and `pip install selenium`, or run scripts/test"
    );
    let up = Upstream::start().await;
    let toml = Fixture::new()
        // T = 10 s: the playground's 6 clicks cannot see a refill even on a busy machine.
        .policy("client", "ip", 1, "10s", 5)
        .policy("endpoint", "route", 100, "1s", 20)
        .policy_raw("inflight", "key = \"ip\"\nmax_in_flight = 8\n")
        .policy_raw(
            "monthly",
            "key = \"ip\"\nquota = 1000000\nwindow = \"month\"\ntimezone = \"Europe/Berlin\"\n",
        )
        .route(
            "search",
            "/v1/search",
            "api",
            &["endpoint", "client", "inflight", "monthly"],
        )
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let shots = tempfile::tempdir().expect("tempdir");
    let shots_dir = shots.path().display().to_string();
    let report = run_check(
        "status_page.py",
        vec![gw.admin_url(""), gw.url("/v1/search"), shots_dir],
        shots.path(),
        &["status-page.png", "playground.png"],
    )
    .await;
    assert!(
        report.contains("quota policies shown: monthly 1,000,000 per month"),
        "the quota policy's row with its window and reset: {report}"
    );
}

/// Runs `tests/browser/SCRIPT ARGS…` (within 3 minutes), asserts it passed, and that it
/// wrote each of `shots` into `dir`; returns what it printed.
async fn run_check(script: &str, args: Vec<String>, dir: &Path, shots: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/browser")
        .join(script);
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(path)
            .args(args)
            .output()
    });
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the browser check finishes within 3 minutes")
        .expect("join")
        .expect("python3 runs");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} failed:\n{report}");
    for shot in shots {
        let size = std::fs::metadata(dir.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 10_000, "{shot} was written ({size} bytes)");
    }
    report
}

/// With Redis unreachable, the page says so — the address, the cause, the breaker — instead
/// of a green "live" (tests/browser/store_down.py), and never shows the store's password.
#[tokio::test]
#[ignore = "needs chromium, chromium-driver and selenium: scripts/test installs them and runs it (--include-ignored)"]
async fn status_page_shows_a_store_that_cannot_be_reached() {
    assert!(
        browser_available(),
        "install chromium, chromium-driver and `pip install selenium`, or run scripts/test"
    );
    let up = Upstream::start().await;
    let port = free_port();
    let secret = "hunter2-page-secret";
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"redis://:{secret}@127.0.0.1:{port}\"\ntimeout = \"100ms\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n"
        ))
        .policy("client", "ip", 10, "1s", 10)
        .route("search", "/v1/search", "api", &["client"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    // Limited requests meet the dead store and open its breaker.
    for _ in 0..5 {
        assert_eq!(get(&gw.url("/v1/search"), &[]).await.status, 503);
    }
    let shots = tempfile::tempdir().expect("tempdir");
    let args = vec![
        gw.admin_url(""),
        format!("127.0.0.1:{port}"),
        secret.to_owned(),
        shots.path().display().to_string(),
    ];
    run_check("store_down.py", args, shots.path(), &["store-down.png"]).await;
}
