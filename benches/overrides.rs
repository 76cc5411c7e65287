//! `cargo bench --bench overrides`: what one runtime override change costs as the number
//! of overrides grows, through the real admin API of a real gateway.
//!
//! Memory: a gateway with `overrides_file`, started from a journal of N overrides, takes
//! 1,000 `PUT`s of new overrides one after another; per N, the mean, median and 99th
//! percentile time per `PUT` (each includes the appended line's `fdatasync`).
//! Redis (when `redis-server` is on the PATH): two gateways on one Redis; the first is
//! loaded with N overrides, then takes 1,000 `PUT`s while the second follows; per N,
//! the time per `PUT` and the bytes Redis sent per change (to both gateways, all calls
//! included), which stay flat where a re-read of the whole set grew with N.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::clock::MonotonicClock;
use tollgate::gateway::Gateway;

/// What one run measures: PUTs per size, and the sizes.
struct Run {
    changes: usize,
    sizes: &'static [usize],
}

/// `cargo test --benches` runs benches without `--bench`: that smoke run stays small.
fn run() -> Run {
    if std::env::args().any(|a| a == "--bench") {
        Run {
            changes: 1_000,
            // The last size ends at the gateway's maximum, 100,000.
            sizes: &[1_000, 10_000, 99_000],
        }
    } else {
        println!("overrides bench smoke run under `cargo test` (unoptimised build): the times are not a measurement; run `cargo bench --bench overrides`");
        Run {
            changes: 50,
            sizes: &[100, 1_000],
        }
    }
}

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn config(dir: &std::path::Path, store: &str, file: bool) -> std::path::PathBuf {
    let path = dir.join("tollgate.toml");
    let overrides = if file {
        format!("overrides_file = {:?}\n", dir.join("overrides.json"))
    } else {
        String::new()
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = false\nworkers = 1\n{overrides}\
         [store]\n{store}\n\
         [upstreams.api]\ntargets = [\"http://127.0.0.1:9\"]\n\
         [policies.tenant]\nkey = \"header:x-tenant-id\"\nlimit = 10\nperiod = \"1s\"\nburst = 10\n\
         [[routes]]\nname = \"api\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"tenant\"]\n"
    );
    std::fs::write(&path, text).expect("config written");
    path
}

/// A journal holding `n` overrides, as the gateway writes it.
fn journal(dir: &std::path::Path, n: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("overrides.json")).unwrap());
    writeln!(f, "{{\"tollgate_overrides\":2}}").unwrap();
    for i in 0..n {
        writeln!(
            f,
            "{{\"put\":{{\"policy\":\"tenant\",\"key\":[\"loaded-{i}\"],\"set\":{{\"burst\":20}}}}}}"
        )
        .unwrap();
    }
}

async fn start(path: &std::path::Path) -> Gateway {
    let config = tollgate::config::load(path).unwrap_or_else(|e| panic!("{e}"));
    Gateway::start_with(config, Arc::new(MonotonicClock::new()))
        .await
        .expect("gateway starts")
}

/// One `PUT` of an override; its time.
async fn put(http: &Http, gw: &Gateway, key: &str) -> Duration {
    let uri = format!(
        "http://{}/admin/overrides/tenant/{key}",
        gw.admin_addr().expect("admin listener")
    );
    let req = hyper::Request::put(uri)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"burst": 30}"#)))
        .unwrap();
    let started = Instant::now();
    let resp = http.request(req).await.expect("admin answers");
    let status = resp.status();
    let body = resp.into_body().collect().await.map(|b| b.to_bytes());
    let took = started.elapsed();
    assert_eq!(status, 200, "PUT {key}: {body:?}");
    took
}

struct Times(Vec<Duration>);

impl Times {
    fn line(mut self) -> String {
        self.0.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mean = self.0.iter().sum::<Duration>() / self.0.len() as u32;
        format!(
            "mean {:.3} ms  p50 {:.3} ms  p99 {:.3} ms",
            ms(mean),
            ms(self.0[self.0.len() / 2]),
            ms(self.0[self.0.len() * 99 / 100])
        )
    }
}

async fn memory(http: &Http, run: &Run) {
    println!("memory, overrides_file (each PUT appends one line and syncs it):");
    for &n in run.sizes {
        let dir = tempfile::tempdir().unwrap();
        journal(dir.path(), n);
        let gw = start(&config(dir.path(), "backend = \"memory\"", true)).await;
        let mut times = Vec::with_capacity(run.changes);
        for i in 0..run.changes {
            times.push(put(http, &gw, &format!("new-{i}")).await);
        }
        println!(
            "  {n:>6} to {:>6} overrides: {}",
            n + run.changes,
            Times(times).line()
        );
        gw.shutdown().await;
    }
}

struct Redis(Child, u16);

impl Redis {
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        let redis = Redis(child, port);
        for _ in 0..100 {
            if redis.cli(&["PING"]).trim() == "PONG" {
                return Some(redis);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.1.to_string()])
            .args(args)
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn bytes_out(&self) -> u64 {
        self.cli(&["INFO", "stats"])
            .lines()
            .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn redis(http: &Http, run: &Run) {
    let Some(redis) = Redis::start() else {
        println!("redis: skipped (redis-server not found)");
        return;
    };
    println!("redis, two gateways (PUT on one, the other follows within a second):");
    let dir = tempfile::tempdir().unwrap();
    let store = format!(
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\ntimeout = \"2s\"",
        redis.1
    );
    let path = config(dir.path(), &store, false);
    let a = start(&path).await;
    let b = start(&path).await;
    let mut loaded = 0;
    for &n in run.sizes {
        while loaded < n {
            put(http, &a, &format!("loaded-{loaded}")).await;
            loaded += 1;
        }
        // Both gateways have followed the load before the changes are measured.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = redis.bytes_out();
        let mut times = Vec::with_capacity(run.changes);
        for i in 0..run.changes {
            times.push(put(http, &a, &format!("new-{n}-{i}")).await);
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let per_change = (redis.bytes_out() - before) / run.changes as u64;
        println!(
            "  {n:>6} to {:>6} overrides: {}  Redis sent {per_change} bytes per change",
            n + run.changes,
            Times(times).line()
        );
        loaded += run.changes;
    }
    a.shutdown().await;
    b.shutdown().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let run = run();
    rt.block_on(async {
        let http: Http = Client::builder(TokioExecutor::new()).build_http();
        memory(&http, &run).await;
        redis(&http, &run).await;
    });
}
