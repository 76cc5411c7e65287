//! `cargo bench --bench scaling`: how a decision's cost grows with the keys tracked and
//! with the tiers a request is decided by, on the embedded store (one thread).
//!
//! Keys: tollgate's store and governor's keyed limiter each holding 1,000 to 10,000,000
//! keys, decisions on keys drawn from all of them, uniformly (the worst case for the
//! caches) and by Zipf's law (s = 1, as real traffic is skewed); each limiter hashes the
//! key on every decision. The median of 5 rounds, ns per decision, and the ratio to
//! 1,000 keys.
//! Tiers: one request decided by 1 to 8 rate tiers (each on a key of its own among
//! 100,000), ns per request and per extra tier.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use common::pair::{governor, Tollgate};
use common::{full_run, key, median, xorshift};
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

/// The keys a round decides on, as indices among `keys` tracked: each alike (the worst
/// case for the caches), or with `skewed` by rank with Zipf's law (s = 1: the
/// i-th key drawn in proportion to 1/i, as tenants and users are in real traffic). The
/// walk is drawn before it is timed.
fn walk(keys: u64, ops: u64, skewed: bool, seed: u64) -> Vec<u64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let ln_keys = (keys as f64).ln();
    (0..ops)
        .map(|i| {
            if !skewed {
                return (i.wrapping_mul(2_654_435_761) + seed) % keys;
            }
            let u = (xorshift(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
            // Log-uniform over [1, keys]: density 1/x, Zipf's s = 1.
            ((u * ln_keys).exp() as u64).clamp(1, keys) - 1
        })
        .collect()
}

/// ns per decision of `decide` over `keys` keys after they are all tracked: the median of
/// 5 rounds of `ops`, a different walk each round.
fn per_decision(keys: u64, ops: u64, skewed: bool, decide: &impl Fn(u64) -> bool) -> f64 {
    let rounds: Vec<f64> = (0..5)
        .map(|round| {
            let walk = walk(keys, ops, skewed, round);
            let started = Instant::now();
            for &k in &walk {
                std::hint::black_box(decide(k));
            }
            started.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    median(rounds)
}

/// (uniform, skewed) ns per decision with `keys` tracked, for tollgate's store and for
/// governor's keyed limiter, each hashing the key on every decision.
fn both(keys: u64, ops: u64) -> [(f64, f64); 2] {
    let ours = Tollgate::new(keys as usize * 2 + 1_024);
    let decide = |k: u64| ours.check(key(k));
    for k in 0..keys {
        decide(k);
    }
    let tollgate = (
        per_decision(keys, ops, false, &decide),
        per_decision(keys, ops, true, &decide),
    );
    drop(ours);
    let theirs = governor();
    let decide = |k: u64| theirs.check_key(&key(k)).is_ok();
    for k in 0..keys {
        decide(k);
    }
    let governor = (
        per_decision(keys, ops, false, &decide),
        per_decision(keys, ops, true, &decide),
    );
    [tollgate, governor]
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
    println!("| keys tracked | uniform: tollgate ns | / 1,000 keys | governor ns | / 1,000 keys | Zipf (s = 1): tollgate ns | / 1,000 keys | governor ns | / 1,000 keys |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut base = None;
    for &keys in sizes {
        let [ours, theirs] = both(keys, ops);
        let [b_ours, b_theirs] = *base.get_or_insert([ours, theirs]);
        println!(
            "| {keys} | {:.1} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} |",
            ours.0,
            ours.0 / b_ours.0,
            theirs.0,
            theirs.0 / b_theirs.0,
            ours.1,
            ours.1 / b_ours.1,
            theirs.1,
            theirs.1 / b_theirs.1
        );
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
