use super::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// A single-threaded table for exercising the tier logic.
#[derive(Default)]
struct MapTable(RefCell<HashMap<u64, u64>>);

impl TatTable for MapTable {
    fn apply(&self, key: u64, mut decide: impl FnMut(u64) -> Decision) -> (u64, Decision) {
        let mut map = self.0.borrow_mut();
        let tat = map.get(&key).copied().unwrap_or(0);
        let d = decide(tat);
        if d.admitted {
            map.insert(key, d.tat);
        }
        (tat, d)
    }
    fn peek(&self, key: u64) -> u64 {
        self.0.borrow().get(&key).copied().unwrap_or(0)
    }
    fn undo(&self, key: u64, old: u64, _new: u64, _now: u64) {
        self.0.borrow_mut().insert(key, old);
    }
}

const S: u64 = 1_000_000_000;

fn tier(limit: u64, burst: u64, key: u64) -> Tier {
    Tier {
        window: None,
        overflow: 0,
        quota: Quota::new(limit, S, burst).expect("valid"),
        mode: Mode::Enforce,
        max_delay_ns: 0,
        key,
        reserve: None,
    }
}

#[test]
fn later_denial_rolls_back_earlier_tiers() {
    let table = MapTable::default();
    let tiers = [tier(100, 10, 1), tier(1, 2, 2)];
    let now = 10 * S;
    assert!(evaluate(&table, &tiers, now, 1).admitted);
    assert!(evaluate(&table, &tiers, now, 1).admitted);
    let before = table.peek(1);
    let v = evaluate(&table, &tiers, now, 1);
    assert!(!v.admitted);
    assert_eq!(v.first_denier, Some(1));
    assert_eq!(v.reporting, Some(1));
    assert_eq!(table.peek(1), before, "tenant tier untouched by the denial");
    assert_eq!(v.remaining, 0);
    assert_eq!(v.wait_ns, S);
}

#[test]
fn wait_is_the_maximum_over_denying_tiers() {
    let table = MapTable::default();
    // Tier 0: 1/s burst 1. Tier 1: 1 per 4 s (limit 1, period 1 s => use burst 1 and 0.25/s).
    let slow = Tier {
        window: None,
        overflow: 0,
        quota: Quota::new(1, 4 * S, 1).expect("valid"),
        ..tier(1, 1, 2)
    };
    let tiers = [tier(1, 1, 1), slow];
    assert!(evaluate(&table, &tiers, S, 1).admitted);
    let v = evaluate(&table, &tiers, S, 1);
    assert!(!v.admitted);
    assert_eq!(v.first_denier, Some(0));
    assert_eq!(v.wait_ns, 4 * S);
    assert_eq!(v.reporting, Some(1), "the tier forcing the longest wait");
}

#[test]
fn admission_reports_the_tightest_tier() {
    let table = MapTable::default();
    let tiers = [tier(100, 10, 1), tier(100, 3, 2)];
    let v = evaluate(&table, &tiers, S, 1);
    assert!(v.admitted);
    assert_eq!(v.remaining, 2);
    assert_eq!(v.reporting, Some(1));
}

#[test]
fn shadow_tiers_never_deny_and_are_not_reported() {
    let table = MapTable::default();
    let mut shadow = tier(1, 1, 2);
    shadow.mode = Mode::Shadow;
    let tiers = [tier(100, 10, 1), shadow];
    for _ in 0..5 {
        let v = evaluate(&table, &tiers, S, 1);
        assert!(v.admitted);
        assert_eq!(v.reporting, Some(0));
    }
    let v = evaluate(&table, &tiers, S, 1);
    assert!(!v.outcomes()[1].decision.admitted, "shadow tier would deny");
}

#[test]
fn a_verdict_filled_in_place_forgets_the_one_before() {
    // Two tables in the same state: one decided fresh each time, one into a verdict that
    // still holds the previous request's (a denial with a wait, then a held admission).
    let (fresh, reused) = (MapTable::default(), MapTable::default());
    let mut delayed = tier(1, 1, 3);
    delayed.max_delay_ns = 5 * S;
    let requests: [(&[Tier], u64); 4] = [
        (&[tier(1, 1, 1), tier(1, 1, 2)], 10 * S),
        (&[tier(1, 1, 1), tier(1, 1, 2)], 10 * S),
        (&[delayed, delayed], 20 * S),
        (&[tier(100, 10, 4)], 30 * S),
    ];
    let mut verdict = Verdict::unlimited();
    for (tiers, now) in requests {
        evaluate_into(&reused, tiers, now, 1, &mut verdict);
        assert_eq!(verdict, evaluate(&fresh, tiers, now, 1));
    }
    assert!(!verdict.outcomes().is_empty());
}

