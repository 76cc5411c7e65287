//! `tollgate reload` and `tollgate top` against the real binary: a reload says by name what
//! changed; pointed at anything but the admin listener (a gateway's data-plane port with a
//! catch-all route) they reload nothing and send the token nowhere; an answer past the
//! bound is refused without being held; `top --once` lines its columns up and says how
//! to send the token when it is missing.

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::*;

pub(super) const TOKEN: &str = "a-long-enough-admin-token-0123";

pub(super) fn tollgate(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args)
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .env_remove("TOLLGATE_ADMIN");
    cmd
}

/// Runs `cmd` off the test's runtime: its exit code, stdout and stderr.
pub(super) async fn run(mut cmd: Command) -> (Option<i32>, String, String) {
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run tollgate"))
        .await
        .expect("join");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(super) fn reload(admin: SocketAddr) -> Command {
    tollgate(&["reload", "--admin", &admin.to_string(), "--timeout", "20s"])
}

fn before() -> Fixture {
    Fixture::new()
        .upstream("gone", "")
        .policy("search", "ip", 1_000, "1s", 1_000)
        .policy("old", "ip", 1, "1s", 1)
        .route("api", "/", "api", &["search"])
        .route("legacy", "/legacy", "gone", &[])
        .route("moved", "/m1", "api", &[])
}

fn after() -> Fixture {
    Fixture::new()
        .upstream("api", "timeout = \"3s\"")
        .upstream("new", "")
        .policy("search", "ip", 2_000, "1s", 1_000)
        .policy_raw(
            "tenant",
            "key = \"header:x-tenant\"\nlimit = 10\nperiod = \"1s\"\nburst = 10\nmissing = \"reject\"\n",
        )
        .route("api", "/", "api", &["search"])
        .route("fresh", "/fresh", "new", &["tenant"])
        .route("moved", "/m2", "api", &[])
}

#[tokio::test]
async fn reload_names_the_routes_policies_and_upstreams_it_changed() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, before().build_for(&up.url())).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener");

    std::fs::write(&path, after().build_for(&up.url())).expect("write");
    let (code, out, err) = run(reload(admin)).await;
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "reloaded: 3 routes, 2 policies",
            "routes: added fresh; removed legacy; changed moved",
            "policies: added tenant; removed old; changed search",
            "upstreams: added new; removed gone; changed api",
        ],
        "{out}"
    );
    let fresh = get(&format!("http://{}/fresh", gw.addr), &[("x-tenant", "t")]).await;
    assert_eq!(fresh.status, 200, "the new config serves");

    // The same file again: said so.
    let (code, out, err) = run(reload(admin)).await;
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(out, "reloaded: 3 routes, 2 policies\nnothing changed\n");
    // The admin API's answer names them too, for scripts.
    let answer = post_reload(admin).await;
    assert_eq!(answer["status"], "ok", "{answer}");
    assert_eq!(
        answer["report"]["changes"]["policies"],
        serde_json::json!({"added": [], "removed": [], "changed": []})
    );
}

async fn post_reload(admin: SocketAddr) -> serde_json::Value {
    let url = format!("http://{admin}/admin/reload");
    let resp = send(&http1(), "POST", &url, &[], b"").await;
    assert_eq!(resp.header("tollgate-admin"), Some("1"), "the admin header");
    resp.json()
}

/// Reloads applied, as `/metrics` counts them (none before the first).
async fn reloads_applied(admin: SocketAddr) -> u64 {
    let text = get(&format!("http://{admin}/metrics"), &[]).await.text();
    text.lines()
        .find_map(|l| l.strip_prefix("tollgate_config_reloads_total{result=\"ok\"} "))
        .map_or(0, |v| v.trim().parse().expect("a count"))
}

