//! Property tests: GCRA and the tier evaluator against an independent reference model,
//! a token bucket kept in exact rational arithmetic.

use num_bigint::BigInt;
use num_rational::BigRational;
use proptest::prelude::*;

use super::gcra::{settle, Adjustment};
use super::{evaluate, Mode, Quota, TatTable, Tier};
use crate::store::MemoryStore;

fn r(n: u64) -> BigRational {
    BigRational::from_integer(BigInt::from(n))
}

/// The obvious token bucket: `burst` tokens when idle, refilled at one token per `T`
/// nanoseconds, a request of cost `c` takes `c` tokens; `max_delay` lets the level go
/// down to `−max_delay / T`.
#[derive(Clone, Debug)]
struct Bucket {
    tokens: BigRational,
    last: u64,
    cap: BigRational,
    t: BigRational,
    floor: BigRational,
}

impl Bucket {
    fn new(q: &Quota, max_delay: u64, start: u64) -> Self {
        let t = r(q.interval_ns());
        Self {
            tokens: r(q.burst()),
            last: start,
            cap: r(q.burst()),
            floor: -(r(max_delay) / &t),
            t,
        }
    }

    fn refill(&mut self, now: u64) {
        if now > self.last {
            let refilled = &self.tokens + r(now - self.last) / &self.t;
            self.tokens = refilled.min(self.cap.clone());
            self.last = now;
        }
    }

    /// (admitted, exact wait in ns when denied) — the wait as a rational.
    fn offer(&mut self, now: u64, cost: u64) -> (bool, BigRational) {
        self.refill(now);
        let after = &self.tokens - r(cost);
        if after >= self.floor {
            (true, r(0))
        } else {
            ((false), (&self.floor - after) * &self.t)
        }
    }

    fn take(&mut self, cost: u64) {
        self.tokens -= r(cost);
    }
}

