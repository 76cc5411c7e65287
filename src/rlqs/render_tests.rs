//! How a key's share splits between one stream's buckets of it (`split_key`): by
//! demand, never above the share, small parts refused or pooled, turns.

use super::*;

/// The assignment period `n`, nobody holding its turn yet.
fn period(n: u64) -> Turn {
    Turn { n, holder: None }
}

/// 10 a second, burst 20, `free` of it free.
fn key(free: u64) -> KeyState {
    KeyState {
        quota: crate::limit::Quota::new(10, 1_000_000_000, 20).expect("quota"),
        calendar: false,
        free,
        until_full_ns: 0,
    }
}

fn whole() -> Weight {
    Weight {
        mine: 1.0,
        all: 1.0,
        others_told: 0,
    }
}

fn tokens(split: &[Assignment]) -> (u64, u64) {
    split.iter().fold((0, 0), |(max, fill), a| match *a {
        Assignment::Bucket {
            max_tokens,
            tokens_per_fill,
            ..
        } => (
            max + u64::from(max_tokens),
            fill + u64::from(tokens_per_fill),
        ),
        _ => (max, fill),
    })
}

#[test]
fn siblings_split_the_share_by_demand_and_never_hold_more_than_it() {
    for demands in [
        vec![1.0, 1.0],
        vec![9.0, 1.0, 0.0],
        vec![0.0; 5],
        vec![3.0; 7],
        vec![9.0, 0.05],
        vec![100.0, 0.2, 0.2, 0.0],
    ] {
        for free in [0, 1, 7, 20] {
            let split = split_key(&key(free), (whole(), &demands), (10, &mut period(0)));
            let (max, fill) = tokens(&split);
            // What is free and one fill of the rate, at most.
            assert!(
                max <= free.max(1) + 10 && fill <= 10 && per_s(&split) <= 10.0,
                "{demands:?} {free}: {split:?}"
            );
        }
    }
    let busy = split_key(&key(20), (whole(), &[9.0, 1.0]), (10, &mut period(0)));
    assert_eq!(busy[0], share::share(&key(20), (0.9, 1.0), 10));
    assert_eq!(busy[1], share::share(&key(20), (0.1, 1.0), 10));
}

#[test]
fn parts_under_a_token_are_refused_and_those_asking_take_turns_when_all_are() {
    let forty = vec![0.0; 40];
    let split = split_key(&key(20), (whole(), &forty), (10, &mut period(3)));
    let given: Vec<usize> = (0..40)
        .filter(|&i| split[i] != Assignment::DenyAll)
        .collect();
    assert_eq!(given, [3], "one, by turn");
    assert_eq!(split[3], share::share(&key(20), (1.0, 1.0), 10));
    let asking = [0.8, 0.6, 0.0];
    let slow = KeyState {
        quota: crate::limit::Quota::new(1, 60_000_000_000, 1).expect("quota"),
        ..key(0)
    };
    let winners: Vec<usize> = (0..4)
        .map(|turn| {
            let split = split_key(&slow, (whole(), &asking), (10, &mut period(turn)));
            let given: Vec<usize> = (0..3)
                .filter(|&i| split[i] != Assignment::DenyAll)
                .collect();
            assert_eq!(given.len(), 1, "{split:?}");
            given[0]
        })
        .collect();
    assert_eq!(
        winners,
        [0, 1, 0, 1],
        "those asking take turns; the idle one never"
    );
}

#[test]
fn a_quiet_sibling_asking_beside_a_busy_one_has_a_token_out_of_the_busy_ones_part() {
    // Nine a second and one every twenty: the quiet part (under a token now and one a
    // second) was refused for as long as the busy sibling asked, the key full.
    let split = split_key(&key(20), (whole(), &[9.0, 0.05]), (10, &mut period(0)));
    assert_eq!(
        split[1],
        share::share(&key(20), (0.05 * (1.0 + 1e-9), 1.0), 10)
    );
    assert!(
        matches!(split[1], Assignment::Bucket { max_tokens: 1, .. }),
        "{split:?}"
    );
    let busy = 9.0 / 9.05 - (0.05 * (1.0 + 1e-9) - 0.05 / 9.05);
    assert_eq!(split[0], share::share(&key(20), (busy, 1.0), 10));
    let (max, fill) = tokens(&split);
    assert!(max <= 20 && fill <= 10, "{split:?}");
}

