//! The memory store against the reference model (`limit::model_tests`): tiers decided on
//! it match independent token buckets, and concurrent evaluation and rollback charge
//! exactly what is admitted.

use num_rational::BigRational;
use proptest::prelude::*;

use super::MemoryStore;
use crate::limit::model_tests::{quota_strategy, r, Bucket};
use crate::limit::{evaluate, Mode, Quota, TatTable, Tier};

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Tiers: a request passes iff every enforcing bucket has room; a denial leaves every
    /// TAT exactly as it was; an admission takes from every tier that admitted.
    #[test]
    fn tiers_match_independent_buckets(
        quotas in prop::collection::vec((quota_strategy(), any::<bool>()), 1..=4),
        steps in prop::collection::vec((0u64..=2_000, 1u64..=3), 1..80),
    ) {
        let store = MemoryStore::new(10_000);
        let start = 1_000_000_000_000u64;
        let tiers: Vec<Tier> = quotas
            .iter()
            .enumerate()
            .map(|(i, ((q, _), shadow))| Tier {
                window: None,
                reserve: None,
                overflow: 0,
                quota: *q,
                mode: if *shadow && i > 0 { Mode::Shadow } else { Mode::Enforce },
                max_delay_ns: 0,
                key: (i as u64 + 1) << 41 | 7,
            })
            .collect();
        let mut models: Vec<Bucket> = tiers.iter().map(|t| Bucket::new(&t.quota, 0, start)).collect();
        let min_burst = tiers.iter().map(|t| t.quota.burst()).min().unwrap_or(1);
        let t_min = tiers.iter().map(|t| t.quota.interval_ns()).min().unwrap_or(1);
        let mut now = start;
        for (gap, cost) in steps {
            let cost = cost.min(min_burst);
            now += t_min / 1000 * gap;
            let before: Vec<u64> = tiers.iter().map(|t| store.peek(t.key)).collect();
            let v = evaluate(&store, &tiers, now, cost);
            let offers: Vec<(bool, BigRational)> = models.iter_mut().map(|m| m.offer(now, cost)).collect();
            let expected = tiers.iter().zip(&offers).all(|(t, (ok, _))| *ok || t.mode == Mode::Shadow);
            prop_assert_eq!(v.admitted, expected);
            if v.admitted {
                for ((m, (ok, _)), _) in models.iter_mut().zip(&offers).zip(&tiers) {
                    if *ok {
                        m.take(cost);
                    }
                }
            } else {
                let after: Vec<u64> = tiers.iter().map(|t| store.peek(t.key)).collect();
                prop_assert_eq!(&after, &before, "rollback restores every tier");
                let max_wait = tiers
                    .iter()
                    .zip(&offers)
                    .filter(|(t, _)| t.mode == Mode::Enforce)
                    .map(|(_, (_, w))| w.clone())
                    .max()
                    .unwrap_or_else(|| r(0));
                prop_assert_eq!(r(v.wait_ns), max_wait, "the wait is the maximum over tiers");
            }
        }
    }
}

/// Many threads on one key admit exactly what GCRA allows: the burst, then one per
/// interval the clock moves, never one more.
#[test]
fn threads_hammering_one_key_admit_exactly() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    const THREADS: usize = 8;
    const PHASES: u64 = 20;
    let store = Arc::new(MemoryStore::new(1000));
    let quota = Quota::new(10, 1_000_000_000, 25).expect("valid");
    let now = Arc::new(AtomicU64::new(1_000_000_000_000));
    let admitted = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (store, now, admitted, barrier) = (
                store.clone(),
                now.clone(),
                admitted.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let tier = [Tier {
                    window: None,
                    reserve: None,
                    overflow: 0,
                    quota,
                    mode: Mode::Enforce,
                    max_delay_ns: 0,
                    key: 42,
                }];
                for _ in 0..PHASES {
                    barrier.wait();
                    let t = now.load(Ordering::SeqCst);
                    for _ in 0..200 {
                        if evaluate(&*store, &tier, t, 1).admitted {
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    let mut expected = 0;
    for phase in 0..PHASES {
        barrier.wait();
        barrier.wait();
        expected += if phase == 0 { 25 } else { 3 };
        assert_eq!(admitted.load(Ordering::SeqCst), expected, "phase {phase}");
        // Three intervals (300 ms) pass between phases.
        now.fetch_add(300_000_000, Ordering::SeqCst);
    }
    for h in handles {
        h.join().expect("thread");
    }
}

/// Rollback under concurrency: two tiers, the second always too small for half the
/// requests; the first tier is charged exactly once per admitted request.
#[test]
fn concurrent_rollback_charges_only_admissions() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let store = Arc::new(MemoryStore::new(1000));
    let big = Quota::new(1, 1_000_000_000, 1000).expect("valid");
    let small = Quota::new(1, 1_000_000_000, 10).expect("valid");
    let now = 1_000_000_000_000u64;
    let admitted = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (store, admitted) = (store.clone(), admitted.clone());
            std::thread::spawn(move || {
                let tiers = [
                    Tier {
                        window: None,
                        reserve: None,
                        overflow: 0,
                        quota: big,
                        mode: Mode::Enforce,
                        max_delay_ns: 0,
                        key: 1,
                    },
                    Tier {
                        window: None,
                        reserve: None,
                        overflow: 0,
                        quota: small,
                        mode: Mode::Enforce,
                        max_delay_ns: 0,
                        key: 2,
                    },
                ];
                for _ in 0..500 {
                    if evaluate(&*store, &tiers, now, 1).admitted {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 10);
    assert_eq!(
        store.peek(1),
        now + 10 * 1_000_000_000,
        "the first tier holds exactly the admissions"
    );
    // The second tier admitted its burst of 10, one interval each, from idle at `now`;
    // its denials wrote nothing.
    assert_eq!(
        store.peek(2),
        now + 10 * 1_000_000_000,
        "the second tier holds exactly its burst"
    );
}

/// Two tiers on one key (only a fuzzer builds this, but undo must still be exact): the
/// rollback restores the TAT bit for bit, not merely to an equivalent idle value.
#[test]
fn rollback_of_tiers_sharing_a_key_is_exact() {
    let store = MemoryStore::new(1000);
    let q = Quota::new(1, 1_000_000_000, 5).expect("valid");
    let small = Quota::new(1, 1_000_000_000, 1).expect("valid");
    let now = 1_000_000_000_000u64;
    let tiers = [
        Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota: q,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: 9,
        },
        Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota: q,
            mode: Mode::Shadow,
            max_delay_ns: 0,
            key: 9,
        },
        Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota: small,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: 9,
        },
    ];
    assert!(!evaluate(&store, &tiers, now, 1).admitted);
    assert_eq!(store.peek(9), 0, "as if the request never happened");
}
