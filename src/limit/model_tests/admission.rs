//! GCRA against the reference model: the same admissions, waits and remaining as an
//! exact token bucket. (Tiers, concurrency and rollback against the model run on the
//! real memory store: `store::memory::model_tests`.)

use num_bigint::BigInt;
use proptest::prelude::*;

use super::{quota_strategy, r, Bucket};

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
}
