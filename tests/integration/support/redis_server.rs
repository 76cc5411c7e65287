//! Real `redis-server` processes on free loopback ports, and a real 3-node cluster.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port below 55535 (a cluster node's bus port is port + 10000).
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if port < 55_535 {
            return port;
        }
    }
    panic!("no free port below 55535");
}

/// A free port whose bus port (port + 10000) is free too, for a cluster node.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Launches that may fail because another process took the port first (the kernel hands
/// the same free ports to every test running beside this one).
const LAUNCH_TRIES: usize = 5;

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    cluster: bool,
}

pub(super) fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisServer {
    pub fn start() -> Self {
        Self::launch_on_a_free_port(false, &[])
    }

    /// A server on a port of its own: a launch that lost its port to another process is
    /// tried again on another.
    fn launch_on_a_free_port(cluster: bool, extra: &[&str]) -> Self {
        for _ in 0..LAUNCH_TRIES {
            let port = if cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            let dir = tempfile::tempdir().expect("tempdir");
            if let Some(server) = Self::launch_with(port, cluster, dir, extra) {
                return server;
            }
        }
        panic!("redis-server did not start on any of {LAUNCH_TRIES} free ports");
    }

    /// A server on `port` (as after a crash), or `None` when it cannot have the port.
    fn launch_with(
        port: u16,
        cluster: bool,
        dir: tempfile::TempDir,
        extra: &[&str],
    ) -> Option<Self> {
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ]);
        }
        let child = cmd
            .spawn()
            .expect("redis-server is installed (apt-get install redis-server)");
        let mut server = Self {
            child: Some(child),
            port,
            dir,
            cluster,
        };
        server.wait_ready().then_some(server)
    }

    /// Whether this process serves the port: another test's server answering on it, or
    /// this one gone (it could not bind), is a lost launch.
    fn wait_ready(&mut self) -> bool {
        let pid = self.child.as_ref().map(Child::id).expect("a child");
        let mine = format!("process_id:{pid}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let exited = self.child.as_mut().map(|c| c.try_wait());
            if !matches!(exited, Some(Ok(None))) {
                self.child = None;
                return false;
            }
            if redis_cli(self.port, &["INFO", "server"]).contains(&mine) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server on {} did not answer in 30 s", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `[store]` on this Redis: a 2 s timeout, and a request refused (503) when it
    /// cannot answer.
    pub fn store_toml(&self) -> String {
        redis_store(&format!("\"{}\"", self.url()))
    }

    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }

    /// Every command the server serves from now on (see [`RedisMonitor`]).
    pub fn monitor(&self) -> super::RedisMonitor {
        super::RedisMonitor::start(self.port)
    }

    /// Script calls the server has served (the GCRA script and its helpers).
    pub fn script_calls(&self) -> u64 {
        self.calls_of(&["evalsha", "eval"])
    }

    /// Calls of `commands` the server has served (`INFO commandstats`; an `INFO` asked
    /// for this counts from the next one on).
    pub fn calls_of(&self, commands: &[&str]) -> u64 {
        let prefixes: Vec<String> = commands.iter().map(|c| format!("cmdstat_{c}:")).collect();
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter(|l| prefixes.iter().any(|p| l.starts_with(p.as_str())))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([format!("-{sig}"), c.id().to_string()])
                .status();
        }
    }

    /// Freezes the server: connections stay open, nothing answers (a hung Redis).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills the server (connections refused from now on).
    pub fn kill(&mut self) {
        self.signal("CONT");
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a fresh server on the same port (state is gone, as after a crash).
    pub fn restart(&mut self) {
        self.kill();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
        let fresh = Self::launch_with(self.port, self.cluster, dir, &[])
            .unwrap_or_else(|| panic!("port {} was taken while its server was down", self.port));
        *self = fresh;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A cluster whose nodes run with `extra` settings too.
    pub fn start_with(extra: &[&str]) -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::launch_on_a_free_port(true, extra))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { nodes }
    }

    /// `[store]` on this Cluster, as [`RedisServer::store_toml`].
    pub fn store_toml(&self) -> String {
        redis_store(&self.urls_toml())
    }

    /// The same with a store timeout far past a test's waits (`60s`): what happens while
    /// a node is held back is the test's doing, not a timeout's.
    pub fn patient_store_toml(&self) -> String {
        let store = self
            .store_toml()
            .replace("timeout = \"2s\"", "timeout = \"60s\"");
        assert!(store.contains("timeout = \"60s\""), "{store}");
        store
    }

    /// Keys each node holds.
    pub fn sizes(&self) -> Vec<u64> {
        let size = |n: &RedisServer| n.cli(&["DBSIZE"]).trim().parse().expect("DBSIZE");
        self.nodes.iter().map(size).collect()
    }

    /// The rollback script loaded on every node, as on a Cluster that rolled back before
    /// (its first load goes to every master, a paused one too).
    pub fn load_rollback_everywhere(&self) {
        for node in &self.nodes {
            let rollback = include_str!("../../../src/store/rate/rollback.lua");
            assert_eq!(node.cli(&["SCRIPT", "LOAD", rollback]).trim().len(), 40);
        }
    }

    /// The TOML value for `url`: a list of the node URLs.
    pub fn urls_toml(&self) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("\"{}\"", n.url()))
            .collect();
        format!("[{}]", urls.join(", "))
    }
}

/// `[store]` on Redis at `url` (its TOML value): a 2 s timeout, `on_error = "deny"`.
pub fn redis_store(url: &str) -> String {
    format!("backend = \"redis\"\nurl = {url}\ntimeout = \"2s\"\non_error = \"deny\"")
}

/// A launch on a port another test's server holds is lost, not taken for its own: the
/// other server answers PING, but not with this launch's process.
#[test]
fn a_launch_on_a_taken_port_is_lost_and_the_next_one_gets_a_port_of_its_own() {
    let holder = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(RedisServer::launch_with(holder.port, false, dir, &[]).is_none());
    let other = RedisServer::start();
    assert_ne!(other.port, holder.port);
    assert_eq!(other.cli(&["PING"]).trim(), "PONG");
}
