//! A real Redis Sentinel set on free loopback ports: a master, a replica and three
//! Sentinels (`redis-server --sentinel`) watching them with a short failover timeout.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::{free_port, redis_cli, RedisServer};

/// The name the Sentinels monitor the master by.
pub const MASTER: &str = "tollgate-test";

pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start();
        replica.cli(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]);
        let synced = wait(Duration::from_secs(30), || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        assert!(synced, "the replica did not sync with the master");
        let dir = tempfile::tempdir().expect("tempdir");
        let sentinels = (0..3)
            .map(|i| launch_sentinel(dir.path(), i, master.port))
            .collect();
        let set = Self {
            master,
            replica,
            sentinels,
            _dir: dir,
        };
        // Every Sentinel knows the master and its replica before a test relies on them.
        for (port, _) in &set.sentinels {
            let knows = wait(Duration::from_secs(30), || {
                sentinel_cli(*port, &["SENTINEL", "replicas", MASTER]).contains("127.0.0.1")
            });
            assert!(knows, "Sentinel on {port} did not find the replica");
        }
        set
    }

    /// The TOML value for `sentinels`.
    pub fn urls_toml(&self) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|(p, _)| format!("\"redis://127.0.0.1:{p}\""))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    /// Asks the Sentinels for a failover (the old master stays up, and takes writes until
    /// they demote it).
    pub fn failover(&self) {
        sentinel_cli(self.sentinels[0].0, &["SENTINEL", "FAILOVER", MASTER]);
    }

    /// The port of the master the Sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        let answer = sentinel_cli(
            self.sentinels[0].0,
            &["SENTINEL", "get-master-addr-by-name", MASTER],
        );
        answer.lines().nth(1)?.trim().parse().ok()
    }
}

impl SentinelSet {
    /// Stops every Sentinel (the master and its replica go on).
    pub fn stop_sentinels(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sentinel `i` watching the master on `master_port`, on a port of its own: a launch that
/// lost its port to another process (it exits, or another server answers) is tried again.
fn launch_sentinel(dir: &Path, i: usize, master_port: u16) -> (u16, Child) {
    for _ in 0..5 {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir.display(),
            ),
        )
        .expect("write sentinel config");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs as a Sentinel");
        let mine = format!("process_id:{}", child.id());
        let mut alive = true;
        let answered = wait(Duration::from_secs(30), || {
            alive = matches!(child.try_wait(), Ok(None));
            !alive || sentinel_cli(port, &["INFO", "server"]).contains(&mine)
        });
        if answered && alive {
            return (port, child);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("no Sentinel started on any of 5 free ports");
}

fn sentinel_cli(port: u16, args: &[&str]) -> String {
    redis_cli(port, args)
}

fn wait(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
