//! The README's demo, run as a user would: `tollgate run --config config/tollgate.toml
//! --demo-upstream 127.0.0.1:3000`, then curl, then Ctrl-C. Only the ports differ: the
//! shipped file is copied with free ones, so the test runs beside anything.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// The shipped config with `from` replaced by `to`, which must be there exactly once.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "config/tollgate.toml should hold {from:?} once (the README's demo relies on it)"
    );
    text.replacen(from, to, 1)
}

/// Whether anything accepts connections on `addr`.
fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

#[tokio::test]
async fn the_readme_demo_serves_200s_then_429s_and_stops_on_ctrl_c() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/tollgate.toml"))
            .expect("config/tollgate.toml");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let (mut gw, demo) = start_demo(&shipped, &path);
    let admin = gw.admin.expect("an admin listener");
    let refused = curl_until_refused(&gw).await;
    check_refusal_headers(&refused);

    // `curl localhost:9901/metrics` and the status page.
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await;
    assert_eq!(metrics.status, 200);
    let denied = metric(
        &metrics.text(),
        r#"tollgate_decisions_total{route="search",policy="client",outcome="denied"}"#,
    );
    assert!(denied >= 1.0, "the refusal is counted:\n{}", metrics.text());
    assert_eq!(get(&format!("http://{admin}/"), &[]).await.status, 200);

    // Ctrl-C: both the gateway and the demo upstream beside it stop, and nothing is left
    // listening on any of the three ports.
    let ports = [
        ("data plane", gw.addr),
        ("admin", admin),
        ("demo upstream", demo),
    ];
    for (what, addr) in ports {
        assert!(
            listening(addr),
            "the {what} listens on {addr} while running"
        );
    }
    gw.signal("INT");
    assert_eq!(
        gw.wait_exit(Duration::from_secs(60)),
        Some(0),
        "exit 0 after SIGINT:\n{}",
        gw.log()
    );
    for (what, addr) in ports {
        assert!(!listening(addr), "the {what} on {addr} is still listening");
    }
}

/// Starts the demo from the shipped config, written to `path` with free ports: the gateway
/// and the demo upstream's address. The demo upstream's port must be known before the
/// start; another process may take a free port before tollgate binds it, so a start that
/// finds it taken is retried.
fn start_demo(shipped: &str, path: &Path) -> (Process, SocketAddr) {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let demo: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let config = replace_once(
            &replace_once(
                &replace_once(
                    shipped,
                    r#"listen = "127.0.0.1:8080""#,
                    r#"listen = "127.0.0.1:0""#,
                ),
                r#"admin_listen = "127.0.0.1:9901""#,
                r#"admin_listen = "127.0.0.1:0""#,
            ),
            r#""http://127.0.0.1:3000""#,
            &format!(r#""http://{demo}""#),
        );
        std::fs::write(path, config).expect("write config");
        match Process::start(path, &["--demo-upstream", &demo.to_string()]) {
            Ok(gw) => break (gw, demo),
            Err(log) if attempts < 3 && log.contains("cannot serve the demo upstream") => {}
            Err(log) => panic!("{log}"),
        }
    }
}

/// `for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code}\n'
/// localhost:8080/v1/search; done`: five 200s, then 429s. One more request is admitted
/// each second, so on a slow machine a 200 may come between the 429s: keep asking
/// until a 429 comes. Returns the 429.
async fn curl_until_refused(gw: &Process) -> Got {
    let search = format!("http://{}/v1/search", gw.addr);
    let mut statuses = Vec::new();
    let refused = loop {
        let got = get(&search, &[]).await;
        statuses.push(got.status.as_u16());
        if got.status == 429 {
            break got;
        }
        assert_eq!(got.status, 200, "{statuses:?}\n{}", gw.log());
        assert_eq!(
            got.json()["path"],
            "/v1/search",
            "the demo upstream answered"
        );
        assert!(statuses.len() < 50, "no 429 after {statuses:?}");
    };
    assert!(
        statuses.len() >= 6 && statuses[..5] == [200; 5],
        "five at once, then a refusal: {statuses:?}"
    );
    refused
}

/// The 429's body and headers, as the binary writes them (`curl -i`).
fn check_refusal_headers(refused: &Got) {
    assert!(refused.num("retry-after") >= 1);
    assert_eq!(refused.json()["policy"], "client", "{}", refused.text());
    assert_eq!(refused.header("content-type"), Some("application/json"));
    assert_eq!(refused.header("vary"), Some("accept"));
    assert_eq!(refused.num("x-ratelimit-limit"), 5, "{:?}", refused.headers);
    assert_eq!(refused.num("x-ratelimit-remaining"), 0);
    assert!(refused.num("x-ratelimit-reset") >= 1);
    let policy = refused.header("ratelimit-policy").unwrap_or_default();
    assert!(policy.contains("\"client\";q=5;"), "{policy}");
    let current = refused.header("ratelimit").unwrap_or_default();
    assert!(current.contains("\"client\";r=0;t="), "{current}");
}
