//! An operator's commands against the real binary: `tollgate reload --admin` reloads the
//! one gateway it names, says what changed or why the file was refused, and exits 0, 2 or
//! 1 as documented.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

fn reload_cmd(admin: std::net::SocketAddr) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(["reload", "--admin", &admin.to_string(), "--timeout", "20s"])
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .env_remove("TOLLGATE_ADMIN");
    cmd
}

fn run(mut cmd: Command) -> (Option<i32>, String, String) {
    let out = cmd.output().expect("run tollgate reload");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn routes(prefix: &str) -> Fixture {
    Fixture::new()
        .policy("open", "ip", 1_000_000, "1s", 1_000_000)
        .route("api", prefix, "api", &["open"])
}

#[tokio::test]
async fn reload_command_applies_reports_and_refuses() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, routes("/before").build_for(&up.url())).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener");
    let base = format!("http://{}", gw.addr);
    assert_eq!(get(&format!("{base}/before"), &[]).await.status, 200);

    std::fs::write(&path, routes("/after").build_for(&up.url())).expect("write");
    let (code, out, err) = tokio::task::spawn_blocking(move || run(reload_cmd(admin)))
        .await
        .expect("join");
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(
        out.trim(),
        "reloaded: 1 routes, 1 policies\nroutes: changed api",
        "{out}"
    );
    assert_eq!(get(&format!("{base}/after"), &[]).await.status, 200);

    // A broken file: exit 2, its located errors on stderr, the running config kept.
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\nbrust = 1\n").expect("write");
    let (code, out, err) = tokio::task::spawn_blocking(move || run(reload_cmd(admin)))
        .await
        .expect("join");
    assert_eq!(code, Some(2), "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("reload refused; the running configuration is kept"),
        "{err}"
    );
    assert!(
        err.contains("tollgate.toml:3:1: unknown field `brust`"),
        "{err}"
    );
    assert_eq!(get(&format!("{base}/after"), &[]).await.status, 200);

    // Nobody listening: exit 1, naming the address.
    let nobody: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let (code, _, err) = tokio::task::spawn_blocking(move || run(reload_cmd(nobody)))
        .await
        .expect("join");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot connect to the admin API at {nobody}")),
        "{err}"
    );
}

#[tokio::test]
async fn reload_command_sends_the_token_from_a_file_or_the_environment() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "a-long-enough-admin-token-0123";
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{token}\n")).expect("write");
    let path = dir.path().join("tollgate.toml");
    let config = routes("/").server(format!("admin_token = \"{token}\""));
    std::fs::write(&path, config.build_for(&up.url())).expect("write");
    let gw = Process::run(&path);
    let admin = gw.admin.expect("admin listener");

    let (code, _, err) = tokio::task::spawn_blocking(move || run(reload_cmd(admin)))
        .await
        .expect("join");
    // Answered, and not reloaded: 2, as a refused file (the contract's "exit 0 or 2").
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("answered 401 Unauthorized (send the admin token"),
        "{err}"
    );

    let file = token_file.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = reload_cmd(admin);
        cmd.arg("--token-file").arg(&file);
        run(cmd)
    })
    .await
    .expect("join");
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");

    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = reload_cmd(admin);
        cmd.env("TOLLGATE_ADMIN_TOKEN", token);
        run(cmd)
    })
    .await
    .expect("join");
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(
        eventually(Duration::from_secs(5), || gw
            .log()
            .matches("configuration reloaded")
            .count()
            == 2)
        .await,
        "two reloads logged:\n{}",
        gw.log()
    );
}

/// The gateway at `base` serves `path` (a route of the config it runs).
async fn serves(base: &str, path: &str) -> bool {
    eventually_async(Duration::from_secs(20), || async {
        get(&format!("{base}{path}"), &[]).await.status == 200
    })
    .await
}

fn watched(prefix: &str, up: &Upstream) -> String {
    routes(prefix)
        .server("watch_config = true")
        .build_for(&up.url())
}

