//! What the quota service costs: CPU per bucket usage read and answered (a report of
//! 1,000 buckets on one stream, charged and re-split on the memory store), and memory
//! per bucket held and per stream open — so how many buckets and streams fit before a
//! GiB. Client and server share this process: CPU is both (the client's part is a
//! protobuf encode and decode). `cargo bench --bench rlqs`; figures in
//! docs/benchmarks.md §12.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tollgate::rlqs::proto::{
    BucketId, BucketQuotaUsage, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tonic_prost::ProstCodec;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[store]
max_keys = 2000000

[policies.tenant]
key = "header:x-tenant"
limit = 100
period = "1s"
burst = 200

[rls]
listen = "127.0.0.1:0"

[[rlqs.buckets]]
domain = "edge"
bucket = ["tenant"]
policy = "tenant"

[upstreams.api]
targets = ["http://127.0.0.1:9"]
"#;

/// User + system CPU of this process, in ns.
fn cpu_ns() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

struct Stream {
    send: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: tonic::codec::Streaming<RateLimitQuotaResponse>,
}

async fn open(addr: std::net::SocketAddr) -> Stream {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    grpc.ready().await.expect("ready");
    let (send, rx) = mpsc::channel(4);
    let outgoing = futures_util::stream::unfold(rx, |mut rx: mpsc::Receiver<_>| async move {
        rx.recv().await.map(|m| (m, rx))
    });
    let path = PathAndQuery::from_static(tollgate::rlqs::proto::STREAM_RATE_LIMIT_QUOTAS);
    let answers = grpc
        .streaming(tonic::Request::new(outgoing), path, ProstCodec::default())
        .await
        .expect("stream")
        .into_inner();
    Stream { send, answers }
}

fn report(first: usize, n: usize) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: (first..first + n)
            .map(|i| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: HashMap::from([("tenant".to_owned(), format!("t{i}"))]),
                }),
                time_elapsed: Some(prost_types::Duration {
                    seconds: 5,
                    nanos: 0,
                }),
                num_requests_allowed: 3,
                num_requests_denied: 1,
            })
            .collect(),
    }
}

impl Stream {
    async fn ask(&mut self, r: RateLimitQuotaUsageReports) -> usize {
        self.send.send(r).await.expect("send");
        let answer = tokio::time::timeout(Duration::from_secs(60), self.answers.message())
            .await
            .expect("in time")
            .expect("answer")
            .expect("a message");
        answer.bucket_action.len()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let dir = std::env::temp_dir().join(format!("tollgate-rlqs-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, CONFIG).expect("config");
    let config = tollgate::config::load(&path).expect("config");
    let gateway = tollgate::gateway::Gateway::start_with(
        config,
        Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await
    .expect("gateway");
    let addr = gateway.rls_addr().expect("rls");

    // CPU per usage: reports of 1,000 buckets, the same buckets again and again.
    let mut stream = open(addr).await;
    let (per_report, rounds) = (1_000, if full { 200 } else { 2 });
    stream.ask(report(0, per_report)).await;
    let (cpu0, wall0) = (cpu_ns(), Instant::now());
    for _ in 0..rounds {
        // Each bucket's token bucket, started full by a DENY_ALL just before it.
        assert_eq!(stream.ask(report(0, per_report)).await, 2 * per_report);
    }
    let usages = (rounds * per_report) as f64;
    let cpu = (cpu_ns() - cpu0) as f64 / usages;
    let wall = wall0.elapsed().as_nanos() as f64 / usages;
    println!(
        "cpu per bucket usage (1,000 a report, memory store): {cpu:.0} ns ({wall:.0} ns wall)"
    );

    // Memory per bucket held: one stream taking ever more buckets.
    let (rss0, mut held) = (rss_bytes(), per_report);
    let target = if full { 60_000 } else { 4_000 };
    while held < target {
        stream.ask(report(held, 2_000)).await;
        held += 2_000;
    }
    let per_bucket = (rss_bytes().saturating_sub(rss0)) as f64 / (held - per_report) as f64;
    println!(
        "memory per bucket held (stream, holders, limiter key): {per_bucket:.0} B -> {:.1} M buckets a GiB",
        (1u64 << 30) as f64 / per_bucket / 1e6
    );

    // Memory per stream open (one bucket each).
    let streams_n = if full { 1_000 } else { 20 };
    let rss1 = rss_bytes();
    let mut streams = Vec::new();
    for i in 0..streams_n {
        let mut s = open(addr).await;
        s.ask(report(1_000_000 + i, 1)).await;
        streams.push(s);
    }
    let per_stream = (rss_bytes().saturating_sub(rss1)) as f64 / streams_n as f64;
    println!(
        "memory per stream (its connection, client side included): {per_stream:.0} B -> {:.0} k streams a GiB",
        (1u64 << 30) as f64 / per_stream / 1e3
    );
    drop(streams);
    let _ = std::fs::remove_dir_all(dir);
}
