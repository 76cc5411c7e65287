//! Configuration: every validation error located with a hint, `tollgate check`, every
//! shipped config valid, a config beyond the open-file limit scaled down. Warnings and type
//! hints: `config_warnings.rs`; reloads: `config_reload.rs`.

use std::time::{Duration, Instant};

use super::bounds::open;

pub(super) const BASE: &str = r#"[server]
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
pub(super) fn errors_of(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).expect("write");
    match tollgate::config::load(&path) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string().replace(&path.display().to_string(), "FILE"),
    }
}

/// Each mistake: replace this, with this, and the expected "FILE:line:col: message"
/// fragment.
const MISTAKES: &[(&str, &str, &str)] = &[
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
        "period = \"1s\"",
        "period = \"1000000y\"",
        "FILE:10:10: `1000000y` is longer than 100 years",
    ),
    (
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\nheader_read_timeout = \"10000000000000000000s\"",
        "is longer than 100 years",
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

#[test]
fn every_mistake_is_located_with_a_hint() {
    for (from, to, expected) in MISTAKES {
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

#[test]
fn a_config_beyond_the_open_file_limit_is_scaled_down_and_still_serves() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let toml = open()
        .server("max_connections = 10000")
        .upstream("api", "max_connections = 1024")
        .build_for("http://127.0.0.1:9");
    std::fs::write(&path, toml).expect("write");
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg("ulimit -n 1024 && exec \"$0\" run --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_tollgate"))
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut warned = None;
    let mut serving = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !(serving && warned.is_some()) {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if line.contains("caps scaled down to fit") {
                warned = Some(line.clone());
            }
            serving |= line.contains("tollgate serving");
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warned = warned.expect("a warning naming the caps in effect");
    assert!(serving, "it started all the same");
    // 10 000 + 1024 scaled into 1024 − 512 (admin) − 64 (reserve) = 448, in proportion
    // (docs/operations.md § open files).
    assert!(
        warned.ends_with("limit=1024 max_connections=406 upstream_max_connections=api=41"),
        "{warned}"
    );
}
