use super::*;
use crate::limit::{evaluate, Mode, Quota, Tier};
use std::sync::Arc;

const S: u64 = 1_000_000_000;

fn tier(key: u64, burst: u64) -> Tier {
    Tier {
        window: None,
        reserve: None,
        overflow: 0,
        quota: Quota::new(1, S, burst).expect("valid"),
        mode: Mode::Enforce,
        max_delay_ns: 0,
        key,
    }
}

#[test]
fn denial_of_unknown_key_inserts_nothing() {
    let store = MemoryStore::new(1000);
    assert!(!evaluate(&store, &[tier(7, 1)], 10 * S, 2).admitted);
    assert!(store.is_empty());
}

#[test]
fn sweep_drops_only_idle_keys() {
    let store = MemoryStore::new(1000);
    let now = 100 * S;
    for key in 0..50u64 {
        assert!(evaluate(&store, &[tier(key << 48 | key, 5)], now, 1).admitted);
    }
    assert_eq!(store.len(), 50);
    assert_eq!(store.sweep(now), 0, "all keys owe time at now");
    assert_eq!(store.sweep(now + S - 1), 0);
    assert_eq!(store.sweep(now + S), 50, "idle exactly one interval later");
    assert!(store.is_empty());
}

#[test]
fn tables_grow_and_keep_every_tat() {
    let store = MemoryStore::new(1_000_000);
    let now = 100 * S;
    for key in 1..=20_000u64 {
        let cost = key % 3 + 1;
        assert!(
            evaluate(
                &store,
                &[tier(key.wrapping_mul(0x9E37_79B9_7F4A_7C15), 5)],
                now,
                cost
            )
            .admitted
        );
    }
    assert_eq!(store.len(), 20_000);
    for key in 1..=20_000u64 {
        assert_eq!(
            store.peek(key.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            now + (key % 3 + 1) * S
        );
    }
}

#[test]
fn a_full_shard_never_forgets_a_debt_and_sends_new_keys_to_the_overflow_key() {
    let store = MemoryStore::new(16); // 16 shards, one key each
    let now = 100 * S;
    let (owing, fresh, overflow) = (3, 5, 7 << 60); // 3 and 5 share a shard
    let with_overflow = |key| Tier {
        window: None,
        reserve: None,
        overflow,
        ..tier(key, 5)
    };
    assert!(evaluate(&store, &[with_overflow(owing)], now, 3).admitted);
    let v = evaluate(&store, &[with_overflow(fresh)], now, 1);
    assert!(v.admitted);
    assert_eq!(v.outcomes()[0].key, overflow, "decided on the overflow key");
    assert_eq!(store.peek(owing), now + 3 * S, "the debt is kept");
    assert_eq!(store.peek(fresh), 0, "the new key is not tracked");
    assert_eq!(
        store.peek(overflow),
        now + S,
        "the overflow key was charged"
    );
    // Every new key shares the overflow key: inventing keys throttles only inventions.
    for key in (9..1000).step_by(2) {
        evaluate(&store, &[with_overflow(key << 4 | 5)], now, 1);
    }
    assert_eq!(
        store.peek(overflow),
        now + 5 * S,
        "the overflow key's burst is spent"
    );
    assert!(!evaluate(&store, &[with_overflow(11)], now, 1).admitted);
    assert_eq!(store.peek(owing), now + 3 * S);
    // Once the debt is paid off, its room is reused.
    let later = now + 10 * S;
    let v = evaluate(&store, &[with_overflow(fresh)], later, 1);
    assert_eq!(v.outcomes()[0].key, fresh);
    assert_eq!(store.peek(owing), 0, "idle keys are dropped to make room");
}

#[test]
fn updates_racing_rebuilds_are_never_lost() {
    use std::sync::atomic::AtomicBool;
    // Large enough that the shard never evicts: only growth rebuilds happen.
    let store = Arc::new(MemoryStore::new(100_000_000));
    let now = 100 * S;
    let hot = 42u64;
    let stop = Arc::new(AtomicBool::new(false));
    // One thread keeps inserting new keys into the hot key's shard, forcing rebuilds.
    let grower = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 1u64;
            while !stop.load(Ordering::Relaxed) && k < 50_000 {
                evaluate(&*store, &[tier(k << 8, 5)], now, 1);
                k += 1;
            }
        })
    };
    let quota = Quota::new(1, 1000, 1_000_000).expect("valid"); // T = 1 µs
    let mut admitted = 0u64;
    for _ in 0..200_000 {
        let t = Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: hot,
        };
        if evaluate(&*store, &[t], now, 1).admitted {
            admitted += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    grower.join().expect("grower");
    assert_eq!(
        store.peek(hot),
        now + admitted * quota.interval_ns(),
        "every admission is in the TAT"
    );
}