/// A verdict's summary as its definition reads, from its outcomes and the tiers' TATs
/// before the request (`before`, by tier): on admission the enforcing tiers' fewest
/// remaining (the first such tier reported) and longest hold; on denial their remaining
/// as before the request and longest wait (the first denying tier with it reported).
fn summary_by_definition(
    v: &Verdict,
    (tiers, before): (&[Tier], &[u64]),
    cost: u64,
) -> (u64, u64, u64, Option<usize>) {
    let enforcing = || {
        v.outcomes()
            .iter()
            .zip(tiers)
            .enumerate()
            .filter(|(_, (o, _))| o.mode == Mode::Enforce)
    };
    let remaining = |i: usize, o: &TierOutcome, t: &Tier| match v.admitted {
        true => o.decision.remaining,
        false => t.quota.remaining(before[i], v.now),
    };
    let least = enforcing().map(|(i, (o, t))| remaining(i, o, t)).min();
    let (mut delay, mut wait, mut reporting) = (0, 0, None::<(usize, u64)>);
    for (i, (o, t)) in enforcing() {
        if v.admitted {
            delay = delay.max(o.decision.delay_ns);
            if reporting.is_none_or(|(_, r)| remaining(i, o, t) < r) {
                reporting = Some((i, remaining(i, o, t)));
            }
        } else {
            wait = wait.max(o.decision.wait_ns);
            if !o.decision.admitted && reporting.is_none_or(|(_, w)| o.decision.wait_ns > w) {
                reporting = Some((i, o.decision.wait_ns));
            }
        }
    }
    if !v.admitted {
        wait = wait.max(shared_keys_wait(v, (tiers, before), cost));
    }
    let least = least.unwrap_or(u64::MAX);
    (least, delay, wait, reporting.map(|(i, _)| i))
}

/// On denial, the enforcing tiers of one key (the same limit) charged together: from the
/// key's TAT before the request, all their costs at once within the burst and hold; no
/// wait when no wait would do (the front door's).
fn shared_keys_wait(v: &Verdict, (tiers, before): (&[Tier], &[u64]), cost: u64) -> u64 {
    let enforcing: Vec<(&TierOutcome, &Tier, u64)> = (v.outcomes().iter().zip(tiers))
        .zip(before)
        .filter(|((o, _), _)| o.mode == Mode::Enforce)
        .map(|((o, t), &tat)| (o, t, tat))
        .collect();
    let mut wait = 0;
    for (i, &(first, tier, tat)) in enforcing.iter().enumerate() {
        if enforcing[..i].iter().any(|(o, ..)| o.key == first.key) {
            continue;
        }
        let group = enforcing
            .iter()
            .filter(|(o, ..)| o.key == first.key)
            .count() as u64;
        let q = &tier.quota;
        let ahead = tat.max(v.now) + group * cost * q.interval_ns() - v.now;
        let allowance = q.tolerance_ns() + tier.max_delay_ns;
        if group > 1 && group * cost * q.interval_ns() <= allowance {
            wait = wait.max(ahead.saturating_sub(allowance));
        }
    }
    wait
}

proptest::proptest! {
    /// Whatever the tiers (shared keys, shadow tiers, holds) and the requests, a verdict's
    /// summary is what its definition says of its outcomes.
    #[test]
    fn a_verdicts_summary_is_its_definition(
        limits in proptest::collection::vec((1u64..=5, 1u64..=4, 0u64..=2), 4),
        shapes in proptest::collection::vec((0usize..=3, 0u8..=3), 1..=4),
        steps in proptest::collection::vec((0u64..=1_500, 1u64..=3), 1..40),
    ) {
        // A key is one policy's: the tiers sharing it share its limit.
        let tiers: Vec<Tier> = shapes
            .iter()
            .map(|&(key, shape)| {
                let (limit, burst, delay_s) = limits[key];
                let mut t = tier(limit, burst, key as u64);
                t.mode = if shape == 0 { Mode::Shadow } else { Mode::Enforce };
                t.max_delay_ns = delay_s * S;
                t
            })
            .collect();
        let table = MapTable::default();
        let mut verdict = Verdict::unlimited();
        let mut now = 100 * S;
        for (gap_ms, cost) in steps {
            now += gap_ms * 1_000_000;
            let before: Vec<u64> = tiers.iter().map(|t| table.peek(t.key)).collect();
            evaluate_into(&table, &tiers, now, cost, &mut verdict);
            let (remaining, delay, wait, reporting) =
                summary_by_definition(&verdict, (&tiers, &before), cost);
            if !verdict.admitted {
                // A denial reports every tier as the request found its key, a denying
                // tier's own numbers too.
                let read: Vec<u64> = verdict.outcomes().iter().map(|o| o.prior_tat).collect();
                proptest::prop_assert_eq!(&read, &before);
                for ((o, t), tat) in verdict.outcomes().iter().zip(&tiers).zip(&before) {
                    if !o.decision.admitted {
                        proptest::prop_assert_eq!(o.decision.until_idle_ns, tat.saturating_sub(now));
                        proptest::prop_assert_eq!(o.decision.remaining, t.quota.remaining(*tat, now));
                    }
                }
            }
            proptest::prop_assert_eq!(verdict.remaining, remaining);
            proptest::prop_assert_eq!(verdict.delay_ns, delay);
            proptest::prop_assert_eq!(verdict.wait_ns, wait);
            proptest::prop_assert_eq!(verdict.reporting, reporting);
            let denied = verdict.outcomes().iter().position(|o| o.mode == Mode::Enforce && !o.decision.admitted);
            proptest::prop_assert_eq!(verdict.first_denier, denied);
            proptest::prop_assert_eq!(verdict.admitted, denied.is_none());
        }
    }
}

