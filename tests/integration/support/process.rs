//! The `tollgate` binary running as a child process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `tollgate` binary running as a child process, with its stderr collected.
pub struct Process {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The rate limit service's address, when `[rls]` is configured.
    pub rls: Option<SocketAddr>,
    pub stderr: Arc<Mutex<String>>,
}

impl Process {
    /// Runs `tollgate run --config PATH --ready-file …` and waits for the ready file.
    pub fn run(config: &std::path::Path) -> Self {
        Self::start(config, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `tollgate run --config PATH --ready-file … EXTRA…` and waits for the ready
    /// file; what went wrong (with the process's log) if it exited first.
    pub fn start(config: &std::path::Path, extra: &[&str]) -> Result<Self, String> {
        use std::io::BufRead;
        let ready = config.with_extension("ready.json");
        let _ = std::fs::remove_file(&ready);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["run", "--config"])
            .arg(config)
            .arg("--ready-file")
            .arg(&ready)
            .args(extra)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn tollgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().expect("lock").push_str(&(line + "\n"));
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let info: serde_json::Value = loop {
            if let Some(v) = std::fs::read(&ready)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
            {
                break v;
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Everything it wrote, up to its end.
                let _ = reader.join();
                return Err(format!(
                    "tollgate exited ({status}):\n{}",
                    log.lock().expect("lock")
                ));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no ready file within 30 s:\n{}",
                log.lock().expect("lock")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = |key: &str| info[key].as_str().and_then(|a| a.parse().ok());
        assert_eq!(info["pid"], child.id(), "the ready file is this process's");
        Ok(Self {
            addr: addr("listen").expect("listen address in the ready file"),
            admin: addr("admin"),
            rls: addr("rls"),
            child,
            stderr: log,
        })
    }

    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits up to `limit` for the process to exit; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn log(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`check_config`] on `text`, written as `tollgate.toml` in a directory of its own.
pub fn check_text(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write the config");
    check_config(&path)
}

/// Runs `tollgate check --config PATH`: whether it passed, and stdout and stderr together.
pub fn check_config(path: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("tollgate check runs");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), all)
}
