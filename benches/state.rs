//! `cargo bench --bench state`: the memory backend's state file and calendar quotas.
//!
//! 1. Writing and reading the state file at 1,000 to 1,000,000 keys that owe time: the
//!    write's duration and size (bytes per key), and — while it runs on one thread — the
//!    longest and the 99.9th-percentile decision on another thread against the same store,
//!    beside the same figures without a write: what a write pauses the data plane by.
//! 2. A decision with a calendar quota tier against one with a rate tier (ns per decision,
//!    one thread, 100,000 keys): what the quota's window costs.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{full_run, key};
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::limit::calendar::{Calendar, Period};
use tollgate::limit::{evaluate, Mode, Quota, Tier};
use tollgate::store::state;
use tollgate::store::MemoryStore;

const S: u64 = 1_000_000_000;

fn rate_tier(key: u64) -> Tier {
    Tier {
        quota: Quota::new(1, 3_600 * S, 10).expect("valid"),
        mode: Mode::Enforce,
        max_delay_ns: 0,
        key,
        overflow: u64::MAX,
        reserve: None,
        window: None,
    }
}

/// Decides random keys of `store` until `stop`, returning every decision's duration.
fn decide_until(
    store: &MemoryStore,
    clock: &MonotonicClock,
    keys: u64,
    stop: &AtomicBool,
) -> Vec<u64> {
    let mut took = Vec::with_capacity(1 << 20);
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let tier = [rate_tier(key(i % keys))];
        let started = Instant::now();
        let v = evaluate(store, &tier, clock.now_ns(), 1);
        std::hint::black_box(v);
        took.push(started.elapsed().as_nanos() as u64);
    }
    took
}

fn tail(mut took: Vec<u64>) -> (u64, u64, usize) {
    took.sort_unstable();
    let n = took.len();
    let p999 = took.get(n * 999 / 1000).copied().unwrap_or(0);
    (p999, took.last().copied().unwrap_or(0), n)
}

fn state_file(keys: u64, clock: &Arc<MonotonicClock>) {
    let store = Arc::new(MemoryStore::new(2 * keys as usize + 1_000));
    let now = clock.now_ns();
    for i in 0..keys {
        std::hint::black_box(evaluate(&*store, &[rate_tier(key(i))], now, 1));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state");
    // Decisions alone, for the same time a write takes (measured first).
    let started = Instant::now();
    let written = state::write(&path, [1, 2, 3, 4], &store, &**clock).expect("written");
    let alone = started.elapsed();
    let stop = AtomicBool::new(false);
    let quiet = std::thread::scope(|s| {
        let h = s.spawn(|| decide_until(&store, clock, keys, &stop));
        std::thread::sleep(alone.max(Duration::from_millis(50)));
        stop.store(true, Ordering::Relaxed);
        h.join().expect("decider")
    });
    let stop = AtomicBool::new(false);
    let (busy, write_took) = std::thread::scope(|s| {
        let h = s.spawn(|| decide_until(&store, clock, keys, &stop));
        std::thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        state::write(&path, [1, 2, 3, 4], &store, &**clock).expect("written");
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        (h.join().expect("decider"), took)
    });
    let started = Instant::now();
    let saved = state::read(&path).expect("read").expect("present");
    let fresh = MemoryStore::new(2 * keys as usize + 1_000);
    // Rate keys only: no quota policy, no window to check.
    let restored = state::restore(&saved, &fresh, &**clock, |_| None).keys;
    let read_took = started.elapsed();
    let (q999, qmax, _) = tail(quiet);
    let (b999, bmax, n) = tail(busy);
    println!(
        "| {keys} | {} | {:.1} | {:.0} ms ({:.0} ms alone) | {:.0} ms ({restored} restored) | {q999} / {qmax} | {b999} / {bmax} ({n} decisions) |",
        written.bytes,
        written.bytes as f64 / keys as f64,
        write_took.as_secs_f64() * 1e3,
        alone.as_secs_f64() * 1e3,
        read_took.as_secs_f64() * 1e3,
    );
}

fn quota_against_rate(clock: &Arc<MonotonicClock>) {
    let calendar = Calendar {
        period: Period::Month(1),
        zone: jiff::tz::TimeZone::get("Europe/Berlin").expect("zone"),
        zone_name: "Europe/Berlin".to_owned(),
    };
    let cached = tollgate::config::CalendarQuota::new(1_000_000, calendar);
    let keys = 100_000u64;
    let n = if full_run() { 5_000_000 } else { 50_000 };
    for quota in [false, true] {
        let store = MemoryStore::new(1 << 20);
        let started = Instant::now();
        for i in 0..n {
            let now = clock.now_ns();
            let mut tier = rate_tier(key(i % keys));
            if quota {
                // What a request does for a quota tier: its window from the policy's
                // remembered bounds, placed on the monotonic clock.
                let unix = clock.unix_ns_at(now);
                let bounds = cached.bounds(unix);
                tier.quota = Quota::new(1_000_000, 1_000_000, 1_000_000).expect("units");
                tier.window = Some(clock.mono_ns_at(bounds.end_at(unix)));
            }
            std::hint::black_box(evaluate(&store, &[tier], now, 1));
        }
        let per = started.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "| {} | {per:.1} ns |",
            if quota {
                "calendar quota (month, Europe/Berlin)"
            } else {
                "rate"
            }
        );
    }
}

fn main() {
    if !full_run() {
        println!("state bench smoke run under `cargo test` (unoptimised build): the times are not a measurement; run `cargo bench --bench state`");
    }
    let clock = Arc::new(MonotonicClock::new());
    println!("| keys owing time | file bytes | bytes / key | write | read + restore | decision p99.9 / max without a write (ns) | with a write running (ns) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let sizes: &[u64] = if full_run() {
        &[1_000, 100_000, 1_000_000]
    } else {
        &[1_000, 10_000]
    };
    for &keys in sizes {
        state_file(keys, &clock);
    }
    println!();
    println!("| one tier, memory store, 100,000 keys | per decision |");
    println!("|---|---:|");
    quota_against_rate(&clock);
}
