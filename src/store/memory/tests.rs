use super::*;
use crate::limit::{evaluate, Mode, Quota, Tier};
use std::sync::Arc;

const S: u64 = 1_000_000_000;

/// Counter `key` spread over the hash space of rate keys (the key hasher's bits).
fn spread(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & crate::key::compose::HASH_MASK
}

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
        assert!(evaluate(&store, &[tier(spread(key), 5)], now, cost).admitted);
    }
    assert_eq!(store.len(), 20_000);
    for key in 1..=20_000u64 {
        assert_eq!(store.peek(spread(key)), now + (key % 3 + 1) * S);
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

/// A calendar quota tier of `quota` units a window ending at `end`, on `key`.
fn quota_tier(key: u64, quota: u64, end: u64) -> Tier {
    Tier {
        window: Some(end),
        quota: Quota::new(quota, quota, quota).expect("valid"),
        ..tier(key, 1)
    }
}

#[test]
fn a_flood_of_quota_keys_takes_no_room_from_rate_keys() {
    let (store, tag) = MemoryStore::with_area(512, "monthly", "month");
    let now = 100 * S;
    let end = now + 30 * 86_400 * S;
    for i in 0..1_500 {
        let key = areas::in_area(spread(i), tag);
        let verdict = evaluate(&store, &[quota_tier(key, 1_000, end)], now, 1);
        assert!(
            verdict.admitted,
            "invented key {i} is admitted: its own budget"
        );
        assert_eq!(verdict.outcomes()[0].key, key, "no quota key overflows");
    }
    assert!(store.len() <= 512, "bounded: {}", store.len());
    for i in 0..200 {
        let key = spread(1_000_000 + i);
        let verdict = evaluate(&store, &[tier(key, 1)], now, 1);
        assert!(verdict.admitted);
        assert_eq!(
            verdict.outcomes()[0].key,
            key,
            "rate key {i} has a room of its own"
        );
    }
}

#[test]
fn a_dropped_quota_key_comes_back_at_least_as_used() {
    let (store, tag) = MemoryStore::with_area(256, "monthly", "month");
    let now = 100 * S;
    let end = now + 30 * 86_400 * S;
    // One key uses 40 units, then thousands of one-unit keys push it out.
    let heavy = areas::in_area(spread(7), tag);
    for _ in 0..40 {
        assert!(evaluate(&store, &[quota_tier(heavy, 100, end)], now, 1).admitted);
    }
    for i in 0..5_000 {
        let key = areas::in_area(spread(100 + i), tag);
        evaluate(&store, &[quota_tier(key, 100, end)], now, 1);
        let used = store.peek(heavy).saturating_sub(end);
        assert!(
            used >= 40,
            "the heavy key reads {used} after {i} one-unit keys"
        );
    }
    // A new key starts at the floor: like a Space-Saving sketch's least count, at most
    // about the units charged in the window over the keys the area holds (128 here).
    let fresh = areas::in_area(spread(99_999_999), tag);
    let floor = store.peek(fresh).saturating_sub(end);
    let charged = 40 + 5_000;
    assert!(
        floor >= 1,
        "one-unit keys were dropped: the floor counts them"
    );
    assert!(
        floor <= 2 * charged / 128,
        "floor {floor} after {charged} units"
    );
}

/// A reload that changes a quota policy's calendar drops its area's keys of the old
/// calendar (a window both share keeps its usage), and the floor with them: making room
/// then weighs only the new calendar's keys, and a key dropped comes back at a floor the
/// new calendar reads as usage.
#[test]
fn a_changed_calendar_empties_its_area_but_a_shared_window() {
    let (store, tag) = MemoryStore::with_area(256, "plan", "month");
    let now = 100 * S;
    let (day_end, month_end) = (now + 86_400 * S, now + 30 * 86_400 * S);
    let monthly = areas::in_area(spread(1), tag);
    let shared = areas::in_area(spread(2), tag);
    assert!(evaluate(&store, &[quota_tier(monthly, 100, month_end)], now, 5).admitted);
    assert!(evaluate(&store, &[quota_tier(shared, 100, day_end)], now, 3).admitted);
    store.areas().raise_floor(area_of(tag), month_end + 50);
    assert_eq!(
        store.empty_stale_areas(|_| Some(day_end)),
        0,
        "nothing changed"
    );
    store.areas().arrange(&[("plan", "day".into())]);
    assert_eq!(store.areas().floor(area_of(tag)), 0, "the floor goes");
    assert_eq!(store.empty_stale_areas(|_| Some(day_end)), 1);
    assert_eq!(store.peek(monthly), 0, "the month's usage is no day's");
    assert_eq!(
        store.peek(shared),
        day_end + 3,
        "a window both share carries over"
    );
    assert_eq!(store.empty_stale_areas(|_| Some(day_end)), 0, "once");
    // An area freed is kept for its policy: another takes a fresh one, nothing emptied
    // (one given away after all is started over: `areas_tests`).
    store.areas().arrange(&[]);
    store.areas().arrange(&[("other", "week".into())]);
    assert_ne!(area_of(store.areas().tag("other")), area_of(tag));
    assert_eq!(store.empty_stale_areas(|_| None), 0);
}

/// An area that goes to another policy (every other area held, the same calendar) keeps
/// none of the old policy's keys, though their usage is of this window: they would count
/// against the new policy's bound and raise its floor as it makes room.
#[test]
fn an_area_given_to_another_policy_keeps_none_of_its_keys() {
    let (store, tag) = MemoryStore::with_area(256, "plan", "month");
    let now = 100 * S;
    let end = now + 30 * 86_400 * S;
    let key = areas::in_area(spread(1), tag);
    assert!(evaluate(&store, &[quota_tier(key, 100, end)], now, 5).admitted);
    let others: Vec<String> = (2..areas::AREAS).map(|i| format!("p{i}")).collect();
    let mut list: Vec<(&str, String)> = (others.iter())
        .map(|n| (n.as_str(), "month".to_owned()))
        .collect();
    list.push(("plan", "month".to_owned()));
    store.areas().arrange(&list);
    list.pop();
    store.areas().arrange(&list);
    list.push(("other", "month".to_owned()));
    store.areas().arrange(&list);
    assert_eq!(store.areas().tag("other"), tag, "the only free area");
    // A settle of the plan's, or room made, before the store empties the area.
    store.areas().raise_floor(areas::area_of(tag), end + 9);
    assert_eq!(store.empty_stale_areas(|_| Some(end)), 1);
    assert_eq!(store.areas().floor(areas::area_of(tag)), 0, "nor its floor");
    assert_eq!(
        store.peek(key),
        0,
        "the plan's key is no usage of the other's"
    );
}
