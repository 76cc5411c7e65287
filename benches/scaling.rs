//! `cargo bench --bench scaling`: how a decision's cost grows with the keys tracked and
//! with the tiers a request is decided by, on the embedded store (one thread).
//!
//! Keys: a store holding 1,000 to 10,000,000 keys, decisions on keys drawn from all of
//! them (a multiplicative hash of a counter, so the cache sees what it would see from
//! real traffic); the median of 5 rounds, ns per decision, and the ratio to 1,000 keys.
//! Tiers: one request decided by 1 to 8 rate tiers (each on a key of its own among
//! 100,000), ns per request and per extra tier.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use common::{full_run, key, median};
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::limit::{evaluate, Mode, Quota, Tier};
use tollgate::store::MemoryStore;

const S: u64 = 1_000_000_000;

fn tier(key: u64) -> Tier {
    Tier {
        // Everything admitted: the decision, not the refusal, is measured.
        quota: Quota::new(1_000_000_000, S, 1_000_000).expect("valid"),
        mode: Mode::Enforce,
        max_delay_ns: 0,
        key,
        overflow: u64::MAX,
        reserve: None,
        window: None,
    }
}

fn per_decision(keys: u64, ops: u64, clock: &MonotonicClock) -> f64 {
    let store = MemoryStore::new(keys as usize * 2 + 1_024);
    for i in 0..keys {
        std::hint::black_box(evaluate(&store, &[tier(key(i))], clock.now_ns(), 1));
    }
    let rounds: Vec<f64> = (0..5)
        .map(|round| {
            let started = Instant::now();
            for i in 0..ops {
                // A key among all of them, a different walk each round.
                let k = key((i.wrapping_mul(2_654_435_761) + round) % keys);
                std::hint::black_box(evaluate(&store, &[tier(k)], clock.now_ns(), 1));
            }
            started.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    median(rounds)
}

fn per_request(tiers: usize, ops: u64, clock: &MonotonicClock) -> f64 {
    let keys = 100_000u64;
    let store = MemoryStore::new(4 * keys as usize * tiers);
    let rounds: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            for i in 0..ops {
                let request: smallvec::SmallVec<[Tier; 8]> = (0..tiers as u64)
                    .map(|t| tier(key((i % keys) * 8 + t)))
                    .collect();
                std::hint::black_box(evaluate(&store, &request, clock.now_ns(), 1));
            }
            started.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    median(rounds)
}

fn main() {
    let full = full_run();
    if !full {
        println!("scaling bench smoke run under `cargo test` (unoptimised build): the times are not a measurement; run `cargo bench --bench scaling`");
    }
    let clock = MonotonicClock::new();
    let ops = if full { 2_000_000 } else { 20_000 };
    let sizes: &[u64] = if full {
        &[1_000, 100_000, 1_000_000, 10_000_000]
    } else {
        &[1_000, 10_000]
    };
    println!("| keys tracked | ns per decision | / at 1,000 keys |");
    println!("|---:|---:|---:|");
    let mut base = None;
    for &keys in sizes {
        let ns = per_decision(keys, ops, &clock);
        let b = *base.get_or_insert(ns);
        println!("| {keys} | {ns:.1} | {:.2} |", ns / b);
    }
    println!();
    println!("| tiers per request | ns per request | ns per extra tier |");
    println!("|---:|---:|---:|");
    let mut one = None;
    for tiers in 1..=8 {
        let ns = per_request(tiers, ops / 2, &clock);
        let first = *one.get_or_insert(ns);
        let extra = if tiers > 1 {
            format!("{:.1}", (ns - first) / (tiers - 1) as f64)
        } else {
            "—".to_owned()
        };
        println!("| {tiers} | {ns:.1} | {extra} |");
    }
}
