//! `cargo bench --bench footprint`: bytes per tracked key of tollgate's embedded store and
//! of `governor`'s keyed limiter (dashmap, its default keyed store), at 100,000, 1,000,000
//! and 10,000,000 keys, measured two ways:
//!
//! - **held**: what the structure holds once it has taken the keys, net of every free,
//!   counted around the allocator. Independent of how the allocator reuses freed memory:
//!   the structure's own size.
//! - **resident**: the RSS growth of a fresh process while the limiter takes the keys, each
//!   limiter in a child process of its own, on the allocator the `tollgate` binary runs on
//!   (`src/allocator.rs`, mimalloc) — what a user sees, including tables a limiter freed as
//!   it grew and the allocator still keeps. (Measured in one process one after the other,
//!   the second limiter reuses what the first freed and looks smaller.)
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

// The binary's allocator, as the gateway runs on it (its unit tests are not run here).
#[path = "../src/allocator.rs"]
#[allow(unused_imports, dead_code)]
mod allocator;
#[path = "common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{full_run, median, pair};

/// The binary's allocator, counting the bytes held.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the binary's allocator unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `Allocator::alloc`, whose contract the caller keeps.
        let p = unsafe { allocator::Allocator.alloc(layout) };
        if !p.is_null() {
            HELD.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `Allocator::alloc_zeroed`.
        let p = unsafe { allocator::Allocator.alloc_zeroed(layout) };
        if !p.is_null() {
            HELD.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { allocator::Allocator.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        let p = unsafe { allocator::Allocator.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HELD.fetch_add(new_size, Ordering::Relaxed);
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// In a child: fills `which` limiter with `n` keys and prints `held resident` in bytes.
fn child(which: &str, n: u64) {
    let (held, resident) = (HELD.load(Ordering::Relaxed), resident_bytes());
    match which {
        "tollgate" => {
            let ours = pair::Tollgate::new(n as usize * 2);
            for k in 0..n {
                ours.check(k);
            }
            assert_eq!(ours.store.len() as u64, n, "every key tracked");
            report(held, resident, &ours);
        }
        "governor" => {
            let theirs = pair::governor();
            for k in 0..n {
                let _ = theirs.check_key(&k);
            }
            assert_eq!(theirs.len() as u64, n, "every key tracked");
            report(held, resident, &theirs);
        }
        other => panic!("no limiter {other}"),
    }
}

/// Prints what was held and resident beyond `held` and `resident`, with `limiter` alive.
fn report<T>(held: usize, resident: usize, limiter: &T) {
    std::hint::black_box(limiter);
    let now = HELD.load(Ordering::Relaxed);
    println!(
        "{} {}",
        now.saturating_sub(held),
        resident_bytes().saturating_sub(resident)
    );
}

/// Runs `which` on `n` keys in a child process: (held, resident) bytes per key.
fn measure(which: &str, n: u64) -> (f64, f64) {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let out = Command::new(exe)
        .args(["--child", which, &n.to_string()])
        .output()
        .expect("the benchmark runs itself");
    assert!(
        out.status.success(),
        "{which} @ {n}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>());
    match (fields.next(), fields.next()) {
        (Some(Ok(held)), Some(Ok(resident))) => (held / n as f64, resident / n as f64),
        _ => panic!("{which} @ {n} printed {text:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        let n = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .expect("key count");
        return child(&args[at + 1], n);
    }
    let sizes: &[u64] = if full_run() {
        &[100_000, 1_000_000, 10_000_000]
    } else {
        println!("footprint bench smoke run under `cargo test` (unoptimised build, small sizes)");
        &[10_000]
    };
    println!("| keys tracked | held: tollgate | governor | tollgate / governor | resident: tollgate | governor | tollgate / governor |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in sizes {
        // Held is exact; resident moves with when the allocator returns freed pages: the
        // median of three fresh processes each, alternating.
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            ours.push(measure("tollgate", n));
            theirs.push(measure("governor", n));
        }
        let ours_held = ours[0].0;
        let theirs_held = theirs[0].0;
        let ours_resident = median(ours.iter().map(|m| m.1).collect());
        let theirs_resident = median(theirs.iter().map(|m| m.1).collect());
        println!(
            "| {n} | {ours_held:.1} B | {theirs_held:.1} B | {:.2} | {ours_resident:.1} B | {theirs_resident:.1} B | {:.2} |",
            ours_held / theirs_held,
            ours_resident / theirs_resident
        );
    }
}
