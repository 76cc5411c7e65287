//! `cargo bench --bench limiter`: tollgate's embedded store against the `governor` crate's
//! keyed limiter (dashmap), side by side in one run, same machine, same keys. Prints
//! throughput ratios (tollgate / governor) and measured bytes per tracked key.
//!
//! Method: each scenario runs ROUNDS alternating rounds (tollgate, governor, tollgate, …) of
//! a fixed operation count; the median round of each is compared. Both limiters read
//! their own clock on every decision and hash the key on every decision. Memory is the
//! RSS growth of this process while a fresh limiter takes N keys.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;

use common::median;
use governor::{Quota as GQuota, RateLimiter};
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::key::{KeyHasher, KeyPart};
use tollgate::limit::{evaluate, Mode, Quota, Tier};
use tollgate::store::MemoryStore;

const ROUNDS: usize = 7;

type Governor = governor::DefaultKeyedRateLimiter<u64>;

/// Everything is admitted in both: the benchmark measures the decision, not denials.
fn governor() -> Governor {
    let rate = NonZeroU32::new(u32::MAX).expect("nonzero");
    RateLimiter::dashmap(
        GQuota::per_second(rate).allow_burst(NonZeroU32::new(1_000).expect("nonzero")),
    )
}

struct Tollgate {
    store: MemoryStore,
    clock: MonotonicClock,
    quota: Quota,
}

impl Tollgate {
    fn new(max_keys: usize) -> Self {
        Self {
            store: MemoryStore::new(max_keys),
            clock: MonotonicClock::new(),
            quota: Quota::new(1_000_000_000, 1_000_000_000, 1_000).expect("quota"),
        }
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        let mut h = KeyHasher::new(self.store.key_hasher(), "bench");
        h.part(&KeyPart::Bytes(key.to_le_bytes()[..].into()));
        let tier = [Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota: self.quota,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: h.finish(),
        }];
        evaluate(&self.store, &tier, self.clock.now_ns(), 1).admitted
    }
}

/// xorshift: a cheap, repeatable key sequence.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `op` `ops` times on `threads` threads; returns operations per second.
fn run<F: Fn(u64, usize) -> bool + Sync>(threads: usize, ops: usize, op: &F) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                let mut admitted = 0usize;
                for i in 0..ops / threads {
                    admitted += usize::from(op(next(&mut state), i));
                }
                std::hint::black_box(admitted);
            });
        }
    });
    ops as f64 / start.elapsed().as_secs_f64()
}

fn scenario(
    name: &str,
    threads: usize,
    ops: usize,
    ours: &(impl Fn(u64, usize) -> bool + Sync),
    theirs: &(impl Fn(u64, usize) -> bool + Sync),
) -> f64 {
    // Warm both (and fill key spaces) once.
    run(threads, ops, ours);
    run(threads, ops, theirs);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        a.push(run(threads, ops, ours));
        b.push(run(threads, ops, theirs));
    }
    let (a, b) = (median(a), median(b));
    let ratio = a / b;
    println!(
        "{name:<28} tollgate {:>7.2} M/s   governor {:>7.2} M/s   ratio {ratio:.2}",
        a / 1e6,
        b / 1e6
    );
    ratio
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn bytes_per_key(n: u64) {
    let before = rss_bytes();
    let ours = Tollgate::new(n as usize * 2);
    for k in 0..n {
        ours.check(k);
    }
    let ours_bytes = rss_bytes().saturating_sub(before) as f64 / n as f64;
    assert_eq!(ours.store.len() as u64, n, "every key tracked");
    drop(ours);
    let before = rss_bytes();
    let theirs = governor();
    for k in 0..n {
        let _ = theirs.check_key(&k);
    }
    let theirs_bytes = rss_bytes().saturating_sub(before) as f64 / n as f64;
    drop(theirs);
    println!("bytes per tracked key @ {:>5}k   tollgate {ours_bytes:>6.1}   governor {theirs_bytes:>6.1}", n / 1_000);
}

fn main() {
    // `cargo test --benches` runs benches with --bench absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let ops = if quick { 20_000 } else { 2_000_000 };
    if quick {
        println!("limiter bench smoke run under `cargo test` (unoptimised build, {ops} ops): the ratios below are not a measurement; run `cargo bench --bench limiter`");
    }
    println!("tollgate vs governor (keyed, dashmap): median of {ROUNDS} alternating rounds, {ops} ops each");

    // An optional argument picks scenarios by name (e.g. `-- single`), for profiling.
    let only = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));

    let single_ours = Tollgate::new(1024);
    let single_theirs = governor();
    if wanted("single key") {
        scenario(
            "single key",
            1,
            ops,
            &|_, _| single_ours.check(0),
            &|_, _| single_theirs.check_key(&0).is_ok(),
        );
    }

    let keys = if quick { 10_000 } else { 1_000_000 };
    let many_ours = Tollgate::new(keys as usize * 2);
    let many_theirs = governor();
    let name = format!("{keys} distinct keys");
    if wanted(&name) {
        scenario(&name, 1, ops, &|r, _| many_ours.check(r % keys), &|r, _| {
            many_theirs.check_key(&(r % keys)).is_ok()
        });
    }

    let hot_ours = Arc::new(Tollgate::new(1024));
    let hot_theirs = Arc::new(governor());
    if wanted("2 threads, one hot key") {
        scenario(
            "2 threads, one hot key",
            2,
            ops,
            &|_, _| hot_ours.check(7),
            &|_, _| hot_theirs.check_key(&7).is_ok(),
        );
    }

    if !wanted("bytes per key") {
    } else if quick {
        bytes_per_key(100_000);
    } else {
        bytes_per_key(1_000_000);
        bytes_per_key(10_000_000);
    }
}
