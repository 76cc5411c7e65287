//! `cargo bench --bench top [NAME]`: what a top-keys sketch costs per decision (one
//! `Sketch::record`, as the request path calls it after each decided tier), ns per
//! decision, the median of 5 rounds, on streams drawn before they are timed:
//!
//! - `hits`: 64 keys in turn, every decision a hit (a tier with a few busy keys);
//! - `zipf`: 100,000 keys by Zipf's law (s = 1), mostly hits, some misses;
//! - `flood`: a different key each decision, every decision a miss of a full sketch;
//! - `cadence`: one key at every 8th decision among keys seen once.
//!
//! NAME runs only the streams whose name contains it. Under callgrind the instructions
//! of `record_all` divided by the decisions it records (printed) are the per-decision
//! instructions:
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*record_all*'
//! target/release/deps/top-HASH --bench flood`.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use common::{full_run, key, median, xorshift};
use tollgate::top::sketch::Sketch;

/// Every decision of `stream` into `sketch` (kept out of line so that callgrind can count
/// it alone).
#[inline(never)]
fn record_all(sketch: &mut Sketch, stream: &[u64]) {
    for (i, &k) in stream.iter().enumerate() {
        sketch.record(k, (i % 3 == 0, i as u64 + 1), |t| t.push("tenant-4711"));
    }
}

fn streams(ops: usize) -> Vec<(&'static str, Vec<u64>)> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let ln_keys = 100_000f64.ln();
    let zipf = (0..ops)
        .map(|_| {
            let u = (xorshift(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
            key(((u * ln_keys).exp() as u64).clamp(1, 100_000))
        })
        .collect();
    let fresh = |i: usize| key(1_000_000 + i as u64);
    vec![
        ("hits", (0..ops).map(|i| key((i % 64) as u64)).collect()),
        ("zipf", zipf),
        ("flood", (0..ops).map(fresh).collect()),
        (
            "cadence",
            (0..ops)
                .map(|i| if i % 8 == 7 { key(7) } else { fresh(i) })
                .collect(),
        ),
    ]
}

fn main() {
    let only = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    let ops = if full_run() { 2_000_000 } else { 20_000 };
    println!("top-keys sketch, ns per decision (median of 5 rounds of {ops})");
    for (name, stream) in streams(ops) {
        if !name.contains(&only) {
            continue;
        }
        let rounds: Vec<f64> = (0..5)
            .map(|_| {
                let mut sketch = Sketch::default();
                let start = Instant::now();
                record_all(&mut sketch, std::hint::black_box(&stream));
                std::hint::black_box(&sketch);
                start.elapsed().as_nanos() as f64 / ops as f64
            })
            .collect();
        println!(
            "{name:<8} {:>6.1} ns  ({} decisions recorded in all)",
            median(rounds),
            5 * ops
        );
    }
}
