//! The gateway in this process, started from TOML text on 127.0.0.1:0.

use std::net::SocketAddr;
use std::sync::Arc;

use tollgate::clock::{Clock, FakeClock};
use tollgate::gateway::Gateway;

/// One second and one millisecond, in the clock's nanoseconds.
pub const S: u64 = 1_000_000_000;
pub const MS: u64 = 1_000_000;

/// A gateway started from TOML text (with `{upstream}` replaced), on 127.0.0.1:0.
pub struct TestGateway {
    pub gateway: Option<Gateway>,
    pub clock: FakeClock,
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The rate limit service's address, when `[rls]` is configured.
    pub rls: Option<SocketAddr>,
}

impl TestGateway {
    /// Starts with a fake clock at 1000 s: tests move time explicitly.
    pub async fn start(toml: &str, upstream: &str) -> Self {
        Self::start_with_clock(toml, upstream, Some(FakeClock::at(1000 * S))).await
    }

    /// Starts on the real monotonic clock (for max_delay and reload tests).
    pub async fn start_real_clock(toml: &str, upstream: &str) -> Self {
        Self::start_with_clock(toml, upstream, None).await
    }

    async fn start_with_clock(toml: &str, upstream: &str, fake: Option<FakeClock>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, toml.replace("{upstream}", upstream)).expect("write config");
        let config = tollgate::config::load(&path)
            .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n\n{toml}"));
        let clock_handle = fake.clone().unwrap_or_default();
        let clock: Arc<dyn Clock> = match fake {
            Some(f) => Arc::new(f),
            None => Arc::new(tollgate::clock::MonotonicClock::new()),
        };
        let gateway = Gateway::start_with(config, clock)
            .await
            .expect("gateway starts");
        let addr = gateway.addr();
        let admin = gateway.admin_addr();
        let rls = gateway.rls_addr();
        Self {
            rls,
            gateway: Some(gateway),
            clock: clock_handle,
            dir,
            addr,
            admin,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin.expect("admin listener"), path)
    }

    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("tollgate.toml")
    }

    pub fn rewrite(&self, toml: &str, upstream: &str) {
        std::fs::write(self.config_path(), toml.replace("{upstream}", upstream))
            .expect("write config");
    }

    pub fn gw(&self) -> &Gateway {
        self.gateway.as_ref().expect("running")
    }

    pub fn advance(&self, ns: u64) {
        self.clock.advance(ns);
    }

    /// Waits (up to 30 s) until a request to `path` as `tenant` is admitted: a Redis
    /// Cluster is connected in the background after start. Use a tenant of its own, so
    /// the tenants a test measures are untouched.
    pub async fn wait_for_store(&self, path: &str, tenant: &str) {
        self.wait_for_store_with(path, "x-tenant-id", tenant).await;
    }

    /// [`TestGateway::wait_for_store`] for routes keyed by another header.
    pub async fn wait_for_store_with(&self, path: &str, header: &str, value: &str) {
        let url = self.url(path);
        let ready = super::eventually_async(std::time::Duration::from_secs(30), || async {
            super::get(&url, &[(header, value)]).await.status == 200
        })
        .await;
        assert!(ready, "the store answers");
    }

    /// Restarts `redis` (its keys gone) once this gateway's upkeep has read the node, so
    /// its next turn compares with that; returns once the gateway counted the restart
    /// and stored the fleet's key secret in it again.
    pub async fn sees_restart_of(&self, redis: &mut super::RedisServer) {
        use std::time::Duration;
        let mut asked = 0;
        let seen = super::eventually(Duration::from_secs(10), || {
            let gateway_read_it = redis.calls_of(&["info"]) > asked;
            asked += 1;
            gateway_read_it
        })
        .await;
        assert!(seen, "the gateway's upkeep reads the node");
        let secret = redis.cli(&["GET", "tg:{secret}"]);
        redis.restart();
        let counted = super::metric_reaches(
            Duration::from_secs(20),
            &self.admin_url("/metrics"),
            "tollgate_store_events_total{kind=\"restart\"}",
            1.0,
        )
        .await;
        assert!(counted, "the restart is counted");
        let replanted = super::eventually(Duration::from_secs(10), || {
            redis.cli(&["GET", "tg:{secret}"]) == secret
        })
        .await;
        assert!(replanted, "the fleet's secret is stored again");
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(g) = self.gateway.take() {
            // Stop accepting and drain in the background; the runtime ends with the test.
            tokio::spawn(g.shutdown());
        }
    }
}