#[tokio::test]
async fn pointed_at_the_data_plane_they_reload_nothing_and_keep_the_token() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let config = Fixture::new()
        .server(format!("admin_token = \"{TOKEN}\""))
        .policy("open", "ip", 1_000_000, "1s", 1_000_000)
        .route("everything", "/", "api", &["open"]);
    std::fs::write(&path, config.build_for(&up.url())).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener");

    let mut cmd = reload(gw.addr);
    cmd.env("TOLLGATE_ADMIN_TOKEN", TOKEN);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, Some(2), "stdout: {out}\nstderr: {err}");
    assert!(out.is_empty(), "{out}");
    let said = format!("{} does not look like tollgate's admin listener", gw.addr);
    assert!(err.contains(&said), "{err}");
    assert!(err.contains("the admin token was not sent"), "{err}");

    let mut cmd = tollgate(&["top", "--admin", &gw.addr.to_string(), "--once"]);
    cmd.env("TOLLGATE_ADMIN_TOKEN", TOKEN);
    let (code, _, err) = run(cmd).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&said), "{err}");

    // The upstream saw the two token-less probes and nothing else.
    assert_eq!(up.targets(), ["/healthz", "/healthz"]);
    assert!(up.authorizations().is_empty(), "{:?}", up.authorizations());
    assert_eq!(reloads_applied(admin).await, 0, "nothing reloaded");
    assert!(!gw.log().contains("configuration reloaded"), "{}", gw.log());

    // The same command at the admin listener works.
    let mut cmd = reload(admin);
    cmd.env("TOLLGATE_ADMIN_TOKEN", TOKEN);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(reloads_applied(admin).await, 1);
}

/// A server that answers `GET /healthz` as an admin listener would, and anything else with
/// the admin header and then `total` bytes: close-delimited, or announced by
/// `content-length` when `announced`. Counts the bytes it got to send.
async fn flooding_server(total: usize, announced: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let sent = Arc::new(AtomicUsize::new(0));
    let count = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    head.extend_from_slice(&chunk[..n]);
                    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    if head.starts_with(b"GET /healthz ") {
                        head.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\ntollgate-admin: 1\r\ncontent-length: 3\r\n\r\nok\n";
                        if stream.write_all(ok).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let length = if announced {
                        format!("content-length: {total}\r\n")
                    } else {
                        "connection: close\r\n".to_owned()
                    };
                    let top = format!("HTTP/1.1 200 OK\r\ntollgate-admin: 1\r\ncontent-type: application/json\r\n{length}\r\n[");
                    let _ = stream.write_all(top.as_bytes()).await;
                    let block = vec![b' '; 64 * 1024];
                    while count.load(Ordering::SeqCst) < total {
                        if stream.write_all(&block).await.is_err() {
                            return;
                        }
                        count.fetch_add(block.len(), Ordering::SeqCst);
                    }
                    return;
                }
            });
        }
    });
    (addr, sent)
}

/// Runs `cmd` to its end: exit code, stderr, and the most memory it held (KiB): its own
/// VmHWM, read every few milliseconds while it runs. (Not `wait4`'s `ru_maxrss`, which
/// counts the test process's memory too: the child's exec records the mm it came from,
/// and the test binary holds hundreds of MiB when the whole suite runs.)
fn run_measured(mut cmd: Command) -> (Option<i32>, String, i64) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0i64;
    let status = loop {
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("VmHWM:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<i64>().ok()
        });
        peak_kib = peak_kib.max(hwm.unwrap_or(0));
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    (status.code(), err, peak_kib)
}