fn quota_strategy() -> impl Strategy<Value = (Quota, u64)> {
    (
        1u64..=1000,
        1_000_000u64..=3_600_000_000_000,
        1u64..=40,
        prop_oneof![Just(0u64), 1u64..=5_000_000_000],
    )
        .prop_filter_map("representable", |(limit, period, burst, max_delay)| {
            Quota::new(limit, period, burst)
                .ok()
                .map(|q| (q, max_delay))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Same admit/deny sequence, the same exact wait, the same remaining.
    #[test]
    fn gcra_matches_the_token_bucket(
        (quota, max_delay) in quota_strategy(),
        steps in prop::collection::vec((0u64..=3_000, 1u64..=40), 1..120),
    ) {
        let start = 1_000_000_000_000u64;
        let mut model = Bucket::new(&quota, max_delay, start);
        let mut tat = 0u64;
        let mut now = start;
        let t = quota.interval_ns();
        for (gap_permille, cost) in steps {
            let cost = cost.min(quota.burst());
            now += t / 1000 * gap_permille + gap_permille % 7;
            let d = quota.decide(tat, now, cost, max_delay);
            let (admitted, wait) = model.offer(now, cost);
            prop_assert_eq!(d.admitted, admitted, "now={} cost={}", now, cost);
            if admitted {
                model.take(cost);
                let level = model.tokens.floor().to_integer();
                let expected = if level < BigInt::from(0) { 0 } else { u64::try_from(level).unwrap_or(u64::MAX) };
                prop_assert_eq!(d.remaining, expected);
                prop_assert_eq!(d.tat, tat.max(now) + cost * t);
                tat = d.tat;
            } else {
                prop_assert_eq!(r(d.wait_ns), wait, "exact wait");
                prop_assert_eq!(d.tat, tat, "a denial changes nothing");
                // Admitted exactly at now + wait, denied one nanosecond earlier.
                prop_assert!(quota.decide(tat, now + d.wait_ns, cost, max_delay).admitted);
                prop_assert!(!quota.decide(tat, now + d.wait_ns - 1, cost, max_delay).admitted);
            }
        }
    }

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

/// One step of a reserve/settle sequence.
#[derive(Clone, Debug)]
enum SettleStep {
    /// After `gap` ns, a request reserving `reserve` units.
    Admit { gap: u64, reserve: u64 },
    /// After `gap` ns, the reservation at `pick` (modulo how many are open) settles at
    /// `actual` units.
    Settle { gap: u64, pick: usize, actual: u64 },
}

fn settle_steps() -> impl Strategy<Value = Vec<SettleStep>> {
    let step = prop_oneof![
        (0u64..=3_000, 1u64..=8).prop_map(|(gap, reserve)| SettleStep::Admit { gap, reserve }),
        (0u64..=3_000, any::<usize>(), 0u64..=30)
            .prop_map(|(gap, pick, actual)| SettleStep::Settle { gap, pick, actual }),
    ];
    prop::collection::vec(step, 1..100)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Reserve at admission, settle later: the TAT always describes exactly the bucket
    /// that took each reserve, then owed the excess (below zero if need be) or got back
    /// the shortfall — never more of it than the reservation still ahead of now, never
    /// above a full bucket. Admissions match the bucket's too.
    #[test]
    fn settling_matches_the_token_bucket(
        (quota, _) in quota_strategy(),
        steps in settle_steps(),
    ) {
        let start = 1_000_000_000_000u64;
        let t = quota.interval_ns();
        let mut model = Bucket::new(&quota, 0, start);
        let mut tat = 0u64;
        let mut now = start;
        // Open reservations: (reserve, the model's room right after it, when).
        let mut open: Vec<(u64, BigRational, u64)> = Vec::new();
        // What the gateway keeps of each: (reserve, GCRA's until_idle, when).
        let mut kept: Vec<(u64, u64, u64)> = Vec::new();
        for step in steps {
            match step {
                SettleStep::Admit { gap, reserve } => {
                    now += t / 1000 * gap;
                    let d = quota.decide(tat, now, reserve, 0);
                    let (ok, _) = model.offer(now, reserve);
                    prop_assert_eq!(d.admitted, ok);
                    if ok {
                        model.take(reserve);
                        tat = d.tat;
                        let room = (&model.cap - &model.tokens) * &model.t;
                        prop_assert_eq!(r(d.until_idle_ns), room.clone(), "ahead of now by what was taken");
                        open.push((reserve, room, now));
                        kept.push((reserve, d.until_idle_ns, now));
                    }
                }
                SettleStep::Settle { gap, pick, actual } => {
                    now += t / 1000 * gap;
                    if open.is_empty() {
                        continue;
                    }
                    let i = pick % open.len();
                    let (reserve, room, at) = open.remove(i);
                    let (_, ahead, _) = kept.remove(i);
                    let adjustment = if actual >= reserve {
                        Adjustment::Debt { ns: (actual - reserve) * t }
                    } else {
                        Adjustment::Refund {
                            ns: (reserve - actual) * t,
                            room_ns: ahead.saturating_sub(now - at),
                        }
                    };
                    tat = settle(tat, now, adjustment, u64::MAX);
                    model.refill(now);
                    if actual >= reserve {
                        model.tokens -= r(actual - reserve);
                    } else {
                        let left = room - r(now - at);
                        let left = if left < r(0) { r(0) } else { left };
                        let back = r(reserve - actual).min(left / &model.t);
                        model.tokens = (&model.tokens + back).min(model.cap.clone());
                    }
                }
            }
            model.refill(now);
            let debt = r(tat.saturating_sub(now)) / &model.t;
            prop_assert_eq!(&model.cap - debt, model.tokens.clone(), "the TAT is the bucket");
        }
    }
}

/// One step of a fleet sharing one key through slices.
#[derive(Clone, Debug)]
enum LeaseStep {
    /// After `gap`, gateway `gw` admits a request of `cost` units: from its slice, or by
    /// asking the store for a slice of `want` whose slots begin `lead` ahead (in
    /// hundredths of T).
    Request {
        gap: u64,
        gw: usize,
        cost: u64,
        want: u64,
        lead: u64,
    },
    /// After `gap`, gateway `gw` gives its slice back (idle, reload, shutdown).
    GiveBack { gap: u64, gw: usize },
    /// Gateway `gw` dies: its slice is lost.
    Crash { gw: usize },
}

fn lease_steps() -> impl Strategy<Value = Vec<LeaseStep>> {
    // Gaps in hundredths of T: mostly bursts, sometimes long pauses (slices age).
    let gap = prop_oneof![4 => 0u64..=30, 1 => 0u64..=3_000];
    let step = prop_oneof![
        8 => (gap.clone(), 0usize..3, 1u64..=3, 1u64..=12, prop_oneof![0u64..=0, 0u64..=2_000])
            .prop_map(|(gap, gw, cost, want, lead)| LeaseStep::Request { gap, gw, cost, want, lead }),
        1 => (gap, 0usize..3).prop_map(|(gap, gw)| LeaseStep::GiveBack { gap, gw }),
        1 => (0usize..3).prop_map(|gw| LeaseStep::Crash { gw }),
    ];
    prop::collection::vec(step, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Any interleaving of slice takes, local admissions, give-backs and crashes across
    /// three gateways admits only what one exact GCRA would: replaying every admission,
    /// at its real time and cost, through a fresh exact GCRA admits each of them.
    #[test]
    fn leased_slices_never_admit_more_than_exact_gcra(
        (quota, _) in quota_strategy(),
        steps in lease_steps(),
    ) {
        use super::slice::{give_back, grant, Grant, Slice};
        let t = quota.interval_ns();
        let mut now = 1_000_000_000_000u64;
        let mut tat = 0u64; // the store's
        let mut slices: [Option<Slice>; 3] = [None, None, None];
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for step in steps {
            match step {
                LeaseStep::Request { gap, gw, cost, want, lead } => {
                    now += t / 100 * gap;
                    let cost = cost.min(quota.burst());
                    if let Some(s) = slices[gw].as_mut() {
                        if s.take(cost, now).is_some() {
                            admitted.push((now, cost));
                            continue;
                        }
                    }
                    let back = slices[gw].take().and_then(|s| s.give_back(now));
                    let lead = t / 100 * lead;
                    let (after, answer) = grant(tat, now, &quota, want.max(cost), cost, lead, back);
                    tat = after;
                    if let Grant::Granted { granted, end, ahead, .. } = answer {
                        let mut s = Slice::new(now, ahead, granted, t, end);
                        prop_assert!(s.take(cost, now).is_some(), "a fresh slice serves its request");
                        admitted.push((now, cost));
                        slices[gw] = Some(s);
                    }
                }
                LeaseStep::GiveBack { gap, gw } => {
                    now += t / 100 * gap;
                    if let Some(back) = slices[gw].take().and_then(|s| s.give_back(now)) {
                        tat = give_back(tat, now, back);
                    }
                }
                LeaseStep::Crash { gw } => slices[gw] = None,
            }
        }
        let mut exact = 0u64;
        for (at, cost) in admitted {
            let d = quota.decide(exact, at, cost, 0);
            prop_assert!(d.admitted, "an admission at {} of cost {} is beyond exact GCRA", at, cost);
            exact = d.tat;
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
                        reserve: None,
                        overflow: 0,
                        quota: big,
                        mode: Mode::Enforce,
                        max_delay_ns: 0,
                        key: 1,
                    },
                    Tier {
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
            reserve: None,
            overflow: 0,
            quota: q,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: 9,
        },
        Tier {
            reserve: None,
            overflow: 0,
            quota: q,
            mode: Mode::Shadow,
            max_delay_ns: 0,
            key: 9,
        },
        Tier {
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
