//! Podman for the container test, bounded: the command on runc, the ulimits the image
//! runs under, every call cut at its time limit with its output kept, and the image and
//! container the test made removed however it ends.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `podman`, on runc when it is installed (scripts/test installs it): a podman whose
/// default runtime is crun fails on this kind of machine (crun refuses a cgroup v1 or
/// hybrid setup: "cgroups in hybrid mode not supported"), runc works on every setup.
/// `TOLLGATE_TEST_PODMAN_RUNTIME` names another runtime (a path or a name podman knows).
fn podman_command() -> Command {
    let mut podman = Command::new("podman");
    let chosen = std::env::var("TOLLGATE_TEST_PODMAN_RUNTIME")
        .ok()
        .or_else(|| {
            ["/usr/sbin/runc", "/usr/bin/runc"]
                .into_iter()
                .find(|path| Path::new(path).exists())
                .map(str::to_owned)
        });
    if let Some(runtime) = chosen {
        podman.arg("--runtime").arg(runtime);
    }
    podman
}

/// podman here has no CAP_SYS_RESOURCE: limits it would raise to its defaults fail, so
/// containers get limits within the current ones.
pub(super) fn ulimits() -> Vec<String> {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
    let nofile = hard.min(65_536);
    vec![
        "--ulimit".into(),
        "nproc=1024:1024".into(),
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
    ]
}

/// Runs a command, its output collected, killed when it outlives `limit`.
pub(super) fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = err.join().unwrap_or_default();
            panic!(
                "{what} still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// `podman ARGS`, off the runtime (the upstream in this process keeps serving), bounded.
pub(super) async fn podman(args: Vec<String>, limit: Duration) -> Output {
    tokio::task::spawn_blocking(move || run_bounded(podman_command().args(args), limit))
        .await
        .expect("join")
}

pub(super) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

pub(super) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(super) fn podman_available() -> bool {
    podman_command()
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The image and the container this test made: removed when it ends, however it ends.
pub(super) struct Made {
    pub(super) image: String,
    pub(super) container: String,
}

impl Made {
    pub(super) async fn logs(&self) -> String {
        let out = podman(strings(&["logs", &self.container]), Duration::from_secs(60)).await;
        format!(
            "container log:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    pub(super) async fn state(&self, field: &str) -> String {
        let out = podman(
            strings(&[
                "inspect",
                "--format",
                &format!("{{{{.State.{field}}}}}"),
                &self.container,
            ]),
            Duration::from_secs(60),
        )
        .await;
        assert!(out.status.success(), "podman inspect: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `podman exec CONTAINER ARGS`.
    pub(super) async fn exec(&self, args: &[&str]) -> Output {
        let mut all = strings(&["exec", &self.container]);
        all.extend(strings(args));
        podman(all, Duration::from_secs(60)).await
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let limit = Duration::from_secs(120);
        let _ = run_bounded(
            podman_command().args(["rm", "--force", "--time", "0", &self.container]),
            limit,
        );
        let _ = run_bounded(
            podman_command().args(["rmi", "--force", &self.image]),
            limit,
        );
    }
}