#[tokio::test]
async fn an_answer_past_the_bound_is_refused_unread() {
    const TOTAL: usize = 256 << 20;
    let cases: [(bool, &[&str]); 2] = [(false, &["reload"]), (true, &["top", "--once"])];
    for (announced, command) in cases {
        let (addr, sent) = flooding_server(TOTAL, announced).await;
        let addr = addr.to_string();
        let mut args = vec![command[0], "--admin", &addr];
        args.extend(&command[1..]);
        let cmd = tollgate(&args);
        let (code, err, max_rss_kib) = tokio::task::spawn_blocking(move || run_measured(cmd))
            .await
            .expect("join");
        assert_eq!(code, Some(1), "{command:?}: {err}");
        assert!(
            err.contains("answered more than 1024 KiB: refused unread"),
            "{command:?}: {err}"
        );
        if command[0] == "reload" {
            assert!(
                err.contains("whether the reload applied is not known"),
                "{err}"
            );
        }
        assert!(
            max_rss_kib < 64 * 1024,
            "{command:?}: the command held {max_rss_kib} KiB"
        );
        let sent = sent.load(Ordering::SeqCst);
        assert!(
            sent < 64 << 20,
            "{command:?}: it read on: {sent} bytes sent"
        );
    }
}

/// Where each cell of `line` starts and ends (in characters): cells are parted by two
/// spaces or more.
fn cells(line: &str) -> Vec<(usize, usize)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        while i < chars.len() && !(chars[i] == ' ' && chars.get(i + 1) == Some(&' ')) {
            i += 1;
        }
        out.push((start, i));
        while i < chars.len() && chars[i] == ' ' {
            i += 1;
        }
    }
    out
}

#[tokio::test]
async fn top_once_lines_up_its_columns() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let config = Fixture::new()
        .policy("t", "header:x-k", 1, "1h", 1)
        .policy("tenant-per-hour", "header:x-k", 1, "1h", 1)
        .route("a", "/a", "api", &["t"])
        .route("b", "/b", "api", &["tenant-per-hour"]);
    std::fs::write(&path, config.build_for(&up.url())).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener").to_string();
    let base = format!("http://{}", gw.addr);
    for (path, key, times) in [
        ("/a", "k", 12),
        ("/a", "a-much-longer-key-0123456789", 3),
        ("/b", "b", 2),
    ] {
        for _ in 0..times {
            get(&format!("{base}{path}"), &[("x-k", key)]).await;
        }
    }

    let (code, out, err) = run(tollgate(&["top", "--admin", &admin, "--once"])).await;
    assert_eq!(
        code,
        Some(0),
        "stdout: {out}
stderr: {err}"
    );
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("POLICY"))
        .collect();
    assert_eq!(
        lines.len(),
        4,
        "a heading and three keys:
{out}"
    );
    let heading = cells(lines[0]);
    assert_eq!(heading.len(), 6, "{}", lines[0]);
    for line in &lines[1..] {
        let row = cells(line);
        assert_eq!(
            row.len(),
            6,
            "{line}
{out}"
        );
        // Names start where their heading starts, numbers end where theirs ends.
        for (i, (cell, head)) in row.iter().zip(&heading).enumerate() {
            if i < 2 {
                assert_eq!(
                    cell.0, head.0,
                    "column {i} of {line:?}:
{out}"
                );
            } else {
                assert_eq!(
                    cell.1, head.1,
                    "column {i} of {line:?}:
{out}"
                );
            }
        }
    }
    assert!(
        out.contains(" 11 "),
        "two-digit and one-digit counts:
{out}"
    );
}

#[tokio::test]
async fn top_without_the_token_says_how_to_send_it() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let config = Fixture::new()
        .server(format!("admin_token = \"{TOKEN}\""))
        .route("a", "/", "api", &[]);
    std::fs::write(&path, config.build_for(&up.url())).expect("write");
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, TOKEN).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener").to_string();

    let (code, out, err) = run(tollgate(&["top", "--admin", &admin, "--once"])).await;
    assert_eq!(code, Some(2), "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("answered 401 Unauthorized (send the admin token: --token-file or TOLLGATE_ADMIN_TOKEN)"),
        "{err}"
    );
    let mut cmd = tollgate(&["top", "--admin", &admin, "--once", "--token-file"]);
    cmd.arg(&token_file);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("POLICY"), "{out}");
}
