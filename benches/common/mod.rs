//! What several benchmarks share (each `benches/*.rs` is a crate of its own, so this is
//! included by path; a benchmark uses some of it).
#![allow(dead_code)]

pub mod pair;

/// `cargo bench` passes `--bench`; `cargo test --benches` does not, and then a benchmark
/// runs as a quick smoke test whose times are no measurement.
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The config sizes a scaling benchmark measures: 10 to 10,000 in a full run; 10 and
/// 1,000 in a smoke run, which says it is one.
pub fn sizes(bench: &str) -> &'static [usize] {
    if full_run() {
        return &[10, 100, 1_000, 10_000];
    }
    println!("{bench} bench smoke run under `cargo test` (unoptimised build): the times are not a measurement; run `cargo bench --bench {bench}`");
    &[10, 1_000]
}

/// A key hash for the counter `i`: a multiplicative spread, so consecutive counters land
/// far apart and no prefetcher helps (never 0); a rate key's, as the key hasher makes it
/// (its top bits, which name a quota policy's area of the store, clear).
pub fn key(i: u64) -> u64 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1) & tollgate::key::compose::HASH_MASK
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// xorshift: a cheap, repeatable key sequence.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