async fn reloads(gw: &Process, result: &str) -> u64 {
    let admin = gw.admin.expect("admin listener");
    let text = get(&format!("http://{admin}/metrics"), &[]).await.text();
    let series = format!("tollgate_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |v| v.trim().parse().expect("a count"))
}

/// A gateway process watching its config, serving `/one` at the returned base URL; the
/// config is `tollgate.toml` in the folder returned.
async fn watched_gateway(up: &Upstream) -> (tempfile::TempDir, Process, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, watched("/one", up)).expect("write");
    let gw = Process::run(&path);
    let base = format!("http://{}", gw.addr);
    assert_eq!(get(&format!("{base}/one"), &[]).await.status, 200);
    (dir, gw, base)
}

#[tokio::test]
async fn watch_config_reloads_edits_renames_and_refuses_broken_files() {
    let up = Upstream::start().await;
    let (dir, gw, base) = watched_gateway(&up).await;
    let path = dir.path().join("tollgate.toml");

    // Edited in place.
    std::fs::write(&path, watched("/two", &up)).expect("write");
    assert!(
        serves(&base, "/two").await,
        "in-place edit; log:\n{}",
        gw.log()
    );

    // Replaced by a rename, as editors and config tools do.
    let aside = dir.path().join(".tollgate.toml.new");
    std::fs::write(&aside, watched("/three", &up)).expect("write");
    std::fs::rename(&aside, &path).expect("rename");
    assert!(serves(&base, "/three").await, "rename; log:\n{}", gw.log());
    assert_eq!(reloads(&gw, "ok").await, 2);

    // A broken file: refused and logged with its error, the running config kept.
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\nbrust = 1\n").expect("write");
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            reloads(&gw, "error").await == 1
        })
        .await,
        "the refusal is counted; log:\n{}",
        gw.log()
    );
    assert!(gw.log().contains("unknown field `brust`"), "{}", gw.log());
    assert_eq!(get(&format!("{base}/three"), &[]).await.status, 200);

    // Fixed again: applied.
    std::fs::write(&path, watched("/four", &up)).expect("write");
    assert!(
        serves(&base, "/four").await,
        "fixed file; log:\n{}",
        gw.log()
    );
}

/// A config file that is a link into another folder (a checkout, a mounted volume):
/// edits of its target there are seen — in place, and by an editor's rename over it.
#[tokio::test]
async fn watch_config_follows_a_link_into_another_folder() {
    let up = Upstream::start().await;
    let (real, links) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let target = real.path().join("tollgate.toml");
    std::fs::write(&target, watched("/one", &up)).expect("write");
    let link = links.path().join("tollgate.toml");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let gw = Process::run(&link);
    let base = format!("http://{}", gw.addr);
    assert_eq!(get(&format!("{base}/one"), &[]).await.status, 200);
    std::fs::write(&target, watched("/two", &up)).expect("write");
    assert!(
        serves(&base, "/two").await,
        "in-place edit of the target; log:\n{}",
        gw.log()
    );
    let aside = real.path().join(".tollgate.toml.new");
    std::fs::write(&aside, watched("/three", &up)).expect("write");
    std::fs::rename(&aside, &target).expect("rename");
    assert!(
        serves(&base, "/three").await,
        "rename over the target; log:\n{}",
        gw.log()
    );
}

/// A file written in place in two steps, half a second apart (a slow `cp`, a generator
/// writing as it goes), is read once it holds still: its first half, a valid config on
/// its own, is never applied. One reload, of the whole file.
#[tokio::test]
async fn watch_config_does_not_reload_a_file_half_written() {
    use std::io::Write as _;
    let up = Upstream::start().await;
    let (dir, gw, base) = watched_gateway(&up).await;
    let path = dir.path().join("tollgate.toml");
    let half = watched("/half", &up);
    let rest = "\n[[routes]]\nname = \"whole\"\npath = \"/whole\"\nupstream = \"api\"\n";
    let mut file = std::fs::File::create(&path).expect("truncate");
    file.write_all(half.as_bytes()).expect("first half");
    file.sync_all().expect("sync");
    tokio::time::sleep(Duration::from_millis(600)).await;
    file.write_all(rest.as_bytes()).expect("second half");
    file.sync_all().expect("sync");
    drop(file);
    assert!(serves(&base, "/whole").await, "log:\n{}", gw.log());
    assert_eq!(get(&format!("{base}/half"), &[]).await.status, 200);
    assert_eq!(reloads(&gw, "ok").await, 1, "log:\n{}", gw.log());
}