#[test]
fn quiet_siblings_asking_take_turns_at_one_pooled_token_and_idle_ones_never() {
    let demands = [9.0, 0.01, 0.01, 0.01, 0.0];
    let winners: Vec<usize> = (0..6)
        .map(|turn| {
            let split = split_key(&key(0), (whole(), &demands), (10, &mut period(turn)));
            assert_ne!(split[0], Assignment::DenyAll, "{split:?}");
            assert_eq!(split[4], Assignment::DenyAll, "{split:?}");
            let (_, fill) = tokens(&split);
            assert!(fill <= 10, "{split:?}");
            let given: Vec<usize> = (1..5)
                .filter(|&i| split[i] != Assignment::DenyAll)
                .collect();
            assert_eq!(given.len(), 1, "{split:?}");
            given[0]
        })
        .collect();
    assert_eq!(winners, [1, 2, 3, 1, 2, 3]);
}

/// What `split` refills a second, all buckets together.
fn per_s(split: &[Assignment]) -> f64 {
    (split.iter())
        .map(|a| match *a {
            Assignment::Bucket {
                tokens_per_fill,
                fill_s,
                ..
            } => f64::from(tokens_per_fill) / fill_s as f64,
            _ => 0.0,
        })
        .sum()
}

#[test]
fn in_debt_a_part_is_small_against_what_the_key_refills_not_its_rate() {
    // 10 a second, owing 99 of the next 10 s's 100: it refills 0.1 a second. Against
    // its rate, the busy part (0.9 once it gave the pool a token's part) and the
    // pooled quiet one (0.1) were each a token a second, and both rounded up to a
    // bucket of a token with none free.
    let owing = KeyState {
        until_full_ns: 16_900_000_000,
        ..key(0)
    };
    assert_eq!(owing.owed(), 99);
    for turn in 0..2 {
        let split = split_key(&owing, (whole(), &[9.0, 0.05]), (10, &mut period(turn)));
        let given = split.iter().filter(|a| **a != Assignment::DenyAll).count();
        assert_eq!(given, 1, "one, by turn: {split:?}");
        assert!(per_s(&split) <= 0.1 + 1e-9, "{split:?}");
        assert!(tokens(&split).0 <= 1, "one fill's rounding: {split:?}");
    }
}

#[test]
fn a_quiet_part_stays_refused_when_the_largest_cannot_spare_a_token() {
    // This Envoy holds 6 % of the key (others hold the rest): its busy part is one
    // token of 20 free, and a token for the quiet one would leave it under one.
    let weight = Weight {
        mine: 0.06,
        all: 1.0,
        others_told: 0,
    };
    let split = split_key(&key(20), (weight, &[9.0, 0.05]), (10, &mut period(0)));
    assert_eq!(split[1], Assignment::DenyAll, "{split:?}");
    assert_eq!(
        split[0],
        share::share(&key(20), (0.06 * 9.0 / 9.05, 1.0), 10)
    );
}

#[test]
fn the_pool_stays_with_its_quiet_holder_for_the_period_asking_or_not() {
    // A client flipping made-up siblings between asking and idle at every report would
    // move the pool, and a bucket starting full, to another each time.
    let mut turn = period(0);
    let given = |split: &[Assignment]| -> Vec<usize> {
        (1..3)
            .filter(|&i| split[i] != Assignment::DenyAll)
            .collect()
    };
    for (quiet, holder) in [
        ([0.01, 0.01], 1), // by the period: the first of those asking
        ([0.0, 0.01], 1),  // the holder idle, the other asking: still the holder
        ([0.01, 0.0], 1),  // and swapped again
        ([0.0, 0.0], 1),   // nobody asking: nothing pooled, the holder kept
    ] {
        let demands = [9.0, quiet[0], quiet[1]];
        let split = split_key(&key(0), (whole(), &demands), (10, &mut turn));
        let pooled = if quiet == [0.0, 0.0] {
            vec![]
        } else {
            vec![holder]
        };
        assert_eq!(
            (given(&split), turn.holder),
            (pooled, Some(holder)),
            "{quiet:?}"
        );
    }
    // The next period, another.
    let split = split_key(&key(0), (whole(), &[9.0, 0.01, 0.01]), (10, &mut period(1)));
    assert_eq!(given(&split), [2]);
}

