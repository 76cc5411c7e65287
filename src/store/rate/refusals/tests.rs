use super::*;
use crate::limit::Quota;

const S: u64 = 1_000_000_000;

fn tier(key: u64) -> RateTier {
    RateTier {
        row: None,
        unbounded: false,
        tier: Tier {
            window: None,
            quota: Quota::new(1, S, 2).expect("quota"),
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key,
            overflow: key + 1,
            reserve: None,
        },
        position: 0,
        redis: None,
        bounds: None,
        leased: false,
        settled: false,
    }
}

/// Redis's verdict on `tiers` whose keys owe `debt` (TAT − now) each.
fn redis_verdict(tiers: &[RateTier], debt: u64) -> Verdict {
    let table = SnapshotTable::default();
    for t in tiers {
        table.insert(t.tier.key, debt);
    }
    evaluate(&table, tiers, BASE, 1)
}

#[test]
fn an_admission_that_leaves_nothing_is_remembered_like_a_refusal() {
    let cache = RefusalCache::default();
    let tiers = [tier(10)];
    let now = 100 * S;
    // Burst 2, one already spent: this admission takes the last unit.
    let v = redis_verdict(&tiers, S);
    assert!(v.admitted && v.outcomes()[0].decision.remaining == 0);
    cache.record(&tiers, &v, now);
    let refused = cache.refuse(&tiers, now + S / 2, 1).expect("refused here");
    assert_eq!(refused.wait_ns, S / 2, "until the next unit frees");
    assert!(
        cache.refuse(&tiers, now + S, 1).is_none(),
        "then Redis is asked"
    );
}

#[test]
fn a_refusal_given_here_describes_the_other_tiers_as_redis_left_them() {
    let cache = RefusalCache::default();
    let mut roomy = tier(30);
    roomy.tier.quota = Quota::new(1, S, 10).expect("quota");
    let tiers = [roomy, tier(31)];
    let now = 100 * S;
    // The second tier's last unit goes; the first has 10, 2 now spent.
    let table = SnapshotTable::default();
    table.insert(30, S);
    table.insert(31, S);
    let v = evaluate(&table, &tiers, BASE, 1);
    assert!(v.admitted);
    cache.record(&tiers, &v, now);
    let refused = cache.refuse(&tiers, now, 1).expect("refused here");
    // Remembered to describe it, the roomy tier alone makes no request wait.
    assert!(!cache.known(&tiers[..1], now));
    assert!(cache.known(&tiers[1..], now));
    // The headers describe a tier that admitted as the refusal left it: 8 of 10.
    let first = &refused.outcomes()[0];
    let left = tiers[0].tier.quota.remaining(first.prior_tat, refused.now);
    assert_eq!(left, 8, "as Redis left it, not as an idle key");
}

/// A key remembered beside a refusing one, then moved by an admission of its own through
/// Redis: a refusal served here describes it as the admission left it, not as the
/// refusal found it (a rate limit service call told 9 left where 8 were).
#[test]
fn an_admission_keeps_a_key_remembered_beside_a_refusal_current() {
    let cache = RefusalCache::default();
    let mut roomy = tier(40);
    roomy.tier.quota = Quota::new(1, S, 10).expect("quota");
    let tiers = [roomy, tier(41)];
    let now = 100 * S;
    // Tier 41 takes its last unit: both remembered, the roomy one 2 of 10 spent.
    let table = SnapshotTable::default();
    table.insert(40, S);
    table.insert(41, S);
    cache.record(&tiers, &evaluate(&table, &tiers, BASE, 1), now);
    // The roomy tier alone is admitted through Redis: 3 spent.
    table.insert(40, 2 * S);
    let alone = evaluate(&table, &tiers[..1], BASE, 1);
    assert!(alone.admitted);
    cache.record(&tiers[..1], &alone, now);
    let refused = cache.refuse(&tiers, now, 1).expect("refused here");
    let left = tiers[0]
        .tier
        .quota
        .remaining(refused.outcomes()[0].prior_tat, refused.now);
    assert_eq!(left, 7, "as the last admission left it");
    assert!(!cache.known(&tiers[..1], now), "still only beside");
}

#[test]
fn admissions_with_room_and_tiers_served_from_slices_are_not_remembered() {
    let cache = RefusalCache::default();
    let tiers = [tier(20)];
    let now = 100 * S;
    cache.record(&tiers, &redis_verdict(&tiers, 0), now);
    assert!(
        !cache.remembered(&tiers, now),
        "one unit left: the next request may pass"
    );
    // A leased tier's remaining is its slice's: an empty slice says nothing of Redis.
    let leased = [RateTier {
        leased: true,
        ..tier(20)
    }];
    cache.record(&leased, &redis_verdict(&leased, S), now);
    assert!(!cache.remembered(&tiers, now));
}

#[test]
fn a_quota_entry_keeps_its_usage_exact_at_its_limit_and_beside_one() {
    for end in [1_000_000_000u64, 1_000_000_001] {
        for used in [0u64, 1, 2, 7, 1_000_000] {
            let tat = quota_entry(end, used);
            let at_limit = (tat & !BESIDE).max(2);
            let beside = (tat.saturating_sub(1) | BESIDE).max(BESIDE);
            assert_eq!(
                quota_usage(at_limit, end),
                used,
                "at its limit: {end} {used}"
            );
            assert_eq!(quota_usage(beside, end), used, "beside one: {end} {used}");
        }
    }
}