#[tokio::test]
async fn watch_config_follows_a_configmap_swap() {
    use std::os::unix::fs::symlink;
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    // The kubelet's layout: tollgate.toml -> ..data/tollgate.toml, ..data -> ..<dated>.
    let first = root.join("..2026_12_01_10_00_00.1");
    std::fs::create_dir(&first).expect("mkdir");
    std::fs::write(first.join("tollgate.toml"), watched("/v1", &up)).expect("write");
    symlink("..2026_12_01_10_00_00.1", root.join("..data")).expect("link");
    symlink("..data/tollgate.toml", root.join("tollgate.toml")).expect("link");
    let gw = Process::run(&root.join("tollgate.toml"));
    let base = format!("http://{}", gw.addr);
    assert_eq!(get(&format!("{base}/v1"), &[]).await.status, 200);

    // An update: a new dated folder, a new link renamed over ..data, the old folder gone.
    let second = root.join("..2026_12_01_10_05_00.2");
    std::fs::create_dir(&second).expect("mkdir");
    std::fs::write(second.join("tollgate.toml"), watched("/v2", &up)).expect("write");
    symlink("..2026_12_01_10_05_00.2", root.join("..data_tmp")).expect("link");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
    std::fs::remove_dir_all(&first).expect("rm old");
    assert!(
        serves(&base, "/v2").await,
        "ConfigMap swap; log:\n{}",
        gw.log()
    );
    assert_eq!(get(&format!("{base}/v1"), &[]).await.status, 404);
}

/// `tollgate check` refuses exactly what `tollgate run` refuses, with the same located
/// first line (a systemd `ExecStartPre=tollgate check` then never passes a config the
/// start fails on).
#[test]
fn check_and_run_agree_on_bad_configs() {
    let base =
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:9\"]\n";
    let cases = [
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:63790000\"\n",
        "[store]\nbackend = \"redis\"\nurl = [\"redis://a:1\", \"http://b:2\"]\n",
        "[store]\nbackend = \"redis\"\nsentinels = [\"redis://h:99999\"]\nmaster = \"m\"\n",
        "[policies.p]\nkey = \"ip\"\nrate = \"10r/s\"\n",
        "[policies.p]\nkey = \"ip\"\nlimit = 1\nperiod = \"1s\"\nburst = 1\nmax_in_flight = 2\n",
        "[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"api\"\npolicy = [\"p\"]\n",
        "[policies.p]\nkey = \"ip\nlimit = 1\n",
        "[server.tls]\ncert = \"missing.pem\"\nkey = \"missing.key\"\n",
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, case) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.toml"));
        // A [server.tls] table belongs to [server]: put it right after it.
        let text = if case.starts_with("[server.tls]") {
            base.replacen("[upstreams.api]", &format!("{case}[upstreams.api]"), 1)
        } else {
            format!("{base}{case}")
        };
        std::fs::write(&path, text).expect("write");
        let run = |command: &str| {
            let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args([command, "--config"])
                .arg(&path)
                .output()
                .expect("run tollgate");
            let first = String::from_utf8_lossy(&out.stderr)
                .lines()
                .find(|l| l.contains(".toml:"))
                .unwrap_or_default()
                .to_owned();
            (out.status.code(), first)
        };
        let (check, run_) = (run("check"), run("run"));
        assert_eq!(check.0, Some(2), "check of case {i}: {check:?}");
        assert_eq!(check, run_, "case {i}: check and run disagree");
        assert!(!check.1.is_empty(), "case {i}: a located error");
    }
}
