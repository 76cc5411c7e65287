//! Charges that move after admission: a settled reserve keeps the TAT equal to the
//! reference bucket, and slices leased to a fleet never admit more than exact GCRA.

use num_rational::BigRational;
use proptest::prelude::*;

use super::{quota_strategy, r, Bucket};
use crate::limit::settle::{settle, Adjustment};
use crate::limit::slice::{give_back, grant, Grant, Slice};

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
