//! A real upstream from another ecosystem (Python's MCP SDK, Django, Node's busboy): a
//! script of this repository run on a free port, waited for until it listens, stopped
//! on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually_async, free_port};

pub struct ScriptUpstream {
    child: Child,
    port: u16,
}

impl ScriptUpstream {
    /// Runs `program SCRIPT PORT` (`script` under the repository's root); `installs`
    /// names what scripts/test installs for it, for the message when it cannot start.
    pub async fn start(program: &str, script: &str, installs: &str) -> Self {
        let port = free_port();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        let child = Command::new(program)
            .arg(path)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} runs ({e}; scripts/test installs {installs})"));
        let upstream = Self { child, port };
        let up = eventually_async(Duration::from_secs(60), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(
            up,
            "{script} listens on {port} (scripts/test installs {installs})"
        );
        upstream
    }

    /// `path` on it (`""` for its origin).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for ScriptUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
