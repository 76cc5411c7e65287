//! `redis-cli monitor` on a test's server: every command the server serves, as it serves
//! it, so a test can count the calls of one kind (a gateway's rate scripts, say) apart
//! from the background calls every gateway makes (its read of the fleet's overrides).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct RedisMonitor {
    port: u16,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl RedisMonitor {
    /// Starts monitoring the server on `port`; returns once the server has said it
    /// monitors (so no command served after this returns is missed).
    pub fn start(port: u16) -> Self {
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "monitor"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli is installed (apt-get install redis-tools)");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("monitor lines").push(line);
            }
        });
        let monitor = Self { port, child, lines };
        let deadline = Instant::now() + Duration::from_secs(10);
        let started = || {
            monitor
                .lines
                .lock()
                .expect("monitor lines")
                .iter()
                .any(|l| l == "OK")
        };
        while !started() {
            assert!(Instant::now() < deadline, "redis-cli monitor did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        monitor
    }

    /// Waits until the monitor has seen every command the server served before this call:
    /// the feed lags the server, so a count read at once could miss the last calls. The
    /// server feeds commands in the order it serves them, so once a marker sent now has
    /// come through, everything before it has.
    fn catch_up(&self) {
        static MARKERS: AtomicU64 = AtomicU64::new(0);
        let marker = format!("monitor-marker-{}", MARKERS.fetch_add(1, Ordering::Relaxed));
        super::redis_server::redis_cli(self.port, &["ECHO", &marker]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = || {
            let lines = self.lines.lock().expect("monitor lines");
            lines.iter().rev().any(|l| l.contains(&marker))
        };
        while !seen() {
            assert!(
                Instant::now() < deadline,
                "the monitor fell behind the server"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The gateway's script calls (`EVALSHA` / `EVAL`: its decisions, draws and settles)
    /// since the monitor started — not the commands a script runs, and not the calls on
    /// the fleet's overrides (`tg:{overrides}:…`), which every gateway reads once a second
    /// whatever its traffic, nor its store probe (`…:probe`, a write each half second),
    /// nor its heartbeat in the fleet's membership (`tg:{fleet}`, a script of its own
    /// each upkeep turn: one landing between two counts read as a second decision).
    /// Commands and names are compared in any case.
    pub fn decision_calls(&self) -> u64 {
        self.catch_up();
        let lines = self.lines.lock().expect("monitor lines");
        lines
            .iter()
            .filter(|l| !l.contains(" lua] "))
            .map(|l| l.to_ascii_lowercase())
            .filter(|l| l.contains("] \"evalsha\" ") || l.contains("] \"eval\" "))
            .filter(|l| !l.contains("{overrides}") && !l.contains(":probe\""))
            .filter(|l| !l.contains("\"tg:{fleet}\""))
            .count() as u64
    }
}

impl RedisMonitor {
    /// The script calls (`EVALSHA` / `EVAL`) one of whose words is `word` (an operation a
    /// script is asked for, `"expire"` of the overrides'), since the monitor started.
    pub fn script_calls_with(&self, word: &str) -> u64 {
        self.catch_up();
        let quoted = format!("\"{word}\"");
        let lines = self.lines.lock().expect("monitor lines");
        lines
            .iter()
            .filter(|l| !l.contains(" lua] "))
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("] \"evalsha\" ") || l.contains("] \"eval\" ")
            })
            .filter(|l| l.contains(&quoted))
            .count() as u64
    }
}

impl Drop for RedisMonitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