/// A quota tier decides at its window's end and never holds; forced (a usage report,
/// `max_delay_ns` unbounded), it is charged past its quota, its usage capped one below
/// what would read as another calendar's (which would be no usage at all).
#[test]
fn a_forced_quota_tier_is_charged_past_its_quota_and_never_wraps_to_unused() {
    let end = 1_000 * S;
    let quota_tier = |max_delay_ns| Tier {
        window: Some(end),
        // 100 units a window: one unit a nanosecond, a burst of the quota.
        quota: Quota::new(1, 1, 100).expect("valid"),
        max_delay_ns,
        ..tier(1, 1, 7)
    };
    let table = MapTable::default();
    let used = || super::super::calendar::used(table.peek(7), end);
    let (checked, forced) = ([quota_tier(0)], [quota_tier(u64::MAX)]);
    let first = evaluate(&table, &checked, 10, 60);
    assert!(first.admitted && first.delay_ns == 0);
    assert!(
        !evaluate(&table, &checked, 10, 60).admitted,
        "60 more do not fit"
    );
    let report = evaluate(&table, &forced, 10, 60);
    assert!(report.admitted && report.delay_ns == 0, "{report:?}");
    assert_eq!(used(), 120);
    assert!(evaluate(&table, &forced, 10, u64::MAX / 2).admitted);
    assert_eq!(table.peek(7), super::super::calendar::max_tat(end));
    assert!(used() >= 100, "still used up, not another calendar's");
    assert!(!evaluate(&table, &checked, 10, 1).admitted);
}

/// Forced charges on a rate add up to at most `MAX_FORCED_LEAD_NS` past now, as the
/// Redis script caps them: three absurd reports do not lock the key for 156 days. A key
/// already further than that is left where it is (no refund).
#[test]
fn forced_rate_charges_add_up_to_at_most_the_cap() {
    let forced = [Tier {
        max_delay_ns: u64::MAX,
        ..tier(1000, 1000, 7)
    }];
    let table = MapTable::default();
    let now = 10 * S;
    let big = MAX_FORCED_LEAD_NS / (S / 1000) - 1;
    for _ in 0..3 {
        let report = evaluate(&table, &forced, now, big);
        assert!(report.admitted, "{report:?}");
    }
    // Cut to whole intervals (1 ms): within one of the cap.
    let lead = table.peek(7) - now;
    assert!(
        lead <= MAX_FORCED_LEAD_NS && lead > MAX_FORCED_LEAD_NS - S / 1000,
        "{lead}"
    );
    let checked = [tier(1000, 1000, 7)];
    assert!(
        !evaluate(&table, &checked, now, 1).admitted,
        "still used up"
    );
    table.0.borrow_mut().insert(7, now + 2 * MAX_FORCED_LEAD_NS);
    assert!(evaluate(&table, &forced, now, 1).admitted);
    assert_eq!(table.peek(7), now + 2 * MAX_FORCED_LEAD_NS, "not refunded");
}

/// A rate longer than the cap (the memory backend keeps one of 1,000 a year): a report
/// still uses its key up, a whole burst and one more past now, never further.
#[test]
fn a_forced_charge_on_a_rate_longer_than_the_cap_still_uses_the_key_up() {
    let year = 365 * 86_400 * S;
    let forced = [Tier {
        quota: Quota::new(1000, year, 1000).expect("valid"),
        max_delay_ns: u64::MAX,
        ..tier(1, 1, 7)
    }];
    let table = MapTable::default();
    let now = 10 * S;
    for _ in 0..3 {
        assert!(evaluate(&table, &forced, now, 1000).admitted);
    }
    assert_eq!(table.peek(7), now + 1001 * (year / 1000), "τ + T past now");
    let checked = [Tier {
        max_delay_ns: 0,
        ..forced[0]
    }];
    assert!(!evaluate(&table, &checked, now, 1).admitted, "used up");
}

/// Two tiers on one key are charged together or not at all: on a drained key the request
/// waits until the key holds both (5 + 5 of 10 a second: 1 s), not the one that denied.
#[test]
fn tiers_sharing_a_key_wait_until_it_holds_them_all() {
    let table = MapTable::default();
    let drained = [tier(10, 10, 7)];
    assert!(evaluate(&table, &drained, 100 * S, 10).admitted);
    let twice = [tier(10, 10, 7), tier(10, 10, 7)];
    let verdict = evaluate(&table, &twice, 100 * S, 5);
    assert!(!verdict.admitted);
    assert_eq!(verdict.wait_ns, S, "both fit in 1 s, one in 0.5 s");
    // Together over the burst (6 + 6 of 10): never; the tiers' own wait is left as is.
    let verdict = evaluate(&MapTable::default(), &twice, 100 * S, 6);
    assert!(!verdict.admitted);
    assert_eq!(
        verdict.wait_ns,
        S / 5,
        "the second's own: 2 units past the burst"
    );
}