#[test]
fn the_pool_stays_with_its_holder_when_its_own_demand_spikes_for_a_report() {
    // Its part a token for one report: nothing pooled, the other quiet one still
    // refused, and the turn its own again once it is quiet.
    let mut turn = period(0);
    let mut holders = Vec::new();
    for holder_demand in [0.01, 1.2, 0.01] {
        let demands = [9.0, holder_demand, 0.01];
        let split = split_key(&key(0), (whole(), &demands), (10, &mut turn));
        assert_eq!(split[2], Assignment::DenyAll, "{demands:?}: {split:?}");
        assert_ne!(split[1], Assignment::DenyAll, "{demands:?}: {split:?}");
        holders.push(turn.holder);
    }
    assert_eq!(holders, [Some(1); 3]);
}

#[test]
fn when_every_part_is_small_an_idle_holder_keeps_the_whole_share_for_its_period() {
    let slow = KeyState {
        quota: crate::limit::Quota::new(1, 60_000_000_000, 1).expect("quota"),
        ..key(0)
    };
    let mut turn = period(0);
    let given = |split: &[Assignment]| -> Vec<usize> {
        (0..2)
            .filter(|&i| split[i] != Assignment::DenyAll)
            .collect()
    };
    let split = split_key(&slow, (whole(), &[0.8, 0.6]), (10, &mut turn));
    assert_eq!((given(&split), turn.holder), (vec![0], Some(0)));
    // Idle now, the other asking: still its turn until the period ends.
    let split = split_key(&slow, (whole(), &[0.0, 0.6]), (10, &mut turn));
    assert_eq!((given(&split), turn.holder), (vec![0], Some(0)));
    let split = split_key(&slow, (whole(), &[0.0, 0.6]), (10, &mut period(1)));
    assert_eq!(given(&split), [1], "the next period: one of those asking");
}

/// A token bucket written to start full is a `DENY_ALL` for its bucket, then itself, in
/// one response as a client decodes it; a blanket rule, or a bucket not to start full, is
/// itself alone.
#[test]
fn a_bucket_written_to_start_full_is_preceded_by_a_deny_all_for_it() {
    use super::super::proto::{BucketId, RateLimitQuotaResponse};
    use prost::Message;
    let metrics = crate::metrics::rlqs::RlqsFamilies::register(
        &mut prometheus_client::registry::Registry::default(),
    );
    let id = BucketId {
        bucket: [("tenant".to_owned(), "acme".to_owned())].into(),
    };
    let bucket = Assignment::Bucket {
        max_tokens: 20,
        tokens_per_fill: 10,
        fill_s: 1,
    };
    let written = |assignment, full| {
        let mut buf = Vec::new();
        encode_action(&action(&metrics, &id, assignment, 10), full, &mut buf);
        let response = RateLimitQuotaResponse::decode(&buf[..]).expect("a response");
        response.bucket_action
    };
    let full = written(bucket, true);
    assert_eq!(full.len(), 2);
    assert_eq!(full[1], action(&metrics, &id, bucket, 10));
    assert_eq!(full[0], action(&metrics, &id, Assignment::DenyAll, 10));
    assert_eq!(written(bucket, false), [action(&metrics, &id, bucket, 10)]);
    let deny = action(&metrics, &id, Assignment::DenyAll, 10);
    assert_eq!(written(Assignment::DenyAll, true), [deny]);
}

/// A share leaves room for what the key's other holders were told: half of 300 free is
/// 150, but with 200 told elsewhere only the 100 left; with the others told all of it, a
/// calendar quota's share is refused; with nothing told elsewhere, the whole half.
#[test]
fn a_share_leaves_room_for_what_the_other_holders_were_told() {
    let calendar = |free| KeyState {
        quota: crate::limit::Quota::new(1, 1, 300).expect("quota"),
        calendar: true,
        free,
        until_full_ns: 0,
    };
    let half = |others_told| Weight {
        mine: 1.0,
        all: 2.0,
        others_told,
    };
    let max = |a: Assignment| a.tokens();
    let share = |key: KeyState, w: Weight| share::share(&room_left(key, w), (w.mine, w.all), 10);
    assert_eq!(max(share(calendar(300), half(0))), 150);
    assert_eq!(max(share(calendar(300), half(100))), 150);
    assert_eq!(max(share(calendar(300), half(200))), 100);
    assert_eq!(share(calendar(300), half(300)), Assignment::DenyAll);
    assert_eq!(share(calendar(300), half(1_000)), Assignment::DenyAll);
}
